"""The conversation commands of the CLI: ``tether run`` and ``tether chat`` (``interfaces/threads_cli.py``
has ``tether threads`` and ``tether trace``).

While an executor runs in the home (``tether worker``, ``tether serve``), ``tether run`` hands the turn
to it and follows the thread's events: the turn is then durable step by step (a crash of the executor
is resumed by the next one, from the step it was on). ``--here`` runs it in this process instead.

``tether run`` exits 0 when the turn completed, 1 when it failed (or ran out of steps), 3 when it waits
for your confirmation (it says how to answer), 2 on a usage error such as an unknown ``--thread``.
A thread id, like an execution id, may be given by a unique prefix.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from tether.errors import ConfigError
from tether.interfaces.base import JsonFlag, app, guarded, load_registry, state
from tether.interfaces.render import err, human_size, out
from tether.interfaces.turnview import render_event

CONTROL = ("get_task_status", "stop_task")
EXIT_NEEDS_CONFIRMATION = 3


def _session(
    home: str | None,
    registry_ref: str,
    *,
    detach: bool = False,
    agent: str | None = None,
    thread: str | None = None,
) -> Any:
    """The session that answers: ``agent`` (else the agent ``thread`` belongs to, else the default)."""
    from tether.agent.roster import agent_of, session_for, team_of
    from tether.execution.executor import Executor
    from tether.models.factory import models_for, resolve
    from tether.supervisor.cluster import DbosForwarder

    executor = Executor(load_registry(registry_ref), home=home)
    executor.placement.forwarder = DbosForwarder(executor.runtime)  # another node's resource: its holder
    try:
        executor.maintain()
        runtime = executor.runtime
        team = team_of(executor, models_for(runtime), start_flow=_flow_starter(runtime, executor))
        record = agent_of(team, agent, thread if thread is None else _known_thread(runtime, thread))
        session = session_for(team, record, detach=detach)
        if record.model is None:
            session.model_label = resolve(runtime.home, runtime.model_settings).label
    except BaseException:
        executor.close()
        raise
    return session


def _flow_starter(runtime: Any, executor: Any) -> Any:
    """Starts a skill's flow for ``skills.run`` (the supervisor, and DBOS, load only when one starts)."""

    def start(*args: Any) -> Any:
        from tether.supervisor.skillflows import start_skill_flow

        return start_skill_flow(runtime, executor.registry, *args)

    return start


def _known_thread(runtime: Any, given: str) -> str | None:
    try:
        return resolve_thread(runtime, given)
    except ConfigError:
        return None  # a new thread, or one resolve_thread will name as unknown later


def resolve_thread(session: Any, given: str) -> str:
    """The thread ``given`` names (exactly, or by a unique prefix); an unknown one is an error, never a
    silently new thread."""
    threads = session.threads
    if threads.load(given) is not None:
        return given
    found = threads.ids_with_prefix(given, 5) if len(given) >= 3 else []
    if len(found) == 1:
        return found[0]
    if found:
        raise ConfigError(f"--thread {given!r} could be any of {', '.join(found)}: give more of it")
    recent = [t.thread_id for t in threads.threads(limit=3)]
    hint = f" (recent: {', '.join(recent)})" if recent else ""
    raise ConfigError(
        f"no thread {given[:80]!r}{hint}; leave out --thread to start a new one, or name a new one "
        "with --new-thread NAME"
    )


def _start_thread(session: Any, thread: str | None, new_thread: str | None) -> str:
    from tether.supervisor.conversations import AGENT_THREAD, new_thread_id  # DBOS: only when a turn runs

    if thread is not None and new_thread is not None:
        raise ConfigError("give --thread (an existing thread) or --new-thread (a new one), not both")
    if (new_thread or "").startswith(AGENT_THREAD):
        raise ConfigError(
            f"thread names starting {AGENT_THREAD!r} belong to goal runs' agent tasks: pick another"
        )
    if thread is not None:
        found = resolve_thread(session, thread)
        known = session.threads.load(found)
        if known is not None and known.parent:
            asker = known.parent.rsplit(":", 2)[0]
            raise ConfigError(
                f"thread {found} is a delegation asked by thread {asker}: talk and answer there "
                f"(tether run --thread {asker} …)"
            )
        if found.startswith(AGENT_THREAD):
            raise ConfigError(
                f"thread {found} is a goal run's agent task: its questions are answered through its run "
                "(tether flow show / approve)"
            )
        return found
    if new_thread is not None:
        if session.threads.load(new_thread) is not None:
            raise ConfigError(f"thread {new_thread!r} exists already: continue it with --thread {new_thread}")
        return new_thread
    return new_thread_id()


