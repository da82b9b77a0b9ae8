"""Who may talk to ``tether serve``, and how: one ASGI layer in front of the whole app.

- **Where it listens.** 127.0.0.1 by default. Bound to a loopback address, requests must name a
  loopback host (``Host: 127.0.0.1:…``, ``localhost``, ``[::1]``): a web page on another site that
  rebinds its own name to 127.0.0.1 (DNS rebinding) is refused.
- **The token.** Every API request needs it, on loopback too (as Jupyter does): any local process of
  any local user can reach 127.0.0.1, and one that could approve a destructive call without it would be
  acting for the person. Generated on first use and kept owner-only in ``<home>/web/token``, sent as
  ``Authorization: Bearer …``. The page gets it once, through the URL ``tether serve`` prints
  (``/?token=…``), which sets it as an http-only, same-site cookie and redirects to a URL without it.
  The cookie's name is derived from the token, so two servers on one host (cookies ignore the port)
  do not overwrite each other's. The token never appears in a page or an event.
- **Cross-site requests.** A request that changes state (anything but GET, HEAD, OPTIONS) coming from a
  browser must come from this server's own origin (``Origin``, or ``Sec-Fetch-Site``); CORS stays closed
  (no ``Access-Control-Allow-*`` header is ever sent).
- **Bounds.** Request bodies beyond ``max_body`` bytes (a message's, which may carry images,
  ``max_message_body``) are refused (413) whether or not they announce
  their length (a body without one is read, up to the limit, before the app sees it). Responses carry
  a strict Content-Security-Policy and no-sniff, no-frame headers.
"""

from __future__ import annotations

import hashlib
import html
import ipaddress
import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

COOKIE_PREFIX = "tether_token_"
COOKIE_MAX_AGE_S = 30 * 24 * 3600  # the page keeps working across browser restarts for a month
TOKEN_FILE = "web/token"
OPEN_FILE = "web/open.html"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
PUBLIC = ("/static/", "/favicon.ico")
DIGITS = re.compile(r"[0-9]{1,12}")  # the page's own files: nothing in them is private


def token_path(home: Path) -> Path:
    return home / TOKEN_FILE


def load_or_create_token(home: Path) -> str:
    """The home's web token, created (owner-only) on first use."""
    path = token_path(home)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        token = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        token = ""
    if len(token) >= 32:
        os.chmod(path, 0o600)
        return token
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(token + "\n")
    os.chmod(path, 0o600)
    return token


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def open_page_file(home: Path, url: str) -> Path:
    """An owner-only page that sends the browser on to ``url`` (which holds the token): what
    ``tether serve --open`` hands the browser, so the token is never on a command line that every local
    user can read (``ps``), as Jupyter does."""
    path = home / OPEN_FILE
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = html.escape(url, quote=True)
    page = (
        '<!doctype html><meta charset="utf-8"><title>tether</title>'
        f'<meta http-equiv="refresh" content="0; url={target}">'
        f'<p><a href="{target}">Open tether</a></p>\n'
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(page)
    os.chmod(path, 0o600)
    return path


MESSAGE_PATH = re.compile(r"/api/threads/[^/]+/messages")


@dataclass(frozen=True, slots=True)
class Policy:
    token: str
    loopback: bool  # bound to a loopback address: Host must be one too
    max_body: int = 256 * 1024
    # A message may carry images (4 of at most 5 MB, in base64): its own, larger bound.
    max_message_body: int = 28 * 1024 * 1024

    def limit(self, path: str) -> int:
        """The largest body a request to ``path`` may send."""
        return self.max_message_body if MESSAGE_PATH.fullmatch(path) else self.max_body

    @property
    def cookie(self) -> str:
        """The cookie's name: this server's own (see the module's docstring), and no clue to the token."""
        return COOKIE_PREFIX + hashlib.sha256(self.token.encode()).hexdigest()[:12]

    def authorized(self, headers: dict[str, str]) -> bool:
        bearer = _bearer(headers.get("authorization", ""))
        candidates = [bearer] if bearer is not None else _cookies(headers.get("cookie", ""), self.cookie)
        return any(self.valid_token(given) for given in candidates)

    def valid_token(self, given: str) -> bool:
        return secrets.compare_digest(given.encode("utf-8", "replace"), self.token.encode())


def _bearer(value: str) -> str | None:
    scheme, _, credential = value.partition(" ")
    return credential.strip() or None if scheme.lower() == "bearer" else None


def _cookies(value: str, cookie: str) -> list[str]:
    """Every value of cookie ``cookie`` in a Cookie header. Split by hand: ``http.cookies`` drops
    whatever follows a cookie it dislikes, so another local app's cookie could hide ours."""
    found = []
    for part in value.split(";"):
        name, eq, given = part.strip().partition("=")
        if eq and name == cookie:
            found.append(given.strip().strip('"'))
    return found


HOST_RE = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9.-]+))(?::[0-9]{1,5})?$")


