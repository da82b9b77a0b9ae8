"""Reading one URL through the guard: redirects followed one at a time (each re-checked), the body
streamed and cut at a byte limit, the whole read under one deadline; and the bytes decoded to text.

Every failure is a ``TaskFailed`` whose message a person can act on (refused address, timeout, HTTP
status, too many redirects); httpx's exceptions never leave this module.
"""

from __future__ import annotations

import codecs
import re
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from tether.config import ResearchSettings
from tether.errors import TaskFailed
from tether.toolkits.web.guard import GuardedTransport, Policy, check_url, guarded_client

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    max_bytes: int
    timeout_s: float
    max_redirects: int

    @classmethod
    def from_settings(cls, settings: ResearchSettings) -> Limits:
        return cls(
            max_bytes=settings.fetch_max_bytes,
            timeout_s=settings.fetch_timeout_s,
            max_redirects=settings.fetch_max_redirects,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Fetched:
    url: str  # the final URL, after redirects
    status: int
    content_type: str  # media type only, lowercase ("text/html")
    charset: str | None  # from the Content-Type header, if it named one
    body: bytes
    truncated: bool  # the body went on past ``max_bytes`` and was cut there
    redirects: tuple[str, ...] = ()


class Fetcher:
    """One guarded client and its limits; reuse it for several reads (connections are kept alive)."""

    def __init__(self, policy: Policy, limits: Limits, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self.policy = policy
        self.limits = limits
        self.transport = GuardedTransport(policy, ssl_context)
        self.client = guarded_client(self.transport, timeout_s=limits.timeout_s)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Fetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def fetch(
        self,
        url: str,
        *,
        method: str = "GET",
        json: Any = None,
        params: Mapping[str, str | int] | None = None,
        headers: Mapping[str, str] | None = None,
        check_stop: Callable[[], None] | None = None,
    ) -> Fetched:
        """Read ``url``; ``TaskFailed`` (or ``AddressRefused``) with a readable reason otherwise."""
        limits = self.limits
        current = check_url(url)
        if params:
            current = current.copy_merge_params(dict(params))
        deadline = time.monotonic() + limits.timeout_s
        self.transport.backend.deadline = deadline
        try:
            return self._follow(url, current, method, json, headers, deadline, check_stop)
        finally:
            self.transport.backend.deadline = None

    def _follow(
        self,
        url: str,
        current: httpx.URL,
        method: str,
        json: Any,
        headers: Mapping[str, str] | None,
        deadline: float,
        check_stop: Callable[[], None] | None,
    ) -> Fetched:
        limits = self.limits
        hops: list[str] = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _timeout(url, limits)
            try:
                with self.client.stream(
                    method, current, json=json, headers=headers, timeout=httpx.Timeout(remaining)
                ) as response:
                    location = response.headers.get("location")
                    if response.status_code in REDIRECT_STATUSES and location:
                        if len(hops) >= limits.max_redirects:
                            raise TaskFailed(
                                f"{_shown(url)} redirected more than {limits.max_redirects} times "
                                "([research] fetch_max_redirects)",
                                url=_shown(url),
                                redirects=hops,
                            )
                        if method != "GET":
                            raise TaskFailed(
                                f"{_shown(str(current))} answered {method} with a redirect; the "
                                "service's address is probably wrong",
                                url=_shown(str(current)),
                            )
                        current = check_url(location, base=current)
                        hops.append(str(current))
                        continue
                    if response.status_code >= 400:
                        raise TaskFailed(
                            f"{_shown(str(current))} answered HTTP {response.status_code} "
                            f"{response.reason_phrase}".rstrip(),
                            url=_shown(str(current)),
                            status=response.status_code,
                        )
                    body, truncated = _read(response, limits, deadline, url, check_stop)
                    media, charset = parse_content_type(response.headers.get("content-type", ""))
                    return Fetched(
                        url=str(current),
                        status=response.status_code,
                        content_type=media,
                        charset=charset,
                        body=body,
                        truncated=truncated,
                        redirects=tuple(hops),
                    )
            except httpx.TimeoutException as exc:
                raise _timeout(url, limits) from exc
            except httpx.HTTPError as exc:
                raise TaskFailed(
                    f"could not read {_shown(str(current))}: {_describe(exc)}", url=_shown(str(current))
                ) from exc


def _read(
    response: httpx.Response,
    limits: Limits,
    deadline: float,
    url: str,
    check_stop: Callable[[], None] | None,
) -> tuple[bytes, bool]:
    """The (decompressed) body up to ``max_bytes``: what a server or a gzip bomb sends past it is
    never read."""
    parts: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        if time.monotonic() > deadline:
            raise _timeout(url, limits)
        if check_stop is not None:
            check_stop()
        room = limits.max_bytes - size
        if len(chunk) > room:
            parts.append(chunk[:room])
            return b"".join(parts), True
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts), False


def _timeout(url: str, limits: Limits) -> TaskFailed:
    return TaskFailed(
        f"reading {_shown(url)} took longer than {limits.timeout_s:g}s ([research] fetch_timeout_s)",
        url=_shown(url),
        timed_out=True,
    )


def _describe(exc: httpx.HTTPError) -> str:
    text = str(exc) or type(exc).__name__
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return "its TLS certificate could not be verified"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({text})"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"the server's answer is not valid HTTP ({text})"
    return text


def _shown(url: str) -> str:
    return url if len(url) <= 300 else url[:297] + "..."


# -- decoding --------------------------------------------------------------------------------------

# Labels that name a subset of a larger codec: decode with the superset, which reads them all.
_SUPERSETS = {"gb2312": "gb18030", "gbk": "gb18030", "x-gbk": "gb18030", "cp936": "gb18030",
              "iso-8859-1": "cp1252", "latin-1": "cp1252", "us-ascii": "cp1252", "ascii": "cp1252",
              "big5": "big5hkscs", "shift_jis": "cp932", "euc-kr": "cp949"}  # fmt: skip
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]{1,40})""", re.IGNORECASE)
_XML_ENCODING = re.compile(rb"""^<\?xml[^>]+encoding\s*=\s*["']([A-Za-z0-9_.:-]{1,40})""")


