"""The bounded reader: redirects re-checked one at a time, size and time limits, readable failures;
and decoding bytes to text in the charsets Chinese and English pages use."""

from __future__ import annotations

import codecs
import ipaddress
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.toolkits.web.site import ARTICLE_ZH, Recorder, Site, article_html
from tether.errors import TaskFailed
from tether.toolkits.web.fetch import Fetcher, Limits, codec_for, decode, parse_content_type
from tether.toolkits.web.guard import AddressRefused, Policy

LIMITS = Limits(max_bytes=64 * 1024, timeout_s=2.0, max_redirects=3)


@pytest.fixture
def fetcher(site: Site) -> Iterator[Fetcher]:
    """A reader that may reach the test site's host:port and nothing else on this machine."""
    policy = Policy(networks=((ipaddress.ip_network("127.0.0.1/32"), site.port),))
    with Fetcher(policy, LIMITS) as reader:
        yield reader


def test_redirects_are_followed_one_by_one_and_reported(site: Site, fetcher: Fetcher) -> None:
    site.add("/end", "<html><body>end</body></html>", "text/html; charset=utf-8")
    site.redirect("/a", "/b", 301)
    site.redirect("/b", site.url("/end"), 307)
    fetched = fetcher.fetch(site.url("/a"))
    assert fetched.url == site.url("/end")
    assert fetched.redirects == (site.url("/b"), site.url("/end"))
    assert fetched.charset == "utf-8" and fetched.content_type == "text/html"


def test_too_many_redirects_fail_naming_the_setting(site: Site, fetcher: Fetcher) -> None:
    site.redirect("/loop", "/loop")
    with pytest.raises(
        TaskFailed, match=r"redirected more than 3 times \(\[research\] fetch_max_redirects\)"
    ):
        fetcher.fetch(site.url("/loop"))


@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.1:{rec}/",
        "http://localhost:{rec}/",
        "http://[::1]:{rec}/",
        "http://2130706433:{rec}/",
        "http://0x7f.1:{rec}/",
        "http://[::ffff:127.0.0.1]:{rec}/",
        "http://169.254.169.254/latest/meta-data/",
    ],
)
def test_a_redirect_to_a_refused_address_is_never_followed(
    site: Site, recorder: Recorder, fetcher: Fetcher, target: str
) -> None:
    site.redirect("/jump", target.format(rec=recorder.port))
    with pytest.raises(AddressRefused, match="refused to connect"):
        fetcher.fetch(site.url("/jump"))
    assert recorder.accepted == []


@pytest.mark.parametrize("target", ["file:///etc/passwd", "ftp://example.com/x", "http://u:p@example.com/"])
def test_a_redirect_to_another_scheme_or_with_credentials_is_refused(
    site: Site, fetcher: Fetcher, target: str
) -> None:
    site.redirect("/jump", target)
    with pytest.raises(AddressRefused):
        fetcher.fetch(site.url("/jump"))


def test_an_oversized_body_stops_at_the_limit(site: Site, fetcher: Fetcher) -> None:
    site.add("/big", b"<html><body>" + b"x" * (1024 * 1024), "text/html")
    fetched = fetcher.fetch(site.url("/big"))
    assert fetched.truncated and len(fetched.body) == LIMITS.max_bytes


def test_a_gzip_bomb_is_cut_at_the_limit_after_decompression(site: Site, fetcher: Fetcher) -> None:
    site.gzip_bomb("/bomb", decoded_bytes=50 * 1024 * 1024)
    fetched = fetcher.fetch(site.url("/bomb"))
    assert fetched.truncated and len(fetched.body) == LIMITS.max_bytes


@pytest.mark.parametrize("behaviour", ["drip", "stall"])
def test_a_slow_server_fails_with_the_timeout_setting(site: Site, fetcher: Fetcher, behaviour: str) -> None:
    getattr(site, behaviour)("/slow")
    with pytest.raises(TaskFailed, match=r"took longer than 2s \(\[research\] fetch_timeout_s\)") as caught:
        fetcher.fetch(site.url("/slow"))
    assert caught.value.data["timed_out"] is True


