"""The model's tool calls, each run as one step of a turn and put on record.

``ToolCalls`` is the session's hands: it runs one call through the ``Executor`` (or its control door,
for ``get_task_status`` and ``stop_task``) under the deterministic execution id of its step, recorded
``started`` before anything runs, and records the outcome, which is also the tool message the model
reads. A call that needs the person's consent becomes the question the thread waits on; a call that is
not run (cut by contract 10, or waiting for the person) is answered ``skipped``. The turn's loop
(``agent/session.py``) decides which calls run; the recovery of a dead turn (``agent/recovery.py``)
settles its steps with the same collaborators.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import tether.telemetry as telemetry
from tether.agent import texts
from tether.agent.skillruns import SKILL_RUN_NAME
from tether.agent.steps import TOOL, Steps, perform
from tether.agent.surface import CONTROL_IDS, ToolSurface
from tether.agent.team import DELEGATE_NAME
from tether.agent.turn import Turn
from tether.config import AgentSettings
from tether.errors import TetherError
from tether.events import ConfirmationRequested, ToolFinished, ToolStarted, activity_of
from tether.execution.admission import execution_id_for
from tether.execution.executor import Executor
from tether.models.base import Message, ToolCall, ToolOutcome
from tether.store.threads import ThreadStore
from tether.tasks.confirm import Confirmation
from tether.tasks.grants import Grants
from tether.tasks.result import TaskResult, TaskStatus

if TYPE_CHECKING:
    from tether.agent.delegation import Delegations
    from tether.agent.skillruns import SkillRuns

OK = (TaskStatus.COMPLETED, TaskStatus.RUNNING)
RERUNS = 3  # runs again of a call whose starting process kept dying before its worker began


def never_began(result: TaskResult) -> bool:
    """A call whose process died before its worker began: its claim was given up, so it provably never
    ran and never will."""
    return result.status is TaskStatus.FAILED and bool(result.data.get("never_started"))


def again_id(thread_id: str, turn: int, index: int, n: int = 1) -> str:
    """The execution id of a step's ``n``-th run again (a crash replayed on any process derives the same)."""
    return execution_id_for(thread_id, str(turn), str(index), "again", *([str(n)] if n > 1 else []))


