"""Tool names to task ids, the allowlist, and annotations to danger: hints, never permissions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.tasks.spec import TASK_ID_RE, Danger
from tether.toolkits.mcp import names


@pytest.mark.parametrize(
    ("tool", "segment"),
    [
        ("read_file", "read_file"),
        ("readFile", "read_file"),
        ("getHTTPResponse", "get_http_response"),
        ("read-file", "read_file"),
        ("search.web", "search_web"),
        ("2fa_code", "t_2fa_code"),
        ("___", "tool"),
        ("查询", "tool"),
        ("x" * 80, "x" * 40),
    ],
)
def test_a_tool_name_becomes_a_task_id_segment_predictably(tool: str, segment: str) -> None:
    assert names.segment(tool) == segment


@given(st.text(min_size=1, max_size=100) | st.text("0aZ_-.", min_size=30, max_size=100))
def test_every_tool_name_makes_a_valid_task_id(tool: str) -> None:
    """With the longest server name allowed, a model's function name (dots as ``__``) fits the 64
    characters providers allow. (CI: the bound was written wrong and hypothesis found it rarely.)"""
    task_id = names.task_id("s" * 16, tool)
    assert TASK_ID_RE.match(task_id) and len(task_id.replace(".", "__")) <= 64


def test_the_allowlist_takes_names_and_globs_by_the_servers_name_or_the_mapped_one() -> None:
    assert names.matches("readFile", ["readFile"]) == "readFile"
    assert names.matches("readFile", ["read_file"]) == "read_file"
    assert names.matches("read_note", ["write_*", "read_*"]) == "read_*"
    assert names.matches("delete_note", ["read_*"]) is None
    assert names.matches("Read", ["read"]) == "read"  # by its task-id segment
    assert names.matches("Read", ["READ"]) is None  # a glob matches case-sensitively


@pytest.mark.parametrize(
    ("annotations", "overrides", "trust", "danger"),
    [
        ({}, {}, False, Danger.CAUTION),
        (None, {}, False, Danger.CAUTION),
        ({"readOnlyHint": True}, {}, False, Danger.CAUTION),  # the server's word alone
        ({"readOnlyHint": True}, {}, True, Danger.SAFE),  # the person trusts it
        ({"readOnlyHint": True, "destructiveHint": True}, {}, True, Danger.DESTRUCTIVE),
        ({"destructiveHint": True}, {}, False, Danger.DESTRUCTIVE),
        ({"destructiveHint": True}, {"t": "safe"}, False, Danger.DESTRUCTIVE),  # never lowered
        ({"destructiveHint": True}, {"*": "caution"}, False, Danger.DESTRUCTIVE),
        ({"destructiveHint": "true"}, {}, False, Danger.CAUTION),  # only a real true counts
        ({}, {"t": "safe"}, False, Danger.SAFE),
        ({}, {"t*": "destructive"}, False, Danger.DESTRUCTIVE),  # raised by the person
        ({"readOnlyHint": True}, {"t": "destructive"}, True, Danger.DESTRUCTIVE),
    ],
)
def test_annotations_are_hints_and_the_persons_settings_decide_within_them(
    annotations: dict[str, object] | None, overrides: dict[str, str], trust: bool, danger: Danger
) -> None:
    found, why = names.danger_of("t", annotations, overrides, trust_read_only=trust)
    assert found is danger and why


@pytest.mark.parametrize(
    ("said", "plain"),
    [
        ("Read one note.\n\tIts name first.", "Read one note.\n\tIts name first."),
        ("读取笔记\u3000全文", "读取笔记\u3000全文"),  # a space of any width stays
        ("\x1b[2J\x1b]0;title\x07cleared", "[2J]0;titlecleared"),  # C0: ESC, BEL
        ("\x9b31mred\x85", "31mred"),  # C1: the 8-bit CSI, NEL
        ("evil\u202etxt.exe \u2066x\u2069", "eviltxt.exe x"),  # bidirectional override, isolate
        ("hidden\U000e0049\U000e0067\u200b", "hidden"),  # invisible tag characters, zero width
        ("one\r\ntwo\rthree", "one\ntwo\nthree"),  # a carriage return would hide a line
    ],
)
def test_a_servers_words_are_kept_plain(said: str, plain: str) -> None:
    assert names.plain(said) == plain


@given(st.text(max_size=60))
def test_plain_words_hold_nothing_a_terminal_acts_on_and_stay_as_they_are(text: str) -> None:
    once = names.plain(text)
    assert all(c.isprintable() or c in "\n\t" or c.isspace() for c in once)
    assert not set(once) & {
        "\r",
        "\x1b",
        "\x9b",
        *map(chr, range(0x202A, 0x202F)),
        *map(chr, range(0x2066, 0x206A)),
    }
    assert names.plain(once) == once
    if text.isprintable():
        assert once == text
