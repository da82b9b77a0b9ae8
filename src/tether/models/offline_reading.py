"""How the offline model reads one request: the words it understands and the ones it does not.

It owns the first half of the offline planner. A request is cut into parts in the order they are to be
done (connectives, "A after B", two tools named with no connective between them); each part is read
against the tool surface (the longest tool word, catalog values longest first, counts, an execution id,
background words) and whatever is left over is its residue, the words not understood, which the
planner refuses to guess past. It also tells a question about state or about the tools apart from a
request to act, guesses what a mistyped part meant, and holds the limits that bound all this work.
Choosing calls from the parts is ``offline_choosing``'s; nothing here writes a reply.
"""

from __future__ import annotations

import bisect
import difflib
import functools
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from tether.models.base import ToolDef
from tether.models.offline_free import Free, free_values, params_for, tool_by_verb
from tether.models.understand import (
    BACKGROUND_WORDS,
    FILLER_EN,
    FILLER_ZH,
    FILLER_ZH_VERBS,
    FILLER_ZH_WORDS,
    NEGATIONS,
    Token,
    counts,
    fold,
    has_cjk,
    stems,
    tokens,
)

# The longest request the offline planner reads (the page's own limit): its work grows linearly with the
# request, so this bounds its time too (well under a second).
MAX_REQUEST_CHARS = 20_000
# The most parts ("start the game, then farm gold, …") one request is planned in: more is not a request
# a person makes, and values carried from part to part would make the work grow with their square.
MAX_PARTS = 40

EXECUTION_ID = re.compile(r"\b[0-9a-f]{19}\b")

# Connectives that split a request into parts, in order. "A after B" / "A之前B" reverse the two parts.
SPLIT = re.compile(
    r"(?:然后|接着|之后|以后|随后|完了再|完再|再然后|并且|而且|同时|还要|以及|最后|接下来|和|跟|与|再|"
    r"后(?!台|面)|，|,|；|;|。|、|!|！|"
    r"\band then\b|\bthen\b|\bafter that\b|\bafterwards\b|\band\b|\balso\b|\bplus\b|&)",
)
REVERSE = re.compile(r"\bafter\b(?! that)|之前|以前")
POLITE_OPENER = re.compile(
    r"^(?:(?:can|could|would|will) you(?: please)?|please|pls|"
    r"能不能|可不可以|能否|能|可以|麻烦你?|请你?|帮我)\s*"
)
QUESTION_EN = re.compile(r"^(?:is|are|was|were|did|does|has|have|how|what|what's|whats|where|any)\b")
QUESTION_ZH = re.compile(
    r"(?:吗|(?<![什怎那这多])么|没|没有|了没|了吗|怎么样|咋样|如何|情况|是否|多少|几)了?\s*[?？]*$|有没有|是不是|几次|多少|"
    r"(?:什么|啥)(?:状态|情况|样|时候)|在干(?:什么|啥|嘛)|第几|几轮|多少轮|几[遍回趟把场局盘]"
)
ABILITY = re.compile(
    r"what can (?:you|it|this|the [a-z ]{1,30}?) do|what do you do|what are you able|what can i ask|"
    r"^help$|^\?$|"
    r"你能干|你能做|你会干|你会做|你会什么|你能干嘛|能干嘛|能干啥|有什么功能|有哪些功能|怎么用|^帮助$"
)
# "can I salvage …?", "what happens if …", "我可以刷金币吗": asking about an action is not asking for it.
HYPOTHETICAL = re.compile(
    r"^(?:can|could|may|should|shall|would) i\b|\bwhat (?:happens|would happen|if)\b|^what if\b|"
    r"^(?:我|咱)(?:可以|能不能|能|该不该|应该|该)|会怎样|会怎么样|会发生什么"
)
PROGRESS_WORDS = (
    "进度", "进展", "怎么样", "咋样", "完了没", "好了没", "刷得", "刷到", "progress", "how is it going",
    "how it's going", "how's it going", "done yet", "finished", "how far", "going", "刷了多少", "still",
    "还在", "第几",
)  # fmt: skip