class ToolCalls:
    def __init__(
        self,
        executor: Executor,
        surface: ToolSurface,
        threads: ThreadStore,
        steps: Steps,
        settings: AgentSettings,
        *,
        caller: str,
        detach: bool,
        grants: Grants | None = None,
    ) -> None:
        self.executor = executor
        self.surface = surface
        self.threads = threads
        self.steps = steps
        self.settings = settings
        self.caller = caller
        self.grants = grants  # the agent's: narrow every lookup, execution and job it may see
        self.detach = detach  # background jobs outlive this session's process
        self.delegations: Delegations | None = None  # set by a session that may delegate
        self.skill_runs: SkillRuns | None = None  # set by a session that may start skills' flows

    def origin(self, thread_id: str) -> str:
        return f"thread:{thread_id}"

    def scope(self, thread_id: str) -> str | None:
        """The origin whose jobs this session may see and control (None: every job exposed to it)."""
        return self.origin(thread_id) if self.settings.job_scope == "thread" else None

    async def execute(
        self,
        turn: Turn,
        call: ToolCall,
        *,
        consent: Confirmation | None = None,
        may_ask: bool = True,
        answer: TaskResult | None = None,
        delegated: dict[str, Any] | None = None,
    ) -> TaskResult:
        """Run one call as one step: recorded started (with its execution id) before it runs, then its
        outcome, which is also the tool message the model sees (unless, with ``may_ask``, the call waits
        for the person: the loop turns that step into the question)."""
        task_id = self.surface.task_id(call.name)
        index = len(turn.steps)
        step_id = f"{turn.thread_id}:{turn.turn}:{index}"
        execution_id = execution_id_for(turn.thread_id, str(turn.turn), str(index))
        control = self.surface.is_control(call.name)
        delegation = self.delegations is not None and call.name == DELEGATE_NAME
        skill_run = self.skill_runs is not None and call.name == SKILL_RUN_NAME
        # A call that is no job of its own (control, a delegation, a skill's run, a call answered
        # without running) is on record without an execution id.
        no_job = control or delegation or skill_run or bool(call.error) or answer is not None
        await turn.record(
            "tool",
            status="started",
            tool=task_id,
            args=call.arguments,
            call_id=call.id,
            execution_id=None if no_job else execution_id,
            event=ToolStarted(
                topic=turn.topic, thread_id=turn.thread_id, turn=turn.turn, index=index, tool=task_id,
                args=call.arguments,
                execution_id=None if no_job else execution_id,
                activity=activity_of(task_id),
            ),
        )  # fmt: skip
        # The call's span takes its id from its step's: a replayed call, or a job re-attached after a
        # crash, is the same span, and a delegated turn or a worker hangs under it.
        with telemetry.span(
            f"execute_tool {task_id}", _traced(task_id, call, None if no_job else execution_id),
            ids=telemetry.child_ids(step_id),
        ) as traced:  # fmt: skip
            result = await self._dispatch(
                turn, call, task_id, index, execution_id, consent=consent, delegated=delegated, answer=answer
            )
            traced.set_attribute("tether.task.status", result.status.value)
            if result.status not in OK and not result.data.get("needs_confirmation"):
                traced.error(result.message)
        if not (may_ask and result.status is TaskStatus.REJECTED and result.data.get("needs_confirmation")):
            await self.observe(turn, call, result, index)
        return result

    async def _dispatch(
        self,
        turn: Turn,
        call: ToolCall,
        task_id: str,
        index: int,
        execution_id: str,
        *,
        consent: Confirmation | None,
        delegated: dict[str, Any] | None,
        answer: TaskResult | None,
    ) -> TaskResult:
        """What the call does: nothing (answered or refused as it stands), a skill's run, a delegation,
        a control call or one execution through the executor, as one step."""
        control = self.surface.is_control(call.name)
        if answer is not None:  # settled without running (no file was wanted): recorded like any outcome
            result = answer
        elif call.error is not None:
            result = TaskResult(
                task_id=task_id,
                execution_id="",
                status=TaskStatus.REJECTED,
                message=f"{call.name}: {call.error}",
                data={"errors": [{"param": None, "message": call.error}]},
            )
        elif self.skill_runs is not None and call.name == SKILL_RUN_NAME:
            assert self.skill_runs is not None
            result = await self.skill_runs.run(turn, call, index)
        elif self.delegations is not None and call.name == DELEGATE_NAME:
            assert self.delegations is not None
            result = await self.delegations.run(turn, call, index, consent, delegated)
        else:

            async def work() -> dict[str, Any]:
                if control:
                    done = await self.control(turn, call)
                else:
                    done = await self.once(
                        task_id, call.arguments, thread_id=turn.thread_id, turn=turn.turn, index=index,
                        consent=consent, execution_id=execution_id,
                    )  # fmt: skip
                return {"result": done.model_dump(mode="json")}

            result = TaskResult.model_validate((await perform(self.steps, TOOL, work))["result"])
        return result

    async def once(
        self,
        task_id: str,
        arguments: dict[str, Any],
        *,
        thread_id: str,
        turn: int,
        index: int,
        consent: Confirmation | None,
        execution_id: str,
        attached: TaskResult | None = None,
    ) -> TaskResult:
        """One call of a step, under its execution id: a replayed step attaches to what the first try
        recorded. When that try's process died after putting it on record and before its worker began
        (``attached``: already known), the call provably never ran and never will (its claim is given
        up): it runs again under the step's derived ids, whatever its task, at most ``RERUNS`` times (a
        consent the person gave covered the one call: a confirmed call is refused again, and asks)."""
        done = attached or await self._run(task_id, arguments, thread_id, index, turn, consent, execution_id)
        for n in range(1, RERUNS + 1):
            # Only what an earlier process put on record: a call this one started and gave up on (its
            # worker never came) is not run again and again here.
            if not (never_began(done) and (done is attached or done.data.get("attached"))):
                break
            again = again_id(thread_id, turn, index, n)
            done = await self._run(task_id, arguments, thread_id, index, turn, consent, again)
            done = done.with_data(rerun_of=execution_id)
        return done

    async def _run(
        self,
        task_id: str,
        arguments: dict[str, Any],
        thread_id: str,
        index: int,
        turn: int,
        consent: Confirmation | None,
        execution_id: str,
    ) -> TaskResult:
        return await self.executor.execute(
            task_id,
            arguments,
            caller=self.caller,
            grants=self.grants,
            confirmation=consent,
            detach=self.detach,
            origin=self.origin(thread_id),
            step_id=f"{thread_id}:{turn}:{index}",
            execution_id=execution_id,
        )

    async def control(self, turn: Turn, call: ToolCall) -> TaskResult:
        """A control tool is the registry task it stands for (``jobs.status`` / ``jobs.stop``), run through
        the executor like any call: granted, its arguments checked, within this thread's jobs."""
        try:
            return await self.executor.execute(
                CONTROL_IDS[call.name],
                call.arguments,
                caller=self.caller,
                grants=self.grants,
                origin=self.scope(turn.thread_id),
            )
        except TetherError as exc:
            return TaskResult(
                task_id=call.name, execution_id="", status=TaskStatus.FAILED, message=exc.message
            )

    async def observe(self, turn: Turn, call: ToolCall, result: TaskResult, index: int) -> None:
        payload = result.model_dump(mode="json")
        task_id = self.surface.task_id(call.name)
        await turn.record(
            "tool",
            index=index,
            tool=task_id,
            args=call.arguments,
            result=payload,
            call_id=call.id,
            execution_id=result.execution_id or None,
            message=tool_message(call, payload),
            event=ToolFinished(
                topic=turn.topic, thread_id=turn.thread_id, turn=turn.turn, index=index, tool=task_id,
                args=call.arguments, result=payload,
            ),
        )  # fmt: skip

    async def skip(self, turn: Turn, call: ToolCall, why: str) -> None:
        payload = {"status": ToolOutcome.SKIPPED.value, "message": why}
        task_id = self.surface.task_id(call.name)
        await turn.record(
            "tool",
            tool=task_id,
            args=call.arguments,
            result=payload,
            text=why,
            call_id=call.id,
            message=tool_message(call, payload),
            event=ToolFinished(
                topic=turn.topic, thread_id=turn.thread_id, turn=turn.turn, index=len(turn.steps),
                tool=task_id, args=call.arguments, result=payload,
            ),
        )  # fmt: skip

    async def ask_confirmation(self, turn: Turn, call: ToolCall, refusal: TaskResult, index: int) -> str:
        """Turn the call's started step (``index``) into the question; the thread now waits on it."""
        task_id = refusal.task_id
        args = refusal.data.get("params", call.arguments)
        pending_id = f"{turn.thread_id}:{turn.turn}:{index}"
        turn.state.pending = {
            "id": pending_id,
            "tool": task_id,
            "name": call.name,
            "args": args,
            "digest": refusal.data.get("digest"),
            "danger": refusal.data.get("danger"),
            "formats": list(turn.formats),
        }
        if refusal.data.get("delegated") and call.name == DELEGATE_NAME:  # a sub-agent's question, asked here
            turn.state.pending["delegated"] = refusal.data["delegated"]
        zh = texts.zh(turn.message, self.settings.language)
        shown = json.dumps(args, ensure_ascii=False)
        destructive = refusal.data.get("danger") == "destructive"
        # What the call would touch (files, bytes), measured now, as the person is asked.
        # (a sub-agent's call is checked against the sub-agent's grants, in its own session)
        grants = None if refusal.data.get("delegated") else self.grants
        spec = self.executor.registry.get(task_id, self.caller, grants)
        impact = None
        if spec is not None and spec.impact is not None and isinstance(args, dict):
            impact = await asyncio.to_thread(spec.impact_of, self.executor.home, args, "zh" if zh else "en")
        question = texts.confirmation_question(task_id, shown, impact, destructive=destructive, zh=zh)
        if refusal.data.get("delegated"):
            question = texts.delegated_question(str(refusal.data["delegated"]["agent"]), question, zh=zh)
        payload = {
            "status": ToolOutcome.NEEDS_CONFIRMATION.value,
            "message": "waiting for the person's confirmation; nothing ran",
        }
        await turn.record(
            "confirmation",
            index=index,
            tool=task_id,
            args=call.arguments,
            result=payload,
            text=question,
            call_id=call.id,
            message=tool_message(call, payload),
            event=ConfirmationRequested(
                topic=turn.topic, thread_id=turn.thread_id, turn=turn.turn, index=index,
                pending_id=pending_id, tool=task_id, args=args, digest=refusal.data.get("digest"),
                question=question,
            ),
        )  # fmt: skip
        await asyncio.to_thread(self.threads.save, turn.state)
        return question


def call_key(call: ToolCall) -> str:
    """One call's identity within a turn: its tool and canonical arguments."""
    try:
        arguments = json.dumps(call.arguments, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        arguments = repr(call.arguments)
    return f"{call.name}\0{arguments}\0{call.error or ''}"


def tool_message(call: ToolCall, payload: dict[str, Any]) -> Message:
    return {
        "role": "tool",
        "tool_call_id": call.id,
        "name": call.name,
        "content": json.dumps(payload, ensure_ascii=False),
    }


def _traced(task_id: str, call: ToolCall, execution_id: str | None) -> dict[str, Any]:
    """An ``execute_tool`` span's attributes, as the GenAI conventions name them (and tether's own)."""
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": task_id,
        "gen_ai.tool.call.id": call.id,
        "gen_ai.tool.type": "function",
        "tether.execution.id": execution_id,
    }
