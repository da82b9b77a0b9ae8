"""The controlled conversation loop: the model decides, the executor acts, every step is on record.

``send(thread_id, message)`` claims the thread's next turn (one writer per thread, across processes),
builds the context (system prompt, memory summary, open jobs, recent messages), asks the model, checks
each tool call against the caller's surface, executes it through the ``Executor`` (or its control
door, for the control tools), records the observation, and repeats until the model answers or the step
budget is spent. Contract 10 is enforced here, in code:

- calls run one at a time, in order; the rest of a response is cut at the first call that does not
  complete (``failed``, ``rejected``, ``stopped``, ``not_found``);
- after such a call only ``get_task_status`` and ``stop_task`` may run in that turn; a model that still
  asks for business tools has the turn ended for it, with the failure reported;
- a call that needs the person's consent (``destructive``, or ``caution`` for a model) ends the turn as
  ``needs_confirmation`` and runs nothing. The question is bound to exactly that call (task + digest
  of its canonical arguments). Only the person's answer — a reply such as "yes"/"是", or an interface's
  explicit approval through ``confirm(thread_id)`` — mints a ``Confirmation`` for it, usable once; any
  other call that needs consent, in that turn or later, asks again.
- the agent sees and controls only the jobs its own thread started (``[agent].job_scope``), through
  the executor's one control door.

Each model call and each tool execution is one step with the id ``<thread>:<turn>:<index>``; a tool
step runs under the deterministic execution id of its step, recorded before it starts, so a step that
is run again never starts a second worker. A turn whose process died is recovered by the next turn on
its thread (``agent/recovery.py``) — or, when the turn runs as a durable workflow in an executor
(``steps``, see ``agent/steps.py``), resumed from its last recorded step by the next executor.

This module owns the turn and its loop: claiming the turn, the answer to a waiting question, and which
calls run. Running and recording one call is ``agent/calls.py``'s, the model's steps and the budget
review ``agent/decisions.py``'s, what the model reads ``agent/context.py``'s and tether's own words
``agent/texts.py``'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import tether.telemetry as telemetry
from tether.agent import decisions, memory, outputs, texts
from tether.agent import images as images_of
from tether.agent.calls import OK, ToolCalls, call_key
from tether.agent.context import model_messages, system_prompt, turn_context
from tether.agent.delegation import Delegations
from tether.agent.recall import keep_vector, semantic_for, worth_keeping
from tether.agent.recall import recall as recall_of
from tether.agent.recovery import recover_interrupted
from tether.agent.skillruns import SKILL_RUN, SkillRuns, skill_run_tool, skills_with_flows
from tether.agent.steps import DIRECT, OPEN, Steps, TurnHalted, perform
from tether.agent.surface import GET_STATUS, STOP_TASK, ToolSurface
from tether.agent.team import DELEGATE_NAME, Lineage, Team, delegate_tool
from tether.agent.turn import Turn, TurnResult, TurnStatus, worth_remembering
from tether.config import AgentSettings
from tether.errors import ConfigError, ModelError
from tether.events import ConfirmationAnswered, EventBus, ModelDecided
from tether.execution import process
from tether.execution.executor import Executor
from tether.models.base import UNABLE, Message, Model, ModelResponse, RecalledMemory, ToolCall, TurnContext
from tether.models.replies import is_no, is_yes
from tether.store.agents import DEFAULT_AGENT
from tether.store.memories import MemoryStore
from tether.store.threads import MemoryThreadStore, ThreadState, ThreadStore
from tether.tasks.confirm import Confirmation
from tether.tasks.grants import DELEGATE, REMEMBER, Grants
from tether.tasks.result import TaskResult, TaskStatus
from tether.tasks.spec import AGENT

# Thread ids name records and events: letters, digits and a few separators.
THREAD_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
TURN_POLL_S = 0.02

__all__ = ["ConversationSession", "TurnResult", "TurnStatus"]


def _alive(pid: int, create_time: float) -> bool:
    return process.is_alive(process.ProcessRef(pid=pid, create_time=create_time))


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
        steps: Steps = DIRECT,
        persona: str = "",
        grants: Grants | None = None,
        agent: str = DEFAULT_AGENT,
        team: Team | None = None,
        lineage: Lineage | None = None,
        flows: dict[str, str] | None = None,
        remember: bool = True,
    ) -> None:
        """``grants`` narrow the tasks this session's agent may reach (``tasks/grants.py``); ``agent``
        names it on its threads; with ``team`` it may hand work to other agents (``agent/team.py``) when
        its grants include ``agents.delegate`` and there is someone to hand work to; ``lineage`` is where
        it stands in a chain of delegations; ``flows`` the skills that run (read from the home when
        None: a durable turn passes the ones it recorded, so a replay sees the tools it saw)."""
        self.executor = executor
        telemetry.configure(executor.home)  # as [telemetry] says (nothing, by default)
        self.detach = detach  # background jobs outlive this session's process
        self.model = model
        self.model_label = model.name  # what people are told answered (e.g. "deepseek/deepseek-chat")
        self.manager = manager or model
        self.settings = settings or executor.runtime.agent_settings
        if threads is None:
            threads = MemoryThreadStore() if self.settings.memory == "ephemeral" else executor.runtime.threads
        self.threads = threads
        self.caller = caller
        self.grants = grants
        self.agent_name = agent
        self.remember = remember  # its memory is on: earlier threads are recalled, finished turns kept
        self.lineage = lineage or Lineage()
        extra = ()
        # Only an agent granted agents.delegate hands work on (the built-in assistant, with no grants
        # of its own, stays as it was: a person gives it the team bundle by editing it).
        if team is not None and grants is not None and grants.allows(DELEGATE):
            extra = (delegate_tool(team.roster(), agent),)
        given, flows = flows, {}
        if (
            team is not None
            and team.start_flow is not None
            and grants is not None
            and grants.allows(SKILL_RUN)
        ):
            # only when a skill that runs is installed
            flows = skills_with_flows(executor.home) if given is None else given
            if flows:
                extra = (*extra, skill_run_tool(flows))
        self.surface = ToolSurface(executor.registry, caller, executor.home, grants, extra)
        self.events = events or EventBus()
        self.steps = steps
        self._prompt = system_prompt(self.surface, executor.home, self.settings.language, persona)
        self.calls = ToolCalls(
            executor, self.surface, threads, steps, self.settings, caller=caller, detach=detach, grants=grants
        )
        if flows and team is not None:
            chain = self.lineage.chain or (agent,)
            self.calls.skill_runs = SkillRuns(
                team.start_flow, caller=caller, grants=grants, steps=steps, chain=chain
            )
        if team is not None and any(t.name == DELEGATE_NAME for t in extra):
            self.calls.delegations = Delegations(
                team, me=agent, grants=grants, lineage=self.lineage, steps=steps,
                language=self.settings.language, caller=caller,
            )  # fmt: skip
        self._locks: dict[str, asyncio.Lock] = {}
        me = process.current()
        self._me = (me.pid, me.create_time)

    def send_sync(self, thread_id: str, message: str) -> TurnResult:
        return asyncio.run(self.send(thread_id, message))

    def pending(self, thread_id: str) -> dict[str, Any] | None:
        """The call this thread waits for the person to confirm (id, tool, args, digest), if any."""
        state = self.threads.load(thread_id)
        return None if state is None else state.pending

    async def confirm(
        self,
        thread_id: str,
        *,
        approve: bool = True,
        source: str = "person:cli",
        pending_id: str | None = None,
    ) -> TurnResult:
        """The person's explicit answer to the call the thread waits on (a flag, a button): exactly that
        call runs (or is declined), then the turn goes on. With ``pending_id``, only if that question is
        still the one waiting (an answer handed to an executor may arrive after another question).
        ``ConfigError`` if nothing (or another question) waits."""
        if not self.steps.durable and self.pending(thread_id) is None:
            # (a durable turn asks in its opening step instead: a replay must not read it again)
            raise ConfigError(f"thread {thread_id!r} is not waiting for a confirmation")
        state = self.threads.load(thread_id)  # the request answered sets the answer's language
        asked = self.threads.turn(thread_id, state.turns) if state is not None else None
        word = texts.answer_word(approve, zh=texts.zh(asked.message if asked else "", self.settings.language))
        return await self._turn(thread_id, word, approve, source, require_pending=True, pending_id=pending_id)

    # -- one turn -------------------------------------------------------------------------------

    async def send(
        self,
        thread_id: str,
        message: str,
        *,
        formats: Sequence[str] = (),
        images: Sequence[dict[str, Any]] = (),
    ) -> TurnResult:
        """One turn for the person's ``message``. A yes/no reply answers the call the thread waits on.
        ``formats`` are the files the person ticked (``agent/outputs.py``); ``images`` the references
        of images sent with it (``agent/images.py``: kept in the home already)."""
        shown = images_of.refs(list(images))
        answer = None if shown else True if is_yes(message) else False if is_no(message) else None
        return await self._turn(
            thread_id, message, answer, "person:chat", formats=outputs.normalize(formats), images=shown
        )

    async def _turn(
        self,
        thread_id: str,
        message: str,
        answer: bool | None,
        source: str,
        *,
        require_pending: bool = False,
        pending_id: str | None = None,
        formats: tuple[str, ...] = (),
        images: list[dict[str, Any]] | None = None,
    ) -> TurnResult:
        if not isinstance(thread_id, str) or not THREAD_ID_RE.match(thread_id):
            raise ConfigError(
                "a thread id is 1-128 letters, digits, '_', '.', ':' or '-' (starting with a letter or digit)"
            )
        lock = self._locks.setdefault(thread_id, asyncio.Lock())
        async with lock:
            try:
                opened = await perform(
                    self.steps, OPEN, lambda: self._open(thread_id, message, require_pending, pending_id)
                )
            except TurnHalted as halt:
                if halt.ended and halt.number is not None:  # a replay of a turn that had ended
                    return await asyncio.to_thread(self._recorded, thread_id, halt.number)
                raise
            if opened.get("error"):
                raise ConfigError(str(opened["error"]))
            number = int(opened["number"])
            pending = opened.get("pending")
            # The turn's span: its identity was decided in the opening step, so a replay continues it.
            with telemetry.span(
                f"invoke_agent {self.agent_name}", self._traced(thread_id, number), ids=opened.get("trace")
            ) as traced:
                try:
                    state = await asyncio.to_thread(self.threads.load, thread_id)
                    assert state is not None
                    turn = Turn(self.threads, self.events, state, number, message)
                    turn.images = list(images or ()) if pending is None else []
                    turn.limits = dict(opened.get("limits") or self._limits())
                    await turn.started()
                    turn.stray_answer = bool(opened.get("stray"))
                    # An answer carries on the request that asked: with the files that request ticked.
                    turn.formats = outputs.normalize(pending.get("formats") or ()) if pending else formats
                    if pending is None and not turn.stray_answer:
                        turn.recalled = await asyncio.to_thread(self._recall, state, message)
                    try:
                        result = await self._run(
                            turn, pending, answer if pending is not None else None, source
                        )
                    except TurnHalted as halt:
                        if halt.taken_over:
                            raise  # another process recovered this turn: its record is theirs now
                        traced.error(halt.reason)
                        return await turn.done(TurnStatus.FAILED, halt.reason)
                    noted = any(s.kind == "tool" and s.tool == REMEMBER for s in result.steps)
                    if pending is None and worth_remembering(result) and not noted:
                        # (a turn that noted a fact is remembered as that fact: forgetting it forgets it)
                        await asyncio.to_thread(self._keep, state, number, message, result.final)
                    traced.set_attribute("tether.turn.status", result.status.value)
                    if result.status is TurnStatus.FAILED:
                        traced.error(result.final)
                    return result
                except TurnHalted:
                    raise
                except asyncio.CancelledError:
                    if not self.steps.durable:  # a durable turn is resumed by the next executor
                        await asyncio.shield(asyncio.to_thread(self._end_failed, thread_id, number))
                    raise
                except BaseException:
                    # Whatever ends this turn abnormally, the record says so (the page never spins).
                    await asyncio.shield(asyncio.to_thread(self._end_failed, thread_id, number))
                    raise

    def _traced(self, thread_id: str, number: int) -> dict[str, Any]:
        return {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": self.agent_name,
            "gen_ai.conversation.id": thread_id, "gen_ai.request.model": self.model_label,
            "tether.turn": number, "tether.caller": self.caller,
        }  # fmt: skip

    def _memories(self, state: ThreadState) -> MemoryStore | None:
        """Where this session's agent remembers, when it does: not with its memory off, not in a private
        thread, not when the threads themselves are not kept."""
        if not self.remember or state.private or isinstance(self.threads, MemoryThreadStore):
            return None
        return self.executor.runtime.memories

    def _recall(self, state: ThreadState, message: str) -> tuple[RecalledMemory, ...]:
        memories = self._memories(state)
        if memories is None:
            return ()
        s = self.settings
        return recall_of(
            memories, self.agent_name, message, state.thread_id, top_k=s.recall_top_k,
            max_chars=s.recall_max_chars, semantic=semantic_for(self.executor.runtime, s.recall_semantic),
        )  # fmt: skip

    def _keep(self, state: ThreadState, number: int, message: str, final: str) -> None:
        memories = self._memories(self.threads.load(state.thread_id) or state)  # private since it began?
        if memories is None or not worth_keeping(message):
            return
        record = self.threads.turn(state.thread_id, number)
        previous = self.threads.turn(state.thread_id, number - 1) if number > 1 else None
        before = previous.message if previous is not None else ""
        said = (self.agent_name, state.thread_id, number)
        if record is not None and memories.keep_turn(*said, record.started_at, message, final, before):
            keep_vector(memories, semantic_for(self.executor.runtime, self.settings.recall_semantic), *said)

    def _limits(self) -> dict[str, int]:
        s = self.settings
        return {"max_steps": s.max_steps, "ceiling": s.max_steps_ceiling, "extend_by": s.extend_by}

    def _recorded(self, thread_id: str, number: int) -> TurnResult:
        """A turn's result as its record has it."""
        record = self.threads.turn(thread_id, number)
        assert record is not None
        try:
            status = TurnStatus(record.status)
        except ValueError:
            status = TurnStatus.FAILED
        steps = tuple(self.threads.steps(thread_id, number))
        return TurnResult(thread_id=thread_id, turn=number, status=status, final=record.final, steps=steps)

    async def _open(
        self, thread_id: str, message: str, require_pending: bool, pending_id: str | None = None
    ) -> dict[str, Any]:
        """Claim the thread's next turn, settle what an interrupted turn left, and take the call the
        person answers (read and cleared by the one writer of this thread: a second answer to the
        same question finds nothing waiting). One step: a replayed turn gets the same answer."""
        # The thread belongs to this session's agent (the default assistant's threads name none).
        stored = None if self.agent_name == DEFAULT_AGENT else self.agent_name
        await asyncio.to_thread(self.threads.assign, thread_id, stored, self.lineage.parent_step)
        number = await self._claim_turn(thread_id, message)
        try:
            state = await asyncio.to_thread(self.threads.load, thread_id)
            assert state is not None
            if await recover_interrupted(self.calls, state):
                state = await asyncio.to_thread(self.threads.load, thread_id)
                assert state is not None
            if require_pending and (
                state.pending is None or (pending_id is not None and state.pending.get("id") != pending_id)
            ):
                why = (
                    f"thread {thread_id!r} is not waiting for a confirmation"
                    if state.pending is None
                    else f"thread {thread_id!r} waits on another question now: answer that one"
                )
                await asyncio.to_thread(
                    self.threads.end_turn, thread_id, number, TurnStatus.FAILED.value, why
                )
                return {"error": why, "number": number}
            pending, state.pending = state.pending, None
            if pending is not None:  # the question is taken (begin_turn dated the thread already)
                await asyncio.to_thread(self.threads.save, state)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(self._end_failed, thread_id, number))
            raise
        return {
            "number": number,
            "pending": pending,
            "stray": pending is None and (is_yes(message) or is_no(message)),
            "limits": self._limits(),  # the step budget of this turn, as it was when it opened
            "trace": telemetry.turn_ids(),  # the turn's span (None: nothing is traced)
        }

    def _end_failed(self, thread_id: str, number: int, why: str = "the turn ended abnormally") -> None:
        record = self.threads.turn(thread_id, number)
        if record is not None and record.status == "running":
            self.threads.end_turn(thread_id, number, TurnStatus.FAILED.value, why)

    async def _claim_turn(self, thread_id: str, message: str) -> int:
        """The thread's next turn, once no other live process is in one (waiting for it if it is)."""
        while True:
            number = await asyncio.to_thread(self.threads.begin_turn, thread_id, message, self._me, _alive)
            if number is not None:
                return number
            await asyncio.sleep(TURN_POLL_S)  # another process's turn: nothing to await but its record

    async def _run(
        self, turn: Turn, pending: dict[str, Any] | None, answer: bool | None, source: str
    ) -> TurnResult:
        state = turn.state
        blocked: TaskResult | None = None
        if turn.images and not getattr(self.model, "supports_images", False):
            # The person sent images this model cannot see: say so, run nothing.
            return await turn.done(
                TurnStatus.FAILED,
                images_of.cannot_see(self.model_label, len(turn.images), zh=self._zh(turn)),
            )
        if pending is not None and answer is True:
            confirmed, call, index = await self._run_confirmed(turn, pending, source)
            if confirmed.status is TaskStatus.REJECTED and confirmed.data.get("needs_confirmation"):
                # The sub-agent went on and asks again: its next question is asked here, like the first.
                question = await self.calls.ask_confirmation(turn, call, confirmed, index)
                return await turn.done(TurnStatus.NEEDS_CONFIRMATION, question)
            if confirmed.status not in OK:
                blocked = confirmed  # contract 10 holds across the confirmation too
        elif pending is not None and answer is False:
            if pending.get("delegated") and self.calls.delegations is not None:
                await self.calls.delegations.decline(pending["delegated"], source)
            await turn.record(
                "confirmation",
                tool=pending["tool"],
                args=pending["args"],
                text="declined by the person",
                event=ConfirmationAnswered(
                    topic=turn.topic, thread_id=turn.thread_id, turn=turn.turn, index=len(turn.steps),
                    tool=pending["tool"], args=pending["args"], approved=False,
                ),
            )  # fmt: skip
            if self.lineage.parent_step is not None:
                # A sub-agent the person said no to stops there: its delegator, in the thread the
                # person looks at, decides what happens next (nothing goes on unseen).
                return await turn.done(TurnStatus.COMPLETED, texts.declined_text(zh=self._zh(turn)))
        try:
            return await self._loop(turn, answer=answer if pending is not None else None, blocked=blocked)
        except ModelError as exc:
            return await turn.done(TurnStatus.FAILED, f"The model service failed: {exc.message}")
        finally:
            await asyncio.to_thread(self._compress, state)

    def origin(self, thread_id: str) -> str:
        """The origin of this thread's jobs (``thread:<id>``)."""
        return self.calls.origin(thread_id)

    async def _run_confirmed(
        self, turn: Turn, pending: dict[str, Any], source: str
    ) -> tuple[TaskResult, ToolCall, int]:
        """Run the one call the person confirmed; (its result, the call, its step's index). Only a
        delegation's result may ask again (its sub-agent's next question)."""
        # (only a delegation's own question carries where its sub-agent waits)
        delegated = pending.get("delegated") if pending.get("name") == DELEGATE_NAME else None
        if delegated is not None and self.calls.delegations is None:
            delegated = None
        # A sub-agent's question: the call that runs here is the delegation, resumed with the answer.
        arguments = dict(delegated.get("call") or {}) if delegated else pending["args"]
        call = ToolCall(id=f"confirmed_{turn.turn}", name=pending["name"], arguments=arguments)
        await turn.record(
            "confirmation",
            tool=pending["tool"],
            args=pending["args"],
            text="confirmed by the person",
            message={"role": "assistant", "content": "", "tool_calls": [call.to_message()]},
            event=ConfirmationAnswered(
                topic=turn.topic, thread_id=turn.thread_id, turn=turn.turn, index=len(turn.steps),
                tool=pending["tool"], args=pending["args"], approved=True,
            ),
        )  # fmt: skip
        # The nonce is the question's own id: however many answers arrive, it authorizes one execution.
        consent = Confirmation(
            task_id=pending["tool"], digest=pending["digest"], source=source, nonce=str(pending["id"])
        )
        index = len(turn.steps)
        result = await self.calls.execute(
            turn, call, consent=consent, may_ask=delegated is not None, delegated=delegated
        )
        return result, call, index

    async def _loop(
        self, turn: Turn, *, answer: bool | None, blocked: TaskResult | None = None
    ) -> TurnResult:
        limit = int(turn.limits["max_steps"])
        used = 0
        completed = failed = 0
        refused: set[str] = set()  # calls that did not complete this turn, by name and arguments
        while True:
            if used >= limit:
                extra = await decisions.review(
                    self.steps, self.manager, turn, language=self.settings.language, used=used,
                    completed=completed, failed=failed, limit=limit,
                )  # fmt: skip
                if extra <= 0:
                    return await turn.done(
                        TurnStatus.BUDGET_EXHAUSTED, texts.budget_text(used, zh=self._zh(turn))
                    )
                limit += extra
            response = await self._decide(turn, answer)
            used += 1
            if not response.tool_calls:
                # After a business call that did not complete, the model's words are not the work done;
                # nor when they say it cannot be done here.
                unable = blocked is not None or response.finish_reason == UNABLE
                status = TurnStatus.FAILED if unable else TurnStatus.COMPLETED
                return await turn.done(status, response.text)
            cut = False
            violated = False
            for position, call in enumerate(response.tool_calls):
                if cut:
                    await self.calls.skip(
                        turn, call, "not run: an earlier call in this response did not complete"
                    )
                    continue
                control = self.surface.is_control(call.name)
                if blocked is not None and not control:
                    violated = True
                    await self.calls.skip(
                        turn,
                        call,
                        f"not run: after a {blocked.status.value} result only {GET_STATUS} and "
                        f"{STOP_TASK} may follow in this turn",
                    )
                    continue
                index = len(turn.steps)
                declined = None
                if not control and self.surface.task_id(call.name) == outputs.GENERATE_TASK:
                    call, declined = await decisions.settle_formats(
                        self.steps, self.model, turn, call, self.settings.language
                    )
                result = await self.calls.execute(turn, call, answer=declined)
                if result.status is TaskStatus.REJECTED and result.data.get("needs_confirmation"):
                    # The executor checked everything else first: only the person's word is missing.
                    question = await self.calls.ask_confirmation(turn, call, result, index)
                    for later in response.tool_calls[position + 1 :]:
                        await self.calls.skip(
                            turn, later, "not run: the turn waits for the person's confirmation"
                        )
                    return await turn.done(TurnStatus.NEEDS_CONFIRMATION, question)
                if result.status in OK:
                    completed += 1
                    continue
                failed += 1  # a refused control call is a failure too, for the budget review
                key = call_key(call)
                if key in refused:  # the model is stuck: the same answer would come again
                    return await turn.done(
                        TurnStatus.FAILED, texts.repeated_text(call, result, zh=self._zh(turn))
                    )
                refused.add(key)
                if not control:
                    blocked = result
                    cut = True
            if violated and blocked is not None:
                return await turn.done(TurnStatus.FAILED, texts.failure_text(blocked, zh=self._zh(turn)))

    async def _decide(self, turn: Turn, answer: bool | None) -> ModelResponse:
        """One model step: the model reads the turn as it stands and answers; its answer is on record."""
        tools = self.surface.tools
        context = await asyncio.to_thread(
            turn_context, self.calls, turn.state, answer, turn.stray_answer, turn.formats
        )
        context = dataclasses.replace(context, memories=turn.recalled)
        messages = await asyncio.to_thread(self._messages, turn.state, context)
        context = dataclasses.replace(context, progress=decisions.thinking(self.threads, turn))
        response, call = await decisions.complete(self.steps, self.model, messages, tools, context)
        decided = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in response.tool_calls]
        await turn.record(
            "model",
            text=response.text,
            args={"tool_calls": decided} if decided else None,
            result={"model_calls": [call]},
            message=response.to_message(),
            event=ModelDecided(
                topic=turn.topic, thread_id=turn.thread_id, turn=turn.turn, index=len(turn.steps),
                text=response.text, tool_calls=decided, call=call,
            ),
        )  # fmt: skip
        return response

    def _zh(self, turn: Turn) -> bool:
        return texts.zh(turn.message, self.settings.language)

    # -- context and memory ---------------------------------------------------------------------

    def _messages(self, state: ThreadState, context: TurnContext) -> list[Message]:
        language = self.settings.language
        messages = model_messages(self._prompt, self.threads, state, context, language, self.surface.spec)
        sees = bool(getattr(self.model, "supports_images", False))
        return images_of.for_model(messages, self.executor.home, sees)

    def _compress(self, state: ThreadState) -> None:
        current = self.threads.load(state.thread_id) or state
        live = self.threads.messages(current.thread_id, from_seq=current.folded)
        s = self.settings
        if not memory.needs_folding(
            live, after_messages=s.compress_after_messages, after_chars=s.compress_after_chars
        ):
            return
        split = memory.split_point(live, s.keep_last_messages)
        if split <= 0:
            return
        current.summary = memory.fold(current.summary, live[:split], s.summary_max_chars)
        current.folded += split
        self.threads.save(current)

    def prompt_chars(self, thread_id: str) -> int:
        state = self.threads.load(thread_id)
        if state is None:
            return 0
        return memory.chars(self._messages(state, turn_context(self.calls, state, None)))
