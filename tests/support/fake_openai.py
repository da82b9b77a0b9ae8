"""A real HTTP server on 127.0.0.1 that answers like an OpenAI-compatible service, from a script."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def completion(
    content: str | None = None,
    tool_calls: list[tuple[str, str, str]] | None = None,
    finish_reason: str = "stop",
    model: str = "gpt-4o-mini",
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in tool_calls
        ]
        finish_reason = "tool_calls"
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def chunk(
    delta: dict[str, Any], finish_reason: str | None = None, usage: dict[str, int] | None = None
) -> dict:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
        if delta is not None
        else [],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def error(
    status: int, code: str | None, message: str, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "status": status,
        "body": {"error": {"message": message, "type": "error", "code": code}},
        "headers": headers or {},
    }


class FakeOpenAI:
    """``strict=True`` behaves like llama-cpp-python's server where it differs from the hosted APIs:
    a message with ``"content": null`` is answered HTTP 500, and tools offered without ``tool_choice``
    are dropped (the request is answered as if no tools were there: the scripted step is skipped for
    a refusal)."""

    def __init__(self, *, strict: bool = False) -> None:
        self.script: deque[dict[str, Any]] = deque()
        # When set, answers every request from the request itself (a model that does not depend on how
        # many calls came before: what a test needs when processes die and ask again).
        self.responder: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.strict = strict
        self.models_answer: tuple[int, dict[str, Any]] = (
            200,
            {"object": "list", "data": [{"id": "gpt-4o-mini", "object": "model"}]},
        )
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # GET /v1/models, what `tether doctor` asks
                fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                status, body = fake.models_answer
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                fake.requests.append(json.loads(self.rfile.read(length) or b"{}"))
                fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                if fake.responder is not None:
                    step = {"status": 200, "body": fake.responder(fake.requests[-1])}
                else:
                    step = (
                        fake.script.popleft()
                        if fake.script
                        else error(500, "unscripted", "no scripted answer")
                    )
                request = fake.requests[-1]
                if fake.strict and any(m.get("content", "") is None for m in request.get("messages", [])):
                    step = error(500, None, "Internal Server Error: content must be a string")
                elif fake.strict and request.get("tools") and "tool_choice" not in request:
                    step = {"status": 200, "body": completion("I cannot call tools.")}
                if step.get("delay"):
                    time.sleep(step["delay"])
                if "sse" in step:
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    if step.get("cut"):
                        self.send_header("content-length", "100000")  # promised, never sent
                    self.end_headers()
                    for number, event in enumerate(step["sse"]):
                        pause = step.get("first_delay", 0.0) if number == 0 else step.get("gap", 0.0)
                        if pause:
                            time.sleep(pause)
                        self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                        self.wfile.flush()
                    if step.get("done", True) and not step.get("cut"):
                        self.wfile.write(b"data: [DONE]\n\n")
                    return
                payload = json.dumps(step.get("body", {})).encode()
                self.send_response(step.get("status", 200))
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for key, value in step.get("headers", {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up early
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def reply(self, body: dict[str, Any]) -> None:
        self.script.append({"status": 200, "body": body})

    def fail(self, step: dict[str, Any]) -> None:
        self.script.append(step)

    def stream(
        self,
        events: list[dict[str, Any]],
        *,
        done: bool = True,
        cut: bool = False,
        first_delay: float = 0.0,
        gap: float = 0.0,
    ) -> None:
        """Server-sent events; ``done=False`` ends without ``[DONE]``, ``cut=True`` drops the
        connection in the middle of the body. The headers go at once; the first event after
        ``first_delay`` (a server still reading the prompt), the others ``gap`` apart."""
        self.script.append({"sse": events, "done": done, "cut": cut, "first_delay": first_delay, "gap": gap})

    def slow(self, seconds: float, body: dict[str, Any]) -> None:
        self.script.append({"status": 200, "body": body, "delay": seconds})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