def parse_content_type(value: str) -> tuple[str, str | None]:
    media, _, rest = value.partition(";")
    charset = None
    for part in rest.split(";"):
        name, _, raw = part.partition("=")
        if name.strip().lower() == "charset" and raw.strip().strip("\"'"):
            charset = raw.strip().strip("\"'")
    return media.strip().lower(), charset


def codec_for(label: str | None) -> str | None:
    """The Python codec that decodes a declared ``label``, or None when there is no such codec."""
    if not label:
        return None
    name = label.strip().lower()
    name = _SUPERSETS.get(name, name)
    try:
        info = codecs.lookup(name)
    except LookupError:
        return None
    # Only text encodings a page may declare: not zlib/base64/rot13 (bytes to bytes), not idna/punycode
    # (for host names, and they cannot replace bad input), not "undefined" (it raises on everything).
    if not getattr(info, "_is_text_encoding", True) or info.name in _NOT_PAGE_CODECS:
        return None
    return _SUPERSETS.get(info.name, info.name)


_NOT_PAGE_CODECS = frozenset({"idna", "punycode", "undefined", "raw-unicode-escape", "unicode-escape"})


def decode(body: bytes, declared: str | None = None) -> tuple[str, str]:
    """``body`` as text and the codec used: a byte-order mark, then the declared charset (HTTP
    header), then ``<meta charset>`` / the XML declaration, then charset-normalizer's guess."""
    for bom, codec in _BOMS:
        if body.startswith(bom):
            return body.decode(codec, errors="replace"), codec
    head = body[:8192]
    found = _META_CHARSET.search(head) or _XML_ENCODING.search(head)
    for label in (declared, found.group(1).decode("ascii") if found else None):
        codec = codec_for(label)
        # A page cannot say UTF-16/32 in ASCII (the HTML standard reads such a declaration as UTF-8), and
        # UTF-7 is not allowed for pages at all.
        if codec is not None and not codec.startswith(
            ("utf-16", "utf-32", "utf-7", "utf_16", "utf_32", "utf_7")
        ):
            try:
                return body.decode(codec, errors="replace"), codec
            except (LookupError, UnicodeError, ValueError):  # a codec that cannot decode this: try the next
                continue
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    import charset_normalizer

    best = charset_normalizer.from_bytes(body[:262_144]).best()
    codec = codec_for(best.encoding if best is not None else None) or "utf-8"
    return body.decode(codec, errors="replace"), codec
