"""``tether chat``: a conversation at the terminal.

Line editing and history (↑/↓, kept in ``<home>/chat_history``), a spinner while a turn runs, the
steps shown as they happen, confirmations answered in the words people use (是/否/好的/取消, yes/no/y/n),
Ctrl-C cancels the turn in progress and keeps the conversation, and leaving with background jobs
still running asks whether to keep them (they run detached) or stop them: never a silent kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rich.markup import escape

from tether.interfaces.render import err, out, progress_text
from tether.models.replies import is_no, is_yes
from tether.models.understand import has_cjk

HISTORY_FILE = "chat_history"
KEEP = frozenset({"k", "keep", "keep them", "保留", "留着", "继续", "继续运行", "不停", "不要停"})
STOP = frozenset({"s", "stop", "stop them", "停", "停止", "停掉", "关掉", "全部停止"})
EXIT_WORDS = frozenset({"exit", "quit", ":q", "/exit", "/quit", "退出聊天", "再见", "拜拜"})


class Chat:
    def __init__(self, session: Any, thread_id: str) -> None:
        self.session = session
        self.thread_id = thread_id
        self.zh = session.settings.language == "zh"
        self.home: Path = session.executor.runtime.home

    # -- the loop -------------------------------------------------------------------------------

    def run(self) -> int:
        from tether.interfaces.turnview import render_event

        self.session.events.subscribe(render_event)
        self._line_editing()
        thread, model = escape(self.thread_id), escape(self.session.model_label)
        out.print(
            f"[bold]tether chat[/] · thread {thread} · model {model}"
            " · [dim]Ctrl-C cancels a turn · exit or Ctrl-D leaves[/]"
        )
        self._jobs_of_other_chats()
        try:
            while True:
                try:
                    message = input("you> ").strip()
                except EOFError:
                    out.print()
                    break
                except KeyboardInterrupt:
                    out.print()  # Ctrl-C at the prompt: a fresh line, nothing else
                    continue
                if not message:
                    continue
                if message.lower() in EXIT_WORDS:
                    break
                self.zh = has_cjk(message)  # answer in the language just used
                result = self._turn(lambda text=message: self.session.send(self.thread_id, text))
                while result is not None and result.status == "needs_confirmation":
                    answer = self._yes_or_no()
                    if answer is None:
                        break  # the thread keeps waiting; a later "是" or "no" answers it
                    result = self._turn(
                        lambda answer=answer: self.session.confirm(
                            self.thread_id, approve=answer, source="person:chat"
                        )
                    )
        finally:
            self._save_history()
            self._leave()
        return 0

    def _turn(self, make: Callable[[], Awaitable[Any]]) -> Any:
        text = "思考中…" if self.zh else "working…"
        try:
            with err.status(text, spinner="dots") as status:
                result = asyncio.run(self._with_progress(make, status, text))
        except KeyboardInterrupt:
            out.print(
                "[yellow]已取消本轮，对话继续。[/]"
                if self.zh
                else "[yellow]turn cancelled; the conversation goes on[/]"
            )
            return None
        out.print(f"[bold cyan]tether>[/] {escape(result.final)}")
        return result

    async def _with_progress(self, make: Callable[[], Awaitable[Any]], status: Any, idle: str) -> Any:
        """The turn, with the running task's latest progress in the spinner's line."""
        from tether.events import ToolFinished, ToolStarted
        from tether.execution.protocol import last_progress

        current: dict[str, str] = {}

        def follow(event: Any) -> None:
            if isinstance(event, ToolStarted) and event.execution_id:
                current.update(eid=event.execution_id, tool=event.tool)
            elif isinstance(event, ToolFinished):
                current.clear()

        async def watch() -> None:
            paths = self.session.executor.jobs.paths
            while True:
                eid = current.get("eid")
                progress = await asyncio.to_thread(last_progress, paths(eid)) if eid else None
                said = progress_text(progress) if progress else ""
                status.update(f"{current['tool']} · {said}" if eid and said else current.get("tool") or idle)
                await asyncio.sleep(0.2)

        unsubscribe = self.session.events.subscribe(follow)
        watcher = asyncio.ensure_future(watch())
        try:
            return await make()
        finally:
            watcher.cancel()
            unsubscribe()

    def _yes_or_no(self) -> bool | None:
        prompt = "确认执行吗？（是/否）" if self.zh else "Run it? (yes/no) "
        while True:
            try:
                answer = input(prompt).strip()
            except (EOFError, KeyboardInterrupt):
                out.print()
                return None
            if is_yes(answer):
                return True
            if is_no(answer):
                return False
            out.print("请回答“是”或“否”（yes/no）。" if self.zh else "Please answer yes or no (是/否).")

    # -- leaving ------------------------------------------------------------------------------

    def _leave(self) -> None:
        """Background jobs this thread started are still running: keep them (they are detached) or
        stop them, as the person says; without an answer they keep running, and we say how to stop them."""
        executor = self.session.executor
        try:
            jobs = executor.jobs_for(
                self.session.caller, origin=self.session.origin(self.thread_id), active=True, limit=20
            )
        except Exception:
            return
        if not jobs:
            return
        for job in jobs:
            progress = progress_text((job.data or {}).get("progress"))
            out.print(f"  [cyan]running[/] {job.execution_id}  {escape(job.task_id)}  {escape(progress)}")
        question = (
            f"还有 {len(jobs)} 个后台任务在运行：保留（k）还是停止（s）？[k] "
            if self.zh
            else f"{len(jobs)} background job(s) still running: keep them (k) or stop them (s)? [k] "
        )
        while True:
            try:
                answer = input(question).strip().lower()
            except (EOFError, KeyboardInterrupt, OSError):
                answer = ""
            if answer in STOP:
                for job in jobs:
                    with contextlib.suppress(Exception):
                        stopped = asyncio.run(
                            executor.control(
                                job.execution_id,
                                "stop",
                                caller=self.session.caller,
                                reason="the person left the chat",
                            )
                        )
                        out.print(f"  {stopped.execution_id} {stopped.status.value}")
                return
            if answer in KEEP or answer == "":
                ids = " ".join(job.execution_id for job in jobs)
                thread = self.thread_id
                out.print(
                    "它们会继续运行。一个对话只能看到、停止它自己启动的任务：回到这个对话用"
                    f" tether chat --thread {thread}；在任何地方查看用 tether job list，"
                    f"停止用 tether job stop {ids}"
                    if self.zh
                    else "They keep running. A conversation sees and stops only the jobs it started: come"
                    f" back to this one with tether chat --thread {thread}; from anywhere, tether job list"
                    f" shows them and tether job stop {ids} stops them",
                    markup=False,
                    soft_wrap=True,  # a command is never broken across lines: it is copied
                )
                return

    def _jobs_of_other_chats(self) -> None:
        """Say which jobs other conversations left running: the agent of this one cannot see them
        (``[agent].job_scope = "thread"``), so the person learns where they are and how to reach them."""
        from tether.tasks.callers import CLI

        try:
            jobs = self.session.executor.jobs_for(CLI, active=True, limit=20)
        except Exception:
            return
        mine = self.session.origin(self.thread_id)
        threads: dict[str, list[str]] = {}
        for job in jobs:
            origin = str((job.data or {}).get("origin") or "")
            if origin.startswith("thread:") and origin != mine and not (job.data or {}).get("elsewhere"):
                threads.setdefault(origin.removeprefix("thread:"), []).append(job.execution_id)
        for thread, ids in threads.items():
            out.print(
                f"另一个对话（{thread}）的 {len(ids)} 个后台任务在运行，本对话看不到它们：回到那个对话用"
                f" tether chat --thread {thread}；查看 tether job list；停止 tether job stop {' '.join(ids)}"
                if self.zh
                else (
                    f"1 background job of another conversation ({thread}) is running"
                    if len(ids) == 1
                    else f"{len(ids)} background jobs of another conversation ({thread}) are running"
                )
                + f"; this one cannot see them. Go back to it: tether chat --thread {thread} · see them:"
                f" tether job list · stop them: tether job stop {' '.join(ids)}",
                markup=False,
                style="dim",
                soft_wrap=True,  # a command is never broken across lines: it is copied
            )

    # -- line editing -------------------------------------------------------------------------

    def _line_editing(self) -> None:
        try:
            import readline
        except ImportError:  # Windows without pyreadline: plain input still works
            self._readline = None
            return
        self._readline = readline
        path = self.home / HISTORY_FILE
        with contextlib.suppress(OSError):
            readline.read_history_file(path)
        readline.set_history_length(1000)

    def _save_history(self) -> None:
        readline = getattr(self, "_readline", None)
        if readline is None:
            return
        path = self.home / HISTORY_FILE
        with contextlib.suppress(OSError):
            readline.write_history_file(path)
            os.chmod(path, 0o600)
