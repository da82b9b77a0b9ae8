"""Recognising a person's yes or no to a confirmation question, in Chinese and English."""

from __future__ import annotations

import re

YES = frozenset(
    {
        "yes",
        "y",
        "yeah",
        "yep",
        "ok",
        "okay",
        "sure",
        "confirm",
        "confirmed",
        "go ahead",
        "do it",
        "proceed",
        "是",
        "是的",
        "好",
        "好的",
        "确认",
        "确定",
        "可以",
        "行",
        "对",
        "同意",
        "执行",
        "继续",
    }
)
NO = frozenset(
    {
        "no",
        "n",
        "nope",
        "cancel",
        "stop",
        "don't",
        "do not",
        "abort",
        "never mind",
        "不",
        "不要",
        "不用",
        "否",
        "取消",
        "算了",
        "别",
        "不行",
        "不可以",
        "放弃",
    }
)
_PUNCT = re.compile(r"[\s.!?,;:，。！？；：、~]+")


def _fold(text: str) -> str:
    return _PUNCT.sub(" ", text.casefold()).strip()


def is_yes(text: str) -> bool:
    return _fold(text) in YES


def is_no(text: str) -> bool:
    return _fold(text) in NO