def test_http_errors_and_closed_ports_are_said_plainly(site: Site, fetcher: Fetcher) -> None:
    with pytest.raises(TaskFailed, match=r"answered HTTP 404 Not Found"):
        fetcher.fetch(site.url("/missing"))
    closed = Policy(networks=((ipaddress.ip_network("127.0.0.1/32"), 1),))
    with Fetcher(closed, LIMITS) as reader, pytest.raises(TaskFailed, match="cannot connect"):
        reader.fetch("http://127.0.0.1:1/")


def test_an_unknown_host_is_said_plainly(fetcher: Fetcher) -> None:
    with pytest.raises(TaskFailed, match=r"cannot find the host 'no-such-host\.invalid'"):
        fetcher.fetch("http://no-such-host.invalid/")


def test_stop_requests_are_honoured_while_reading(site: Site, fetcher: Fetcher) -> None:
    site.drip("/slow")

    class Stop(Exception):
        pass

    def check_stop() -> None:
        raise Stop

    with pytest.raises(Stop):
        fetcher.fetch(site.url("/slow"), check_stop=check_stop)


# -- decoding ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["gbk", "gb18030", "utf-8", "big5"])
def test_declared_charsets_decode_chinese(codec: str) -> None:
    text = "繁體與简体：信任边界" if codec != "big5" else "繁體中文：信任邊界"
    body = article_html(text, None).encode(codec, errors="strict" if codec != "big5" else "ignore")
    decoded, _ = decode(body, codec)
    assert text in decoded


def test_a_meta_charset_is_read_when_the_header_says_nothing() -> None:
    body = article_html("标题", "gb2312").encode("gbk")
    decoded, used = decode(body, None)
    assert used == "gb18030" and ARTICLE_ZH in decoded


def test_an_undeclared_gbk_page_is_detected() -> None:
    body = article_html("没有声明编码的页面", None, paragraphs=8).encode("gbk")
    decoded, used = decode(body, None)
    assert "没有声明编码的页面" in decoded and ARTICLE_ZH in decoded, used


def test_gb18030_four_byte_characters_survive() -> None:
    text = "𠀀𪚥 and 中文"  # outside GBK: four-byte sequences in GB18030
    decoded, _ = decode(f"<meta charset='gb18030'><p>{text}</p>".encode("gb18030"))
    assert text in decoded


def test_a_byte_order_mark_wins_over_a_wrong_declaration() -> None:
    decoded, used = decode(codecs.BOM_UTF8 + "中文".encode(), "iso-8859-1")
    assert decoded == "中文" and used == "utf-8-sig"


def test_content_type_and_codec_names() -> None:
    assert parse_content_type('text/HTML; Charset="GBK"') == ("text/html", "GBK")
    assert parse_content_type("") == ("", None)
    assert codec_for("GB2312") == "gb18030"
    assert codec_for("no-such-charset") is None


@given(st.binary(max_size=2048), st.sampled_from([None, "utf-8", "gbk", "latin-1", "bogus", "utf-16"]))
def test_decoding_never_fails(body: bytes, declared: str | None) -> None:
    text, used = decode(body, declared)
    assert isinstance(text, str) and codecs.lookup(used)


def test_no_declared_charset_makes_decoding_raise() -> None:
    """A hostile page may declare any codec Python knows (zlib, base64, idna, undefined …): decoding
    falls back instead of raising."""
    import encodings.aliases

    from tether.toolkits.web.fetch import decode

    names = {*encodings.aliases.aliases, *encodings.aliases.aliases.values(), "undefined", "idna", "punycode"}
    body = "<p>你好, world é</p>".encode()
    for name in sorted(names):
        page = f'<meta charset="{name}">'.encode() + body
        text, codec = decode(page)
        assert isinstance(text, str) and codec, name
        assert isinstance(decode(body, declared=name)[0], str), name


def test_a_page_declaring_utf16_or_utf7_in_ascii_is_read_as_utf8() -> None:
    from tether.toolkits.web.fetch import decode

    for label in ("utf-16le", "UTF-16", "utf-32", "utf-7"):
        text, codec = decode(f'<meta charset="{label}"><p>hello 你好</p>'.encode())
        assert codec == "utf-8" and "hello 你好" in text, label
