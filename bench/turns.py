"""Per-turn cost on a long thread: turn 3,000 next to turn 10, on the same SQLite store, paired.

The long thread is built by the session itself (every turn one tool call and an answer, with the
default compression). Each pair then times one more turn on the long thread and the eleventh turn of
a ten-turn thread built beforehand, alternately.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from bench import goals
from bench.paired import paired, row
from bench.registry import registry
from tether.agent.session import ConversationSession
from tether.execution.executor import Executor
from tether.testing import ScriptedModel, call, calls, say

LONG = 3000
SHORT = 10
ROUNDS = 30
WARMUP = 2


def _turns(n: int) -> list[Any]:
    return [r for _ in range(n) for r in (calls(call("b__inline")), say("Done: the task ran."))]


def per_turn(home: Path) -> None:
    print("\nper-turn cost on a long thread (threads in SQLite; one tool call and an answer per turn)")
    with Executor(registry, home=home) as executor:
        model = ScriptedModel(_turns(LONG + (SHORT + 1) * (ROUNDS + 4) + ROUNDS + 10))
        session = ConversationSession(executor, model)
        loop = asyncio.new_event_loop()
        start = time.perf_counter()
        for i in range(LONG):
            loop.run_until_complete(session.send("long", f"turn {i}: run the task"))
        print(f"  (built a {LONG}-turn thread in {time.perf_counter() - start:.1f} s)")
        # The short threads are built beforehand, so that each side's CPU, like its wall, is one turn.
        short = [f"short-{n}" for n in range(ROUNDS + WARMUP)]
        for thread in short:
            for i in range(SHORT):
                loop.run_until_complete(session.send(thread, f"turn {i}: run the task"))
        fresh = iter(short)

        def long_turn() -> None:
            loop.run_until_complete(session.send("long", "one more: run the task"))

        def short_turn() -> None:
            loop.run_until_complete(session.send(next(fresh), "one more: run the task"))

        pair = paired(long_turn, short_turn, ROUNDS, WARMUP)
        floor = f"turn {SHORT + 1} of a {SHORT}-turn thread (issue 7's goal)"
        row(f"turn {LONG + 1} of a thread", pair, floor, goals.LONG_TURN)
        loop.close()


def delegation(home: Path) -> None:
    """What one hop through ``agents.delegate`` costs: a manager's turn that hands one tool call to a
    sub-agent (its own thread, session, model decisions and records), next to one turn making the same
    call itself — the same mechanism without the hop, paired."""
    from tether.agent.roster import agent_of, run_child, session_for
    from tether.agent.team import Team
    from tether.events import EventBus
    from tether.store.agents import AgentRecord

    print("\none delegation (a manager hands one inline tool call to a sub-agent; threads in SQLite)")
    rounds = ROUNDS + WARMUP
    with Executor(registry, home=home) as executor:
        executor.runtime.agents.create(AgentRecord(name="boss", grants=("team", "b.*"), model="boss"))
        executor.runtime.agents.create(AgentRecord(name="helper", grants=("b.*",), model="helper"))
        boss = ScriptedModel(
            [
                r
                for _ in range(rounds)
                for r in (calls(call("agents__delegate", {"to": "helper", "request": "run it"})), say("done"))
            ]
        )
        helper = ScriptedModel(_turns(rounds))
        alone = ScriptedModel(_turns(rounds))
        models = {"boss": boss, "helper": helper, None: alone}
        team = Team(
            executor=executor, agents=executor.runtime.agents, model_for=lambda name: models[name],
            threads=executor.runtime.threads, events=EventBus(), settings=executor.runtime.agent_settings,
            runner=run_child,
        )  # fmt: skip
        manager = session_for(team, agent_of(team, "boss"))
        direct = ConversationSession(executor, alone)
        loop = asyncio.new_event_loop()
        numbers = iter(range(10**6))

        def delegated() -> None:
            loop.run_until_complete(manager.send(f"team-{next(numbers)}", "have the helper run it"))

        def itself() -> None:
            loop.run_until_complete(direct.send(f"self-{next(numbers)}", "run the task"))

        pair = paired(delegated, itself, ROUNDS, WARMUP)
        row("a turn that delegates one call", pair, "a turn that makes the call itself")
        loop.close()
