"""Arguments read from the context (``Call.args_from``): a task reads what the tasks before it produced,
a single reference that is missing skips it, a list keeps what exists; a research goal becomes a DAG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tests.supervisor.test_policies import NOW, run, state
from tether.errors import PlanError
from tether.supervisor.goals import plan_offline
from tether.supervisor.plan import Plan
from tether.supervisor.policies import MISSING, as_text_where_text, call_args, context_of, lookup, schedule
from tether.supervisor.validate import problems
from tether.toolkits.standard import registry

SEARCH = {"query": "x", "results": [{"title": "A", "url": "https://a.example/"}]}


def read(n: int) -> dict[str, Any]:
    ref = f"data.search/results/{n - 1}/url"
    return {
        "id": f"read-{n}",
        "call": {"task": "web.read_url", "args_from": {"url": ref}},
        "depends_on": ["search"],
    }


def research(**extra: Any) -> Plan:
    search = {
        "id": "search",
        "call": {"task": "web.search", "args": {"query": "x"}},
        "outputs": ["data.search"],
    }
    return Plan.model_validate({"caller": "agent", "tasks": [search, read(1), read(2)], **extra})


def test_references_read_paths_into_the_context() -> None:
    context = {"data.search": SEARCH}
    assert lookup("data.search/results/0/url", context) == "https://a.example/"
    for missing in (
        "data.search/results/1/url",
        "data.search/results/x",
        "data.nothing",
        "data.search/query/0",
    ):
        assert lookup(missing, context) is MISSING


def test_a_task_reads_its_arguments_and_one_whose_reference_is_missing_is_skipped() -> None:
    plan = research()
    assert plan.task("read-1").inputs == ["data.search"]  # type: ignore[union-attr]
    done = run(
        state("search", "completed", outputs={"data.search": SEARCH}), state("read-1"), state("read-2")
    )
    decision = schedule(plan, done, now=NOW, started=NOW, resources={})
    assert [task for task, _ in decision.run] == ["read-1"]
    assert [(m.task_id, m.status) for m in decision.moves] == [("read-2", "skipped")]
    assert "data.search/results/1/url" in decision.moves[0].message
    args, missing = call_args(plan.task("read-1"), None, context_of(plan, done))  # type: ignore[arg-type]
    assert args == {"url": "https://a.example/"} and missing == []


def test_a_list_keeps_what_exists_and_becomes_text_for_a_text_parameter() -> None:
    plan = Plan.model_validate(
        {"caller": "agent", "tasks": [
            {"id": "s1", "call": {"task": "web.search", "args": {"query": "x"}}, "outputs": ["data.one"]},
            {"id": "gen", "call": {"task": "documents.generate", "args": {"title": "t", "formats": ["md"]},
             "args_from": {"content": ["data.one/summary", "data.two/summary"]}}, "depends_on": ["s1"]},
        ]}
    )  # fmt: skip
    found = problems(plan, registry)
    assert any("data.two" in p.problem for p in found)
    args, missing = call_args(plan.task("gen"), None, {"data.one": {"summary": "- a [1]"}})  # type: ignore[arg-type]
    assert missing == [] and args["content"] == ["- a [1]"]
    spec = registry.get("documents.generate")
    joined = as_text_where_text(spec, {**args, "content": ["- a", "- b"]})
    assert joined["content"] == "- a\n\n- b"


def test_a_plan_that_reads_a_parameter_twice_or_an_unknown_one_is_refused() -> None:
    with pytest.raises(ValidationError, match="not both"):
        Plan.model_validate({"caller": "agent", "tasks": [
            {"id": "a", "call": {"task": "web.read_url", "args": {"url": "https://x.example"},
             "args_from": {"url": "inputs.url"}}}]})  # fmt: skip
    plan = Plan.model_validate(
        {"caller": "agent", "context": {"url": "https://x.example"}, "tasks": [
            {"id": "a", "call": {"task": "web.read_url", "args_from": {"link": "inputs.url"}}}]}
    )  # fmt: skip
    found = [p.problem for p in problems(plan, registry)]
    assert "args_from names 'link', which web.read_url does not take" in found
    # url is neither given nor read from the context: the call is refused as it stands.
    assert any(p.startswith("calls web.read_url with arguments it refuses") and "url" in p for p in found)


def test_a_research_goal_becomes_search_read_summarize_generate(tmp_path: Path) -> None:
    (tmp_path / "settings.toml").write_text(
        '[research]\nsearch_provider = "searxng"\nsearxng_url = "http://127.0.0.1:9"\n'
    )
    plan = plan_offline("搜索一下 太阳能发电，然后写成讲义做成PPT", registry, home=tmp_path)
    ids = [t.id for t in plan.tasks]
    assert ids == [
        "search",
        "read-1",
        "summarize-1",
        "read-2",
        "summarize-2",
        "read-3",
        "summarize-3",
        "generate",
    ]
    generate = plan.task("generate")
    assert generate is not None and generate.call is not None
    assert generate.call.args["formats"] == ["pptx", "pdf"]
    assert generate.call.args_from["content"] == [f"data.summary{n}/summary" for n in (1, 2, 3)]
    assert set(generate.depends_on) == {"summarize-1", "summarize-2", "summarize-3"}
    overwrite = plan_offline("搜索一下 光伏 然后写成讲义 保存到 handout.pptx 覆盖", registry, home=tmp_path)
    assert overwrite.task("generate").review == "before"  # type: ignore[union-attr]


def test_a_research_goal_without_a_search_provider_says_why(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="search_provider"):
        plan_offline("搜索一下 太阳能发电，然后写成讲义", registry, home=tmp_path)


def test_a_review_shows_the_values_read_from_the_context_which_are_what_runs() -> None:
    plan = Plan.model_validate(
        {"caller": "agent", "tasks": [
            {"id": "s", "call": {"task": "web.search", "args": {"query": "x"}}, "outputs": ["data.search"]},
            {"id": "save", "review": "before", "depends_on": ["s"],
             "call": {"task": "documents.generate", "args": {"title": "t", "formats": ["md"], "save_to": "a"},
                      "args_from": {"content": "data.search/query"}}},
        ]}
    )  # fmt: skip
    done = run(state("s", "completed", outputs={"data.search": {"query": "the page's text"}}), state("save"))
    decision = schedule(plan, done, now=NOW, started=NOW, resources={})
    (move,) = decision.moves
    assert move.status == "waiting_for_human"
    assert move.review == {"kind": "before", "answer": None, "args": {
        "title": "t", "formats": ["md"], "save_to": "a", "content": "the page's text"}}  # fmt: skip


def test_an_argument_that_can_make_a_call_destructive_read_from_the_context_needs_a_review() -> None:
    plan = Plan.model_validate(
        {"caller": "agent", "tasks": [
            {"id": "s", "call": {"task": "web.search", "args": {"query": "x"}}, "outputs": ["data.flag"]},
            {"id": "save", "depends_on": ["s"],
             "call": {"task": "documents.generate", "args": {"title": "t", "content": "c", "formats": ["md"],
                                                               "save_to": "a"},
                      "args_from": {"overwrite": "data.flag/ok"}}},
        ]}
    )  # fmt: skip
    assert any("review: before" in p.problem for p in problems(plan, registry))


def test_an_optional_task_the_executor_refused_still_goes_to_a_person() -> None:
    from tether.supervisor.policies import after_attempt

    plan = research()
    task = plan.task("read-1")
    assert task is not None
    optional = task.model_copy(update={"optional": True})
    done = run(state("search", "completed"), state("read-1", "running", attempts=1))
    common = {"data": {}, "idempotent": True, "now": NOW, "executor_failures": 0, "context": {}, "run": done}
    refused = after_attempt(optional, done.tasks[1], outcome="rejected", message="no", **common)  # type: ignore[arg-type]
    assert refused.status == "waiting_for_human"
    failed = optional.model_copy(update={"retry": optional.retry.model_copy(update={"at_once": 0})})
    skipped = after_attempt(failed, done.tasks[1], outcome="failed", message="404", **common)  # type: ignore[arg-type]
    assert skipped.status == "skipped" and "404" in skipped.message
