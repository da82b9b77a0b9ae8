"""The controlled conversation loop: the model decides, the executor acts, every step is on record.

``send(thread_id, message)`` builds the context (system prompt, memory summary, open jobs, recent
messages), asks the model, checks each tool call against the caller's surface, executes it through the
``Executor`` (or the job manager, for the control tools), records the observation, and repeats until the
model answers or the step budget is spent. Contract 10 is enforced here, in code:

- calls run one at a time, in order; the rest of a response is cut at the first call that does not
  complete (``failed``, ``rejected``, ``stopped``, ``not_found``);
- after such a call only ``get_task_status`` and ``stop_task`` may run in that turn; a model that still
  asks for business tools has the turn ended for it, with the failure reported;
- a call that needs the person's consent (``destructive``, or ``caution`` for a model) ends the turn as
  ``needs_confirmation`` and runs nothing. The question is bound to exactly that call (task + digest
  of its canonical arguments). Only the person's answer — a reply such as "yes"/"是", or an interface's
  explicit approval through ``confirm(thread_id)`` — mints a ``Confirmation`` for it; any other call
  that needs consent, in that turn or later, asks again.
- the agent sees and controls only the jobs its own thread started (``[agent].job_scope``), through
  the executor's one control door.

Each model call and each tool execution is one step with the id ``<thread>:<turn>:<index>``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from tether.agent import memory
from tether.agent.surface import GET_STATUS, STOP_TASK, ToolSurface
from tether.config import AgentSettings
from tether.errors import ModelError, TetherError
from tether.events import Event, EventBus
from tether.execution.executor import Executor
from tether.execution.protocol import clip
from tether.models.base import Message, Model, ModelResponse, ToolCall
from tether.models.jsonfix import loads_lenient
from tether.models.replies import is_no, is_yes
from tether.store.threads import MemoryThreadStore, SqliteThreadStore, StepRecord, ThreadState, ThreadStore
from tether.tasks.confirm import Confirmation
from tether.tasks.result import TaskResult, TaskStatus
from tether.tasks.spec import AGENT
from tether.tasks.validation import MAX_PARAMS_BYTES

OK = (TaskStatus.COMPLETED, TaskStatus.RUNNING)
# A model's text answer as stored and shown; longer answers are cut with a note.
MAX_MODEL_TEXT_CHARS = 100_000
NEEDS_CONFIRMATION = "needs_confirmation"

MANAGER_PROMPT = (
    "You supervise an agent whose step budget for this turn ran out. Given the review below, answer with "
    'one JSON object: {"extend": <number of extra steps>} if it is making progress and should go on, or '
    '{"stop": "<reason>"} if it should stop and report.'
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnResult:
    thread_id: str
    turn: int
    status: str  # "completed", "needs_confirmation", "budget_exhausted", "failed"
    final: str
    steps: tuple[StepRecord, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "turn": self.turn,
            "status": self.status,
            "final": self.final,
            "steps": [
                {
                    "index": s.index,
                    "kind": s.kind,
                    "tool": s.tool,
                    "args": s.args,
                    "result": s.result,
                    "text": s.text,
                }
                for s in self.steps
            ],
        }


def bounded(response: ModelResponse) -> ModelResponse:
    """A model's answer within the limits before anything stores or runs it: a call whose arguments are
    larger than the executor accepts is answered with that refusal and recorded without them, and an
    endless text is cut (saying so)."""
    calls = []
    for call in response.tool_calls:
        try:
            size = len(json.dumps(call.arguments, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        except (TypeError, ValueError, RecursionError):
            size = MAX_PARAMS_BYTES + 1
        if size > MAX_PARAMS_BYTES:
            why = f"arguments of {size} bytes are over the limit of {MAX_PARAMS_BYTES}; nothing ran"
            call = ToolCall(id=call.id, name=clip(call.name, 80), arguments={}, error=why)
        calls.append(call)
    text = clip(response.text, MAX_MODEL_TEXT_CHARS)
    if text == response.text and all(a is b for a, b in zip(calls, response.tool_calls, strict=True)):
        return response
    return dataclasses.replace(response, text=text, tool_calls=tuple(calls))


def load_prompt(language: str) -> str:
    return (
        resources.files("tether.agent.prompts").joinpath(f"system.{language}.md").read_text(encoding="utf-8")
    )


class _Turn:
    """The bookkeeping of one turn: step indices, records and events."""

    def __init__(self, session: ConversationSession, state: ThreadState, message: str = "") -> None:
        self.session = session
        self.message = message
        self.state = state
        self.turn = state.turns
        self.steps: list[StepRecord] = []

    def record(
        self,
        kind: str,
        *,
        tool: str | None = None,
        args: dict[str, Any] | None = None,
        result: dict[str, Any] | None = None,
        text: str = "",
    ) -> StepRecord:
        step = StepRecord(
            thread_id=self.state.thread_id,
            turn=self.turn,
            index=len(self.steps),
            kind=kind,
            tool=tool,
            args=args,
            result=result,
            text=text,
        )
        self.steps.append(step)
        self.session.threads.add_step(step)
        self.session.events.emit(
            Event(
                kind=kind, thread_id=step.thread_id, turn=step.turn, index=step.index, payload=step.to_dict()
            )
        )
        return step

    def say(self, message: Message) -> None:
        self.session.threads.append(self.state.thread_id, self.turn, message)

    def done(self, status: str, final: str) -> TurnResult:
        self.record("final", text=final)
        self.session.threads.save(self.state)
        return TurnResult(
            thread_id=self.state.thread_id,
            turn=self.turn,
            status=status,
            final=final,
            steps=tuple(self.steps),
        )


class ConversationSession:
    def __init__(
        self,
        executor: Executor,
        model: Model,
        *,
        settings: AgentSettings | None = None,
        threads: ThreadStore | None = None,
        caller: str = AGENT,
        manager: Model | None = None,
        events: EventBus | None = None,
        detach: bool = False,
    ) -> None:
        self.executor = executor
        self.detach = detach  # background jobs outlive this session's process
        self.model = model
        self.manager = manager or model
        self.settings = settings or AgentSettings.load(executor.home)
        if threads is None:
            threads = (
                MemoryThreadStore()
                if self.settings.memory == "ephemeral"
                else SqliteThreadStore.in_home(executor.home)
            )
        self.threads = threads
        self.caller = caller
        self.surface = ToolSurface(executor.registry, caller)
        self.events = events or EventBus()
        self._prompt = load_prompt(self.settings.language)

    def send_sync(self, thread_id: str, message: str) -> TurnResult:
        return asyncio.run(self.send(thread_id, message))

    def pending(self, thread_id: str) -> dict[str, Any] | None:
        """The call this thread waits for the person to confirm (id, tool, args, digest), if any."""
        state = self.threads.load(thread_id)
        return None if state is None else state.pending

    async def confirm(
        self, thread_id: str, *, approve: bool = True, source: str = "person:cli"
    ) -> TurnResult:
        """The person's explicit answer to the call the thread waits on (a flag, a button): exactly that
        call runs (or is declined), then the turn goes on. ``ConfigError`` if nothing waits."""
        from tether.errors import ConfigError

        if self.pending(thread_id) is None:
            raise ConfigError(f"thread {thread_id!r} is not waiting for a confirmation")
        return await self._turn(thread_id, "yes" if approve else "no", approve, source)

    # -- one turn -------------------------------------------------------------------------------

    async def send(self, thread_id: str, message: str) -> TurnResult:
        """One turn for the person's ``message``. A yes/no reply answers the call the thread waits on."""
        answer = True if is_yes(message) else False if is_no(message) else None
        return await self._turn(thread_id, message, answer, "person:chat")

    async def _turn(self, thread_id: str, message: str, answer: bool | None, source: str) -> TurnResult:
        state = self.threads.load(thread_id) or ThreadState(
            thread_id=thread_id, title=" ".join(message.split())[:80]
        )
        state.turns += 1
        turn = _Turn(self, state, message)
        self.events.emit(
            Event(kind="turn_started", thread_id=thread_id, turn=turn.turn, payload={"message": message})
        )
        pending, state.pending = state.pending, None
        self.threads.save(state)  # the thread row exists before any message or step refers to it
        turn.say({"role": "user", "content": message})
        blocked: TaskResult | None = None
        if pending is not None and answer is True:
            confirmed = await self._run_confirmed(turn, pending, source)
            if confirmed.status not in OK:
                blocked = confirmed  # contract 10 holds across the confirmation too
        elif pending is not None and answer is False:
            turn.record(
                "confirmation", tool=pending["tool"], args=pending["args"], text="declined by the person"
            )
        try:
            return await self._loop(turn, blocked=blocked)
        except ModelError as exc:
            return turn.done("failed", f"The model service failed: {exc.message}")
        finally:
            self._compress(state)

    def origin(self, thread_id: str) -> str:
        return f"thread:{thread_id}"

    def _scope(self, thread_id: str) -> str | None:
        """The origin whose jobs this session may see and control (None: every job exposed to it)."""
        return self.origin(thread_id) if self.settings.job_scope == "thread" else None

    async def _run_confirmed(self, turn: _Turn, pending: dict[str, Any], source: str) -> TaskResult:
        turn.record(
            "confirmation", tool=pending["tool"], args=pending["args"], text="confirmed by the person"
        )
        call = ToolCall(id=f"confirmed_{turn.turn}", name=pending["name"], arguments=pending["args"])
        turn.say({"role": "assistant", "content": None, "tool_calls": [call.to_message()]})
        consent = Confirmation(task_id=pending["tool"], digest=pending["digest"], source=source)
        result = await self.executor.execute(
            pending["tool"],
            pending["args"],
            caller=self.caller,
            confirmation=consent,
            detach=self.detach,
            origin=self.origin(turn.state.thread_id),
        )
        self._observe(turn, call, result)
        return result

    async def _loop(self, turn: _Turn, *, blocked: TaskResult | None = None) -> TurnResult:
        limit = self.settings.max_steps
        used = 0
        completed = failed = 0
        while True:
            if used >= limit:
                extra = await self._review(turn, used, completed, failed, limit)
                if extra <= 0:
                    return turn.done("budget_exhausted", self._budget_text(used, turn))
                limit += extra
            tools = self.surface.tools
            response = bounded(await self.model.complete(self._context(turn.state), tools))
            used += 1
            turn.say(response.to_message())
            turn.record(
                "model",
                text=response.text,
                args={"tool_calls": [{"name": c.name, "arguments": c.arguments} for c in response.tool_calls]}
                if response.tool_calls
                else None,
            )
            if not response.tool_calls:
                return turn.done("completed", response.text)
            cut = False
            violated = False
            for position, call in enumerate(response.tool_calls):
                if cut:
                    self._skip(turn, call, "not run: an earlier call in this response did not complete")
                    continue
                control = self.surface.is_control(call.name)
                if blocked is not None and not control:
                    violated = True
                    self._skip(
                        turn,
                        call,
                        f"not run: after a {blocked.status.value} result only {GET_STATUS} and "
                        f"{STOP_TASK} may follow in this turn",
                    )
                    continue
                result = await self._execute(turn, call)
                if result.status is TaskStatus.REJECTED and result.data.get("needs_confirmation"):
                    # The executor checked everything else first: only the person's word is missing.
                    for later in response.tool_calls[position + 1 :]:
                        self._skip(turn, later, "not run: the turn waits for the person's confirmation")
                    return self._ask_confirmation(turn, call, result)
                self._observe(turn, call, result)
                if result.status in OK:
                    completed += 1
                elif not control:
                    failed += 1
                    blocked = result
                    cut = True
            if violated and blocked is not None:
                return turn.done("completed", self._failure_text(blocked, turn))

    async def _execute(self, turn: _Turn, call: ToolCall) -> TaskResult:
        if call.error is not None:
            return TaskResult(
                task_id=self.surface.task_id(call.name),
                execution_id="",
                status=TaskStatus.REJECTED,
                message=f"{call.name}: {call.error}",
                data={"errors": [{"param": None, "message": call.error}]},
            )
        thread_id = turn.state.thread_id
        if self.surface.is_control(call.name):
            execution_id = call.arguments.get("execution_id")
            if not isinstance(execution_id, str) or not execution_id:
                return TaskResult(
                    task_id=call.name,
                    execution_id="",
                    status=TaskStatus.REJECTED,
                    message=f"{call.name}: execution_id must be the id a tool call returned",
                )
            try:
                return await self.executor.control(
                    execution_id,
                    "status" if call.name == GET_STATUS else "stop",
                    caller=self.caller,
                    origin=self._scope(thread_id),
                    reason=f"asked by the {self.caller}",
                )
            except TetherError as exc:
                return TaskResult(
                    task_id=call.name,
                    execution_id=execution_id,
                    status=TaskStatus.FAILED,
                    message=exc.message,
                )
        return await self.executor.execute(
            self.surface.task_id(call.name),
            call.arguments,
            caller=self.caller,
            detach=self.detach,
            origin=self.origin(thread_id),
        )

    def _observe(self, turn: _Turn, call: ToolCall, result: TaskResult) -> None:
        payload = result.model_dump(mode="json")
        turn.say(
            {
                "role": "tool",
                "tool_call_id": call.id,
                "name": call.name,
                "content": json.dumps(payload, ensure_ascii=False),
            }
        )
        turn.record("tool", tool=self.surface.task_id(call.name), args=call.arguments, result=payload)

    def _skip(self, turn: _Turn, call: ToolCall, why: str) -> None:
        payload = {"status": "skipped", "message": why}
        turn.say(
            {
                "role": "tool",
                "tool_call_id": call.id,
                "name": call.name,
                "content": json.dumps(payload, ensure_ascii=False),
            }
        )
        turn.record(
            "tool", tool=self.surface.task_id(call.name), args=call.arguments, result=payload, text=why
        )

    def _ask_confirmation(self, turn: _Turn, call: ToolCall, refusal: TaskResult) -> TurnResult:
        task_id = refusal.task_id
        args = refusal.data.get("params", call.arguments)
        turn.state.pending = {
            "id": f"{turn.state.thread_id}:{turn.turn}:{len(turn.steps)}",
            "tool": task_id,
            "name": call.name,
            "args": args,
            "digest": refusal.data.get("digest"),
            "danger": refusal.data.get("danger"),
        }
        zh = self._zh(turn)
        shown = json.dumps(args, ensure_ascii=False)
        destructive = refusal.data.get("danger") == "destructive"
        if zh:
            kind = "破坏性操作" if destructive else "需要谨慎的操作"
            question = f"{task_id} 是{kind}（参数 {shown}）。确认执行吗？请回答“是”或“否”。"
        else:
            kind = "destructive" if destructive else "a caution task"
            question = f"{task_id} is {kind} (arguments {shown}). Do you confirm? Answer yes or no."
        payload = {
            "status": NEEDS_CONFIRMATION,
            "message": "waiting for the person's confirmation; nothing ran",
        }
        turn.say(
            {
                "role": "tool",
                "tool_call_id": call.id,
                "name": call.name,
                "content": json.dumps(payload, ensure_ascii=False),
            }
        )
        turn.record("confirmation", tool=task_id, args=call.arguments, result=payload, text=question)
        return turn.done(NEEDS_CONFIRMATION, question)

    # -- budget ---------------------------------------------------------------------------------

    async def _review(self, turn: _Turn, used: int, completed: int, failed: int, limit: int) -> int:
        room = self.settings.max_steps_ceiling - limit
        review = {
            "steps_used": used,
            "completed_steps": completed,
            "failed_steps": failed,
            "extend_by": min(self.settings.extend_by, max(room, 0)),
            "ceiling": self.settings.max_steps_ceiling,
        }
        extra = 0
        reason = "the hard ceiling of steps is reached"
        if room > 0:
            answer = await self.manager.complete(
                [
                    {"role": "system", "content": MANAGER_PROMPT},
                    {"role": "user", "content": json.dumps(review)},
                ],
                (),
            )
            decision = loads_lenient(answer.text) or {}
            try:
                extra = max(0, min(int(decision.get("extend", 0)), self.settings.extend_by, room))
            except (TypeError, ValueError):
                extra = 0
            reason = str(decision.get("stop") or ("extended" if extra else "the manager gave no extension"))
        turn.record("budget", args=review, result={"extend": extra}, text=reason)
        return extra

    def _zh(self, turn: _Turn | None = None) -> bool:
        """Messages tether writes itself follow the person's language, else the setting."""
        if turn is not None and turn.message:
            return any("\u4e00" <= ch <= "\u9fff" for ch in turn.message)
        return self.settings.language == "zh"

    def _budget_text(self, used: int, turn: _Turn) -> str:
        if self._zh(turn):
            return f"已用完本轮的 {used} 步预算，我先停在这里。"
        return f"I used this turn's budget of {used} steps and stopped here."

    def _failure_text(self, result: TaskResult, turn: _Turn) -> str:
        if self._zh(turn):
            return f"{result.task_id} {result.status.value}：{result.message}。本轮不再继续执行其他任务。"
        outcome = f"{result.task_id} {result.status.value}: {result.message}."
        return f"{outcome} I did not run anything else this turn."

    # -- context and memory ---------------------------------------------------------------------

    def _context(self, state: ThreadState) -> list[Message]:
        jobs = self.executor.jobs_for(self.caller, origin=self._scope(state.thread_id), active=True, limit=20)
        open_jobs = "[open jobs]\n" + (
            "\n".join(
                f"- execution_id={r.execution_id} task={r.task_id} status={r.status.value}"
                + (f" progress={r.data['progress'].get('message')}" if r.data.get("progress") else "")
                for r in jobs
            )
            or "(none)"
        )
        system = self._prompt.replace("{{memory}}", state.summary or "(nothing yet)").replace(
            "{{open_jobs}}", open_jobs
        )
        return [
            {"role": "system", "content": system},
            *self.threads.messages(state.thread_id)[state.folded :],
        ]

    def _compress(self, state: ThreadState) -> None:
        messages = self.threads.messages(state.thread_id)
        live = messages[state.folded :]
        s = self.settings
        if not memory.needs_folding(
            live, after_messages=s.compress_after_messages, after_chars=s.compress_after_chars
        ):
            return
        split = memory.split_point(live, s.keep_last_messages)
        if split <= 0:
            return
        state.summary = memory.fold(state.summary, live[:split], s.summary_max_chars)
        state.folded += split
        self.threads.save(state)

    def prompt_chars(self, thread_id: str) -> int:
        state = self.threads.load(thread_id)
        return 0 if state is None else memory.chars(self._context(state))