@dataclass(slots=True, kw_only=True)
class Part:
    """One part of a request, as read."""

    text: str
    tool: ToolDef | None = None
    values: dict[str, list[str]] = field(default_factory=dict)  # param → canonical values, in order
    scoped: list[tuple[str, str, str, int]] = field(default_factory=list)  # (param, parent, value, len)
    numbers: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # per number: "times" (a count) or ""
    background: bool = False
    execution_id: str | None = None
    residue: list[str] = field(default_factory=list)  # words not understood
    reading: Reading | None = None
    candidates: list[ToolDef] = field(default_factory=list)
    free: list[Free] = field(default_factory=list)  # paths, patterns, quoted text

    @property
    def has_values(self) -> bool:
        return bool(self.values or self.scoped or self.numbers)


@functools.lru_cache(maxsize=4096)
def weight(word: str) -> int:
    """How much of a request ``word`` explains: its folded characters, spaces aside (cached: the same
    tool words and values are weighed for every part of every request)."""
    return len(fold(word).replace(" ", ""))


def tool_words(tool: ToolDef) -> list[str]:
    """The words that name ``tool``: its aliases and its own name, read as words."""
    return [*tool.aliases, tool.name.split("__")[-1].replace("_", " ")]


class Reading:
    """A part's tokens, and which of them have been understood."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokens(text)
        self.used = [False] * len(self.tokens)
        self.starts = [token.start for token in self.tokens]
        # Where each stem occurs: a word is looked for only where its first stem is, so reading a
        # request against every tool word and catalog value costs the words plus the matches, not
        # words × tokens (a long message was seconds of CPU).
        self.at: dict[str, list[int]] = {}
        for index, token in enumerate(self.tokens):
            self.at.setdefault(token.stem, []).append(index)

    def find(self, word: str) -> list[tuple[int, int]]:
        """Token ranges where ``word`` occurs among the tokens not used yet."""
        want = stems(word)
        n = len(want)
        if not n:
            return []
        found = []
        last = len(self.tokens) - n
        for i in self.at.get(want[0], ()):
            if i > last or any(self.used[i : i + n]):
                continue
            if all(self.tokens[i + k].stem == want[k] for k in range(1, n)):
                found.append((i, i + n))
        return found

    def score(self, word: str) -> int:
        return weight(word) if self.find(word) else 0

    def take(self, word: str) -> bool:
        spans = self.find(word)
        for i, j in spans:
            for k in range(i, j):
                self.used[k] = True
        return bool(spans)

    def take_chars(self, start: int, end: int) -> None:
        k = bisect.bisect_left(self.starts, start)  # tokens are in text order
        while k < len(self.tokens) and self.tokens[k].start < end:
            if self.tokens[k].end <= end:
                self.used[k] = True
            k += 1

    def left(self) -> list[Token]:
        return [t for t, used in zip(self.tokens, self.used, strict=True) if not used]


def _residue(reading: Reading) -> list[str]:
    for word in FILLER_ZH_WORDS:
        reading.take(word)
    words = []
    for token in reading.left():
        if token.text in NEGATIONS:
            words.append(token.text)
        elif (
            token.text in FILLER_ZH
            or token.text in FILLER_ZH_VERBS
            or token.text in FILLER_EN
            or token.stem in FILLER_EN
        ):
            continue
        else:
            words.append(token.text)
    return words


def read_part(text: str, tools: Sequence[ToolDef]) -> Part | None:
    """``text`` read against the tool surface: its tool, catalog values, counts, execution id and
    background words taken; None when it has no words at all."""
    reading = Reading(text)
    if not reading.tokens:
        return None
    part = Part(text=text)
    explicit = EXECUTION_ID.search(text)
    if explicit:
        part.execution_id = explicit.group(0)
        reading.take_chars(explicit.start(), explicit.end())
    part.free = free_values(text)
    for free in part.free:
        reading.take_chars(free.start, free.end)
    best: tuple[int, int, ToolDef, str] | None = None
    for tool in tools:
        for word in tool_words(tool):
            score = reading.score(word)
            if score and (best is None or (score, tool.kind == "control") > (best[0], best[1])):
                best = (score, int(tool.kind == "control"), tool, word)
    for word in sorted(BACKGROUND_WORDS, key=len, reverse=True):
        if best is not None and stems(word) == stems(best[3]):
            continue
        if reading.find(word):
            part.background = True
            if best is None or not _contains_word(best[3], word):
                reading.take(word)
    if part.free and (best is None or not all(params_for(best[2], f.kind) for f in part.free)):
        by_verb = tool_by_verb(text, part.free, tools)  # "read report.md": the tool by its verb
        if by_verb is not None:
            best = None
            part.tool = by_verb[0]
            for word in by_verb[1]:
                reading.take(word)
    if best is not None:
        part.tool = best[2]
        reading.take(best[3])
    # Catalog values of every tool: the part may name a value before (or without) its tool.
    candidates = [part.tool] if part.tool is not None else [t for t in tools if t.kind == "business"]
    for tool in candidates:
        _values(reading, tool, part)
    for count in counts(text):
        if any(f.start <= count.start < f.end for f in part.free):
            continue  # "v2.txt", "report-3.md": part of a name, not a count
        reading.take_chars(count.start, count.end)
        part.numbers.append(count.value)
        part.kinds.append(count.kind)
    part.reading = reading
    part.candidates = candidates
    return part


def understood(part: Part, tool: ToolDef | None) -> list[str]:
    """The words of ``part`` not understood once ``tool`` is known: the words that only restate
    the tool or a value found ("刷金币副本", "the crimson calyx", "四星遗器") are understood."""
    reading = part.reading
    assert reading is not None
    vocab: set[str] = set()
    if tool is not None:
        for word in [*tool_words(tool), *(v for m in tool.labels.values() for v in m.values())]:
            vocab.update(stems(word))
    for owner in [tool] if tool is not None else part.candidates:
        for name, words in owner.value_words.items():
            for canonical in part.values.get(name, ()):
                for word in (canonical, *words.get(canonical, ())):
                    vocab.update(stems(word))
        for name, parent, canonical, _ in part.scoped:
            scoped = owner.scoped_words.get(name, {}).get(parent, {})
            for word in (canonical, *scoped.get(canonical, ())):
                vocab.update(stems(word))
            parents = owner.value_words.get(owner.depends_on.get(name, ""), {})
            for word in (parent, *parents.get(parent, ())):
                vocab.update(stems(word))
    for index, token in enumerate(reading.tokens):
        if not reading.used[index] and token.stem in vocab and token.text not in NEGATIONS:
            reading.used[index] = True
    part.residue = _residue(reading)
    return part.residue


def _values(reading: Reading, tool: ToolDef, part: Part) -> None:
    """Catalog values, longest words first; a word taken by a longer one is not read again
    ("霜风" is not also "风"). A word two parents share is kept under both: the caller asks."""
    owners: dict[str, list[tuple[str, str | None, str]]] = {}
    for name, words in tool.value_words.items():
        for canonical, aliases in words.items():
            for word in (canonical, *aliases):
                owners.setdefault(word, []).append((name, None, canonical))
    for name, scoped in tool.scoped_words.items():
        for parent_value, words in scoped.items():
            for canonical, aliases in words.items():
                for word in (canonical, *aliases):
                    owners.setdefault(word, []).append((name, parent_value, canonical))
    found: list[tuple[int, str, str | None, str, int]] = []
    for word in sorted(owners, key=lambda w: weight(w), reverse=True):
        spans = reading.find(word)
        if not spans:
            continue
        reading.take(word)
        length = weight(word)
        for name, parent, canonical in dict.fromkeys(owners[word]):
            found.append((spans[0][0], name, parent, canonical, length))
    for _, name, parent, canonical, length in sorted(found):
        if parent is None:
            values = part.values.setdefault(name, [])
            if canonical not in values:
                values.append(canonical)
        elif (name, parent, canonical) not in [(n, p, c) for n, p, c, _ in part.scoped]:
            part.scoped.append((name, parent, canonical, length))


def split(text: str) -> list[str]:
    """The parts of a request in the order they are to be done."""
    parts: list[str] = []
    for sentence in re.split(r"[。!！;；]", text):
        pieces = REVERSE.split(sentence, maxsplit=1)
        if len(pieces) == 2:
            pieces = [pieces[1], pieces[0]]  # "close the game after farming" = farm, then close
        for piece in pieces:
            parts += [p.strip(" .?？") for p in SPLIT.split(piece) if p and p.strip(" .?？")]
    return parts


def state_question(text: str) -> str | None:
    """The question, when the request asks about state rather than for an action."""
    stripped = text.strip()
    if POLITE_OPENER.match(stripped):
        return None  # "can you start the game?", "能帮我开游戏吗": a request, politely
    if QUESTION_EN.match(stripped) or QUESTION_ZH.search(stripped):
        return stripped
    if any(fold(w) == stripped.rstrip("?？ ") for w in PROGRESS_WORDS):
        return stripped
    return None


def by_tools(text: str, tools: Sequence[ToolDef]) -> list[str]:
    """``text`` cut before each business tool it names after the first ("进游戏刷两把经验书",
    "每日任务做完了就退出游戏"): two requests written without a connective. A background variant of
    the same work ("挂机刷钱") and a control word over a task word ("stop farming") stay one request."""
    reading = Reading(text)
    if len(reading.tokens) < 2:  # two tools take two words at least: nothing to cut
        return [text]
    found: list[tuple[int, int, int, ToolDef]] = []
    words = [(w, t) for t in tools if t.kind == "business" for w in tool_words(t)]
    taken = bytearray(len(reading.tokens))  # tokens a longer word already claimed: overlap checks stay linear
    for word, tool in sorted(words, key=lambda wt: weight(wt[0]), reverse=True):
        for i, j in reading.find(word):
            if not any(taken[i:j]):
                taken[i:j] = b"\1" * (j - i)
                found.append((i, j, len(fold(word)), tool))
    found.sort(key=lambda f: f[0])
    if any(t.kind == "control" and reading.find(w) for t in tools for w in tool_words(t)):
        return [text]
    cuts: list[int] = []
    for (_, _, _, before), (start, _, _, tool) in itertools.pairwise(found):
        if tool.name == before.name or background_variant(before, tools) is tool:
            continue
        if background_variant(tool, tools) is before:
            continue
        cuts.append(reading.tokens[start].start)
    if not cuts:
        return [text]
    bounds = [0, *cuts, len(text)]
    return [text[a:b].strip() for a, b in itertools.pairwise(bounds) if text[a:b].strip()]


def combine(first: Part, second: Part) -> Part:
    """``first`` (values with no tool) read as the start of ``second``."""
    assert first.reading is not None and second.reading is not None
    reading = Reading(f"{first.text} {second.text}")
    reading.used = [*first.reading.used, *second.reading.used]
    values = {k: list(v) for k, v in first.values.items()}
    for name, more in second.values.items():
        values.setdefault(name, [])
        values[name] += [v for v in more if v not in values[name]]
    return Part(
        text=reading.text,
        tool=second.tool,
        values=values,
        scoped=[*first.scoped, *(s for s in second.scoped if s not in first.scoped)],
        numbers=[*first.numbers, *second.numbers],
        kinds=[*first.kinds, *second.kinds],
        background=first.background or second.background,
        execution_id=second.execution_id or first.execution_id,
        reading=reading,
        candidates=second.candidates,
        free=[*first.free, *second.free],
    )


def _contains_word(alias: str, word: str) -> bool:
    a, w = stems(alias), stems(word)
    return any(a[i : i + len(w)] == w for i in range(len(a) - len(w) + 1))


def background_variant(tool: ToolDef, tools: Sequence[ToolDef]) -> ToolDef | None:
    """The background tool that takes the same catalog values ("keep farming gold" → loop_farm)."""
    mine = set(tool.value_words) | set(tool.scoped_words)
    for other in tools:
        if (
            other.background
            and other.kind == "business"
            and mine
            and mine <= (set(other.value_words) | set(other.scoped_words))
        ):
            return other
    return None


def likely_meaning(part: Part, tools: Sequence[ToolDef]) -> str | None:
    """What the person probably typed ("strat the game" → "start the game", "farm gld" → "farm gold"):
    the whole part close to one known phrase, or each word not understood close to one known word."""
    phrases: set[str] = set()
    for tool in tools:
        phrases.update(fold(w) for w in tool_words(tool))
        for mapping in [
            *tool.value_words.values(),
            *(m for s in tool.scoped_words.values() for m in s.values()),
        ]:
            for canonical, aliases in mapping.items():
                phrases.update(fold(w) for w in (canonical, *aliases))
    phrases = {p for p in phrases if len(p) >= 2}

    def closest(probe: str, pool: set[str], cutoff: float) -> str | None:
        close = difflib.get_close_matches(probe, sorted(pool), n=1, cutoff=cutoff)
        return close[0] if close else None

    whole = closest(part.text, phrases, 0.75)
    if whole is not None:
        return whole
    words = {w for p in phrases for w in p.split() if len(w) >= 3 and not has_cjk(w)}
    corrected = part.text
    for unknown in part.residue:
        if has_cjk(unknown) or len(unknown) < 3:
            return None
        word = closest(unknown, words, 0.75)
        if word is None:
            return None
        corrected = re.sub(rf"\b{re.escape(unknown)}\b", word, corrected)
    return corrected if corrected != part.text else None
