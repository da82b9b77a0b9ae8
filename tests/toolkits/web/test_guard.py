"""The SSRF guard: which addresses are public, what settings relax, which URLs are read at all, and
the promise that matters most: no refused address is ever connected to, however it is spelled."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.toolkits.web.site import Recorder, Site
from tether.config import ResearchSettings
from tether.errors import ConfigError, TaskFailed
from tether.toolkits.web.fetch import Fetcher, Limits
from tether.toolkits.web.guard import (
    AddressRefused,
    Policy,
    check_url,
    classify,
    parse_allow_entry,
)

LIMITS = Limits(max_bytes=64 * 1024, timeout_s=3.0, max_redirects=3)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def ip(text: str) -> Any:
    return ipaddress.ip_address(text)


# -- which addresses are public ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("fd12:3456::1", "unique-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("192.0.2.10", "documentation"),
        ("2001:db8::1", "documentation"),
        ("169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("::ffff:127.0.0.1", "loopback (IPv4 127.0.0.1 inside IPv6)"),
        ("::ffff:169.254.169.254", "cloud metadata (IPv4 169.254.169.254 inside IPv6)"),
        ("64:ff9b::a00:1", "private (IPv4 10.0.0.1 inside IPv6)"),
        ("2002:7f00:1::", "loopback (IPv4 127.0.0.1 inside IPv6)"),
        ("2001:0:4136:e378::1", "reserved"),  # Teredo
        ("::7f00:1", "reserved"),  # IPv4-compatible, deprecated
    ],
)
def test_special_addresses_are_refused_by_kind(address: str, kind: str) -> None:
    assert classify(ip(address)) == kind
    assert Policy().address_problem("h", 80, ip(address)) == f"{ip(address)} is a {kind} address"


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"],
)
def test_public_addresses_pass(address: str) -> None:
    assert classify(ip(address)) is None
    assert Policy().address_problem("h", 443, ip(address)) is None


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_every_ipv4_address_python_calls_non_global_is_refused(n: int) -> None:
    address = ipaddress.IPv4Address(n)
    if not address.is_global or address.is_multicast or address.is_reserved:
        assert classify(address) is not None


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_ipv4_inside_ipv6_is_judged_as_the_ipv4_it_carries(n: int) -> None:
    v4 = ipaddress.IPv4Address(n)
    refused = classify(v4) is not None
    mapped = ipaddress.IPv6Address(f"::ffff:{v4}")
    nat64 = ipaddress.IPv6Address((0x64FF9B << 96) | n)
    six_to_four = ipaddress.IPv6Address((0x2002 << 112) | (n << 80))
    for wrapped in (mapped, nat64, six_to_four):
        assert (classify(wrapped) is not None) == refused, wrapped


@given(st.integers(min_value=0, max_value=2**128 - 1))
def test_ipv6_outside_global_unicast_or_python_special_is_refused(n: int) -> None:
    address = ipaddress.IPv6Address(n)
    embedded = (
        address.ipv4_mapped is not None
        or address in ipaddress.IPv6Network("64:ff9b::/96")
        or address in ipaddress.IPv6Network("2002::/16")
    )
    if embedded:
        return
    special = (
        address.is_private
        or address.is_multicast
        or address.is_link_local
        or address.is_loopback
        or address.is_unspecified
        or address.is_reserved
        or address.is_site_local
        or address not in ipaddress.IPv6Network("2000::/3")
    )
    if special:
        assert classify(address) is not None


# -- what settings relax ----------------------------------------------------------------------------


def test_allow_private_networks_opens_private_kinds_but_never_metadata_or_multicast() -> None:
    policy = Policy.from_settings(ResearchSettings(allow_private_networks=True))
    for address in ("127.0.0.1", "10.0.0.5", "192.168.1.9", "169.254.3.3", "100.64.1.1", "fd00::5", "::1"):
        assert policy.address_problem("nas", 80, ip(address)) is None, address
    assert policy.address_problem("h", 80, ip("::ffff:192.168.1.9")) is None
    for address in ("169.254.169.254", "fd00:ec2::254", "224.0.0.1", "0.0.0.0", "240.0.0.1"):
        assert policy.address_problem("h", 80, ip(address)) is not None, address
    assert policy.name_problem("metadata.google.internal", 80) is not None


def test_allow_hosts_names_exact_hosts_ports_and_networks() -> None:
    policy = Policy.from_settings(
        ResearchSettings(allow_hosts=("192.168.1.0/24", "127.0.0.1:8888", "NAS.lan", "[::1]:9000"))
    )
    assert policy.address_problem("x", 80, ip("192.168.1.77")) is None
    assert policy.address_problem("x", 80, ip("192.168.2.1")) is not None
    assert policy.address_problem("x", 8888, ip("127.0.0.1")) is None
    assert policy.address_problem("x", 8889, ip("127.0.0.1")) is not None  # another port, refused
    assert policy.address_problem("x", 8888, ip("::ffff:127.0.0.1")) is None
    assert policy.address_problem("nas.lan", 5000, ip("10.0.0.2")) is None  # a named host, any address
    assert policy.address_problem("other.lan", 5000, ip("10.0.0.2")) is not None
    assert policy.address_problem("nas.lan", 80, ip("169.254.169.254")) is not None  # never metadata
    assert policy.address_problem("x", 9000, ip("::1")) is None
    assert policy.address_problem("x", 9001, ip("::1")) is not None


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("10.0.0.0/8", (ipaddress.ip_network("10.0.0.0/8"), None)),
        ("host.lan:8080", ("host.lan", 8080)),
        ("[fd00::1]:443", (ipaddress.ip_network("fd00::1/128"), 443)),
        ("fd00::/8", (ipaddress.ip_network("fd00::/8"), None)),
    ],
)
def test_allow_entries_parse(entry: str, expected: tuple[object, object]) -> None:
    assert parse_allow_entry(entry) == expected


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("host:0", "port must be a number"),
        ("host:99999", "port"),
        ("1.2.3.4/99", "CIDR"),
        ("[::1]x", "[::1]"),
    ],
)
def test_bad_allow_entries_say_what_is_allowed(entry: str, says: str) -> None:
    with pytest.raises(ConfigError, match=r"allow_hosts entry") as caught:
        parse_allow_entry(entry)
    assert says in caught.value.message


# -- which URLs are read at all ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("", "empty"),
        ("file:///etc/passwd", "only http and https"),
        ("gopher://example.com/", "only http and https"),
        ("javascript:alert(1)", "only http and https"),
        ("http://user:pw@example.com/", "user name or password"),
        ("http://example.com@127.0.0.1/", "user name or password"),
        ("http://example.com\\@127.0.0.1/", "backslash"),
        ("http://exa mple.com/", "space"),
        ("http://example.com/\x00", "control character"),
        ("http:///path", "names no host"),
        ("http://" + "a" * 2100 + ".com/", "longer than 2000"),
    ],
)
def test_urls_outside_http_and_https_are_refused_with_the_reason(url: str, says: str) -> None:
    with pytest.raises(AddressRefused) as caught:
        check_url(url)
    assert says in caught.value.message


def test_a_url_keeps_its_host_for_the_connection_and_drops_its_fragment() -> None:
    assert str(check_url("HTTPS://Example.COM/a?b=1#frag")) == "https://example.com/a?b=1"
    assert check_url("http://例子.测试/路径").raw_host == b"xn--fsqu00a.xn--0zwm56d"
    assert str(check_url("/next", base=check_url("https://example.com/a/b"))) == "https://example.com/next"


@given(st.text(max_size=300))
def test_check_url_refuses_clearly_or_returns_an_http_url(text: str) -> None:
    try:
        url = check_url(text)
    except AddressRefused as exc:
        assert exc.message
        return
    assert url.scheme in ("http", "https")
    assert not url.userinfo and url.host and not url.fragment


# -- the promise: a refused address is never connected to ------------------------------------------


def spell_ipv4(draw: st.DrawFn, n: int) -> str:
    """``n`` in one of the notations inet_aton and friends accept: dotted parts in decimal, octal or
    hex, the short forms a.b.c / a.b / a, one integer."""
    octets = [(n >> shift) & 0xFF for shift in (24, 16, 8, 0)]
    form = draw(st.sampled_from(["dotted", "abc", "ab", "int"]))
    parts = {
        "dotted": octets,
        "abc": [octets[0], octets[1], (octets[2] << 8) | octets[3]],
        "ab": [octets[0], (n & 0xFFFFFF)],
        "int": [n],
    }[form]
    rendered = []
    for part in parts:
        base = draw(st.sampled_from(["dec", "hex", "HEX", "oct"]))
        rendered.append({"dec": str(part), "hex": hex(part), "HEX": f"0X{part:X}", "oct": f"0{part:o}"}[base])
    return ".".join(rendered)


@st.composite
def local_urls(draw: st.DrawFn, port: int) -> str:
    """URLs whose connection would land on this machine, in every notation and with URL tricks."""
    loopback_v4 = (127 << 24) | draw(st.integers(0, 2**24 - 1))
    v4 = spell_ipv4(draw, draw(st.sampled_from([loopback_v4, (127 << 24) | 1, 0])))
    host = draw(
        st.sampled_from(
            [
                v4,
                v4,
                "localhost",
                "LOCALHOST",
                "localhost.",
                "[::1]",
                "[0:0:0:0:0:0:0:1]",
                "[::ffff:127.0.0.1]",
                "[::ffff:7f00:1]",
                "[0:0:0:0:0:ffff:127.0.0.1]",
                "[::]",
                "0.0.0.0",
                "0",
                "127.0.0.1",
                "127%2E0%2E0%2E1",
                "%31%32%37.0.0.1",
                "127。0。0。1",
                f"[64:ff9b::{(127 << 8):x}:1]",
            ]
        )
    )
    own = _own_addresses()
    if own and draw(st.booleans()):
        host = draw(st.sampled_from(own))
    scheme = draw(st.sampled_from(["http", "HTTP", "Http", "https"]))
    trick = draw(st.sampled_from(["", "user@", "user:pw@", "a.invalid@", "a.invalid\\@", "@"]))
    path = draw(st.sampled_from(["/", "/x", "/%2e%2e/", "/?q=1", "#@a.invalid", "/#frag", ""]))
    return f"{scheme}://{trick}{host}:{port}{path}"


def _own_addresses() -> list[str]:
    """This machine's own non-loopback addresses (a container's 172.17.x, a LAN address)."""
    found: set[str] = set()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM):
            found.add(str(info[4][0]).partition("%")[0])
    except OSError:
        return []
    return sorted(f"[{a}]" if ":" in a else a for a in found)


@pytest.fixture
def guarded_fetcher() -> Iterator[Fetcher]:
    fetcher = Fetcher(Policy(), LIMITS)
    yield fetcher
    fetcher.close()


def test_no_refused_address_is_ever_connected_to(recorder: Recorder, guarded_fetcher: Fetcher) -> None:
    refusals: list[str] = []

    @FUZZ
    @given(local_urls(recorder.port))
    def attempt(url: str) -> None:
        with pytest.raises(TaskFailed) as caught:
            guarded_fetcher.fetch(url)
        refusals.append(caught.value.message)
        assert not recorder.accepted, (url, recorder.accepted)

    attempt()
    assert recorder.accepted == []
    assert any("loopback" in message for message in refusals)
    assert guarded_fetcher.client is not None
    transport = guarded_fetcher.transport
    assert transport.backend.connected == []


def test_the_recorder_does_record_a_connection_the_guard_allows(recorder: Recorder) -> None:
    """The control for the test above: the same listener, reached once the policy allows it."""
    policy = Policy(networks=((ipaddress.ip_network("127.0.0.0/8"), recorder.port),))
    with Fetcher(policy, LIMITS) as fetcher:
        fetched = fetcher.fetch(f"http://127.0.0.1:{recorder.port}/")
    assert fetched.body == b"ok"
    assert recorder.accepted and recorder.accepted[0].endswith("127.0.0.1")


def test_metadata_names_are_refused_before_any_lookup(guarded_fetcher: Fetcher) -> None:
    with pytest.raises(AddressRefused, match="cloud metadata"):
        guarded_fetcher.fetch("http://metadata.google.internal/computeMetadata/v1/")
    with pytest.raises(AddressRefused, match="cloud metadata"):
        guarded_fetcher.fetch("http://169.254.169.254/latest/meta-data/")


def test_the_address_connected_to_is_the_address_checked(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rebinding resolver answers the allowed address once and a refused one afterwards: the name
    is resolved once per connection and the socket goes to the address that was checked."""
    site.add("/page", "<html><body><p>hello</p></body></html>")
    real = socket.getaddrinfo
    asked: list[str] = []

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "rebind.test":
            asked.append(host)
            target = "127.0.0.1" if len(asked) == 1 else "169.254.169.254"
            return real(target, port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    policy = Policy(networks=((ipaddress.ip_network("127.0.0.1/32"), site.port),))
    with Fetcher(policy, LIMITS) as fetcher:
        fetched = fetcher.fetch(f"http://rebind.test:{site.port}/page")
        backend = fetcher.transport.backend
        assert backend.connected == [("rebind.test", "127.0.0.1")]
    assert asked == ["rebind.test"]
    assert b"hello" in fetched.body
    assert site.requests[-1]["headers"]["host"] == f"rebind.test:{site.port}"  # the name, not the IP


def test_a_name_with_one_refused_address_among_public_ones_is_refused(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = socket.getaddrinfo

    def mixed(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "mixed.test":
            return real("93.184.216.34", port, *args, **kwargs) + real("127.0.0.1", port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", mixed)
    with (
        Fetcher(Policy(), LIMITS) as fetcher,
        pytest.raises(AddressRefused, match=r"127\.0\.0\.1 is a loopback"),
    ):
        fetcher.fetch(f"http://mixed.test:{recorder.port}/")
    assert recorder.accepted == []


@given(st.text(max_size=80))
def test_any_allow_entry_parses_or_is_refused_with_the_entry_named(entry: str) -> None:
    try:
        value, port = parse_allow_entry(entry)
    except ConfigError as exc:
        assert "allow_hosts entry" in exc.message or "host name" in exc.message
        return
    assert port is None or 0 < port < 65536
    assert isinstance(value, str | ipaddress.IPv4Network | ipaddress.IPv6Network)
