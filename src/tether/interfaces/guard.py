"""Running one CLI command so that it always ends in one clear line, or one JSON document.

Whatever happens — a usage error, a ``TetherError``, a full or read-only disk, input nested too deep,
text that is not UTF-8, Ctrl-C, SIGTERM, SIGHUP, or a bug — the person sees one sentence (under
``--json``: exactly one ``{"error": {"code", "message"}}`` document on stdout) and an exit code. The
traceback of an unexpected failure goes to a private log file, which the sentence names.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tether.errors import TetherError

USAGE = 2
FAILURE = 1
INTERRUPTED = 130
CRASH_LOG = "cli-errors.log"


def print_error(message: str, *, as_json: bool, code: str) -> None:
    from tether.interfaces.render import print_error as show  # Rich only once an error is shown

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


def _interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is the interrupt, or what code it landed in made of it (an import that was
    interrupted raises RuntimeError from the KeyboardInterrupt)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt) or type(current).__name__ == "Abort":
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


_SAID: set[str] = set()  # what this command has said already ("interrupted": said once)


def fail_for(exc: BaseException, as_json: bool) -> int:
    """Say what ``exc`` means in one line (or one JSON document) and return the exit code for it."""
    if _interrupted(exc):
        if "interrupted" not in _SAID:
            _SAID.add("interrupted")
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


class _OneLine(logging.Handler):
    """What a library logs reaches the person as one line, never a traceback; and nothing at all for
    the interrupt in progress (``run`` reports it once)."""

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            return
        try:
            text = record.getMessage()
        except Exception:
            text = str(record.msg)
        if exc is not None:
            text += f" ({type(exc).__name__})"
        from tether.credentials import scrub

        with contextlib.suppress(Exception):
            sys.stderr.write(f"{record.levelname.lower()}: {scrub(text)}\n")


def _unraisable(unraisable: Any) -> None:
    """An error in a finalizer (often the interrupt landing there) is one line at most."""
    if isinstance(unraisable.exc_value, (KeyboardInterrupt, SystemExit)):
        return
    with contextlib.suppress(Exception):
        sys.stderr.write(f"warning: ignored {type(unraisable.exc_value).__name__} in a finalizer\n")


def _quiet_libraries() -> None:
    root = logging.getLogger()
    if not any(isinstance(h, _OneLine) for h in root.handlers):
        root.addHandler(_OneLine(logging.WARNING))
    sys.unraisablehook = _unraisable


def _install_handlers() -> None:
    # A command started with SIGINT ignored (``cmd &`` in a script) still ends cleanly on Ctrl-C,
    # SIGTERM and SIGHUP: they all take the KeyboardInterrupt path. A SIGTERM or SIGHUP the command was
    # started with ignored (``nohup``) stays ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)):
        if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _interrupt_instead)


@contextlib.contextmanager
def _stops_blocked() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP wait (blocked, not lost) until the block ends, then act as ever."""
    stops = {
        s for s in (signal.SIGINT, getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s
    }
    if not hasattr(signal, "pthread_sigmask"):  # Windows: nothing to block with
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def settle(code: int) -> None:
    """The command has ended and said how: from now on a signal (during the interpreter's own
    shutdown) ends the process at once with ``code``, instead of killing it with another status or
    printing a traceback from the cleanup it interrupted."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    for sig in (signal.SIGINT, getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)):
        if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, lambda signum, frame: os._exit(code))


builds = 0  # how many times this process's image built a click command (a test reads it)


@functools.cache
def command_of(app: Any) -> Any:
    """The click command Typer builds from ``app``, built once per process image. Typer builds it anew
    on every call (reading every command's signature, its annotations evaluated one by one): half of a
    served command's CPU. The CLI server builds it while it warms, and every command it forks reuses it."""
    from typer.main import get_command

    from tether.interfaces.helptext import polish

    global builds
    builds += 1
    return polish(get_command(app))


def run(app: Any, argv: list[str]) -> int:
    """Run the Typer ``app`` on ``argv`` and return its exit code; never raises, never prints a traceback."""
    as_json = "--json" in argv
    try:
        from tether import credentials
        from tether.interfaces import handoff

        _SAID.clear()
        _install_handlers()
        _quiet_libraries()
        # Keys handed to this command leave its environment before it starts anything (a worker, a
        # browser, a background executor): they stay in this process's memory, for its model client.
        credentials.adopt_environment()
        with _stops_blocked():  # a stop acting inside reconfigure would leave a stream without its encoder
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(AttributeError, ValueError):
                    stream.reconfigure(errors="replace")  # type: ignore[union-attr]
        if handoff.pending_signals():  # a signal came while the command was starting
            raise KeyboardInterrupt
        bad = not_utf8(argv)
        if bad is not None:
            print_error(bad, as_json=as_json, code="usage")
            return USAGE
        code = command_of(app)(args=argv, prog_name="tether", standalone_mode=False)
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
    if code == INTERRUPTED and "interrupted" not in _SAID:
        # Typer turns an interrupt that lands in its own code (parsing, building the command) into
        # a silent exit 130: say it, as for one that lands anywhere else.
        return fail_for(KeyboardInterrupt(), as_json)
    return code if isinstance(code, int) else 0
