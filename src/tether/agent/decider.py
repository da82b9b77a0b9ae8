"""The decider: whether an agent speaks first about a signal (seed 001 §4.3).

A signal is something that happened — a new message from outside, outside information a script sends,
a schedule's tick, a job or run that ended, a file that changed — and the decider turns it into
**fire / no fire**, an action category (``alert``, ``reminder``, ``report``, ``done``, ``info``,
``none``), a score in [0, 1] and the reason. Rules first (in both languages); when the agent has a model
and the rules' score is close to the agent's threshold, the model weighs a text signal too. Then the
guards, which only ever silence: the same message said within ``REPEAT_H`` hours, or ``max_per_hour``
messages already posted in the last hour, is no fire (a schedule's tick is exempt: the person asked).
It never raises: a signal it cannot read, or a model that fails, is decided by the rules or not fired,
with why.

Staying silent is rarely wrong and spamming is never right, so a neutral signal scores low and only
alerts, reminders, scheduled reports and long work that ended clear the default threshold.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tether.models.base import Model

log = logging.getLogger("tether.decider")

Kind = Literal["message", "outside", "schedule", "ended", "file"]
KINDS: tuple[str, ...] = ("message", "outside", "schedule", "ended", "file")
CATEGORIES = ("alert", "reminder", "report", "done", "info", "none")
REPEAT_H = 6.0
GRAY = 0.2  # the model is asked when the rules' score is this close to the threshold
LONG_S = 600.0  # work that ran this long (10 min) is worth a word when it ends


class Signal(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Kind
    text: str = Field(default="", max_length=4000)
    source: str = Field(default="", max_length=200)
    agent: str = Field(default="assistant", pattern=r"^[a-z][a-z0-9_-]{0,39}$")
    # Decided once: a second signal with the same key gets the first one's decision.
    key: str | None = Field(default=None, max_length=300)
    # What the kind carries: ``status``/``duration_s``/``task`` (ended), ``action`` (schedule: report or
    # remind), ``path`` (file), ``priority`` (high or urgent: anything).
    data: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    fire: bool
    category: str
    score: float
    reason: str
    by: str  # rules | model | guard
    threshold: float


_ALERT = re.compile(
    r"urgent|emergency|fail(ed|ure|ing)?\b|errors?\b|outage|\bdown\b|crash|broken|critical|alarm|"
    r"security|breach|banned|overdue|expired|degraded|faulted|offline|unreachable|overheat|captcha|"
    r"suspicious|intrusion|logged in from|login from|new device|on battery|stuck|paused until|leak|"
    r"water detected|smoke|"
    r"紧急|失败|出错|错误|故障|宕机|崩溃|告警|报警|警告|异常|挂了|过期|逾期|中断|被封|封号|掉线|离线|报错|"
    r"不可用|卡住|过热|验证码|异地登录|电池供电|写满|余额不足|欠费|被盗|入侵|漏水|烟雾",
    re.IGNORECASE,
)
# Negations and recoveries that name the trouble without being in it.
_NOT_ALERT = re.compile(
    r"\b(no|zero|0|without|none of the)\s+(new\s+)?(critical|high|errors?|failures?|failed|alerts?|issues?)|"
    r"(没有|无|未见|未发现|0\s*个?)(任何)?(错误|异常|故障|失败|告警|报错)|all (checks )?(passed|green|ok)|"
    r"recovered|restored|resolved|back (up|online)|all services up|已恢复|恢复正常|已修复|已解决|重新上线",
    re.IGNORECASE,
)
_REMIND = re.compile(
    r"deadline|\bdue\b|reminder|remind|appointment|meeting|expires?|expiring|\bfull\b|capacity|"
    r"截止|到期|提醒|预约|会议|快满|满了|已满|上限|即将",
    re.IGNORECASE,
)
# Something that must happen soon: a time today, "before 5", "in 2 hours", "今晚 6 点前".
_SOON = re.compile(
    r"tonight|today|right now|asap|\bbefore \d|\bby \d|\bin \d+ ?(min|minutes|hours?)\b|"
    r"今晚|今天|今日|马上|立刻|尽快|\d+ ?(小时|分钟)内|\d+ ?点前|前(能|要|给|回)|之前",
    re.IGNORECASE,
)
_ASKS = re.compile(r"[?？]|can you|could you|please|麻烦|能否|能不能|请", re.IGNORECASE)
_ENDS = re.compile(r"\bends?\b|ending|closes|结束|截止|到期|过期", re.IGNORECASE)
_NOISE = re.compile(
    r"heartbeat|no change|nothing new|unchanged|routine|all good|still running|"
    r"心跳|无变化|没有变化|一切正常|运行正常|照常|例行",
    re.IGNORECASE,
)
# Marketing: urgent-sounding words in it are not news for the person.
_PROMOTION = re.compile(
    r"\bsale\b|discount|% off|coupon|promo|newsletter|unsubscribe|"
    r"降价|秒杀|优惠|促销|折扣|领券|满减|【[^】]{1,8}】",
    re.IGNORECASE,
)
_NO_RUSH = re.compile(r"no rush|not urgent|whenever|不急|不着急|有空再", re.IGNORECASE)
# A file event worth a word: many files changed at once, or one deleted from a place others share.
_MASS = re.compile(r"(\d[\d,]{1,}\s*(files|个文件))", re.IGNORECASE)
_HARM = re.compile(r"deleted|removed|renamed|encrypted|locked|删除|重命名|加密", re.IGNORECASE)
_SHARED = re.compile(r"shared|共享", re.IGNORECASE)
_FAILED = ("failed", "error", "unknown", "timeout", "timed_out", "lost")
_STOPPED = ("cancelled", "canceled", "stopped", "rejected")


def _ended(signal: Signal, long_s: float) -> tuple[float, str, str]:
    data = signal.data
    status = str(data.get("status", "")).lower()
    what = str(data.get("task") or signal.source or "the work")
    said = f"{signal.text} {data.get('message', '')}"
    if status in _FAILED:
        return 0.85, "alert", f"{what} ended {status}"
    if status in _STOPPED:
        if _ALERT.search(said) and not _NOT_ALERT.search(said):
            return 0.8, "alert", f"{what} was {status}: {_ALERT.search(said).group(0)!r}"  # type: ignore[union-attr]
        return 0.05, "none", f"{what} was {status}: whoever stopped it knows"
    try:
        took = float(data.get("duration_s") or 0.0)
    except (TypeError, ValueError):
        took = 0.0
    if took >= long_s:
        return 0.6, "done", f"{what} ended {status or 'done'} after {took:.0f} s of work"
    return 0.15, "none", f"{what} ended {status or 'done'} after {took:.0f} s: short work is seen ending"


def _text(signal: Signal, urgent: bool) -> tuple[float, str, str]:
    text = signal.text
    if _PROMOTION.search(text):
        return 0.05, "none", f"marketing ({_PROMOTION.search(text).group(0)!r}), however urgent it sounds"  # type: ignore[union-attr]
    if _NOISE.search(text) and not urgent:
        return 0.05, "none", "routine news: nothing changed that the person needs"
    if signal.kind == "file":
        if _HARM.search(text) and (_MASS.search(text) or _SHARED.search(text)):
            return 0.8, "alert", "files others rely on, or many at once, were changed or deleted"
        return 0.15, "info", "a file changed: the person's own work, most likely"
    if (found := _ALERT.search(text)) and not _NOT_ALERT.search(text):
        return 0.8, "alert", f"it says {found.group(0)!r}"
    soon = None if _NO_RUSH.search(text) else _SOON.search(text)
    if signal.kind == "message" and soon and _ASKS.search(text):
        return 0.7, "reminder", f"someone asks for an answer soon ({soon.group(0)!r})"
    if (
        signal.kind == "message"
        and not _NO_RUSH.search(text)
        and re.search(r"right now|马上|立刻|asap|尽快|急", text, re.I)
    ):
        return 0.7, "alert", "someone needs the person now"
    if soon and _ENDS.search(text):
        return 0.65, "reminder", f"something ends soon ({soon.group(0)!r})"
    if found := _REMIND.search(text):
        return 0.6, "reminder", f"it says {found.group(0)!r}: something is due"
    base = {"message": 0.35, "outside": 0.25}[signal.kind]
    return base, "info", "news with nothing urgent or due in it"


def weigh(signal: Signal, *, long_s: float = LONG_S) -> tuple[float, str, str]:
    """The rules' score, category and reason for ``signal``."""
    data = signal.data
    urgent = str(data.get("priority", "")).lower() in ("high", "urgent")
    if signal.kind == "schedule":
        action = str(data.get("action", ""))
        if action == "report":
            return 1.0, "report", "a report the person scheduled"
        if action == "remind":
            return 1.0, "reminder", "a reminder the person scheduled"
        return 0.0, "none", f"a schedule tick with nothing to say (action {action!r})"
    if signal.kind == "ended":
        return _ended(signal, long_s)
    score, category, reason = _text(signal, urgent)
    if urgent and score > 0.05:  # a sender's "high priority" counts for something, never for marketing
        score, reason = min(1.0, score + 0.3), reason + "; marked " + str(data.get("priority"))
    return score, category, reason


