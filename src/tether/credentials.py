"""API keys: from the OS keyring, else an environment variable (documented fallback); nowhere else.

Keys are stored under the keyring service ``tether`` with the provider name as user. The fallback is
``TETHER_API_KEY_<PROVIDER>`` (e.g. ``TETHER_API_KEY_DEEPSEEK``), then ``TETHER_API_KEY``. A key is never
read from a config file or a command-line argument, and never printed, logged or stored by tether.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tether.errors import CredentialError

SERVICE = "tether"
PROVIDER_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,159}$")  # a model provider, or an MCP server's secret


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyInfo:
    """Where a key was found and how long it is; never the key itself."""

    provider: str
    source: str  # "keyring", an environment variable name, or "none"
    length: int = 0


def _check(provider: str) -> str:
    if not PROVIDER_RE.match(provider):
        raise CredentialError(
            f"provider names are lowercase words like 'openai' or 'deepseek', got {provider!r}"
        )
    return provider


def env_names(provider: str) -> tuple[str, ...]:
    return (f"TETHER_API_KEY_{re.sub(r'[^A-Z0-9]', '_', provider.upper())}", "TETHER_API_KEY")


def _keyring_get(provider: str) -> str | None:
    import keyring
    from keyring.errors import KeyringError

    try:
        return keyring.get_password(SERVICE, provider)
    except (KeyringError, ValueError, ImportError, RuntimeError):
        return None  # no usable keyring: the environment variables are the fallback


# Keys this process has read, so that anything it writes in a crash can have them taken out.
_SEEN: set[str] = set()
# Keys this process was handed (in its environment, or through KEYS_FD_ENV), taken out of the
# environment at start-up by ``adopt_environment``: nothing it starts inherits them, and no task it
# runs in process finds them in ``os.environ`` or ``/proc/self/environ``.
_HANDED: dict[str, str] = {}
KEY_ENV = "TETHER_API_KEY"
# A pipe's read end, inherited, holding the keys a process was handed by the tether process that
# started it (``handing_pipe``): a key passed this way never sits in an environment.
KEYS_FD_ENV = "TETHER_KEYS_FD"
KEYS_LIMIT = 60_000  # under a pipe's buffer: the writer never blocks on a child that does not read


def _is_key_name(name: str) -> bool:
    return name == KEY_ENV or name.startswith(KEY_ENV + "_")


def _from_env(name: str) -> str | None:
    return _HANDED.get(name) or os.environ.get(name) or None


def adopt_environment() -> None:
    """Move the keys in this process's environment (``TETHER_API_KEY``, ``TETHER_API_KEY_*``, and those
    handed through ``KEYS_FD_ENV``) into this module, out of ``os.environ`` and out of the environment
    block the process was started with. Called once by every command before it starts anything."""
    fd = os.environ.pop(KEYS_FD_ENV, None)
    if fd is not None and fd.isdigit():
        _read_handed(int(fd))
    names = [name for name in os.environ if _is_key_name(name)]
    for name in names:
        value = os.environ.pop(name)
        if value:
            _HANDED[name] = value
    if names:
        _wipe_initial_environment(names)


def _read_handed(fd: int) -> None:
    import json

    try:
        data = b""
        while chunk := os.read(fd, 65536):
            data += chunk
            if len(data) > KEYS_LIMIT:
                return
        handed = json.loads(data or b"{}")
    except (OSError, ValueError):
        return
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    if isinstance(handed, dict):
        _HANDED.update({str(k): str(v) for k, v in handed.items() if _is_key_name(str(k)) and v})


def handing_pipe() -> int | None:
    """The read end of a pipe that holds this process's handed keys, for one tether process it starts
    (pass it with ``pass_fds`` and name it in ``KEYS_FD_ENV``); None when there is nothing to hand."""
    return keys_pipe(_HANDED)


def keys_pipe(keys: Mapping[str, str] | None) -> int | None:
    """The read end of a pipe holding ``keys`` (variable → value) for one process this one starts; None
    when there is nothing to hand, or too much for the pipe's buffer."""
    import json

    if not keys:
        return None
    data = json.dumps(dict(keys)).encode()
    if len(data) > KEYS_LIMIT:
        return None
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)
    finally:
        os.close(write_end)
    return read_end


