"""Notifications: what waits for the person, and what agents say first, reach them where they are.

Every executor (``tether serve``, ``tether worker``) runs ``loop``: it reads the event log after the
``notify`` cursor and turns

- a call waiting for approval (``ConfirmationRequested``) into an ``approval`` notification that says
  exactly what waits — the task and its arguments — and how to answer it (the command, or the page's
  link): a notification never approves anything itself;
- a run waiting at a review point (a task ``waiting_for_human``) into ``review``;
- a run that ended, and a background job that ended, into ``ended`` — and into an ``ended`` signal for
  initiative, which decides whether the agent says a word about it;
- a proactive message (``ProactivePosted``) into ``proactive`` (only to the agent's own channel when it
  has one).

Each goes to every channel that chose that kind, through the outbox (``store/notifications.py``): one
row per channel and event, however many executors read the log. Then ``send_due`` sends what is due
through Apprise, in a thread (a slow channel never holds up anything else), outside quiet hours; a
channel that fails is tried again with growing waits (``BACKOFF_S``) and, after ``ATTEMPTS``, marked
failed with its error (``tether notify log``). A channel's address — tokens and passwords — is read
from the keyring (``credentials``, as ``notify.<name>``) at the moment of sending, never stored here.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from datetime import datetime, time
from typing import Any

from tether.config import InitiativeSettings
from tether.credentials import get_key, scrub
from tether.events import (
    ConfirmationRequested,
    Event,
    JobStateChanged,
    ProactivePosted,
    RunChanged,
    RunTaskChanged,
)
from tether.runtime import Runtime
from tether.store.notifications import EVENTS, Notification

log = logging.getLogger("tether.notify")

CURSOR = "notify"
ATTEMPTS = 6
BACKOFF_S = (2.0, 10.0, 30.0, 120.0, 600.0)
LEASE_S = 120.0  # a claimed notification not settled in this long is claimed again (its sender died)
POLL_S = 1.0
TELEGRAM_API = "https://api.telegram.org"
BATCH = 200
ENDED_RUN = ("completed", "failed", "cancelled")
ENDED_JOB = ("completed", "failed", "stopped", "not_found")


def secret_name(channel: str) -> str:
    return f"notify.{channel}"


# -- from events to the outbox ------------------------------------------------------------------------


def _args(args: dict[str, Any]) -> str:
    return json.dumps(args, ensure_ascii=False, sort_keys=True)[:1500]


def describe(runtime: Runtime, event: Event, page_url: str) -> tuple[str, str, str] | None:
    """(kind, title, body) of the notification ``event`` makes, or None when it makes none."""
    page = page_url.rstrip("/")
    if isinstance(event, ConfirmationRequested):
        link = f"\nOr on the page: {page}/#thread={event.thread_id}" if page else ""
        return (
            "approval",
            f"Waiting for your approval: {event.tool}",
            (
                f"{event.question}\n\nTask: {event.tool}\nArguments: {_args(event.args)}\n\n"
                f"Nothing runs until you answer. To answer: tether chat --thread {event.thread_id}{link}"
            ),
        )
    if isinstance(event, RunTaskChanged) and event.status == "waiting_for_human":
        link = f"\nOr on the page: {page}/#run={event.run_id}" if page else ""
        return (
            "review",
            f"Run {event.run_id} waits for you at {event.task_id}",
            (
                f"{event.message or 'A review point: the run goes on when you answer.'}\n\n"
                f"To see it: tether flow show {event.run_id}\nTo answer: tether flow approve {event.run_id} "
                f"(or reject){link}"
            ),
        )
    if isinstance(event, RunChanged) and event.status in ENDED_RUN:
        return "ended", f"Run {event.run_id} {event.status}", event.message or f"run {event.run_id} ended"
    if isinstance(event, JobStateChanged) and event.status in ENDED_JOB:
        job = _background_job(runtime, event)
        if job is None:
            return None
        return (
            "ended",
            f"{event.task_id} {event.status}",
            (f"{event.message or 'ended'} (job {event.execution_id}, {job.duration_seconds:.0f} s)"),
        )
    if isinstance(event, ProactivePosted):
        return "proactive", f"{event.agent}: {event.category}", event.text
    return None


def ended_signal(runtime: Runtime, event: Event, heads: dict[str, Any] | None = None) -> Any:
    """The ``ended`` signal for initiative that ``event`` is, if it is one (``heads``: the heads of the
    runs that ended, read together beforehand by ``ended_runs``; else its run's head is read here)."""
    from tether.agent.decider import Signal

    if isinstance(event, RunChanged) and event.status in ENDED_RUN:
        if heads is None:
            heads = ended_runs(runtime, [event])
        run = heads.get(event.run_id)
        goal, took = (run.goal, _took(run)) if run is not None else (event.run_id, 0.0)
        return Signal(kind="ended", source=f"run {event.run_id}", key=f"event:{event.id}", data={
            "status": event.status, "task": goal[:200],
            "message": event.message[:300], "duration_s": took, "run_id": event.run_id,
        })  # fmt: skip
    if isinstance(event, JobStateChanged) and event.status in ENDED_JOB:
        job = _background_job(runtime, event)
        if job is None:
            return None
        return Signal(kind="ended", source=f"job {event.execution_id}", key=f"event:{event.id}", data={
            "status": event.status, "task": event.task_id, "message": event.message[:300],
            "duration_s": job.duration_seconds, "execution_id": event.execution_id,
        })  # fmt: skip
    return None


def ended_runs(runtime: Runtime, events: list[Event]) -> dict[str, Any]:
    """The heads (no plan, tasks or attempts) of the runs whose ends are among ``events``, in one read."""
    ended = [e.run_id for e in events if isinstance(e, RunChanged) and e.status in ENDED_RUN]
    return runtime.runs.heads(ended) if ended else {}


def _took(run: Any) -> float:
    if not run.ended_at:
        return 0.0
    return (datetime.fromisoformat(run.ended_at) - datetime.fromisoformat(run.created_at)).total_seconds()


def _background_job(runtime: Runtime, event: JobStateChanged) -> Any:
    """The job that ended, if it ran in the background (the only jobs whose end is said); read only
    then: the end of every flow task and foreground call is not worth a read of its job."""
    if event.background is False:
        return None
    job = runtime.jobs.get(event.execution_id)
    return job if job is not None and job.background else None


def route(
    runtime: Runtime, event: Event, settings: InitiativeSettings, channels: list[Any] | None = None
) -> int:
    """Queue ``event``'s notification for every channel that takes its kind (``channels``: as a pass
    read them once; else read here); how many were queued."""
    described = describe(runtime, event, settings.page_url)
    if described is None:
        return 0
    kind, title, body = described
    only: str | None = None
    if isinstance(event, ProactivePosted):
        agent = runtime.agents.get(event.agent)
        only = agent.channel if agent is not None else None
    queued = 0
    for channel in runtime.notifications.channels() if channels is None else channels:
        if kind in channel.events and (only is None or channel.name == only):
            queued += runtime.notifications.queue(channel.name, kind, f"event:{event.id}", title, body)
    return queued


@dataclass(frozen=True)
class Pass:
    """A pass's events, routed, each with the signal it is for initiative (None: none), and what
    initiative reads once for all of them."""

    weighed: list[tuple[Event, Any]]
    weighing: Any


def routed(runtime: Runtime, events: list[Event], settings: InitiativeSettings) -> Pass:
    """Route a pass's events and find their signals, in one trip to a thread: the channels, the heads
    of the runs that ended and the decisions the signals have already are each read once."""
    from tether.supervisor.initiative import Weighing

    channels = runtime.notifications.channels()
    heads = ended_runs(runtime, events) if settings.enabled else {}
    weighed = []
    for event in events:
        route(runtime, event, settings, channels)
        weighed.append((event, ended_signal(runtime, event, heads) if settings.enabled else None))
    keys = [signal.key for _, signal in weighed if signal is not None and signal.key is not None]
    return Pass(weighed, Weighing.of(runtime, keys))


KINDS = ("confirmation_requested", "run_task_changed", "run_changed", "job_state_changed", "proactive_posted")


def read_events(runtime: Runtime) -> tuple[list[Event], int, int]:
    """This home's events that may notify, after the cursor (which starts at the log's end: history is
    not notified), where the cursor was, and how far that read covers the log."""
    last = runtime.events.last_id()  # ids grow in commit order: everything up to it is visible now
    after = runtime.notifications.cursor(CURSOR, last)
    if after >= last:
        return [], after, after  # nothing new: no read of the log
    found, scanned = runtime.events.page(after=after, limit=BATCH, kinds=KINDS, mine=True)
    return found, after, last if scanned is None else scanned


# -- sending ------------------------------------------------------------------------------------------


def quiet_until(quiet_hours: str, now: datetime) -> float | None:
    """Seconds until the quiet hours around ``now`` (local time) end; None outside them."""
    if not quiet_hours:
        return None
    start_s, end_s = quiet_hours.split("-")
    start, end = time.fromisoformat(start_s), time.fromisoformat(end_s)
    at = now.time()
    inside = (start <= at < end) if start <= end else (at >= start or at < end)
    if not inside or start == end:
        return None
    ends = now.replace(hour=end.hour, minute=end.minute, second=0, microsecond=0)
    if ends <= now:
        from datetime import timedelta

        ends += timedelta(days=1)
    return (ends - now).total_seconds()


def deliver(url: str, title: str, body: str, settings: InitiativeSettings) -> str | None:
    """Send one notification through Apprise; None when sent, else what went wrong."""
    import apprise
    from apprise.plugins.telegram import NotifyTelegram

    # Apprise's Telegram plugin reads its API's address from the class: set it (or put the public one
    # back) on every send, so one home's setting never outlives a change of it in this process.
    NotifyTelegram.notify_url = (settings.telegram_api or TELEGRAM_API).rstrip("/") + "/bot"
    sender = apprise.Apprise()
    if not sender.add(url):
        return "Apprise does not understand this channel's address: `tether notify add` it again"
    with apprise.LogCapture(level=logging.WARNING) as captured:
        ok = sender.notify(title=title, body=body)
    if ok:
        return None
    said = " ".join(str(getattr(captured, "getvalue", lambda: "")()).split())
    return scrub(said.replace(url, "***"))[:400] or "the channel refused the notification"


def send_due(runtime: Runtime, settings: InitiativeSettings, *, now: datetime | None = None) -> int:
    """Send what is due (outside quiet hours); how many were sent."""
    sent = 0
    for item in runtime.notifications.due():
        hold = quiet_until(settings.quiet_hours, now or datetime.now().astimezone())
        if hold is not None:
            runtime.notifications.retry(item.notification_id, "quiet hours", after_s=hold)
            continue
        if not runtime.notifications.claim(item, LEASE_S):
            continue  # another executor took it
        sent += _send_one(runtime, item, settings)
    return sent


def _send_one(runtime: Runtime, item: Notification, settings: InitiativeSettings) -> int:
    attempt = item.attempts + 1
    url = get_key(secret_name(item.channel))
    if not url:
        error: str | None = f"no address for channel {item.channel!r} in the keyring: `tether notify add` it"
    else:
        try:
            error = deliver(url, item.title, item.body, settings)
        except Exception as exc:  # a plugin's bug must not end the loop
            error = scrub(f"{type(exc).__name__}: {exc}".replace(url, "***"))[:400]
    if error is None:
        runtime.notifications.sent(item.notification_id)
        return 1
    last = attempt >= ATTEMPTS
    after = None if last else BACKOFF_S[min(attempt - 1, len(BACKOFF_S) - 1)]
    runtime.notifications.retry(item.notification_id, error, after_s=after)
    how = "failed for good" if last else f"failed (attempt {attempt}, again in {after:.0f} s)"
    log.warning("notification %d to %s %s: %s", item.notification_id, item.channel, how, error)
    return 0


# -- the loop in every executor -------------------------------------------------------------------------


async def step(runtime: Runtime, settings: InitiativeSettings, model_for: Any = None) -> None:
    """One pass: route new events (and weigh the ended ones), then send what is due."""
    from tether.supervisor.initiative import consider

    events, after, covered = await asyncio.to_thread(read_events, runtime)
    if events:
        found = await asyncio.to_thread(routed, runtime, events, settings)
        for event, signal in found.weighed:
            if signal is None:
                continue
            try:
                await consider(
                    runtime, signal, model_for=model_for, settings=settings, weighing=found.weighing
                )
            except Exception:  # the events before it are done; it and the rest, next pass
                log.warning("notifications: weighing event %s failed", event.id, exc_info=True)
                covered = event.id - 1
                break
    # The cursor moves once a pass: an event read again after a crash leads to nothing new (what an
    # event leads to is keyed by it: a notification per channel, a decision per signal, each taken once).
    if covered > after:
        await asyncio.to_thread(runtime.notifications.advance, CURSOR, covered)
    await asyncio.to_thread(send_due, runtime, settings)


async def loop(runtime: Runtime, model_for: Any = None) -> None:
    settings = InitiativeSettings.load(runtime.home)
    while True:
        try:
            await step(runtime, settings, model_for)
        except asyncio.CancelledError:
            raise
        except Exception:  # a store hiccup: the next pass does better
            log.warning("notifications: a pass failed", exc_info=True)
        await asyncio.sleep(POLL_S)


__all__ = ["EVENTS", "loop", "send_due", "step"]
