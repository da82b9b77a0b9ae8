"""The demo "game": a real process that keeps its state in the tether home and obeys commands.

``python -m tether.toolkits.demo.game <home>`` serves JSON lines on 127.0.0.1 (port in
``<home>/demo/game.json``). Its lifetime counters (``farm_attempts_total``, ``daily_training_total``,
``salvaged_total``) live in ``<home>/demo/state.json`` and are changed only by the game itself, so a test
can prove that a task ran exactly once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import socketserver
import sys
import time
from pathlib import Path
from typing import Any

from tether.toolkits.demo.catalog import SALVAGE_COUNTS

GAME_NAME = "tether-demo-game"
CONNECT_TIMEOUT_S = 2.0
COUNTERS = ("farm_attempts_total", "daily_training_total", "salvaged_total")


class GameNotRunning(Exception):
    pass


def game_dir(home: Path) -> Path:
    return home / "demo"


def info_path(home: Path) -> Path:
    return game_dir(home) / "game.json"


def state_path(home: Path) -> Path:
    return game_dir(home) / "state.json"


def ensure_game_dir(home: Path) -> Path:
    """The game's folder in the home, private like the rest of the home."""
    path = game_dir(home)
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def _write_atomic(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(payload, out, ensure_ascii=False)
    os.replace(tmp, path)


def load_state(home: Path) -> dict[str, Any]:
    try:
        state = json.loads(state_path(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        state = {}
    for name in COUNTERS:
        state.setdefault(name, 0)
    state.setdefault("by_instance", {})
    return state


def request(home: Path, op: str, **args: Any) -> dict[str, Any]:
    """Send one command to the running game and return its answer; ``GameNotRunning`` if it is not."""
    try:
        info = json.loads(info_path(home).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GameNotRunning("the game is not running") from exc
    try:
        with socket.create_connection(("127.0.0.1", int(info["port"])), timeout=CONNECT_TIMEOUT_S) as conn:
            conn.sendall((json.dumps({"op": op, **args}, ensure_ascii=False) + "\n").encode())
            reply = conn.makefile("rb").readline()
    except OSError as exc:
        raise GameNotRunning("the game is not running (it does not answer)") from exc
    if not reply:
        raise GameNotRunning("the game closed the connection")
    answer = json.loads(reply)
    if answer.get("game") != GAME_NAME or answer.get("pid") != info.get("pid"):
        raise GameNotRunning("something else answers on the game's port")
    return answer


def is_running(home: Path) -> bool:
    try:
        request(home, "ping")
    except GameNotRunning:
        return False
    return True


class _Game:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.state = load_state(home)
        self.started_at = time.time()

    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command.get("op")
        if op == "ping":
            return {}
        if op == "status":
            return {"running": True, "started_at": self.started_at, **self._counters()}
        if op == "farm":
            key = f"{command.get('instance_type')}/{command.get('instance_name')}"
            self.state["farm_attempts_total"] += 1
            self.state["by_instance"][key] = self.state["by_instance"].get(key, 0) + 1
            self._save()
            return self._counters()
        if op == "train":
            self.state["daily_training_total"] += 1
            self._save()
            return self._counters()
        if op == "salvage":
            count = SALVAGE_COUNTS.get(int(command.get("rarity", 0)), 0)
            self.state["salvaged_total"] += count
            self._save()
            return {"salvaged": count, **self._counters()}
        if op == "quit":
            return {"quitting": True}
        return {"error": f"unknown op {op!r}"}

    def _counters(self) -> dict[str, Any]:
        return {name: self.state[name] for name in COUNTERS} | {
            "by_instance": dict(self.state["by_instance"])
        }

    def _save(self) -> None:
        _write_atomic(state_path(self.home), self.state)


def serve(home: Path) -> int:
    ensure_game_dir(home)
    game = _Game(home)

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            line = self.rfile.readline()
            try:
                command = json.loads(line)
            except ValueError:
                command = {"op": None}
            answer = {"game": GAME_NAME, "pid": os.getpid(), **game.handle(command)}
            self.wfile.write((json.dumps(answer, ensure_ascii=False) + "\n").encode())
            if command.get("op") == "quit":
                server.quitting = True

    class Server(socketserver.TCPServer):
        allow_reuse_address = True
        quitting = False

        def service_actions(self) -> None:
            if self.quitting:
                raise _Quit

    server = Server(("127.0.0.1", 0), Handler)
    signal.signal(signal.SIGTERM, lambda signum, frame: setattr(server, "quitting", True))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _write_atomic(
        info_path(home),
        {"pid": os.getpid(), "port": server.server_address[1], "started_at": game.started_at},
    )
    try:
        server.serve_forever(poll_interval=0.05)
    except _Quit:
        pass
    finally:
        with contextlib.suppress(OSError):
            info = json.loads(info_path(home).read_text(encoding="utf-8"))
            if info.get("pid") == os.getpid():
                info_path(home).unlink()
        server.server_close()
    return 0


class _Quit(Exception):
    pass


def check_running(home: Path) -> str | None:
    """Precondition ``game_running``: None when the game answers, else what to do about it."""
    if is_running(home):
        return None
    return "the game is not running: start it first with demo.start_game"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m tether.toolkits.demo.game <tether home>", file=sys.stderr)
        sys.exit(2)
    sys.exit(serve(Path(sys.argv[1])))
