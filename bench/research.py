"""The web toolkit's page reads (``web.read_url``) next to the floor: a plain httpx client and the
same extraction with no guard. A ~50 KB article (Chinese and English) served on 127.0.0.1, timed
interleaved, as paired ratios:

- the guarded read (resolve + check + pinned connect, bounded streaming) and the extraction, in this
  process, one client kept alive for all reads, against ``httpx.Client.get`` + the same extraction;
- the read alone (no extraction): what the guard and the bounded reader cost per request;
- the whole task through the executor (its own worker process per read) against the in-process floor;
- a page in Chinese against a page in English of the same size, both read and extracted as above.

``python -m bench.research`` runs it alone. Measured on 2 cores: the guard costs ~0.07 ms a
read (1.1x a bare keep-alive ``httpx.get`` of the page); read + extraction is 1.0x its floor (trafilatura
is ~95% of it); the task through the executor is ~10x, ~0.3 s of it a fresh worker importing httpx and
trafilatura (the fork server preloads only the registry module).
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from bench import goals
from bench.paired import Cpu, paired, row
from tether.config import ResearchSettings, Settings
from tether.execution.executor import Executor
from tether.tasks.result import TaskStatus
from tether.toolkits.web.extract import html_page
from tether.toolkits.web.fetch import Fetcher, Limits, decode, parse_content_type
from tether.toolkits.web.guard import Policy
from tether.toolkits.web.specs import registry

PAGES = 200
WORKER_PAGES = 40
PARAGRAPH_EN = (
    "Controlled autonomy means the model chooses among audited tools, and every call passes through an "
    "executor that is the trust boundary; each task runs in its own worker process. "
)
PARAGRAPH_ZH = "受控自治的意思是模型只能在经过审计的工具中选择，每一次调用都经过执行器，执行器就是信任边界。"


def article(target_bytes: int = 50_000, languages: str = "mixed") -> bytes:
    """An article of ``target_bytes`` of paragraphs: alternating English and Chinese ("mixed"), or one
    language only ("en", "zh")."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>基准 Benchmark article</title>",
        "<script>var x = 1;</script></head><body><nav>menu</nav><article><h1>Benchmark</h1>",
    ]
    size, i = 0, 0
    while size < target_bytes:
        zh = languages == "zh" or (languages == "mixed" and i % 2 == 1)
        paragraph = f"<p>{PARAGRAPH_ZH if zh else PARAGRAPH_EN} ({i})</p>\n"
        parts.append(paragraph)
        size += len(paragraph.encode())
        i += 1
    parts.append("</article><footer>footer</footer></body></html>")
    return "".join(parts).encode()


class _Site:
    def __init__(self, body: bytes, others: dict[str, bytes] | None = None) -> None:
        pages = {"/article": body, **(others or {})}

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else keep-alive answers wait 40 ms for a delayed ACK

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                body = pages[self.path]
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.url = self.base + "/article"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def research(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    body = article()
    zh, en = article(languages="zh"), article(languages="en")
    site = _Site(body, {"/zh": zh, "/en": en})
    port = int(site.url.split(":")[2].split("/")[0])
    settings = ResearchSettings(allow_hosts=(f"127.0.0.1:{port}",))
    (home / "settings.toml").write_text(f'[research]\nallow_hosts = ["127.0.0.1:{port}"]\n')
    fetcher = Fetcher(Policy.from_settings(settings), Limits.from_settings(settings))
    plain = httpx.Client(trust_env=False, timeout=20.0)
    try:
        print(f"\nweb.read_url: a {len(body) / 1024:.0f} KB article on 127.0.0.1, one client kept alive")

        def ours() -> None:
            fetched = fetcher.fetch(site.url)
            text, _ = decode(fetched.body, fetched.charset)
            assert html_page(text, url=fetched.url).text

        def floor() -> None:
            response = plain.get(site.url)
            text, _ = decode(response.content, parse_content_type(response.headers["content-type"])[1])
            assert html_page(text, url=str(response.url)).text

        pair = paired(ours, floor, PAGES)
        row("guarded read + extraction", pair, "httpx.get + extraction")
        print(f"  {'':<44} {1000 / pair.ours_ms:.0f} pages/s, the floor {1000 / pair.floor_ms:.0f} pages/s")

        pair = paired(lambda: fetcher.fetch(site.url), lambda: plain.get(site.url).content, PAGES)
        row("guarded read alone", pair, "httpx.get alone")

        def read(url: str) -> Callable[[], None]:
            def run() -> None:
                fetched = fetcher.fetch(url)
                text, _ = decode(fetched.body, fetched.charset)
                assert html_page(text, url=fetched.url).text

            return run

        pair = paired(read(site.base + "/zh"), read(site.base + "/en"), PAGES)
        row(f"a Chinese page ({len(zh) / 1024:.0f} KB), read + extraction", pair,
            f"an English page ({len(en) / 1024:.0f} KB), the same read", goals.CHINESE_PAGE)  # fmt: skip

        with Executor(registry, home=home, settings=Settings()) as executor:
            executor.warm_up()
            # A long-lived executor (tether serve, a worker) has warmed its preload in the pauses between
            # requests: measure that state, not the first seconds of a fresh one.
            log, deadline = home / "logs" / "forkserver.log", time.monotonic() + 30
            while time.monotonic() < deadline and not (
                log.exists() and f"preloaded {registry.preload[-1]}" in log.read_text()
            ):
                time.sleep(0.1)

            def task() -> None:
                result = executor.execute_sync("web.read_url", {"url": site.url}, caller="cli")
                assert result.status is TaskStatus.COMPLETED, result

            cpu = Cpu.tree("this process tree: executor, fork server, worker (psutil)")
            pair = paired(task, floor, WORKER_PAGES, cpu=cpu)
            row("web.read_url task (own worker)", pair, "httpx.get + extraction, in process")
            print(f"  {'':<44} {1000 / pair.ours_ms:.0f} pages/s")
    finally:
        fetcher.close()
        plain.close()
        site.close()


if __name__ == "__main__":
    research(Path(tempfile.mkdtemp(prefix="tether-bench-research-")))
    sys.exit(0)
