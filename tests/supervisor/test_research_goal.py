"""Done-when, as a goal run: a research goal becomes a DAG (search → read → summarize → generate) that
runs to the end by itself on local pages, each step reading what the one before produced."""

from __future__ import annotations

import json
from pathlib import Path

from tests.interfaces.test_research_cli import deck_text
from tests.support.helpers import tether_cli
from tests.support.research_site import research_site


def test_a_research_goal_runs_as_a_dag_and_leaves_its_files(home: Path) -> None:
    with research_site() as site:
        site.configure(home)
        code, out, err = tether_cli(
            "goal", "搜索一下 太阳能发电，然后写成讲义，做成PPT", "--json", home=home, timeout=180
        )
    assert code == 0, (out, err)
    run = json.loads(out.strip().splitlines()[-1])
    assert run["status"] == "completed", run
    code, out, err = tether_cli("flow", "show", run["run_id"], "--json", home=home)
    assert code == 0, err
    shown = json.loads(out)
    statuses = {t["id"]: t["status"] for t in shown["tasks"]}
    assert statuses == dict.fromkeys(
        ["search", "read-1", "summarize-1", "read-2", "summarize-2", "read-3", "summarize-3", "generate"],
        "completed",
    ), statuses
    assert site.queries == ["太阳能发电"]
    code, out, err = tether_cli("artifacts", "--json", home=home)
    items = json.loads(out)["items"]
    assert {i["format"] for i in items} == {"pptx", "pdf"}
    assert all(i["origin"] == f"run:{run['run_id']}" for i in items)
    for item in items:
        assert (home / item["path"]).stat().st_size == item["size"] > 1000
    deck = next(home / i["path"] for i in items if i["format"] == "pptx")
    text = deck_text(deck.read_bytes())
    for n, path in enumerate(("/solar", "/grid", "/cost"), start=1):  # each page cited by its own number
        assert site.base + path in text
        assert f"[{n}]" in text


def test_one_unreadable_page_is_skipped_and_the_document_is_made_from_the_rest(home: Path) -> None:
    with research_site(broken="/grid") as site:
        site.configure(home)
        goal = "research solar power and write a report as a pdf"
        code, out, err = tether_cli("goal", goal, "--json", home=home, timeout=180)
    assert code == 0, (out, err)
    run = json.loads(out.strip().splitlines()[-1])
    code, out, err = tether_cli("flow", "show", run["run_id"], "--json", home=home)
    tasks = {t["id"]: t for t in json.loads(out)["tasks"]}
    assert run["status"] == "completed", tasks
    assert tasks["read-2"]["status"] == "skipped" and "404" in tasks["read-2"]["message"]
    assert tasks["summarize-2"]["status"] == "skipped" and tasks["generate"]["status"] == "completed"


def test_a_research_goal_overwrites_a_file_only_after_the_person_approves_what_was_read(home: Path) -> None:
    handouts = home / "workspace" / "handouts"
    handouts.mkdir(parents=True)
    (handouts / "solar.pdf").write_bytes(b"old pdf")
    with research_site() as site:
        site.configure(home)
        goal = "搜索一下 太阳能发电，然后写成讲义 保存到 handouts/solar 覆盖"
        code, out, err = tether_cli("goal", goal, "--json", home=home, timeout=180)
        assert code == 3, (out, err)  # waits for the person at the overwrite
        run = json.loads(out.strip().splitlines()[-1])
        code, out, err = tether_cli("flow", "show", run["run_id"], "--json", home=home)
        generate = next(t for t in json.loads(out)["tasks"] if t["id"] == "generate")
        assert generate["status"] == "waiting_for_human"
        shown = generate["review"]["args"]
        assert shown["overwrite"] is True and "光伏效应" in "".join(shown["content"])  # the values, not refs
        assert (handouts / "solar.pdf").read_bytes() == b"old pdf"
        code, out, err = tether_cli("flow", "approve", run["run_id"], "generate", home=home)
        assert code == 0, err
        code, out, err = tether_cli("worker", "--until-idle", home=home, timeout=180)
        assert code == 0, err
    code, out, err = tether_cli("flow", "show", run["run_id"], "--json", home=home)
    assert json.loads(out)["status"] == "completed"
    assert (handouts / "solar.pdf").read_bytes().startswith(b"%PDF")
