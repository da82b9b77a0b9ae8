"""`tether task run -p`: a list parameter takes one word, `a,b`, a repeated -p or JSON, as people write it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.helpers import tether_cli


@pytest.mark.parametrize(
    ("given", "made"),
    [
        (["-p", "formats=md"], ["md"]),
        (["-p", "formats=md,html"], ["md", "html"]),
        (["-p", "formats=md", "-p", "formats=html"], ["md", "html"]),
        (["-p", 'formats=["html"]'], ["html"]),
    ],
    ids=["one word", "commas", "repeated", "json"],
)
def test_a_list_parameter_reads_as_a_person_writes_it(home: Path, given: list[str], made: list[str]) -> None:
    code, out, err = tether_cli(
        "task", "run", "documents.generate", "-p", "title=T", "-p", "content=## A\nb", *given, "--json",
        home=home,
    )  # fmt: skip
    assert code == 0, out + err
    assert [item["format"] for item in json.loads(out)["data"]["artifacts"]] == made


def test_a_format_that_is_not_allowed_is_still_refused_naming_the_allowed_ones(home: Path) -> None:
    code, out, _ = tether_cli(
        "task", "run", "documents.generate", "-p", "title=T", "-p", "content=x", "-p", "formats=md,docx",
        "--json", home=home,
    )  # fmt: skip
    assert code == 2 and "allowed: md, html, pptx, pdf" in json.loads(out)["message"]
