"""Local stand-ins for notification channels, on 127.0.0.1: a Telegram Bot API (what Apprise's
``tgram://`` posts to, answered like Telegram does), a webhook receiver that can be told to fail, and a
real SMTP server (aiosmtpd)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FakeHttp:
    """Records every POST (path, JSON body); answers 200 with Telegram's ``ok`` shape, or ``status``."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        self.status = 200
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    parsed = json.loads(body or b"{}")
                except ValueError:
                    parsed = {"raw": body.decode("utf-8", "replace")}
                outer.received.append((self.path, parsed))
                answer = json.dumps(
                    {"ok": outer.status == 200, "result": {"message_id": len(outer.received)}}
                )
                self.send_response(outer.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer.encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def texts(self) -> list[str]:
        return [str(body.get("text", "")) for _, body in self.received]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class FakeSmtp:
    """A real SMTP server (aiosmtpd) that keeps every message it is given."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.messages: list[str] = []
        outer = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
                outer.messages.append(envelope.content.decode("utf-8", "replace"))
                return "250 OK"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def address(self, to: str = "me@example.com") -> str:
        return f"mailto://127.0.0.1:{self.port}?from=tether@localhost&to={to}"

    def close(self) -> None:
        self.controller.stop()
