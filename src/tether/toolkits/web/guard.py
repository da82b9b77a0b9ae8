"""The SSRF guard: which URLs may be read, and which addresses may be connected to.

Two checks, at two moments:

1. ``check_url`` reads the URL a model or a person gave (and every redirect's ``Location``): http and
   https only, no ``user@`` part, no backslashes, spaces or control characters, a host that is there.
2. ``GuardedBackend.connect_tcp`` is the network backend of every connection the toolkit opens. It
   resolves the host itself, checks *every* address the name resolves to, and connects to one of
   those checked addresses by its numeric form, so there is no second resolution between the check
   and the connection (DNS rebinding cannot slip in). TLS keeps the host name for SNI and certificate
   verification, because httpcore takes those from the request, not from the socket.

Because the check is on the resolved address, every spelling of an address is covered whatever the
URL parser made of it (``127.1``, ``2130706433``, ``0x7f.1``, ``0177.0.0.1``, ``[::ffff:7f00:1]``):
the resolver turns them into the address that would be connected to, and that address is the one
checked. What is reachable is an allowlist: IPv4 outside the IANA special-purpose blocks, IPv6 in
global unicast ``2000::/3`` outside its special blocks, and IPv4 embedded in IPv6 (mapped, NAT64,
6to4) judged as the IPv4 address it carries.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpcore
import httpx

from tether.config import ResearchSettings
from tether.errors import ConfigError, TaskFailed

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_URL_CHARS = 2000
SCHEMES = ("http", "https")

# Cloud instance-metadata services: refused even when private networks are allowed.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254", "fd00:ec2::23")
)
METADATA_NAMES = frozenset(
    {"metadata.google.internal", "metadata.goog", "metadata", "instance-data", "instance-data.ec2.internal"}
)

# Kinds a person may open up with ``allow_private_networks``; every other refused kind stays refused
# unless ``allow_hosts`` names the address.
RELAXABLE = frozenset({"loopback", "private", "link-local", "carrier-grade NAT", "unique-local"})

_V4_SPECIAL: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "unspecified"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "carrier-grade NAT"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "reserved"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "reserved"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "reserved"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),  # includes the broadcast address 255.255.255.255
)
_V6_GLOBAL = ipaddress.IPv6Network("2000::/3")
_V6_SPECIAL: tuple[tuple[str, str], ...] = (
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "private"),
    ("fc00::/7", "unique-local"),
    ("fe80::/10", "link-local"),
    ("ff00::/8", "multicast"),
    ("2001::/23", "reserved"),  # IETF protocol assignments, Teredo among them
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
)
_V4_TABLE = tuple((ipaddress.IPv4Network(n), kind) for n, kind in _V4_SPECIAL)
_V6_TABLE = tuple((ipaddress.IPv6Network(n), kind) for n, kind in _V6_SPECIAL)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")

_FORBIDDEN_CHARS = re.compile(r"[\x00-\x20\x7f\\]")


class AddressRefused(TaskFailed):
    """A URL or an address the guard does not let the toolkit reach."""


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, NAT64 well-known prefix, 6to4), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _SIX_TO_FOUR:
        return ip.sixtofour
    return None


def classify(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public address ("loopback", "metadata", …), or None when it is one."""
    if ip in METADATA_ADDRESSES:
        return "cloud metadata"
    if isinstance(ip, ipaddress.IPv6Address):
        inner = embedded_ipv4(ip)
        if inner is not None:
            kind = classify(inner)
            return None if kind is None else f"{kind} (IPv4 {inner} inside IPv6)"
        if ip.scope_id:
            return "link-local"
        for network, kind in _V6_TABLE:
            if ip in network:
                return kind
        return None if ip in _V6_GLOBAL else "reserved"
    for network, kind in _V4_TABLE:
        if ip in network:
            return kind
    return None


