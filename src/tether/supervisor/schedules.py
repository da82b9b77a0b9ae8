"""Schedules: cron expressions that make an agent speak at set times — a daily report, a reminder.

A schedule is a DBOS schedule of this home's application, kept in DBOS's system database (so it survives
restarts) and fired by the scheduler every executor runs: each tick is one workflow whose id is the
schedule's name and the tick's time, so two executors, or one restarted, fire a tick once. The workflow
(``engine.schedule_fire``) turns the tick into a ``schedule`` signal keyed by that id, and initiative
decides and posts it — a tick is decided once even if its step is replayed.

Adding, listing, removing and firing now go through DBOS's client: no executor needs to run for them
(the next executor to start picks a new schedule up within a second or so of its start, and a running
one within ``POLL_S``). A tick missed while no executor ran is not fired late unless the schedule was
added with ``catch_up`` (then every missed tick fires once when an executor starts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tether.errors import ConfigError
from tether.runtime import Runtime
from tether.supervisor import durable

ACTIONS = ("report", "remind")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
MAX_TEXT = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    name: str
    cron: str
    action: str
    text: str
    agent: str
    timezone: str | None
    catch_up: bool
    last_fired_at: str | None
    status: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "cron": self.cron, "action": self.action, "text": self.text,
            "agent": self.agent, "timezone": self.timezone, "catch_up": self.catch_up,
            "last_fired_at": self.last_fired_at, "status": self.status,
        }  # fmt: skip


def _of(raw: Any) -> Schedule:
    found = raw.get("context")
    context: dict[str, Any] = found if isinstance(found, dict) else {}
    return Schedule(
        name=raw["schedule_name"], cron=raw["schedule"], action=str(context.get("action", "")),
        text=str(context.get("text", "")), agent=str(context.get("agent", "assistant")),
        timezone=raw.get("cron_timezone"), catch_up=bool(raw.get("automatic_backfill")),
        last_fired_at=raw.get("last_fired_at"), status=str(raw.get("status", "ACTIVE")).lower(),
    )  # fmt: skip


def check(name: str, cron: str, action: str, text: str, timezone: str | None) -> None:
    """``ConfigError`` naming what is allowed, for anything a person could get wrong."""
    from croniter import croniter

    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ConfigError(f"a schedule's name is a short lowercase word such as daily-report, not {name!r}")
    if not isinstance(cron, str) or not croniter.is_valid(cron, second_at_beginning=True):
        raise ConfigError(
            f"{cron!r} is not a cron expression: five fields (minute hour day month weekday), e.g. "
            "'0 8 * * *' for every day at 08:00, or six with seconds first"
        )
    if action not in ACTIONS:
        raise ConfigError(f"a schedule does one of {', '.join(ACTIONS)}, not {action!r}")
    if action == "remind" and not (isinstance(text, str) and text.strip()):
        raise ConfigError("a reminder needs its words: --text 'water the plants'")
    if len(text) > MAX_TEXT:
        raise ConfigError(f"a schedule's text is at most {MAX_TEXT} characters; this is {len(text)}")
    if timezone:
        from zoneinfo import ZoneInfo

        try:
            ZoneInfo(timezone)
        except Exception:
            raise ConfigError(
                f"{timezone!r} is not a time zone: use an IANA name such as Asia/Shanghai"
            ) from None


def add(
    runtime: Runtime,
    name: str,
    cron: str,
    *,
    action: str = "report",
    text: str = "",
    agent: str = "assistant",
    timezone: str | None = None,
    catch_up: bool = False,
) -> Schedule:
    check(name, cron, action, text, timezone)
    if runtime.agents.get(agent) is None:
        raise ConfigError(f"no agent {agent!r}: `tether agents list` shows the team")
    with durable.client(runtime) as c:
        if c.get_schedule(name) is not None:
            raise ConfigError(f"a schedule {name!r} exists already: remove it first, or pick another name")
        c.create_schedule(
            schedule_name=name, workflow_name=durable.SCHEDULE_WORKFLOW, schedule=cron,
            context={"action": action, "text": text.strip(), "agent": agent, "name": name},
            automatic_backfill=catch_up, cron_timezone=timezone or None, queue_name=c.names.queue,
        )  # fmt: skip
        made = c.get_schedule(name)
    if made is None:
        raise ConfigError(f"the schedule {name!r} was removed while it was being added")
    return _of(made)


def listed(runtime: Runtime) -> list[Schedule]:
    with durable.client(runtime) as c:
        return sorted((_of(raw) for raw in c.list_schedules()), key=lambda s: s.name)


def remove(runtime: Runtime, name: str) -> bool:
    with durable.client(runtime) as c:
        if c.get_schedule(name) is None:
            return False
        c.delete_schedule(name)
    return True


def run_now(runtime: Runtime, name: str) -> str:
    """Fire ``name`` once now (an executor runs it); the workflow id of that firing."""
    with durable.client(runtime) as c:
        if c.get_schedule(name) is None:
            known = ", ".join(s["schedule_name"] for s in c.list_schedules()) or "none yet"
            raise ConfigError(f"no schedule {name!r} (schedules: {known})")
        return str(c.trigger_schedule(name).workflow_id)
