"""Summaries that keep their source: through the home's configured model when there is one, else a
deterministic extractive summary (sentences scored by term frequency and the focus words).

The extractive summary works on Chinese and English alike: sentences end at 。！？；!?; or a line
break (and at ". " in English); Chinese is counted in character bigrams, English in words.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_SENTENCES = 5
MAX_SENTENCE_CHARS = 400
MODEL_INPUT_CHARS = 30_000
MAX_SUMMARY_CHARS = 4_000

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CLAUSES = re.compile(r"[^。！？；!?;\n]+[。！？；!?;]*[”」』\"')）]*")
_ENGLISH_END = re.compile(r"(?<=[a-z0-9\)\]\"'][.!?])\s+(?=[A-Z0-9\"'(\[])")
_WORD = re.compile(rf"[A-Za-z][A-Za-z0-9'-]*|[0-9]+(?:\.[0-9]+)?|[{_CJK}]+")
_HAN_RUN = re.compile(rf"^[{_CJK}]+$")
STOPWORDS = frozenset(
    """a about above after again all also am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers him his how i if in into is it its itself just me more most my no nor not
    now of off on once only or other our out over own same she should so some such than that the their
    them then there these they this those through to too under until up very was we were what when
    where which while who whom why will with would you your yours 's
    的 了 和 是 在 也 就 都 而 及 与 着 或 一个 我们 你们 他们 这 那 之 其 为 以 于 上 中 等""".split()
)


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` in order, each stripped, none empty."""
    sentences: list[str] = []
    for clause in _CLAUSES.findall(text):
        for part in _ENGLISH_END.split(clause):
            part = " ".join(part.split())
            if part:
                sentences.append(part)
    return sentences


def terms(text: str) -> list[str]:
    """Lowercase English words and Chinese character bigrams (a lone character stands for itself)."""
    found: list[str] = []
    for token in _WORD.findall(text):
        if _HAN_RUN.match(token):
            if len(token) == 1:
                found.append(token)
            else:
                found.extend(token[i : i + 2] for i in range(len(token) - 1))
        else:
            found.append(token.lower())
    return [t for t in found if t not in STOPWORDS and (len(t) > 1 or _HAN_RUN.match(t))]


def extractive(text: str, focus: str = "", max_sentences: int = DEFAULT_SENTENCES) -> list[str]:
    """The ``max_sentences`` sentences that best carry the text's frequent terms and ``focus``, in
    their original order. Deterministic: ties go to the earlier sentence."""
    sentences = split_sentences(text)
    # Menus, headings and captions left by extraction ("首页 | 关于", a bare title) are not statements:
    # they are summarized only when nothing else is there.
    sentences = [s for s in sentences if _is_prose(s)] or sentences
    if len(sentences) <= max_sentences:
        return [_clip(s) for s in sentences]
    counted = [terms(s) for s in sentences]
    frequency = Counter(t for words in counted for t in words)
    top = max(frequency.values(), default=1)
    wanted = set(terms(focus))
    scores: list[tuple[float, int]] = []
    for index, words in enumerate(counted):
        if not words:
            scores.append((0.0, index))
            continue
        unique = set(words)
        score = sum(frequency[t] / top for t in unique) / math.sqrt(len(words))
        if wanted:
            score += 2.0 * len(unique & wanted) / math.sqrt(len(wanted))
        if index == 0:
            score *= 1.1  # an opening sentence often says what the text is about
        scores.append((score, index))
    chosen = sorted(scores, key=lambda pair: (-pair[0], pair[1]))[:max_sentences]
    return [_clip(sentences[index]) for _, index in sorted(chosen, key=lambda pair: pair[1])]


_ENDS = tuple("。！？!?.；;…\"”')）")
MIN_PROSE_CHARS = 16  # a line shorter than this without a sentence's end is a heading or a menu item


def _is_prose(sentence: str) -> bool:
    if " | " in sentence or sentence.count("|") >= 2:
        return False
    return sentence.endswith(_ENDS) or len(sentence) >= MIN_PROSE_CHARS