def host_name(host_header: str) -> str:
    """The name part of a Host header (``[::1]:8765`` → ``::1``); "" for anything malformed."""
    found = HOST_RE.fullmatch(host_header)
    if found is None:
        return ""
    return found.group("v6") or found.group("name")


class Guard:
    """The ASGI middleware that applies a ``Policy`` (see the module's docstring)."""

    def __init__(self, app: Any, policy: Policy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            status, code, message = refusal
            await _error(send, status, code, message)
            return
        if scope["method"] not in SAFE_METHODS:  # read whole, up to the limit, whatever it announced
            limit = self.policy.limit(scope.get("path", ""))
            body = await _read_bounded(receive, limit)
            if isinstance(body, _Gone):
                return  # the client left (or was cut off) mid-body: no part of a body reaches the app
            if body is None:
                await _error(send, 413, "too_large", f"a request body may hold at most {limit} bytes")
                return
            receive = _replay(body, receive)

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *HEADERS]}
            await send(message)

        await self.app(scope, receive, sending)

    def _refusal(self, scope: dict[str, Any], headers: dict[str, str]) -> tuple[int, str, str] | None:
        policy = self.policy
        host = headers.get("host", "")
        if policy.loopback and not is_loopback(host_name(host)):
            return 421, "wrong_host", "this server answers only to a loopback address such as 127.0.0.1"
        length = headers.get("content-length")
        if length is not None and "transfer-encoding" in headers:
            return 400, "invalid", "a request may give Content-Length or Transfer-Encoding, not both"
        limit = policy.limit(scope.get("path", ""))
        if length is not None and (not DIGITS.fullmatch(length) or int(length) > limit):
            return 413, "too_large", f"a request body may hold at most {limit} bytes"
        method = scope["method"]
        if method not in SAFE_METHODS and _cross_site(headers, scope):
            return 403, "cross_site", "state-changing requests must come from this server's own page"
        path = scope["path"]
        if path == "/" or path.startswith(PUBLIC):
            return None  # the page (its login sets the cookie) and its own files
        if not policy.authorized(headers):
            return 401, "unauthorized", "open the URL `tether serve` printed, or send its token as a bearer"
        return None


class _Gone:
    """The client went away before its body's end."""


GONE = _Gone()


async def _read_bounded(receive: Any, limit: int) -> bytes | _Gone | None:
    """The request's body, read whole; None past ``limit`` bytes; ``GONE`` when the client went away
    before its end (it is never handed on cut short)."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return GONE
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(parts)


def _replay(body: bytes, receive: Any) -> Any:
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _cross_site(headers: dict[str, str], scope: dict[str, Any]) -> bool:
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return True
    origin = headers.get("origin")
    if origin is None:
        return False  # not a browser (or one that says where it is by Sec-Fetch-Site above)
    parts = urlsplit(origin)
    scheme = scope.get("scheme", "http")
    return origin == "null" or parts.scheme != scheme or parts.netloc != headers.get("host", "")


async def _error(send: Any, status: int, code: str, message: str) -> None:
    body = json.dumps({"detail": {"code": code, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *HEADERS]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