ThreadOption = Annotated[str | None, typer.Option(help="Continue this thread (its id or a unique prefix)")]
NewThreadOption = Annotated[
    str | None, typer.Option("--new-thread", help="Start a new thread with this name")
]
AgentOption = Annotated[
    str | None,
    typer.Option("--agent", "-a", help="Who answers (tether agents); a thread keeps the agent it began with"),
]

WorkspaceOption = Annotated[
    Path | None,
    typer.Option(
        "--workspace",
        "-w",
        help="Work on the files of this folder (-w . for the one you are in) instead of [workspace] roots",
    ),
]


def _use_workspace(folder: Path | None) -> None:
    """``--workspace``: the folder becomes this command's workspace root (``TETHER_ROOTS``, which its
    workers inherit), checked now as every root is: an existing folder that is not the tether home."""
    if folder is None:
        return
    path = folder.expanduser().absolute()
    if "," in str(path):
        raise ConfigError(f"--workspace {folder}: a folder whose path holds a comma cannot be a root here")
    os.environ["TETHER_ROOTS"] = str(path)
    try:
        from tether.config import resolve_home
        from tether.toolkits.workspace.paths import Roots

        Roots.load(resolve_home(state.home))
    except ConfigError as exc:
        del os.environ["TETHER_ROOTS"]
        raise ConfigError(f"--workspace {folder}: {exc}".replace("[workspace] roots: ", "")) from exc


