"""Running one CLI command so that it always ends in one clear line, or one JSON document.

Whatever happens — a usage error, a ``TetherError``, a full or read-only disk, input nested too deep,
text that is not UTF-8, Ctrl-C, SIGTERM, SIGHUP, or a bug — the person sees one sentence (under
``--json``: exactly one ``{"error": {"code", "message"}}`` document on stdout) and an exit code. The
traceback of an unexpected failure goes to a private log file, which the sentence names.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from tether.errors import TetherError

USAGE = 2
FAILURE = 1
INTERRUPTED = 130
CRASH_LOG = "cli-errors.log"


def print_error(message: str, *, as_json: bool, code: str) -> None:
    from tether.interfaces.cli import print_error as show

    show(message, as_json=as_json, code=code)


def not_utf8(argv: list[str]) -> str | None:
    """The first argument that is not valid UTF-8 text (Python keeps such bytes as lone surrogates)."""
    for position, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            shown = ascii(arg.encode("utf-8", "surrogateescape"))[:60]
            return f"argument {position} is not valid UTF-8 text: {shown}"
    return None


def _interrupt_instead(signum: int, frame: object) -> None:
    # SIGTERM and SIGHUP take the path Ctrl-C takes, so a followed job is stopped the same way.
    signal.raise_signal(signal.SIGINT)


def describe_os_error(exc: OSError) -> str:
    where = f" ({exc.filename})" if exc.filename else ""
    if exc.errno == errno.ENOSPC:
        return f"the disk is full{where}: free some space and try again"
    if exc.errno == errno.EROFS:
        return f"the file system is read-only{where}"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied{where}"
    return f"{exc.strerror or type(exc).__name__}{where}"


def _crash_log(exc: BaseException) -> str:
    text = f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} tether {' '.join(map(ascii, sys.argv[1:]))}\n"
    text += "".join(traceback.format_exception(exc))
    candidates = []
    home = os.environ.get("TETHER_HOME")
    if home:
        candidates.append(Path(home) / "logs" / CRASH_LOG)
    candidates.append(
        Path(tempfile.gettempdir()) / f"tether-{os.getuid() if hasattr(os, 'getuid') else 0}-{CRASH_LOG}"
    )
    for path in candidates:
        with contextlib.suppress(OSError):
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8", errors="replace") as log:
                log.write(text)
            return str(path)
    return "nowhere (no writable place was found)"


def fail_for(exc: BaseException, as_json: bool) -> int:
    """Say what ``exc`` means in one line (or one JSON document) and return the exit code for it."""
    if isinstance(exc, KeyboardInterrupt) or type(exc).__name__ == "Abort":
        print_error("interrupted", as_json=as_json, code="interrupted")
        return INTERRUPTED
    if isinstance(exc, TetherError):
        print_error(exc.message, as_json=as_json, code=exc.code)
        return USAGE
    if isinstance(exc, OSError):
        print_error(describe_os_error(exc), as_json=as_json, code="os")
        return FAILURE
    if isinstance(exc, RecursionError):
        print_error("the input is nested too deeply", as_json=as_json, code="input")
        return USAGE
    if isinstance(exc, UnicodeError):
        print_error(f"text that is not valid Unicode: {exc}", as_json=as_json, code="input")
        return USAGE
    where = _crash_log(exc)
    # Only the type: an unexpected error's text may carry anything (a provider may echo a key).
    print_error(
        f"internal error ({type(exc).__name__}); the details are in {where}", as_json=as_json, code="internal"
    )
    return FAILURE


def _usage_error(exc: BaseException) -> bool:
    # Typer raises click's (or its vendored copy's) usage errors; both have these.
    return hasattr(exc, "exit_code") and hasattr(exc, "format_message") and hasattr(exc, "show")


def run(app: Any, argv: list[str]) -> int:
    """Run the Typer ``app`` on ``argv`` and return its exit code; never raises, never prints a traceback."""
    as_json = "--json" in argv
    from tether import credentials

    # Keys handed to this command leave its environment before it starts anything (a worker, a
    # browser, a background executor): they stay in this process's memory, for its model client.
    credentials.adopt_environment()
    # A command started with SIGINT ignored (``cmd &`` in a script) still ends cleanly on Ctrl-C,
    # SIGTERM and SIGHUP: they all take the KeyboardInterrupt path.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="replace")  # type: ignore[union-attr]
    for sig in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, _interrupt_instead)
    bad = not_utf8(argv)
    if bad is not None:
        print_error(bad, as_json=as_json, code="usage")
        return USAGE
    try:
        code = app(args=argv, prog_name="tether", standalone_mode=False)
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            return exc.code if isinstance(exc.code, int) else FAILURE
        if _usage_error(exc):
            if as_json:
                print_error(exc.format_message(), as_json=True, code="usage")  # type: ignore[attr-defined]
            else:
                exc.show()  # type: ignore[attr-defined]
            return int(exc.exit_code)  # type: ignore[attr-defined]
        return fail_for(exc, as_json)
    return code if isinstance(code, int) else 0
