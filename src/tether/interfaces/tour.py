"""``tether demo``: a scripted tour of the execution core on the demo game, in English and Chinese.

Every step goes through the same ``Executor.execute`` the agent, the CLI and MCP use; nothing here
reaches around the trust boundary. It needs no key, no network and no configuration.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from rich.markup import escape
from rich.rule import Rule

from tether.execution.executor import Executor
from tether.execution.protocol import last_progress
from tether.interfaces.render import out, print_result, show_progress
from tether.tasks.result import TaskResult, TaskStatus
from tether.tasks.spec import Registry

GOLD = {"instance_type": "拟造花萼（金）", "instance_name": "藏珍之蕾"}


class Tour:
    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.number = 0

    def say(self, english: str, chinese: str) -> None:
        self.number += 1
        out.print(Rule(f"[bold]{self.number}. {english} · {chinese}[/]", align="left"))

    async def run(self, task_id: str, params: dict[str, Any] | None = None, **kwargs: Any) -> TaskResult:
        follower: list[asyncio.Task[None]] = []

        def on_start(execution_id: str) -> None:
            if sys.stderr.isatty():
                follower.append(
                    asyncio.get_running_loop().create_task(show_progress(self.executor, execution_id))
                )

        try:
            result = await self.executor.execute(task_id, params, caller="cli", on_start=on_start, **kwargs)
        finally:
            for task in follower:
                task.cancel()
        print_result(result)
        return result


async def tour(executor: Executor) -> int:
    t = Tour(executor)
    await _stop_leftovers(executor)

    t.say(
        "What the agent may call (debug tasks are hidden from it)", "智能体可调用的任务（调试任务对它不可见）"
    )
    names = sorted(spec.task_id for spec in executor.registry.for_caller("agent"))
    out.print("  " + ", ".join(names))

    t.say("Status needs no lock and runs inline", "查询状态：无需加锁，进程内执行")
    await t.run("demo.status")

    if (await executor.execute("demo.status", caller="cli")).data.get("running"):
        await t.run("demo.exit_game")
    t.say("Farming before the game runs is refused by a precondition", "游戏未启动时刷副本：前置条件拒绝")
    await t.run("demo.farm_instance", {**GOLD, "attempts": 3})

    t.say("Start the game: a real process keeping its state in the tether home", "启动游戏：一个真实的进程")
    await t.run("demo.start_game")

    t.say(
        "An alias such as 金币 is not a canonical name: rejected with the allowed values",
        "“金币”是别名而非标准名称：拒绝并给出允许值",
    )
    await t.run("demo.farm_instance", {**GOLD, "instance_name": "金币", "attempts": 3})

    t.say("Farm 3 times in a fresh worker process, with progress", "在独立工作进程中刷 3 次，显示进度")
    await t.run("demo.farm_instance", {**GOLD, "attempts": 3})

    await _background_and_its_lock(t, executor)

    t.say(
        "Destructive tasks need the person's confirmation of that exact call",
        "破坏性任务需要玩家本人确认这一次调用",
    )
    await t.run("demo.salvage_relics", {"rarity": 4})
    consent = executor.confirm("demo.salvage_relics", {"rarity": 4}, caller="cli", source="person:tour")
    await t.run("demo.salvage_relics", {"rarity": 3}, confirmation=consent)
    await t.run("demo.salvage_relics", {"rarity": 4}, confirmation=consent)
    await t.run("demo.salvage_relics", {"rarity": 4}, confirmation=consent)

    t.say(
        "A hung task ignores stop requests and SIGINT: the process tree is killed",
        "卡死的任务无视停止请求和 SIGINT：整棵进程树被终止",
    )
    hang = await t.run("demo.debug_hang")
    if hang.status is TaskStatus.RUNNING:
        print_result(await executor.control(hang.execution_id, "stop", caller="cli"))

    t.say(
        "A worker that dies without a result is recorded failed, with its exit code",
        "没有写出结果就退出的工作进程被记为 failed，并带上退出码",
    )
    await t.run("demo.debug_crash")

    t.say("Every execution is on record", "每一次执行都有记录")
    for result in executor.jobs_for("cli", limit=8):
        out.print(f"  {result.execution_id}  {result.task_id:<22} {result.status.value}")

    t.say("Close the game", "关闭游戏")
    await t.run("demo.exit_game")
    out.print(f"\n[green]Tour done.[/] Home: {executor.home}")
    out.print("Next: [bold]tether tasks[/], [bold]tether job list[/], [bold]tether task run demo.status[/]")
    return 0


async def _background_and_its_lock(t: Tour, executor: Executor) -> None:
    """A background loop holds the automation lock: other automation is refused, status and stop are not."""
    t.say(
        "A background loop returns once its worker completed the handshake",
        "后台循环：握手完成后才返回 running",
    )
    loop = await t.run("demo.loop_farm")
    if loop.status is TaskStatus.RUNNING:
        t.say(
            "While it holds the automation lock, other automation is refused",
            "它持有自动化锁时，其他自动化任务被拒绝",
        )
        await t.run("demo.daily_training")
        t.say("…but status and stop never wait for that lock", "……但查询与停止永远不等待这把锁")
        paths = executor.jobs.paths(loop.execution_id)
        await _until(lambda: last_progress(paths) is not None)
        print_result(await executor.control(loop.execution_id, "status", caller="cli"))
        t.say("Stop it: cooperative first", "停止它：先协作式停止")
        print_result(await executor.control(loop.execution_id, "stop", caller="cli"))


async def _stop_leftovers(executor: Executor) -> None:
    """Stop what a previous tour, interrupted half-way, left running."""
    for job in executor.jobs_for("cli", active=True):
        await executor.control(job.execution_id, "stop", caller="cli", reason="a new tour starts")


async def _until(condition: Any, seconds: float = 10.0) -> None:
    # Another process's progress file: nothing to await, so poll it with a deadline.
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        if condition():
            return
        await asyncio.sleep(0.02)


AGENT_SCRIPT = (
    "启动游戏，然后刷 3 次金币副本",
    "Keep farming credits in the background",
    "进度怎么样？",
    "stop it",
    "分解四星遗器",
    "是",
    "退出游戏",
    "好的",
)


async def agent_tour(executor: Executor) -> int:
    """The agent on the offline model: plain requests in, controlled tool calls out, then the trace."""
    from tether.agent.session import ConversationSession
    from tether.interfaces.turnview import render_event
    from tether.models.offline import OfflineModel
    from tether.supervisor.conversations import new_thread_id

    await _stop_leftovers(executor)
    session = ConversationSession(executor, OfflineModel())
    session.events.subscribe(render_event)
    thread_id = new_thread_id()
    out.print(Rule(f"[bold]tether agent tour · offline model · thread {thread_id}[/]", align="left"))
    for message in AGENT_SCRIPT:
        out.print(f"\n[bold]you>[/] {message}")
        if message == "进度怎么样？":
            # Let the background loop make progress worth reporting (polled, with a deadline).
            active = executor.jobs_for("agent", active=True)
            if active:
                paths = executor.jobs.paths(active[0].execution_id)
                await _until(lambda paths=paths: (last_progress(paths) or {}).get("rounds_done", 0) >= 2)
        result = await session.send(thread_id, message)
        out.print(f"[bold cyan]tether>[/] {escape(result.final)}")
    out.print(Rule("[bold]the trace · 执行轨迹[/]", align="left"))
    for step in session.threads.steps(thread_id):
        if step.kind == "tool":
            result = step.result or {}
            out.print(f"  {step.turn}:{step.index:<2} {step.tool:<22} {result.get('status')}")
    out.print(
        f"\n[green]Tour done.[/] Replay it: [bold]tether trace {thread_id}[/] · talk: [bold]tether chat[/]"
    )
    return 0


def run_tour(registry: Registry, home: str | None, *, core: bool = False) -> int:
    with Executor(registry, home=home) as executor:
        executor.jobs.recover()
        executor.warm_up()
        return asyncio.run(tour(executor) if core else agent_tour(executor))