def _unmapped(ip: IPAddress) -> IPAddress:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def normalize_host(host: str) -> str:
    """A host name as the connection sees it: lowercase ASCII (IDNA), no trailing dot, no brackets."""
    host = host.strip().strip("[]").rstrip(".").lower()
    if host.isascii():
        return host
    import idna  # httpx's own IDNA codec, so a name compares equal to what httpx connects to

    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except idna.IDNAError as exc:
        raise ConfigError(f"{host!r} is not a valid host name ({exc})") from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """What may be reached beyond public addresses. The default reaches public addresses only."""

    allow_private: bool = False
    networks: tuple[tuple[IPNetwork, int | None], ...] = ()
    names: frozenset[tuple[str, int | None]] = field(default_factory=frozenset)

    @classmethod
    def from_settings(cls, settings: ResearchSettings, extra: Iterable[str] = ()) -> Policy:
        """``[research]``'s relaxations, plus ``extra`` entries (the configured SearXNG's host:port)."""
        networks: list[tuple[IPNetwork, int | None]] = []
        names: set[tuple[str, int | None]] = set()
        for entry in (*settings.allow_hosts, *extra):
            value = parse_allow_entry(entry)
            if isinstance(value[0], str):
                names.add((value[0], value[1]))
            else:
                networks.append((value[0], value[1]))
        return cls(
            allow_private=settings.allow_private_networks, networks=tuple(networks), names=frozenset(names)
        )

    def name_problem(self, host: str, port: int) -> str | None:
        name = normalize_host(host)
        if name in METADATA_NAMES and not self._named(name, port):
            return f"{host} is a cloud metadata service"
        return None

    def address_problem(self, host: str, port: int, ip: IPAddress) -> str | None:
        """Why connecting to ``ip`` (resolved from ``host``) is refused, or None when it may be."""
        kind = classify(ip)
        if kind is None:
            return None
        name = normalize_host(host)
        # A named host may resolve to anything but a metadata service (that needs its address or its
        # own name listed): a LAN name that DNS points at 169.254.169.254 stays refused.
        if self._named(name, port) and (not kind.startswith("cloud metadata") or name in METADATA_NAMES):
            return None
        plain = _unmapped(ip)
        for network, allowed_port in self.networks:
            if plain.version == network.version and plain in network and allowed_port in (None, port):
                return None
        if self.allow_private and kind.partition(" (")[0] in RELAXABLE:
            return None
        return f"{ip} is a {kind} address"

    def _named(self, name: str, port: int) -> bool:
        return (name, None) in self.names or (name, port) in self.names


