"""Record a real model server's exchanges with tether, for the suite to replay without the server.

    python -m tests.support.recorder --upstream http://127.0.0.1:8080 --port 8099 --out session.json

Point tether at ``http://127.0.0.1:8099/v1`` (``[model] base_url``, with ``TETHER_MODEL_STREAM=0``): every
chat completion is forwarded to the upstream server, and the request with its answer is appended to
``--out`` as it happens (``{"exchanges": [{"request", "response", "seconds"}]}``). The suite replays the
answers in order from ``FakeOpenAI``; the requests show what tether sent (and let a test check it still
asks the same). How the sessions in ``tests/**/sessions/real_*.json`` were made: see their ``how``.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def serve(upstream: str, port: int, out: Path, how: str) -> None:
    lock = threading.Lock()
    document: dict[str, Any] = {"how": how, "upstream": upstream, "exchanges": []}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _forward(self, body: bytes | None) -> tuple[int, bytes, float]:
            request = urllib.request.Request(
                upstream.rstrip("/") + self.path, data=body, method=self.command,
                headers={"content-type": "application/json"},
            )  # fmt: skip
            started = time.monotonic()
            try:
                with urllib.request.urlopen(request, timeout=3600) as answer:
                    return answer.status, answer.read(), time.monotonic() - started
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read(), time.monotonic() - started

        def _reply(self, status: int, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            status, payload, _ = self._forward(None)
            self._reply(status, payload)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            status, payload, seconds = self._forward(body)
            with lock:
                document["exchanges"].append(
                    {
                        "request": json.loads(body or b"{}"),
                        "status": status,
                        "response": json.loads(payload or b"{}"),
                        "seconds": round(seconds, 2),
                    }
                )
                out.write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
            self._reply(status, payload)

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--upstream", default="http://127.0.0.1:8080")
    parser.add_argument("--port", type=int, default=8099)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--how", default="", help="what was run (kept in the file)")
    args = parser.parse_args()
    serve(args.upstream, args.port, args.out, args.how)


if __name__ == "__main__":
    main()


def replay(server: Any, path: Path) -> list[dict[str, Any]]:
    """Queue a recorded session's answers on a ``FakeOpenAI``, in the order they were given; the recorded
    exchanges are returned so that a test can compare what was asked this time with what was asked then."""
    exchanges = json.loads(path.read_text(encoding="utf-8"))["exchanges"]
    for exchange in exchanges:
        if exchange.get("status", 200) == 200:
            server.reply(exchange["response"])
        else:
            server.fail({"status": exchange["status"], "body": exchange["response"]})
    return exchanges


def same_questions(asked: list[dict[str, Any]], recorded: list[dict[str, Any]]) -> list[str]:
    """Where this run's requests differ from the recording's (their tools and their last message): a
    replay answers in order, so a request asked differently would get an answer meant for another."""
    problems = []
    if len(asked) != len(recorded):
        problems.append(f"{len(asked)} requests, the recording has {len(recorded)}")
    for number, (now, then) in enumerate(zip(asked, (e["request"] for e in recorded), strict=False), start=1):
        tools = [[t["function"]["name"] for t in r.get("tools") or []] for r in (now, then)]
        last = [(r["messages"][-1]["role"], str(r["messages"][-1].get("content") or "")[:60])
                for r in (now, then)]  # fmt: skip
        if tools[0] != tools[1] or last[0][0] != last[1][0]:
            problems.append(f"request {number}: {tools[0]} {last[0]} != {tools[1]} {last[1]}")
    return problems