def _wipe_initial_environment(names: list[str]) -> None:
    """Overwrite the values of ``names`` in the environment block this process was started with, which
    ``/proc/self/environ`` shows for the process's whole life (``os.environ`` and ``unsetenv`` never touch
    it). Linux only; elsewhere the block is not readable by other processes of the user this way."""
    if not sys.platform.startswith("linux"):
        return
    try:
        with open("/proc/self/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (fields 50 and 51)
    except (OSError, IndexError, ValueError):
        return
    if not 0 < start < end or end - start > 16 * 1024 * 1024:
        return
    import ctypes

    wanted = {os.fsencode(name) for name in names}
    offset = start
    for entry in ctypes.string_at(start, end - start).split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name in wanted and value:
            ctypes.memset(offset + len(name) + 1, 0, len(value))
        offset += len(entry) + 1


def get_key(provider: str) -> str | None:
    _check(provider)
    key = _keyring_get(provider)
    if not key:
        key = next((value for name in env_names(provider) if (value := _from_env(name))), None)
    if key and len(key) >= 8:
        _SEEN.add(key)
    return key or None


def secret_key(entry: str) -> str | None:
    """The secret a worker reads for ``entry`` (an MCP server's, ``mcp.<server>.<name>``): the OS
    keyring's, else the value of the entry's own variable (``TETHER_API_KEY_MCP_…``) that this process
    holds. A worker inherits none of its starter's keys (its environment is an allowlist); its starter
    hands it exactly the variables its task names in ``TaskSpec.secrets`` (``handed_for``). The generic
    ``TETHER_API_KEY`` is the model's and never counts here."""
    _check(entry)
    key = _keyring_get(entry) or _from_env(env_names(entry)[0]) or None
    if key and len(key) >= 8:
        _SEEN.add(key)
    return key


def handed_for(entries: Iterable[str]) -> dict[str, str]:
    """The variables of this process's handed keys that ``entries`` name, for the worker of one task
    (``TaskSpec.secrets``): an entry names its own variable (``env_names(entry)[0]``), or ends in ``.*``
    to name every variable of that namespace (``mcp.*``: every MCP server's secret). Never the generic
    ``TETHER_API_KEY``, which is the model's."""
    handed = {**{name: value for name, value in os.environ.items() if _is_key_name(name)}, **_HANDED}
    chosen: dict[str, str] = {}
    for entry in entries:  # every name made here is TETHER_API_KEY_<something>: never the model's own
        if entry.endswith(".*"):
            prefix = env_names(entry[:-2])[0] + "_"
            chosen.update(
                {name: value for name, value in handed.items() if name.startswith(prefix) and value}
            )
        elif value := handed.get(env_names(entry)[0]):
            chosen[env_names(entry)[0]] = value
    return chosen


def accept_handed(keys: Mapping[str, object]) -> None:
    """Keep the keys a starter handed this worker (``handed_for``), for ``secret_key``; anything that
    is not a ``TETHER_API_KEY_*`` name with a text value is left out."""
    for name, value in keys.items():
        if (
            isinstance(name, str)
            and name != KEY_ENV
            and _is_key_name(name)
            and isinstance(value, str)
            and value
        ):
            _HANDED[name] = value
            if len(value) >= 8:
                _SEEN.add(value)


def scrub(text: str) -> str:
    """``text`` without any key this process has read (for logs written when something went wrong)."""
    for key in _SEEN:
        text = text.replace(key, "***")
    return text


def key_info(provider: str) -> KeyInfo:
    _check(provider)
    key = _keyring_get(provider)
    if key:
        return KeyInfo(provider=provider, source="keyring", length=len(key))
    for name in env_names(provider):
        value = _from_env(name)
        if value:
            return KeyInfo(provider=provider, source=name, length=len(value))
    return KeyInfo(provider=provider, source="none")


# Backends that keep a key readable by anyone who can read a file (keyrings.alt's plaintext and
# "encrypted" files, whose password defaults to prompting) or that cannot keep it at all.
UNSAFE_BACKENDS = ("keyrings.alt.", "keyring.backends.fail.", "keyring.backends.null.")


def backend_problem() -> str | None:
    """Why the active keyring backend must not hold a key, or None when it is a real one."""
    import keyring

    try:
        backend = keyring.get_keyring()
    except Exception as exc:  # a broken PYTHON_KEYRING_BACKEND or keyring config raises anything
        return f"the keyring cannot be loaded ({type(exc).__name__}: {str(exc)[:120]})"
    names = [backend]
    chained = getattr(backend, "backends", None)  # the chainer: what it would actually write to
    if chained is not None:
        names = list(chained) or [backend]
    for item in names[:1]:
        qualified = f"{type(item).__module__}.{type(item).__qualname__}"
        if qualified.startswith(("keyring.backends.fail.", "keyring.backends.null.")):
            return "no OS keyring is available here (no Secret Service, KWallet or macOS Keychain)"
        if qualified.startswith(UNSAFE_BACKENDS) or getattr(item, "priority", 1) <= 0:
            return f"the keyring backend here is {qualified}, which keeps keys in a file anyone can read"
    return None


def backend_name() -> str:
    import keyring

    try:
        backend = keyring.get_keyring()
    except Exception as exc:
        return f"unloadable ({type(exc).__name__})"
    return f"{type(backend).__module__}.{type(backend).__qualname__}"


def refuse_unless_storable(provider: str) -> None:
    """Raise, saying once what to do instead, when a key for ``provider`` could not be stored here:
    asked before the key is typed, so nobody types a key only to have it refused."""
    _check(provider)
    problem = backend_problem()
    if problem is not None:
        name = env_names(provider)[0]
        raise CredentialError(
            f"cannot store a key: {problem}. Set {name} in the environment instead "
            f"(for example `export {name}=…` in your shell profile); tether reads it from there"
        )


def set_key(provider: str, key: str) -> None:
    import keyring
    from keyring.errors import KeyringError

    _check(provider)
    if not key.strip():
        raise CredentialError("an empty key was not stored")
    refuse_unless_storable(provider)
    try:
        keyring.set_password(SERVICE, provider, key.strip())
    except KeyringError as exc:
        raise CredentialError(
            f"the OS keyring is not usable here ({type(exc).__name__}); set {env_names(provider)[0]} "
            "in the environment instead"
        ) from None


def delete_key(provider: str) -> bool:
    import keyring
    from keyring.errors import KeyringError, PasswordDeleteError

    _check(provider)
    try:
        keyring.delete_password(SERVICE, provider)
    except PasswordDeleteError:
        return False
    except KeyringError as exc:
        raise CredentialError(f"the OS keyring is not usable here ({type(exc).__name__})") from None
    return True