def parse_allow_entry(entry: str) -> tuple[str | IPNetwork, int | None]:
    """``host``, ``host:port``, ``[v6]:port``, an IP or a CIDR → (name or network, port or None)."""
    text = entry.strip()
    where = f"[research] allow_hosts entry {entry!r}"
    port: int | None = None
    if text.startswith("["):
        inside, _, rest = text[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ConfigError(f"{where}: write an IPv6 address with a port as [::1]:8080")
        text, port = inside, _port(rest[1:], where) if rest else None
    elif text.count(":") == 1:
        text, _, raw = text.partition(":")
        port = _port(raw, where)
    try:
        return ipaddress.ip_network(text, strict=False), port
    except ValueError:
        pass
    if "/" in text or not text:
        raise ConfigError(f"{where}: not a host, host:port, IP address or CIDR (e.g. 192.168.1.0/24)")
    return normalize_host(text), port


def _port(raw: str, where: str) -> int:
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ConfigError(f"{where}: the port must be a number from 1 to 65535")
    return int(raw)


def check_url(url: object, *, base: httpx.URL | None = None) -> httpx.URL:
    """``url`` (relative to ``base`` for a redirect) as an ``httpx.URL`` a read may go to, without its
    fragment; ``AddressRefused`` with what is allowed otherwise."""
    if not isinstance(url, str):
        raise AddressRefused("the URL must be text, such as https://example.com/page")
    shown = url if len(url) <= 200 else url[:197] + "..."
    text = url.strip()
    if not text:
        raise AddressRefused("the URL is empty: give one such as https://example.com/page")
    if len(text) > MAX_URL_CHARS:
        raise AddressRefused(f"the URL is longer than {MAX_URL_CHARS} characters", url=shown)
    if _FORBIDDEN_CHARS.search(text):
        raise AddressRefused(
            f"{shown!r} contains a space, a backslash or a control character; percent-encode them",
            url=shown,
        )
    try:
        parsed = base.join(text) if base is not None else httpx.URL(text)
    except (httpx.InvalidURL, ValueError, UnicodeError) as exc:
        raise AddressRefused(f"{shown!r} is not a valid URL ({exc})", url=shown) from exc
    if parsed.scheme not in SCHEMES:
        scheme = parsed.scheme or "none"
        raise AddressRefused(
            f"only http and https URLs can be read (this one's scheme is {scheme!r})", url=shown
        )
    if parsed.userinfo:
        raise AddressRefused(
            "URLs with a user name or password before the host (user@host) are not read", url=shown
        )
    if not parsed.host:
        raise AddressRefused(f"{shown!r} names no host", url=shown)
    return parsed.copy_with(fragment=None)


@dataclass(slots=True)
class GuardedBackend(httpcore.NetworkBackend):
    """httpcore's sync backend, connecting only to checked addresses, by number.

    ``connected`` records ``(host, address)`` of every connection made, for tests and logs.
    """

    policy: Policy
    connected: list[tuple[str, str]] = field(default_factory=list)
    # A ``time.monotonic()`` instant no socket operation may wait past (one whole read's deadline,
    # redirects included); None = only httpx's per-operation timeouts.
    deadline: float | None = None
    _inner: httpcore.SyncBackend = field(default_factory=httpcore.SyncBackend)

    def wait_limit(self, timeout: float | None) -> float | None:
        """``timeout`` shortened to what is left before the deadline; ``TimeoutError`` past it."""
        if self.deadline is None:
            return timeout
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the read's deadline has passed")
        return left if timeout is None else min(timeout, left)

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        problem = self.policy.name_problem(host, port)
        if problem is not None:
            raise AddressRefused(f"refused to connect to {host}: {problem}", host=host, refused=True)
        addresses = resolve(host, port)
        for ip, _ in addresses:
            problem = self.policy.address_problem(host, port, ip)
            if problem is not None:
                # One refused address refuses the name: a resolver answer mixing public and private
                # addresses is how a rebinding attack would pick the private one.
                raise AddressRefused(
                    f"refused to connect to {host}: {problem} (not a public address; a person can allow "
                    "it with [research] allow_hosts or allow_private_networks)",
                    host=host,
                    address=str(ip),
                    refused=True,
                )
        last: Exception | None = None
        for ip, numeric in addresses:
            try:
                stream = self._inner.connect_tcp(
                    numeric,
                    port,
                    timeout=self._limit(timeout, httpcore.ConnectTimeout),
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:
                last = exc
                continue
            self.connected.append((host, str(ip)))
            return _BoundedStream(stream, self)
        assert last is not None
        raise last

    def _limit(self, timeout: float | None, error: type[Exception]) -> float | None:
        try:
            return self.wait_limit(timeout)
        except TimeoutError as exc:
            raise error(str(exc)) from exc

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise AddressRefused("unix sockets are never reached by the web toolkit")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _BoundedStream(httpcore.NetworkStream):
    """A connection whose every read and write waits no longer than the backend's deadline allows
    (a server that drips a byte at a time cannot stretch a read past it)."""

    def __init__(self, inner: httpcore.NetworkStream, backend: GuardedBackend) -> None:
        self._inner = inner
        self._backend = backend

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._backend._limit(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._backend._limit(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        inner = self._inner.start_tls(
            ssl_context, server_hostname, self._backend._limit(timeout, httpcore.ConnectTimeout)
        )
        return _BoundedStream(inner, self._backend)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


def resolve(host: str, port: int) -> list[tuple[IPAddress, str]]:
    """Every (address, numeric host to connect to) ``host`` resolves to, in the resolver's order."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError, ValueError) as exc:
        raise TaskFailed(f"cannot find the host {host!r} ({exc})", host=host) from exc
    found: list[tuple[IPAddress, str]] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        literal = str(sockaddr[0])
        ip = ipaddress.ip_address(literal.partition("%")[0])
        if isinstance(ip, ipaddress.IPv6Address) and len(sockaddr) >= 4 and sockaddr[3]:
            ip = ipaddress.IPv6Address(f"{ip}%{sockaddr[3]}")
            literal = f"{ip}"
        if all(ip != seen for seen, _ in found):
            found.append((ip, literal))
    if not found:
        raise TaskFailed(f"cannot find the host {host!r} (no addresses)", host=host)
    return found


class GuardedTransport(httpx.HTTPTransport):
    """httpx's transport with its connection pool on a ``GuardedBackend``; proxies from the
    environment are never used (a proxy would connect on our behalf to an unchecked address)."""

    def __init__(self, policy: Policy, ssl_context: ssl.SSLContext | None = None) -> None:
        super().__init__(trust_env=False)
        self.backend = GuardedBackend(policy)
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context or httpx.create_ssl_context(trust_env=False),
            max_connections=10,
            max_keepalive_connections=5,
            keepalive_expiry=5.0,
            network_backend=self.backend,
        )


USER_AGENT = "tether-research/1"


def guarded_client(transport: GuardedTransport, *, timeout_s: float) -> httpx.Client:
    """An httpx client whose every connection passes the guard. It follows no redirect itself:
    ``fetch`` follows them one by one, each re-checked."""
    return httpx.Client(
        transport=transport,
        trust_env=False,
        follow_redirects=False,
        timeout=httpx.Timeout(timeout_s),
        headers={"User-Agent": USER_AGENT, "Accept-Encoding": "gzip, deflate"},
    )
