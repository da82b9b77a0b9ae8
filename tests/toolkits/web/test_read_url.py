"""``web.read_url`` end to end: a real executor starts a real worker that reads real pages served on
127.0.0.1, in UTF-8 and GBK, a PDF, through redirects, past limits; and refuses what it must."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.toolkits.web.site import ARTICLE_EN, ARTICLE_ZH, Recorder, Site, article_html
from tether.execution.executor import Executor
from tether.tasks.result import TaskResult, TaskStatus
from tether.toolkits.web.specs import registry


@pytest.fixture
def web(make_executor: Callable[..., Executor]) -> Executor:
    return make_executor(registry)


def read(web: Executor, url: str, **params: Any) -> TaskResult:
    return web.execute_sync("web.read_url", {"url": url, **params}, caller="agent")


def test_a_utf8_page_gives_its_title_and_main_text(web: Executor, site: Site, research: object) -> None:
    site.add("/article", article_html("信任边界 Trust boundary", None), "text/html; charset=utf-8")
    result = read(web, site.url("/article"))
    assert result.status is TaskStatus.COMPLETED, result
    data = result.data
    assert data["url"] == site.url("/article")
    assert data["title"] == "信任边界 Trust boundary"
    assert ARTICLE_ZH[:20] in data["text"] and ARTICLE_EN[:40] in data["text"]
    assert "tracking" not in data["text"] and "color: red" not in data["text"]  # no script, no style
    assert data["content_type"] == "text/html" and data["bytes"] > 1000
    assert data["excerpt"] and len(data["excerpt"]) <= 280
    assert data["clipped"] is False and data["extractor"] == "trafilatura"
    assert "信任边界 Trust boundary" in result.message


@pytest.mark.parametrize(
    ("path", "header", "meta"),
    [
        ("/gbk-header", "text/html; charset=GBK", None),
        ("/gbk-meta", "text/html", "gb2312"),
        ("/gbk-bare", "text/html", None),
        ("/gb18030", "text/html", "gb18030"),
    ],
)
def test_chinese_pages_in_gbk_and_gb18030_decode(
    web: Executor, site: Site, research: object, path: str, header: str, meta: str | None
) -> None:
    title = "国标编码的中文页面" + ("𠀀" if path == "/gb18030" else "")
    codec = "gb18030" if path == "/gb18030" else "gbk"
    site.add(path, article_html(title, meta).encode(codec), header)
    result = read(web, site.url(path))
    assert result.status is TaskStatus.COMPLETED, result
    assert result.data["title"] == title
    assert ARTICLE_ZH[:30] in result.data["text"]
    assert result.data["charset"] == "gb18030"


def test_a_pdf_is_read_as_text(web: Executor, site: Site, research: object, pdf_bytes: bytes) -> None:
    site.add("/note.pdf", pdf_bytes, "application/pdf")
    result = read(web, site.url("/note.pdf"))
    assert result.status is TaskStatus.COMPLETED, result
    data = result.data
    assert data["title"] == "Quarterly research note"
    assert data["pages"] == 2 and data["extractor"] == "pypdf"
    assert "trust boundary" in data["text"] and "执行器是智能体的信任边界" in data["text"]
    assert "Second page" in data["text"]


def test_long_text_is_clipped_with_a_note(web: Executor, site: Site, research: object) -> None:
    site.add("/long", article_html("Long", "utf-8", paragraphs=60), "text/html")
    result = read(web, site.url("/long"), max_chars=1000)
    assert result.status is TaskStatus.COMPLETED, result
    data = result.data
    assert data["clipped"] is True and data["chars"] > 1000
    assert len(data["text"]) < 1100 and "[clipped:" in data["text"]
    assert "clipped to 1,000 characters" in data["note"]


@pytest.mark.parametrize(
    ("head", "title"),
    [
        ('<meta property="og:title" content="开放图谱的标题">', "开放图谱的标题"),
        ("", "信任边界 Trust boundary"),
    ],
)
def test_a_page_without_a_title_element_is_named_by_its_meta_tags_or_heading(
    web: Executor, site: Site, research: object, head: str, title: str
) -> None:
    """Without <title>, the title comes from OpenGraph, else from the page's one h1 (as trafilatura's
    metadata gave it), though the rest of that metadata is no longer extracted."""
    page = article_html("信任边界 Trust boundary", "utf-8").replace(
        "<title>信任边界 Trust boundary</title>", head
    )
    site.add("/untitled", page, "text/html; charset=utf-8")
    result = read(web, site.url("/untitled"))
    assert result.status is TaskStatus.COMPLETED, result
    assert result.data["title"] == title and ARTICLE_ZH[:20] in result.data["text"]


def test_a_tiny_page_falls_back_to_plain_extraction(web: Executor, site: Site, research: object) -> None:
    site.add("/tiny", "<html><head><title>小</title></head><body><p>只有一句话。</p></body></html>")
    result = read(web, site.url("/tiny"))
    assert result.status is TaskStatus.COMPLETED, result
    assert result.data["title"] == "小" and "只有一句话。" in result.data["text"]


def test_plain_text_is_returned_as_it_is(web: Executor, site: Site, research: object) -> None:
    site.add("/notes.txt", "第一行\nsecond line\n".encode("gbk"), "text/plain; charset=gbk")
    result = read(web, site.url("/notes.txt"))
    assert result.status is TaskStatus.COMPLETED, result
    assert result.data["text"] == "第一行\nsecond line" and result.data["extractor"] == "as-is"


def test_everything_on_this_machine_is_refused_without_a_relaxation(web: Executor, site: Site) -> None:
    """No [research] relaxation at all: the test site on 127.0.0.1 is not reached."""
    site.add("/article", article_html("x", "utf-8"))
    for url in (site.url("/article"), f"http://localhost:{site.port}/article"):
        result = read(web, url)
        assert result.status is TaskStatus.FAILED, result
        assert "loopback address" in result.message and "allow_hosts" in result.message
        assert result.data["refused"] is True
    assert site.requests == []


def test_a_redirect_to_a_refused_address_fails_and_connects_nowhere(
    web: Executor, site: Site, recorder: Recorder, research: object
) -> None:
    site.redirect("/jump", f"http://127.0.0.1:{recorder.port}/admin")
    result = read(web, site.url("/jump"))
    assert result.status is TaskStatus.FAILED, result
    assert "refused to connect to 127.0.0.1: 127.0.0.1 is a loopback address" in result.message
    assert recorder.accepted == []


def test_an_oversized_page_is_read_up_to_the_limit_and_says_so(
    web: Executor, site: Site, research: Callable[..., None]
) -> None:
    research(fetch_max_bytes=4096)
    site.add("/big", article_html("Big", "utf-8", paragraphs=200), "text/html")
    result = read(web, site.url("/big"))
    assert result.status is TaskStatus.COMPLETED, result
    assert result.data["bytes"] == 4096 and result.data["body_truncated"] is True
    assert "only the first 4,096 bytes were read" in result.data["note"]


def test_an_oversized_pdf_fails_plainly(
    web: Executor, site: Site, research: Callable[..., None], pdf_bytes: bytes
) -> None:
    research(fetch_max_bytes=2048)
    site.add("/note.pdf", pdf_bytes, "application/pdf")
    result = read(web, site.url("/note.pdf"))
    assert result.status is TaskStatus.FAILED, result
    assert "a cut PDF cannot be read" in result.message


def test_a_slow_server_times_out(web: Executor, site: Site, research: Callable[..., None]) -> None:
    research(fetch_timeout_s=1.0)
    site.drip("/slow")
    result = read(web, site.url("/slow"))
    assert result.status is TaskStatus.FAILED, result
    assert "took longer than 1s ([research] fetch_timeout_s)" in result.message


def test_binary_content_is_refused_with_what_can_be_read(web: Executor, site: Site, research: object) -> None:
    site.add("/blob", b"\x00\x01\x02" * 100, "application/octet-stream")
    result = read(web, site.url("/blob"))
    assert result.status is TaskStatus.FAILED, result
    assert "only web pages (HTML), text and PDF documents can be read" in result.message


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://example.com/file", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("", "at least 1 character"),
        ("https://" + "a" * 2100, "at most 2000 characters"),
    ],
)
def test_bad_urls_are_rejected_before_any_worker_starts(web: Executor, url: str, says: str) -> None:
    result = read(web, url)
    assert result.status is TaskStatus.REJECTED, result
    assert says in result.message


def test_a_bad_research_section_fails_with_the_setting_named(web: Executor, home: Path, site: Site) -> None:
    (home / "settings.toml").write_text('[research]\nallow_hosts = ["10.0.0.0/99"]\n')
    result = read(web, site.url("/x"))
    assert result.status is TaskStatus.FAILED, result
    assert "allow_hosts entry '10.0.0.0/99'" in result.message
