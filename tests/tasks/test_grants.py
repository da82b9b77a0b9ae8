"""Grants: an agent's selection within what its caller may reach; they narrow and never widen."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.errors import ConfigError
from tether.tasks.grants import BUNDLES, Grants, expand
from tether.toolkits.standard import registry

TASK_IDS = [spec.task_id for spec in registry]


def test_bundles_patterns_and_ids_select_tasks() -> None:
    files = Grants.of(["files"])
    assert files.allows("workspace.delete") and not files.allows("web.search")
    mixed = Grants.of(["documents.generate", "web.read_*"])
    assert mixed.allows("documents.generate") and mixed.allows("web.read_url")
    assert not mixed.allows("web.search") and not mixed.allows("documents")
    assert Grants.of(["*"]).allows("shell.run")
    assert not Grants.of([]).allows("workspace.read")  # no grant, no task


def test_a_grant_that_is_not_understood_names_what_is_allowed() -> None:
    for bad in ("rm -rf", "Workspace.*", "workspace..read", "", "web/*"):
        with pytest.raises(ConfigError) as caught:
            expand([bad])
        assert "bundle" in caught.value.message and "files" in caught.value.message


def test_the_registry_answers_none_outside_the_grants() -> None:
    grants = Grants.of(["research"])
    assert registry.get("web.search", "agent", grants) is not None
    assert registry.get("shell.run", "agent", grants) is None  # exposed to agent, not granted
    assert registry.get("demo.debug_crash", "agent", Grants.of(["*"])) is None  # grants never widen
    assert {s.task_id for s in registry.for_caller("agent", grants)} <= set(TASK_IDS)
    assert "shell.run" not in registry.similar("shell.run", "agent", grants=grants)


patterns = st.sampled_from([*BUNDLES, *TASK_IDS, "workspace.*", "web.read_*", "demo.*", "*", "jobs.*"])


@given(st.lists(patterns, max_size=4), st.lists(patterns, max_size=4), st.sampled_from(TASK_IDS))
def test_narrowing_never_grants_more_than_either_side(own: list[str], theirs: list[str], task: str) -> None:
    a, b = Grants.of(own), Grants.of(theirs)
    both = a.narrowed(b)
    assert both.allows(task) == (a.allows(task) and b.allows(task))
    assert Grants.from_json(both.to_json()) == both  # it travels as JSON unchanged


@given(st.lists(st.text(max_size=30), max_size=5))
def test_any_text_is_a_grant_or_a_clear_error(entries: list[str]) -> None:
    try:
        expand(entries)
    except ConfigError as exc:
        assert "bundle" in exc.message