def _clip(sentence: str) -> str:
    return sentence if len(sentence) <= MAX_SENTENCE_CHARS else sentence[: MAX_SENTENCE_CHARS - 1] + "…"


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    url: str = ""
    title: str = ""
    number: int = 1  # the citation it is given: [1] alone, [n] as the n-th source of a document

    @property
    def cite(self) -> str:
        return f"[{self.number}]"

    @property
    def known(self) -> bool:
        return bool(self.url or self.title)

    def to_dict(self, number: int) -> dict[str, Any]:
        return {"n": number, "url": self.url, "title": self.title}


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    text: str
    method: str  # "extractive" or "model"
    sources: list[dict[str, Any]] = field(default_factory=list)
    model: str = ""
    note: str = ""

    def data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"summary": self.text, "method": self.method, "sources": self.sources}
        if self.model:
            data["model"] = self.model
        if self.note:
            data["note"] = self.note
        return data


def extractive_summary(text: str, focus: str, source: Source, max_sentences: int) -> Summary:
    sentences = extractive(text, focus, max_sentences)
    cite = f" {source.cite}" if source.known else ""
    body = "\n".join(f"- {sentence}{cite}" for sentence in sentences)
    return Summary(
        text=body, method="extractive", sources=[source.to_dict(source.number)] if source.known else []
    )


PROMPT = (
    "Summarize the text below faithfully, in the language it is written in, in at most {n} short "
    "bullet points. Use only what the text says.{focus_rule}{cite_rule} Answer with the bullet points "
    "only."
)


def messages_for(text: str, focus: str, source: Source, max_sentences: int) -> list[dict[str, str]]:
    clipped = text[:MODEL_INPUT_CHARS]
    note = "" if len(text) <= MODEL_INPUT_CHARS else f"\n[the text was cut at {MODEL_INPUT_CHARS} characters]"
    system = PROMPT.format(
        n=max_sentences,
        focus_rule=f" Concentrate on: {focus}." if focus else "",
        cite_rule=f" End each bullet point with the citation {source.cite}." if source.known else "",
    )
    header = ""
    if source.known:
        header = f"Source {source.cite}: {source.title or '(untitled)'} {source.url}".rstrip() + "\n\n"
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"{header}Text:\n<<<\n{clipped}\n>>>{note}"},
    ]


def model_summary(model: Any, text: str, focus: str, source: Source, max_sentences: int) -> Summary:
    """A summary from ``model`` (a ``tether.models`` Model); its errors propagate."""
    response = asyncio.run(model.complete(messages_for(text, focus, source, max_sentences), ()))
    answer = response.text.strip()
    if not answer:
        raise ValueError("the model answered with no text")
    if source.known and source.cite not in answer:
        answer += f" {source.cite}"
    if len(answer) > MAX_SUMMARY_CHARS:
        answer = answer[: MAX_SUMMARY_CHARS - 1] + "…"
    return Summary(
        text=answer,
        method="model",
        sources=[source.to_dict(source.number)] if source.known else [],
        model=response.model or getattr(model, "name", ""),
    )


def summarize(home: Path, text: str, focus: str, source: Source, max_sentences: int) -> Summary:
    """Through the home's model when ``[model]`` names one; extractive otherwise, or when the model
    fails (the summary then says why in its note)."""
    from tether.config import read_settings_file

    if "model" not in read_settings_file(home):  # the offline model: no need to import any client
        return extractive_summary(text, focus, source, max_sentences)
    from tether.errors import TetherError
    from tether.models.factory import model_from_settings
    from tether.models.offline import OfflineModel

    try:
        # A fresh model per call, but not a fresh breaker: the factory keeps the breaker's state in the
        # home (resilience.breakers_dir), the file the runtime's registry uses too, so failures of
        # separate calls and of the agent's own model calls count against one breaker per service.
        model = model_from_settings(home)
        if isinstance(model, OfflineModel):
            return extractive_summary(text, focus, source, max_sentences)
        return model_summary(model, text, focus, source, max_sentences)
    except (TetherError, ValueError) as exc:
        fallback = extractive_summary(text, focus, source, max_sentences)
        reason = getattr(exc, "message", None) or str(exc)
        return Summary(
            text=fallback.text,
            method=fallback.method,
            sources=fallback.sources,
            note=f"the configured model could not summarize ({reason}); this is an extractive summary",
        )
