"""The words a memory is found by: the same text, cut the same way for what is kept and what is asked.

Chinese has no spaces and most of its words are two characters, so a run of Chinese characters is cut
into overlapping pairs ("藏珍之蕾" → 藏珍 珍之 之蕾): no segmenter, no dictionary, and a two-character
word in a question ("副本") meets the same pair in what was said. (SQLite's ``trigram`` tokenizer needs
three characters to match anything: measured in ``bench/memory.py``, it misses most Chinese questions.)
Latin words are lowercased and lightly stemmed ("reports" → "report", "farming" → "farm"). Questions
drop the words that only make them questions ("上次", "什么", "what", "did"), so what is left is what
the person is asking about.

Plain functions, no dependencies: the stores (SQLite FTS5, PostgreSQL ``tsvector``) index the joined
terms as space-separated tokens.
"""

from __future__ import annotations

import re
import unicodedata

MAX_QUERY_TERMS = 32

# A run of CJK ideographs (and kana), or a run of letters and digits.
_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+|[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")

# Words that make a sentence a question or a request, not what it is about.
EN_STOP = frozenset(
    """a about above after again all also am an and any are as at be been before being below between both
    but by can could did do does doing done for from had has have having he her here hers him his how i
    if in into is it its itself just last let like me mine more most my myself no nor not now of off on
    once only or other our ours out over own please same she should so some such than that the their
    theirs them then there these they this those through time to too under until up us very was we were
    what when where which while who whom why will with would you your yours yourself again earlier
    previous previously told tell say said remember recall know asked ask talked mentioned""".split()
)
ZH_STOP = frozenset(
    """上次 次我 我们 们说 说的 的那 那个 个是 是什 什么 么名 名字 叫什 之前 以前 前我 我说 说过 过的 你还
    还记 记得 得我 我的 的是 是多 多少 哪个 哪天 哪里 一下 一个 这个 那次 们聊 聊的 聊过 提到 到的 请问
    问一 告诉 诉我 我上 你说 跟你 你上 上回 回我 是哪 么时 时候 候的 怎么 么样 有没 没有 有什 么吗 的吗
    了吗 是不 不是 给我 帮我 我想 想知 知道 道我""".split()
)

_SUFFIXES = ("ies", "ing", "ed", "es", "s")


def _stem(word: str) -> str:
    if word.isdigit() or len(word) <= 3:
        return word
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            stem = word[: -len(suffix)]
            return stem + "y" if suffix == "ies" else stem
    return word


def terms(text: str) -> list[str]:
    """Every term of ``text``, in order (repeats kept: they weigh in the ranking)."""
    normal = unicodedata.normalize("NFKC", text or "").lower()
    found: list[str] = []
    for run in _RUN.finditer(normal):
        chunk = run.group()
        if _CJK.match(chunk):
            found.extend(chunk[i : i + 2] for i in range(len(chunk) - 1)) if len(chunk) > 1 else found.append(
                chunk
            )
        else:
            found.append(_stem(chunk))
    # (an unassigned code point inside a CJK block is no letter: it is no term either)
    return [term for term in found if term.isalnum()]


def indexed(text: str) -> str:
    """What a store indexes for ``text``: its terms, space-separated."""
    return " ".join(terms(text))


def asked(text: str) -> list[str]:
    """The terms a question is about: no question words, each once, at most ``MAX_QUERY_TERMS``."""
    seen: dict[str, None] = {}
    for term in terms(text):
        if (
            term in EN_STOP
            or term in ZH_STOP
            or (len(term) == 1 and not term.isdigit() and not _CJK.match(term))
        ):
            continue
        seen.setdefault(term, None)
    return list(seen)[:MAX_QUERY_TERMS]
