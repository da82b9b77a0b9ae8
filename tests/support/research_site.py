"""A small research site on 127.0.0.1 for end-to-end tests: a SearXNG-shaped search (``/search?q=…&
format=json``) and three articles in Chinese, served by a real HTTP server in a thread."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

ARTICLES = {
    "/solar": (
        "太阳能发电原理",
        "太阳能电池利用光伏效应把阳光直接转换成电能。硅是最常见的电池材料。"
        "单晶硅组件的转换效率已经超过百分之二十。",
    ),
    "/grid": (
        "并网与储能",
        "太阳能发电需要接入电网才能大规模使用。储能电池可以平衡白天和夜晚的差异。智能电网负责调度各种电源。",
    ),
    "/cost": (
        "光伏成本趋势",
        "过去十年光伏组件的价格下降了约九成。在许多地区太阳能已经是最便宜的新建电源。"
        "规模化生产是成本下降的主要原因。",
    ),
}


def _page(title: str, text: str) -> bytes:
    paragraphs = "".join(f"<p>{sentence}。</p>" for sentence in text.split("。") if sentence)
    return (
        f"<!DOCTYPE html><html lang='zh'><head><meta charset='utf-8'><title>{title}</title></head>"
        f"<body><nav>首页 | 关于</nav><article><h1>{title}</h1>{paragraphs}</article>"
        "<footer>版权所有</footer></body></html>"
    ).encode()


def _png() -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (80, 40), "#f59e0b").save(out, "PNG")
    return out.getvalue()


class Site:
    def __init__(self, *, broken: str | None = None) -> None:
        """``broken``: an article path the search still lists but the site answers 404 for."""
        site = self
        self.broken = broken

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                if url.path == "/search":
                    query = parse_qs(url.query).get("q", [""])[0]
                    site.queries.append(query)
                    results = [
                        {"title": title, "url": site.base + path, "content": text[:40]}
                        for path, (title, text) in ARTICLES.items()
                    ]
                    self._send(json.dumps({"query": query, "results": results}).encode(), "application/json")
                elif url.path == "/chart.png":  # a picture a page of the site shows
                    self._send(_png(), "image/png")
                elif url.path in ARTICLES and url.path != site.broken:
                    self._send(_page(*ARTICLES[url.path]), "text/html; charset=utf-8")
                else:
                    self.send_error(404)

            def _send(self, body: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                if not isinstance(sys.exc_info()[1], ConnectionError):  # a reader that hung up early
                    super().handle_error(request, client_address)  # type: ignore[arg-type]

        self.queries: list[str] = []
        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def settings(self) -> str:
        """The ``[research]`` section that points a home at this site (the guard relaxed for it only)."""
        host = self.base.removeprefix("http://")
        return (
            f'[research]\nsearch_provider = "searxng"\nsearxng_url = "{self.base}"\n'
            f'allow_hosts = ["{host}"]\n'
        )

    def configure(self, home: Path) -> None:
        path = home / "settings.toml"
        before = path.read_text(encoding="utf-8") if path.exists() else ""
        path.write_text(before + self.settings(), encoding="utf-8")


@contextmanager
def research_site(*, broken: str | None = None) -> Iterator[Site]:
    site = Site(broken=broken)
    thread = threading.Thread(target=site.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield site
    finally:
        site.server.shutdown()
        site.server.server_close()
