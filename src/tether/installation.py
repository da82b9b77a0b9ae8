"""The identity of one tether home (installation), unique across hosts."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
from pathlib import Path

from tether.config import PRIVATE_FILE
from tether.errors import ConfigError

INSTALLATION_FILE = "installation"
NODE_FILE = "node"
_INSTALLATION_ID = re.compile(r"^[0-9a-f]{16}$")
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def installation_id(home: Path) -> str:
    """The id of one tether home, unique across hosts: random, made once and kept in the home (owner-only).

    A hash of the home's path would repeat on every host with the same ``~/.tether``, and two homes on one
    database would then take each other's jobs for their own. A home copied to another machine keeps its
    id: delete ``<home>/installation`` in the copy to give it one of its own."""
    path = home / INSTALLATION_FILE
    for _ in range(2):
        try:
            found = path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            _create_installation_id(path)
            continue
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read this home's identity {str(path)!r}: {exc}") from exc
        if not _INSTALLATION_ID.match(found):
            raise ConfigError(
                f"this home's identity {str(path)!r} is damaged ({found[:40]!r}): delete the file to give "
                "the home a new one (jobs recorded under the old one are then another installation's)"
            )
        return found
    raise ConfigError(f"cannot create this home's identity {str(path)!r}")


def _create_installation_id(path: Path) -> None:
    """Write a new id whole, under its final name only if none is there yet: of two processes that
    start a fresh home at once, one id wins and both read it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(secrets.token_hex(8) + "\n")
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it first: its id is the home's
    except OSError as exc:
        why = exc.strerror or exc
        raise ConfigError(f"cannot create this home's identity {str(path)!r}: {why}") from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def join(home: Path, installation: str) -> str | None:
    """Make ``home`` a node of the installation ``installation`` (a cluster: several homes on several
    hosts, one database). The id it had before (None for a fresh home). Refused for a home that has run
    work under another id: those records would belong to nobody."""
    if not isinstance(installation, str) or not _INSTALLATION_ID.match(installation):
        raise ConfigError(
            f"an installation id is 16 hex digits (`tether cluster id` prints it), not {installation!r}"
        )
    path = home / INSTALLATION_FILE
    before = path.read_text(encoding="ascii").strip() if path.exists() else None
    if before == installation:
        return before
    executions = home / "executions"
    ran = sum(1 for _ in executions.iterdir()) if executions.is_dir() else 0
    if before is not None and ran:
        raise ConfigError(
            f"this home has run {ran} execution(s) as installation {before}: joining another would leave "
            "their records to no one; join with a fresh home (TETHER_HOME=…) instead"
        )
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    _write_whole(path, installation)
    return before


def node_name(home: Path, configured: str = "") -> str:
    """The name of this home among the hosts of its installation: ``configured`` when the settings
    give one (``[cluster] node``, ``tether worker --name``: a worker service's instance name, stable by
    construction; several workers of one home may each have their own). Otherwise the name the home was
    first known by on this machine — the host's name then, kept in ``<home>/node`` with the machine's
    id — so that a host renamed later keeps its jobs (they are its node's). A home found on another
    machine (copied, or its host cloned and given a new machine id) is named anew from its host."""
    if configured:
        return configured
    path = home / NODE_FILE
    machine = _machine_id()
    try:
        kept, _, where = path.read_text(encoding="ascii").strip().partition("\n")
    except (OSError, UnicodeDecodeError):
        kept, where = "", ""
    if _NODE.match(kept) and not (machine and where.strip() and where.strip() != machine):
        return kept
    name = _host_name()
    with contextlib.suppress(OSError):  # a read-only home: the name holds for this process only
        _write_whole(path, f"{name}\n{machine}")
    return name


def _machine_id() -> str:
    """This machine's id (systemd's), "" where there is none: it tells a home moved to another machine."""
    for candidate in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            found = Path(candidate).read_text(encoding="ascii").strip()
            if re.fullmatch(r"[0-9a-f]{32}", found):
                return found
    return ""


def _host_name() -> str:
    found = socket.gethostname()
    if _NODE.match(found):
        return found
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", found).lstrip("_.-")[:63]
    return cleaned or "unknown-host"


def _write_whole(path: Path, text: str) -> None:
    """``text`` as the whole of ``path`` (owner-only), replaced at once: a reader never sees half of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(text + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
