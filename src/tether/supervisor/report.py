"""The daily report: what ran in the last day, what failed, what waits for the person.

Extractive: every line is a record (a run, a background job, a call or run waiting for an answer),
counted and named, in the agent's language — nothing is made up, so the offline model needs nothing
more. With a model configured, ``summarize`` asks it for a short lead over the same lines (the lines
stay: a model's summary never replaces the record it summarizes).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tether.runtime import Runtime

MAX_LINES = 8  # of each kind; the rest is counted


def _since(hours: float) -> str:
    return (datetime.now(UTC) - timedelta(hours=hours)).isoformat(timespec="microseconds")


def gather(runtime: Runtime, *, hours: float = 24.0) -> dict[str, list[dict[str, Any]]]:
    """The records of the last ``hours``: runs and background jobs that ended, and what waits."""
    since = _since(hours)
    # This home's records only: homes sharing a database each report their own.
    runs = [r for r in runtime.runs.list(limit=500, mine=True) if (r.ended_at or r.updated_at) >= since]
    jobs = [
        j for j in runtime.jobs.list(limit=500, mine=True)
        if j.background and j.ended_at is not None and j.ended_at >= since
    ]  # fmt: skip
    waiting_runs = runtime.runs.list(limit=200, status="waiting_for_human", mine=True)
    waiting_calls = [t for t in runtime.threads.threads(limit=200) if t.pending and _asked_here(runtime, t)]
    return {
        "succeeded": [{"what": r.goal, "id": r.run_id} for r in runs if r.status == "completed"]
        + [{"what": j.task_id, "id": j.execution_id} for j in jobs if j.status.value == "completed"],
        "failed": [{"what": r.goal, "id": r.run_id, "why": r.message} for r in runs if r.status == "failed"]
        + [
            {"what": j.task_id, "id": j.execution_id, "why": j.message}
            for j in jobs
            if j.status.value in ("failed", "not_found")
        ],
        "waiting": [{"what": r.goal, "id": r.run_id} for r in waiting_runs]
        + [{"what": str((t.pending or {}).get("tool", "a call")), "id": t.thread_id} for t in waiting_calls],
    }


def _asked_here(runtime: Runtime, thread: Any) -> bool:
    """Whether the turn that waits on the person ran in this home."""
    turn = runtime.threads.turn(thread.thread_id, thread.turns)
    return turn is None or turn.installation in (None, runtime.installation.id)


_WORDS = {
    "en": {
        "title": "Daily report", "succeeded": "Done", "failed": "Failed", "waiting": "Waiting for you",
        "none": "nothing", "more": "and {n} more", "quiet": "A quiet day: nothing ran, nothing waits.",
    },
    "zh": {
        "title": "每日报告", "succeeded": "已完成", "failed": "失败", "waiting": "等你处理",
        "none": "无", "more": "另有 {n} 项", "quiet": "平静的一天：没有运行任何任务，也没有待处理的事。",
    },
}  # fmt: skip


def extract(found: dict[str, list[dict[str, Any]]], language: str = "en") -> str:
    """The report as text: a count and the named records of each kind (failures with why)."""
    words = _WORDS.get(language, _WORDS["en"])
    if not any(found.values()):
        return f"{words['title']}: {words['quiet']}"
    lines = [f"{words['title']}:"]
    for kind in ("failed", "waiting", "succeeded"):
        items = found[kind]
        lines.append(f"- {words[kind]} ({len(items)})" + (": " + words["none"] if not items else ":"))
        for item in items[:MAX_LINES]:
            why = f" — {item['why']}" if item.get("why") else ""
            lines.append(f"  · {str(item['what'])[:120]} [{item['id']}]{why[:160]}")
        if len(items) > MAX_LINES:
            lines.append("  · " + words["more"].format(n=len(items) - MAX_LINES))
    return "\n".join(lines)


async def summarize(model: Any, report: str, language: str) -> str:
    """A model's two-sentence lead over ``report``, then the report itself; the report alone if the
    model gives nothing."""
    ask = (
        "用两句话概括这份报告，先说失败和等待处理的事。只根据报告内容。"
        if language == "zh"
        else "Summarize this report in two sentences, failures and waiting items first. Use only the report."
    )
    try:
        response = await model.complete(
            [{"role": "system", "content": ask}, {"role": "user", "content": report}], ()
        )
    except Exception:
        return report
    lead = " ".join((response.text or "").split())[:400]
    return f"{lead}\n\n{report}" if lead else report