def _norm(text: str) -> str:
    """Text as the repeat guard compares it: words only (no marks, no emoji), numbers as #."""
    return " ".join(re.sub(r"\d+", "#", re.sub(r"[\W_]+", " ", text.lower())).split())


def guard(
    category: str, message: str, *, posted_last_hour: int, max_per_hour: int, posted_recently: list[str]
) -> str | None:
    """Why a message that would fire must not (said already, or too many lately); None to let it."""
    if message and _norm(message) in {_norm(m) for m in posted_recently}:
        return f"said the same within {REPEAT_H:.0f} h already"
    if posted_last_hour >= max_per_hour:
        return f"quiet: {posted_last_hour} message(s) in the last hour already (at most {max_per_hour})"
    return None


_ASK = (
    "You decide whether an assistant should message the person first about a signal. Staying silent is "
    "rarely wrong; spamming is never right. Reply with JSON only: "
    '{"fire": true|false, "category": "alert|reminder|info|none", "score": 0.0-1.0, "reason": "..."}'
)


async def ask_model(
    model: Model, signal: Signal, rules: tuple[float, str, str]
) -> tuple[float, str, str] | None:
    """The model's score, category and reason, or None when it gave nothing usable."""
    prompt = json.dumps(
        {"signal": signal.model_dump(mode="json", exclude={"key"}), "rules": {"score": rules[0],
         "category": rules[1], "reason": rules[2]}}, ensure_ascii=False,
    )  # fmt: skip
    response = await model.complete(
        [{"role": "system", "content": _ASK}, {"role": "user", "content": prompt}], ()
    )
    found = re.search(r"\{.*\}", response.text or "", re.DOTALL)
    if found is None:
        return None
    answer = json.loads(found.group(0))
    score = float(answer.get("score", 0.0))
    category = str(answer.get("category", "none"))
    if not 0.0 <= score <= 1.0 or category not in CATEGORIES:
        return None
    if not answer.get("fire", False):
        score = min(score, 0.49)
    return score, category, "the model: " + str(answer.get("reason", ""))[:300]


