"""Recognising a person's yes or no to a confirmation question, in Chinese and English.

An answer is read whole: it must consist only of yes words, or only of no words, and small words that
carry nothing ("好的，执行吧", "yes please", "ok, go ahead", "不用了", "no thanks"). Anything else (a yes
with a request in it, "yes and no", "不好说") is neither, so it is read as a new message and never
confirms a call. Words are matched longest first, so "不好" is a no and never "不" and "好".
"""

from __future__ import annotations

import functools
import re

YES = frozenset(
    {
        "yes", "y", "yeah", "yep", "yup", "ok", "okay", "sure", "confirm", "confirmed", "go ahead", "do it",
        "proceed", "alright", "all right", "of course", "absolutely", "go for it", "sounds good",
        "是", "是的", "好", "好的", "好啊", "确认", "确定", "可以", "可以的", "行", "对", "对的", "同意",
        "执行", "继续", "嗯", "没问题", "当然", "去吧", "来吧", "冲",
    }
)  # fmt: skip
NO = frozenset(
    {
        "no", "n", "nope", "nah", "cancel", "stop", "don't", "do not", "abort", "never mind", "not now",
        "no thanks", "no thank you", "don't do it",
        "不", "不要", "不用", "否", "取消", "算了", "别", "不行", "不可以", "放弃", "不是", "不好", "不了",
        "不必", "先别", "别了", "等等", "先不要", "先不", "不执行", "不确认", "不同意", "不继续", "别执行",
    }
)  # fmt: skip
# Words that change nothing in an answer: politeness, particles, "then", "just" (never "it": "stop it"
# with no question waiting is a request to stop a job, not a stray "no").
SMALL = frozenset(
    {
        "please", "pls", "thanks", "thank you", "then", "just",
        "吧", "了", "啊", "呀", "的", "哈", "嘛", "呗", "哦", "噢", "喔", "请", "就", "那", "那就", "吧吧",
        "还是", "你", "我", "帮我", "一下",
    }
)  # fmt: skip
MAX_ANSWER_CHARS = 40  # a longer message is a request, whatever words it holds
_PUNCT = re.compile(r"[\s.!?,;:，。！？；：、~…]+")
_LATIN = re.compile(r"[a-z']")


def _fold(text: str) -> str:
    return _PUNCT.sub(" ", text.casefold().replace("’", "'")).strip()


@functools.lru_cache(maxsize=1)
def _phrases() -> list[tuple[str, str]]:
    words = [(w, "yes") for w in YES] + [(w, "no") for w in NO] + [(w, "") for w in SMALL]
    return sorted(words, key=lambda item: len(item[0]), reverse=True)


def answer(text: str) -> bool | None:
    """True for a yes, False for a no, None for anything else."""
    folded = _fold(text)
    if not folded or len(folded) > MAX_ANSWER_CHARS:
        return None
    said: set[str] = set()
    at = 0
    while at < len(folded):
        if folded[at] == " ":
            at += 1
            continue
        for phrase, kind in _phrases():
            end = at + len(phrase)
            if folded.startswith(phrase, at) and not (
                _LATIN.match(phrase[-1]) and end < len(folded) and _LATIN.match(folded[end])
            ):
                if kind:
                    said.add(kind)
                at = end
                break
        else:
            return None  # a word that is not part of an answer
    return None if len(said) != 1 else said == {"yes"}


def is_yes(text: str) -> bool:
    return answer(text) is True


def is_no(text: str) -> bool:
    return answer(text) is False
