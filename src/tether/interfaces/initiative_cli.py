"""When agents speak first: ``tether signal`` (tell an agent something happened), ``tether initiative``
(what it decided and why; rate its messages), ``tether schedule`` (reports and reminders at set times).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from tether.errors import ConfigError
from tether.interfaces.base import JsonFlag, app, guarded, state
from tether.interfaces.render import out

initiative_app = typer.Typer(help="What agents decided about signals, and your ratings of their messages.")
schedule_app = typer.Typer(help="Reports and reminders at set times (cron), fired once per tick.")

AgentOption = Annotated[str, typer.Option("--agent", "-a", help="The agent (default: the assistant)")]


def _runtime() -> Any:
    from tether.runtime import Runtime

    return Runtime.open(state.home)


def _print(as_json: bool, document: Any, lines: list[str]) -> int:
    if as_json:
        print(json.dumps(document, ensure_ascii=False))
    else:
        for line in lines:
            out.print(line, markup=False)
    return 0


def _decision_line(d: dict[str, Any]) -> str:
    verdict = "fired " if d["fired"] else "silent"
    rating = {1: " 👍", -1: " 👎"}.get(d["rating"] or 0, "")
    said = f" → {d['thread_id']}#{d['turn']}" if d["turn"] else ""
    return (
        f"#{d['id']:<5} {d['created_at'][:19]}  {d['agent']:<10} {d['kind']:<8} {verdict} "
        f"{d['category']:<8} {d['score']:.2f}/{d['threshold']:.2f}{said}{rating}  {d['reason'][:100]}"
    )


@app.command("signal")
def signal_command(
    text: Annotated[str, typer.Argument(help="What happened, in your words (Chinese or English)")],
    kind: Annotated[str, typer.Option("--kind", help="message, outside (default) or file")] = "outside",
    source: Annotated[str, typer.Option("--source", help="Where it comes from: a script, a mailbox")] = "",
    agent: AgentOption = "assistant",
    priority: Annotated[str, typer.Option("--priority", help="normal, high or urgent")] = "normal",
    key: Annotated[
        str | None, typer.Option("--key", help="Decide it once: a repeat gets this answer")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Tell an agent that something happened; it decides whether to tell you (and says why)."""

    def body() -> int:
        import asyncio

        from pydantic import ValidationError

        from tether.agent.decider import Signal
        from tether.models.factory import models_for
        from tether.supervisor.initiative import consider, decider_model

        if kind not in ("message", "outside", "file"):
            raise ConfigError(f"a signal sent by hand is a message, outside or file, not {kind!r}")
        if priority not in ("normal", "high", "urgent"):
            raise ConfigError(f"a signal's priority is normal, high or urgent, not {priority!r}")
        try:
            signal = Signal(
                kind=kind, text=text, source=source, agent=agent, key=key,  # type: ignore[arg-type]
                data={"priority": priority} if priority != "normal" else {},
            )  # fmt: skip
        except ValidationError as exc:
            raise ConfigError(
                f"not a signal: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}"
            ) from None
        with _runtime() as runtime:
            if runtime.agents.get(agent) is None:
                raise ConfigError(f"no agent {agent!r}: `tether agents list` shows the team")
            model = decider_model(runtime, models_for(runtime), agent)
            record = asyncio.run(consider(runtime, signal, model=model))
        d = record.to_dict()
        lines = [_decision_line(d)] + ([f"  {agent}: {record.message}"] if record.message else [])
        return _print(as_json, d, lines)

    guarded(as_json, body)


@initiative_app.command("list")
def list_command(
    agent: Annotated[str | None, typer.Option("--agent", "-a", help="One agent's")] = None,
    fired: Annotated[bool, typer.Option("--fired", help="Only those that posted a message")] = False,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=1000)] = 20,
    as_json: JsonFlag = False,
) -> None:
    """The newest decisions: signal, fire or silent, category, score against the threshold, and why."""

    def body() -> int:
        with _runtime() as runtime:
            found = [
                d.to_dict()
                for d in runtime.initiative.decisions(agent=agent, fired=True if fired else None, limit=limit)
            ]
        lines = [_decision_line(d) for d in found] or ["no signals decided yet"]
        return _print(as_json, {"decisions": found}, lines)

    guarded(as_json, body)


