"""The conversation loop's costs: prompt size with and without compression, and the loop's own
overhead per turn next to LangGraph's prebuilt ReAct agent, persistence matched (both with a scripted
model and a no-op tool), and a tool call through the boundary next to LangGraph's ToolNode.

LangGraph is installed only in the bench environment (``.venv-bench``); without it that row is skipped.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bench import goals
from bench.paired import paired, row
from bench.registry import registry
from tether.agent.session import ConversationSession
from tether.config import AgentSettings
from tether.execution.executor import Executor
from tether.store.threads import MemoryThreadStore
from tether.testing import ScriptedModel, call, calls, say

TURNS = 1000
LOOP_TURNS = 300


def _script(turns: int) -> list[Any]:
    script: list[Any] = []
    for _ in range(turns):
        script += [calls(call("b__inline")), say("Done: the task completed and nothing else is needed.")]
    return script


def prompt_sizes(home: Path) -> None:
    print(f"\nprompt size over a {TURNS}-turn conversation (characters sent to the model)")
    off = AgentSettings(compress_after_messages=10**6, compress_after_chars=10**6, keep_last_messages=10**6)
    results: dict[str, dict[int, int]] = {}
    with Executor(registry, home=home) as executor:
        for label, settings in (("compression on (defaults)", AgentSettings()), ("compression off", off)):
            session = ConversationSession(
                executor, ScriptedModel(_script(TURNS)), settings=settings, threads=MemoryThreadStore()
            )
            sizes: dict[int, int] = {}
            for i in range(1, TURNS + 1):
                session.send_sync("t", f"turn {i}: run the task, and remember that I prefer short answers")
                if i in (10, 100, 500, 1000):
                    sizes[i] = session.prompt_chars("t")
            results[label] = sizes
    for label, sizes in results.items():
        print(f"  {label:<28} " + "  ".join(f"turn {k}: {v:>9,}" for k, v in sizes.items()))
    on, raw = results["compression on (defaults)"][TURNS], results["compression off"][TURNS]
    print(f"  at turn {TURNS}: the compressed prompt is {on / raw:.4f}x the uncompressed one")


def loop_overhead(home: Path) -> None:
    """A turn of tether's loop next to LangGraph's ReAct agent with persistence matched (threads in
    SQLite vs ``SqliteSaver``; in memory vs no checkpointer), and one tool call through tether's boundary
    (the executor, an inline task) next to LangGraph's ToolNode; all in this process, interleaved."""
    from bench.peer_langgraph import langgraph_turn, toolnode_call

    print(f"\nloop overhead per turn (2 model decisions + 1 tool call, median of {LOOP_TURNS}, new threads)")
    loop = asyncio.new_event_loop()
    try:
        for label, sqlite, peer_label, goal in (
            ("tether, threads in SQLite", True, "LangGraph ReAct agent + SqliteSaver", goals.AGENT_TURN),
            (
                "tether, threads in memory",
                False,
                "LangGraph ReAct agent, no checkpointer (for the record)",
                None,
            ),
        ):
            folder = home / ("sqlite" if sqlite else "memory")
            folder.mkdir(parents=True, exist_ok=True)
            peer = langgraph_turn(folder / "langgraph.sqlite" if sqlite else None)
            if peer is None:
                print(f"  {label}: not measured: langgraph is not installed (make bench installs it)")
                continue
            with Executor(registry, home=folder) as executor:
                session = ConversationSession(
                    executor,
                    ScriptedModel(_script(LOOP_TURNS + 10)),
                    settings=AgentSettings(memory="sqlite" if sqlite else "ephemeral"),
                )
                threads = iter(range(10**6))

                def turn(session: ConversationSession = session, threads: Any = threads) -> None:
                    loop.run_until_complete(session.send(f"t{next(threads)}", "run the task"))

                try:
                    row(label, paired(turn, peer[0], LOOP_TURNS), peer_label, goal)
                finally:
                    peer[1]()
                tools = [s for s in session.threads.steps("t0") if s.kind == "tool"]
                assert tools and tools[0].result and tools[0].result["status"] == "completed", tools
        call = toolnode_call()
        if call is None:
            print("  a tool call: not measured: langgraph is not installed (make bench installs it)")
            return
        with Executor(registry, home=home / "tool") as executor:

            def ours() -> None:
                result = loop.run_until_complete(executor.execute("b.inline", caller="agent"))
                assert result.status.value == "completed", result

            row("a tool call through the executor, in process", paired(ours, call, LOOP_TURNS),
                "LangGraph ToolNode (a one-node graph), the same no-op tool", goals.TOOL_CALL)  # fmt: skip
            print(f"  {'':<44} of which the job record alone (its row, then its outcome): "
                  f"{_job_record_ms(executor):.3f} ms")  # fmt: skip
    finally:
        loop.close()


def _job_record_ms(executor: Executor) -> float:
    """The median wall time of the two writes every execution puts on record, on the executor's store."""
    import secrets
    import statistics
    import time

    from tether.tasks.result import TaskResult, TaskStatus

    took = []
    for _ in range(LOOP_TURNS):
        eid = secrets.token_hex(8)
        pending = TaskResult(task_id="b.inline", execution_id=eid, status=TaskStatus.PENDING)
        start = time.perf_counter()
        executor.store.insert(pending, caller="agent", params={})
        executor.store.transition(pending.model_copy(update={"status": TaskStatus.COMPLETED}))
        took.append(time.perf_counter() - start)
    return statistics.median(took) * 1000


SKILL_BODY = "Step: do the careful thing, cite every source, keep bullets short. " * 60  # ~4 KB


def _install_skills(home: Path, count: int) -> None:
    for n in range(count):
        folder = home / "skills" / f"skill-{n:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "SKILL.md").write_text(
            f"---\nname: skill-{n:02d}\ndescription: Skill number {n}, for one kind of document.\n"
            f"when_to_use: when the person asks for document kind {n}\n---\n{SKILL_BODY}\n",
            encoding="utf-8",
        )


def skill_prompt_sizes(home: Path) -> None:
    """The system prompt with 1 and with 50 installed skills (names and descriptions only; a body is read
    on demand), next to the floor of inlining every body, which is what the listing avoids."""
    from tether.toolkits.standard import registry as standard

    print("\nsystem prompt with installed skills (characters; the 3 shipped skills are always there)")
    sizes: dict[int, int] = {}
    for count in (1, 50):
        where = home / f"skills-{count}"
        _install_skills(where, count)
        with Executor(standard, home=where) as executor:
            session = ConversationSession(executor, ScriptedModel([]), threads=MemoryThreadStore())
            sizes[count] = len(session._prompt)
    inlined = sizes[1] + 49 * len(SKILL_BODY)
    print(f"  1 skill installed            {sizes[1]:>9,}")
    print(f"  50 skills installed          {sizes[50]:>9,}   ({sizes[50] / sizes[1]:.2f}x the prompt with 1)")
    print(f"  50 bodies inlined (floor)    {inlined:>9,}   (the listing is {sizes[50] / inlined:.3f}x of it)")