def _asks_model(signal: Signal, score: float, threshold: float, model: Model | None) -> bool:
    """Whether ``decide`` asks the model: a person's or the outside's words the rules find close."""
    words = signal.kind in ("message", "outside", "file")  # see ``uses_model``
    return model is not None and words and abs(score - threshold) < GRAY


def uses_model(signal: Signal) -> bool:
    """Whether a model may have a say in ``signal``: weighing a person's or the outside's words, or
    leading a report the person scheduled."""
    return signal.kind in ("message", "outside", "file") or (
        signal.kind == "schedule" and signal.data.get("action") == "report"
    )


def could_fire(signal: Signal, threshold: float, *, model: Model | None, long_s: float = LONG_S) -> bool:
    """Whether ``decide`` may fire ``signal``, and so needs what its guards read (the messages posted
    lately): not when the rules score it under the threshold and no model is asked."""
    try:
        score, _, _ = weigh(signal, long_s=long_s)
    except Exception:  # ``decide`` fires no signal the rules cannot read
        return False
    return score >= threshold or _asks_model(signal, score, threshold, model)


async def decide(
    signal: Signal,
    *,
    threshold: float,
    message: str = "",
    posted_last_hour: int = 0,
    max_per_hour: int = 3,
    posted_recently: list[str] | None = None,
    model: Model | None = None,
    long_s: float = LONG_S,
) -> Decision:
    """Fire or not, and why. ``message`` is what would be said (for the repeat guard)."""
    try:
        score, category, reason = weigh(signal, long_s=long_s)
    except Exception as exc:  # a signal the rules cannot read is not fired
        log.warning("the rules could not weigh a signal", exc_info=True)
        return Decision(fire=False, category="none", score=0.0, reason=f"unreadable signal: {exc}"[:300],
                        by="rules", threshold=threshold)  # fmt: skip
    by = "rules"
    if model is not None and _asks_model(signal, score, threshold, model):
        try:
            weighed = await ask_model(model, signal, (score, category, reason))
        except Exception as exc:
            weighed = None
            reason += f" (the model could not be asked: {type(exc).__name__})"
        if weighed is not None:
            (score, category, reason), by = weighed, "model"
    if score < threshold:
        return Decision(fire=False, category=category, score=score, threshold=threshold, by=by,
                        reason=f"{reason} — {score:.2f} is under the threshold {threshold:.2f}")  # fmt: skip
    # What the person scheduled was asked for: the guards hold back only what the agent chose to say.
    held = None if signal.kind == "schedule" else guard(
        category, message, posted_last_hour=posted_last_hour, max_per_hour=max_per_hour,
        posted_recently=posted_recently or [],
    )  # fmt: skip
    if held is not None:
        return Decision(fire=False, category=category, score=score, threshold=threshold, by="guard",
                        reason=f"{reason} — but {held}")  # fmt: skip
    return Decision(fire=True, category=category, score=score, threshold=threshold, by=by, reason=reason)