@initiative_app.command("rate")
def rate_command(
    decision: Annotated[int, typer.Argument(help="The decision's number (#N in `tether initiative list`)")],
    rating: Annotated[str, typer.Argument(help="up (👍) or down (👎)")],
    note: Annotated[str, typer.Option("--note", help="A word on why")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Rate a proactive message: 👎 makes its agent speak first less often, 👍 a little more."""

    def body() -> int:
        from tether.config import InitiativeSettings

        value = {"up": 1, "👍": 1, "+1": 1, "down": -1, "👎": -1, "-1": -1}.get(rating.strip().lower())
        if value is None:
            raise ConfigError(f"a rating is up or down (👍/👎), not {rating!r}")
        with _runtime() as runtime:
            default = InitiativeSettings.load(runtime.home).threshold
            record, threshold = runtime.initiative.rate(decision, value, note, default=default)
        d = {**record.to_dict(), "agent_threshold": round(threshold, 3)}
        return _print(
            as_json, d, [f"rated #{decision} {rating}; {record.agent}'s threshold is now {threshold:.2f}"]
        )

    guarded(as_json, body)


# -- schedules --------------------------------------------------------------------------------------


def _schedule_line(s: dict[str, Any]) -> str:
    what = s["action"] + (f": {s['text']}" if s["text"] else "")
    zone = f" ({s['timezone']})" if s["timezone"] else " (UTC)"
    last = s["last_fired_at"][:19] if s["last_fired_at"] else "never"
    return f"{s['name']:<20} {s['cron']:<16}{zone:<18} {s['agent']:<10} last {last:<19}  {what[:80]}"


@schedule_app.command("add")
def schedule_add(
    name: Annotated[str, typer.Argument(help="A short name: daily-report, plants")],
    cron: Annotated[str, typer.Option("--cron", help="When: '0 8 * * *' is every day at 08:00")],
    remind: Annotated[str, typer.Option("--remind", help="A reminder's words (else: the daily report)")] = "",
    agent: AgentOption = "assistant",
    tz: Annotated[
        str, typer.Option("--tz", help="The cron's time zone, e.g. Asia/Shanghai (default UTC)")
    ] = "",
    catch_up: Annotated[
        bool, typer.Option("--catch-up", help="Fire ticks missed while no executor ran")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Add a schedule: the daily report ("what ran, what failed, what waits") or a reminder."""

    def body() -> int:
        from tether.supervisor import schedules

        with _runtime() as runtime:
            made = schedules.add(
                runtime, name, cron, action="remind" if remind else "report", text=remind, agent=agent,
                timezone=tz or None, catch_up=catch_up,
            )  # fmt: skip
        lines = [_schedule_line(made.to_dict()), "an executor fires it (tether serve or tether worker)"]
        return _print(as_json, made.to_dict(), lines)

    guarded(as_json, body)


@schedule_app.command("list")
def schedule_list(as_json: JsonFlag = False) -> None:
    """The schedules, with when each last fired."""

    def body() -> int:
        from tether.supervisor import schedules

        with _runtime() as runtime:
            found = [s.to_dict() for s in schedules.listed(runtime)]
        return _print(as_json, {"schedules": found}, [_schedule_line(s) for s in found] or ["no schedules"])

    guarded(as_json, body)


@schedule_app.command("remove")
def schedule_remove(
    name: Annotated[str, typer.Argument(help="The schedule's name")], as_json: JsonFlag = False
) -> None:
    """Remove a schedule: it fires no more."""

    def body() -> int:
        from tether.supervisor import schedules

        with _runtime() as runtime:
            if not schedules.remove(runtime, name):
                raise ConfigError(f"no schedule {name!r}: `tether schedule list` shows them")
        return _print(as_json, {"removed": name}, [f"removed {name}"])

    guarded(as_json, body)


@schedule_app.command("run-now")
def schedule_run_now(
    name: Annotated[str, typer.Argument(help="The schedule's name")], as_json: JsonFlag = False
) -> None:
    """Fire a schedule once now (an executor runs it; its message lands in the agent's notices)."""

    def body() -> int:
        from tether.supervisor import schedules

        with _runtime() as runtime:
            workflow_id = schedules.run_now(runtime, name)
        return _print(as_json, {"fired": name, "workflow_id": workflow_id}, [f"fired {name} ({workflow_id})"])

    guarded(as_json, body)
