"""Real servers on this machine for the web toolkit's tests: a small web site (pages in UTF-8 and GBK,
a PDF, redirects, an oversized body, a gzip bomb, a slow drip, search APIs), and a listener that
only records who connected to it."""

from __future__ import annotations

import gzip
import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

ARTICLE_EN = (
    "Controlled autonomy means the model chooses among audited tools. "
    "Every call passes through an executor, which is the trust boundary. "
    "Each task runs in its own worker process, so a crash never takes the agent down. "
    "Locks live in the infrastructure rather than in the prompt. "
    "A background job can always be stopped, first politely and then by force. "
)
ARTICLE_ZH = (
    "受控自治的意思是模型只能在经过审计的工具中进行选择。"
    "每一次调用都要经过执行器，执行器就是信任边界。"
    "每个任务都在自己的工作进程中运行，进程崩溃不会拖垮整个智能体。"
    "锁由基础设施负责，而不是写在提示词里。"
    "后台任务总是可以被停止，先礼貌地请求，然后再强制结束。"
)


def article_html(title: str, charset: str | None, paragraphs: int = 12) -> str:
    meta = f'<meta charset="{charset}">' if charset else ""
    body = "".join(f"<p>{ARTICLE_ZH if i % 2 else ARTICLE_EN} 第{i + 1}段。</p>\n" for i in range(paragraphs))
    return (
        f"<!DOCTYPE html><html><head>{meta}<title>{title}</title>"
        "<script>var tracking = 'not text';</script><style>p { color: red }</style></head>"
        f"<body><nav><a href='/'>首页</a> | <a href='/about'>About</a></nav>"
        f"<article><h1>{title}</h1>\n{body}</article>"
        "<footer>(c) 2024 页脚</footer></body></html>"
    )


class Route:
    """What one path answers: status, headers, body; or a callable that writes the answer itself."""

    def __init__(
        self,
        body: bytes = b"",
        status: int = 200,
        headers: dict[str, str] | None = None,
        write: Callable[[BaseHTTPRequestHandler], None] | None = None,
    ) -> None:
        self.body = body
        self.status = status
        self.headers = headers or {}
        self.write = write


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (a reader past its limit, a closed keep-alive) is not an error."""
        import sys

        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class Site:
    """A threaded HTTP server on 127.0.0.1 (any free port) answering from ``routes``."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[dict[str, Any]] = []
        self.closing = threading.Event()
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                site.requests.append(
                    {
                        "method": self.command,
                        "path": parts.path,
                        "query": parse_qs(parts.query),
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body,
                    }
                )
                route = site.routes.get(parts.path)
                if route is None:
                    route = Route(b"not here", status=404, headers={"content-type": "text/plain"})
                if route.write is not None:
                    route.write(self)
                    return
                self.send_response(route.status)
                for key, value in route.headers.items():
                    self.send_header(key, value)
                self.send_header("content-length", str(len(route.body)))
                self.end_headers()
                self.wfile.write(route.body)

            do_GET = _answer
            do_POST = _answer

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base + path

    def add(self, path: str, body: bytes | str = b"", content_type: str = "text/html", **kwargs: Any) -> None:
        data = body.encode() if isinstance(body, str) else body
        headers = {"content-type": content_type, **kwargs.pop("headers", {})}
        self.routes[path] = Route(data, headers=headers, **kwargs)

    def redirect(self, path: str, location: str, status: int = 302) -> None:
        self.routes[path] = Route(b"", status=status, headers={"location": location})

    def json(self, path: str, document: Any, status: int = 200) -> None:
        self.add(path, json.dumps(document, ensure_ascii=False).encode(), "application/json", status=status)

    def drip(self, path: str) -> None:
        """Headers at once, then a byte every 50 ms until the site closes: never finishes by itself."""

        def write(handler: BaseHTTPRequestHandler) -> None:
            handler.send_response(200)
            handler.send_header("content-type", "text/html; charset=utf-8")
            handler.send_header("content-length", "10000000")
            handler.end_headers()
            try:
                handler.wfile.write(b"<html><body>")
                while not self.closing.wait(0.05):
                    handler.wfile.write(b"x")
                    handler.wfile.flush()
            except OSError:
                pass

        self.routes[path] = Route(write=write)

    def stall(self, path: str) -> None:
        """Accepts the request and never answers it (until the site closes)."""

        def write(handler: BaseHTTPRequestHandler) -> None:
            self.closing.wait(60)

        self.routes[path] = Route(write=write)

    def gzip_bomb(self, path: str, decoded_bytes: int) -> None:
        packed = gzip.compress(b"<html><body>" + b"A" * decoded_bytes, compresslevel=9)
        self.add(path, packed, "text/html", headers={"content-encoding": "gzip"})

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()


class Recorder:
    """A listener on every local address (IPv4 and IPv6, one port) that records each connection it
    accepts and answers nothing useful: proof of whether anything reached it."""

    def __init__(self) -> None:
        if socket.has_dualstack_ipv6():
            self.sock = socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True)
        else:
            self.sock = socket.create_server(("0.0.0.0", 0))
        self.sock.settimeout(0.05)
        self.port = int(self.sock.getsockname()[1])
        self.accepted: list[str] = []
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.closing.is_set():
            try:
                conn, peer = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted.append(str(peer[0]))
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: text/plain\r\n\r\nok")
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        self.closing.set()
        self.thread.join(timeout=5)
        self.sock.close()