@app.command("run")
def run_command(
    goal: Annotated[
        str | None, typer.Argument(help="What you want done, in plain words (中文 or English)")
    ] = None,
    thread: ThreadOption = None,
    new_thread: NewThreadOption = None,
    confirm: Annotated[
        bool,
        typer.Option("--confirm", help="With --thread: you confirm the one call that thread is waiting on"),
    ] = False,
    detach: Annotated[
        bool, typer.Option("--detach", help="Background jobs it starts outlive this command")
    ] = False,
    here: Annotated[
        bool,
        typer.Option("--here", help="Run the turn in this process even while an executor runs"),
    ] = False,
    formats: Annotated[
        list[str] | None,
        typer.Option(
            "--format",
            "-f",
            help="Generate these files from the turn's result: md, html, pptx, pdf (repeat, or pptx,pdf)",
        ),
    ] = None,
    agent: AgentOption = None,
    workspace: WorkspaceOption = None,
    image: Annotated[
        list[Path] | None,
        typer.Option("--image", help="Send an image with the request (PNG, JPEG, GIF, WebP; repeat)"),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """One turn: the agent plans, calls tools through the executor, and reports.

    A turn that needs your consent ends asking for it (exit code 3); answer with
    `tether run --thread ID --confirm` (exactly that call runs), `tether run --thread ID "是"`,
    or `tether run --thread ID "no"`."""
    import asyncio

    def body() -> int:
        if confirm and (thread is None or goal is not None):
            raise ConfigError(
                "--confirm answers the question a thread is waiting on: use "
                "`tether run --thread ID --confirm` without a message"
            )
        if not confirm and not (goal or "").strip():
            raise ConfigError('say what you want done: tether run "..."')
        ticked = _formats(formats, confirm)
        pictures = _read_images(image or [], confirm)
        _use_workspace(workspace)  # then the turn runs here: a running executor has its own roots
        if not here and workspace is None:
            handed = _hand_over(
                state.home, state.registry_ref, goal, thread, new_thread,
                confirm=confirm, as_json=as_json, formats=ticked, agent=agent, pictures=pictures,
            )  # fmt: skip
            if handed is not None:
                return handed
        session = _session(state.home, state.registry_ref, detach=detach, agent=agent, thread=thread)
        if not as_json:
            session.events.subscribe(render_event)
        try:
            thread_id = _start_thread(session, thread, new_thread)
            if confirm:
                if session.pending(thread_id) is None:
                    raise ConfigError(f"thread {thread_id!r} is not waiting for a confirmation")
                result = asyncio.run(session.confirm(thread_id, approve=True, source="person:cli"))
            else:
                assert goal is not None
                from tether.agent.images import save_all

                kept = save_all(session.executor.home, pictures)
                result = asyncio.run(session.send(thread_id, goal, formats=ticked, images=kept))
        finally:
            session.executor.close()
        _print_turn(result, as_json=as_json, detach=detach, model=session.model_label)
        return _exit_code(result.status.value)

    guarded(as_json, body)


@app.command("chat")
def chat_command(
    thread: ThreadOption = None,
    new_thread: NewThreadOption = None,
    agent: AgentOption = None,
    workspace: WorkspaceOption = None,
) -> None:
    """A conversation. ↑/↓ recall what you typed; Ctrl-C cancels the turn in progress (the
    conversation goes on); 'exit' or Ctrl-D leaves, asking first what to do with background jobs."""

    def body() -> int:
        from tether.interfaces.chat import Chat

        _use_workspace(workspace)
        session = _session(state.home, state.registry_ref, detach=True, agent=agent, thread=thread)
        try:
            thread_id = _start_thread(session, thread, new_thread)
            return Chat(session, thread_id).run()
        finally:
            session.executor.close()

    guarded(False, body)


def _read_images(paths: list[Path], confirm: bool) -> list[tuple[str, bytes]]:
    """The images given with --image, read (``images.save_all`` checks them by their bytes, before
    anything runs)."""
    from tether.agent.images import MAX_BYTES, MAX_IMAGES

    if paths and confirm:
        raise ConfigError("--image goes with a request, not with --confirm")
    if len(paths) > MAX_IMAGES:
        raise ConfigError(f"{len(paths)} images: a message may carry at most {MAX_IMAGES}")
    read: list[tuple[str, bytes]] = []
    for path in paths:
        try:
            if path.stat().st_size > MAX_BYTES:
                raise ConfigError(f"{path} is larger than {MAX_BYTES:,} bytes: an image may be at most that")
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
        read.append((str(path), data))
    return read


def _formats(given: list[str] | None, confirm: bool) -> tuple[str, ...]:
    """The files ticked with --format; a format that is not allowed is refused, naming the allowed ones."""
    from tether.agent.outputs import FORMATS, parse_formats

    if not given:
        return ()
    if confirm:
        raise ConfigError("--format goes with a request; an answer carries on with the formats it asked with")
    ticked = parse_formats(",".join(given))
    if ticked is None:
        raise ConfigError(
            f"--format takes {', '.join(FORMATS)} (repeat it, or separate with commas); got {given}"
        )
    return ticked


def _exit_code(status: str) -> int:
    if status == "needs_confirmation":
        return EXIT_NEEDS_CONFIRMATION
    return 0 if status == "completed" else 1


def _hand_over(
    home: str | None, registry_ref: str, goal: str | None, thread: str | None, new_thread: str | None, *,
    confirm: bool, as_json: bool, formats: tuple[str, ...] = (), agent: str | None = None,
    pictures: list[tuple[str, bytes]] | None = None,
) -> int | None:  # fmt: skip
    """Run the turn in the home's live executor and follow it; None when no executor runs."""
    import secrets

    from tether.agent.turn import TurnResult
    from tether.runtime import Runtime
    from tether.supervisor import durable

    with Runtime.open(home) as runtime:
        if not durable.live_executors(runtime.home):
            return None
        thread_id = _start_thread(runtime, thread, new_thread)
        request = {
            "thread_id": thread_id, "message": goal or "", "confirm": confirm, "source": "person:cli",
            "formats": list(formats), "agent": agent,
        }  # fmt: skip
        if pictures:
            from tether.agent.images import save_all

            request["images"] = save_all(runtime.home, pictures)
        if confirm:  # the question the person answers, by its id: not whatever waits when it runs
            state = runtime.threads.load(thread_id)
            if state is None or state.pending is None:
                raise ConfigError(f"thread {thread_id!r} is not waiting for a confirmation")
            request["pending_id"] = state.pending.get("id")
        workflow_id = f"turn-{secrets.token_hex(8)}"
        after = runtime.events.last_id()
        with durable.client(runtime) as client:
            durable.enqueue_turn(client, workflow_id, request)
            if not as_json:
                err.print(f"[dim]handed to the running executor · thread {escape(thread_id)}[/]")
            try:
                output = _follow_turn(
                    runtime,
                    client,
                    workflow_id,
                    thread_id,
                    after,
                    render=not as_json,
                    registry_ref=registry_ref,
                )
            except KeyboardInterrupt:
                _cancel_handed_over(runtime, client, thread_id, registry_ref)
                raise
    if "error" in output:
        raise ConfigError(str(output["error"]))
    result = TurnResult.from_dict(output)
    _print_turn(result, as_json=as_json, detach=True, model=str(output.get("model", "")))
    return _exit_code(result.status.value)


def _cancel_handed_over(runtime: Any, client: Any, thread_id: str, registry_ref: str) -> None:
    """Ctrl-C while following a turn the executor runs cancels it there, as Ctrl-C cancels a turn run
    in this process: it ends, and the job it waits on is stopped (``conversations.cancel_turn``)."""
    import asyncio

    from tether.execution.executor import Executor
    from tether.supervisor import conversations
    from tether.tasks.spec import CLI

    with Executor(load_registry(registry_ref), runtime=runtime) as executor:
        done = asyncio.run(conversations.cancel_turn(runtime, executor, client, thread_id, caller=CLI))
    if done["cancelled"]:
        err.print(f"turn cancelled; {len(done['stopped_jobs'])} job(s) stopped", markup=False)


TAKE_OVER_S = 1.0  # how long a handed-over turn may have no executor before its command runs it


def _follow_turn(
    runtime: Any,
    client: Any,
    workflow_id: str,
    thread_id: str,
    after: int,
    *,
    render: bool,
    registry_ref: str,
) -> dict[str, Any]:
    """Show the thread's steps as the executor records them, until the turn's workflow ends. If the
    executor leaves first (and none is left), this command becomes the executor and finishes the turn
    from its last step, as `tether flow run` does for a run."""
    import asyncio

    follower = _Follower(runtime, client, workflow_id, thread_id, after, render)
    return asyncio.run(follower.follow(registry_ref))


class _Follower:
    def __init__(
        self, runtime: Any, client: Any, workflow_id: str, thread_id: str, after: int, render: bool
    ) -> None:
        self.runtime, self.client, self.workflow_id = runtime, client, workflow_id
        self.topic, self.after, self.render = f"thread:{thread_id}", after, render

    def _show(self) -> None:
        for event in self.runtime.events.read(self.after, topics=[self.topic]):
            self.after = event.id
            if self.render:
                render_event(event)

    async def follow(self, registry_ref: str | None) -> dict[str, Any]:
        import asyncio
        import time

        from tether.supervisor import durable

        gone_since: float | None = None
        while True:
            await asyncio.to_thread(self._show)
            status, output = await asyncio.to_thread(durable.outcome, self.client, self.workflow_id)
            if status == "SUCCESS" and isinstance(output, dict):
                await asyncio.to_thread(self._show)
                return output
            if status in ("ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"):
                return {"error": f"the executor's turn ended {status.lower()}: {output}"}
            if registry_ref is not None:
                if await asyncio.to_thread(durable.live_executors, self.runtime.home):
                    gone_since = None
                elif gone_since is None:
                    gone_since = time.monotonic()
                elif time.monotonic() - gone_since > TAKE_OVER_S:
                    return await self._execute_here(registry_ref)
            await asyncio.sleep(0.05)

    async def _execute_here(self, registry_ref: str) -> dict[str, Any]:
        from tether.supervisor.runner import executing

        if self.render:
            err.print("[yellow]the executor left: this command goes on with the turn, from its last step[/]")
        async with executing(self.runtime, load_registry(registry_ref), registry_ref):
            return await self.follow(None)


def _print_turn(result: Any, *, as_json: bool, detach: bool, model: str) -> None:
    if as_json:
        document = result.to_dict()
        document["model"] = model
        document["steps"] = [
            {k: s[k] for k in ("index", "kind", "tool", "args", "result")} for s in document["steps"]
        ]
        print(json.dumps(document, ensure_ascii=False))
        return
    out.print(result.final, markup=False)
    status = str(getattr(result.status, "value", result.status)).replace("_", " ")
    out.print(f"[dim]thread {escape(result.thread_id)} · {escape(status)} · model {escape(model)}[/]")
    if result.status == "needs_confirmation":
        from tether.models.understand import has_cjk

        t = result.thread_id
        yes, no = ("是", "不要") if has_cjk(result.final) else ("yes", "no")  # in the thread's language
        err.print("waiting for your confirmation. To run exactly that call:", soft_wrap=True)
        err.print(
            f'  [bold]tether run --thread {t} --confirm[/]   (or: tether run --thread {t} "{yes}")',
            soft_wrap=True,
        )
        err.print(f'To decline: [bold]tether run --thread {t} "{no}"[/]', soft_wrap=True)
    started = [
        s
        for s in result.steps
        if s.kind == "tool" and s.tool not in CONTROL and (s.result or {}).get("status") == "running"
    ]
    files = [
        item
        for s in result.steps
        if s.kind == "tool" and isinstance(s.result, dict)
        for item in (s.result.get("data") or {}).get("artifacts") or []
        if isinstance(item, dict)
    ]
    for item in files:
        out.print(
            f"[green]file[/] {escape(str(item.get('name')))} · {item.get('format')} · "
            f"{human_size(item.get('size'))} · [dim]copy it out: tether artifacts[/]"
        )
    if started and not detach:
        err.print(
            "[yellow]note:[/] background jobs started by this command stop when it exits; "
            "use --detach, or `tether chat`"
        )
