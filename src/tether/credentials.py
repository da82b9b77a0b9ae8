"""API keys: from the OS keyring, else an environment variable (documented fallback); nowhere else.

Keys are stored under the keyring service ``tether`` with the provider name as user. The fallback is
``TETHER_API_KEY_<PROVIDER>`` (e.g. ``TETHER_API_KEY_DEEPSEEK``), then ``TETHER_API_KEY``. A key is never
read from a config file or a command-line argument, and never printed, logged or stored by tether.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from tether.errors import CredentialError

SERVICE = "tether"
PROVIDER_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,39}$")


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


def get_key(provider: str) -> str | None:
    _check(provider)
    key = _keyring_get(provider)
    if not key:
        key = next((os.environ[name] for name in env_names(provider) if os.environ.get(name)), None)
    if key and len(key) >= 8:
        _SEEN.add(key)
    return key or None


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
        if os.environ.get(name):
            return KeyInfo(provider=provider, source=name, length=len(os.environ[name]))
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


def set_key(provider: str, key: str) -> None:
    import keyring
    from keyring.errors import KeyringError

    _check(provider)
    if not key.strip():
        raise CredentialError("an empty key was not stored")
    problem = backend_problem()
    if problem is not None:
        raise CredentialError(
            f"the key was not stored: {problem} (no OS keyring such as Secret Service or macOS Keychain is "
            f"running). Set {env_names(provider)[0]} in the environment instead"
        )
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
