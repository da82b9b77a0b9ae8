"""The demo tasks' handlers. Imported only inside workers (and by ``demo.status``, which runs inline)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

from tether.errors import StopRequested, TaskFailed
from tether.tasks.context import TaskContext
from tether.toolkits.demo import game

STEP_ENV = "TETHER_DEMO_STEP_S"
DEFAULT_STEP_S = 1.0
GAME_START_TIMEOUT_S = 10.0


def step_seconds() -> float:
    """Simulated seconds of work per attempt; ``TETHER_DEMO_STEP_S`` overrides (tests use 0.05)."""
    try:
        return max(0.0, float(os.environ.get(STEP_ENV, DEFAULT_STEP_S)))
    except ValueError:
        return DEFAULT_STEP_S


def _params(ctx: TaskContext) -> Any:
    assert ctx.params is not None
    return ctx.params


def _ask(ctx: TaskContext, op: str, done: int | None = None, **args: Any) -> dict[str, Any]:
    try:
        return game.request(ctx.home, op, **args)
    except game.GameNotRunning as exc:
        data = {} if done is None else {"attempts_done": done}
        raise TaskFailed(f"{exc}; the task could not finish", **data) from exc


def start_game(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    if game.is_running(ctx.home):
        return "the game is already running", {"already_running": True}
    log_fd = os.open(
        game.ensure_game_dir(ctx.home) / "game.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600
    )
    with os.fdopen(log_fd, "ab") as log:
        # Its own session: stopping this worker's process group must not close the game.
        child = subprocess.Popen(
            [sys.executable, "-m", "tether.toolkits.demo.game", str(ctx.home)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    deadline = time.monotonic() + GAME_START_TIMEOUT_S
    ctx.progress(0.0, "launching the game")
    while not game.is_running(ctx.home):
        if child.poll() is not None:
            raise TaskFailed(f"the game exited during start-up with code {child.returncode}")
        if time.monotonic() > deadline:
            child.kill()
            raise TaskFailed(f"the game did not come up within {GAME_START_TIMEOUT_S:g}s")
        ctx.check_stop()
        time.sleep(0.02)
    child.returncode = 0  # it lives on by design; keep Popen from warning about it
    ctx.progress(1.0, "the game is running")
    return "the game is running", {"pid": child.pid}


def exit_game(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    if not game.is_running(ctx.home):
        return "the game was not running", {"already_stopped": True}
    try:
        game.request(ctx.home, "quit")
    except game.GameNotRunning:
        pass
    deadline = time.monotonic() + GAME_START_TIMEOUT_S
    while game.is_running(ctx.home):
        if time.monotonic() > deadline:
            raise TaskFailed("the game did not quit in time")
        time.sleep(0.02)
    return "the game has exited", {}


def daily_training(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    steps = ("claim the daily missions", "run the training", "collect the rewards")
    for index, step in enumerate(steps):
        ctx.progress(index / len(steps), step)
        if not ctx.sleep(step_seconds() / len(steps)):
            raise StopRequested("stopped during daily training", steps_done=index)
    counters = _ask(ctx, "train")
    ctx.progress(1.0, "daily training done")
    return "daily training done", {"daily_training_total": counters["daily_training_total"]}


def farm_instance(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    params = _params(ctx)
    total = params.attempts
    counters: dict[str, Any] = {}
    for done in range(total):
        ctx.progress(done / total, f"attempt {done + 1}/{total} of {params.instance_name}")
        if not ctx.sleep(step_seconds()):
            raise StopRequested(f"stopped after {done} of {total} attempts", attempts_done=done)
        counters = _ask(
            ctx, "farm", done, instance_type=params.instance_type, instance_name=params.instance_name
        )
    ctx.progress(1.0, f"{total}/{total} attempts done")
    return (
        f"farmed {params.instance_name} ({params.instance_type}) {total} time(s)",
        {
            "instance_type": params.instance_type,
            "instance_name": params.instance_name,
            "attempts_done": total,
            "farm_attempts_total": counters.get("farm_attempts_total"),
        },
    )


def loop_farm(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    params = _params(ctx)
    done = 0
    while params.rounds is None or done < params.rounds:
        if not ctx.sleep(step_seconds()):
            raise StopRequested(f"stopped after {done} rounds", rounds_done=done)
        _ask(ctx, "farm", done, instance_type=params.instance_type, instance_name=params.instance_name)
        done += 1
        fraction = None if params.rounds is None else done / params.rounds
        ctx.progress(fraction, f"round {done} of {params.instance_name}", rounds_done=done)
    return f"farmed {params.instance_name} for {done} rounds", {"rounds_done": done}


def salvage_relics(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    rarity = _params(ctx).rarity
    answer = _ask(ctx, "salvage", rarity=rarity)
    return f"salvaged {answer['salvaged']} {rarity}-star relics", {
        "salvaged": answer["salvaged"],
        "salvaged_total": answer["salvaged_total"],
    }


def status(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    running = game.is_running(ctx.home)
    counters = game.load_state(ctx.home)
    data = {"running": running, **{name: counters[name] for name in game.COUNTERS}}
    return ("the game is running" if running else "the game is not running"), data


def debug_crash(ctx: TaskContext) -> None:
    ctx.log.error("debug_crash: exiting with code 3 without a result, on purpose")
    sys.stderr.flush()
    os._exit(3)


def debug_hang(ctx: TaskContext) -> None:
    """Ignores stop.requested and SIGINT, with a child that does too: only a tree kill ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    code = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: time.sleep(1)"
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)
    ctx.progress(None, "hanging on purpose", child_pid=child.pid)
    while True:
        time.sleep(0.1)
