"""What a person sees: tables that fit 80 columns with whole ids, unique prefixes, parameters listed,
the version, and replies in one language."""

import json
from pathlib import Path

from tests.support.helpers import tether_cli
from tether.events import ToolFinished
from tether.interfaces.render import human_duration, human_time
from tether.models.offline import Texts


def test_job_list_fits_80_columns_and_never_cuts_an_id(home: Path) -> None:
    tether_cli("task", "run", "demo.start_game", home=home)
    code, out, _ = tether_cli("task", "run", "demo.loop_farm", "--detach", "--json", home=home)
    eid = json.loads(out)["execution_id"]
    code, out, _ = tether_cli("job", "list", home=home, COLUMNS="80")
    assert code == 0 and eid in out and all(len(line) <= 80 for line in out.splitlines()), out
    code, out, _ = tether_cli("job", "status", eid[:15], home=home)  # a unique prefix will do
    assert code == 0 and eid in out and "running" in out, (out, _)
    code, out, _ = tether_cli("job", "status", eid[-5:], home=home)  # or its last characters
    assert code == 0 and eid in out and "running" in out, (out, _)
    code, out, _ = tether_cli("job", "stop", eid[-6:], home=home)
    assert code == 0 and "stopped" in out
    code, out, _ = tether_cli("job", "status", eid[:2], home=home)  # too short to mean anything
    assert code == 2
    tether_cli("task", "run", "demo.exit_game", home=home)


def test_tasks_lists_parameters_and_allowed_values_within_80_columns(home: Path) -> None:
    code, out, _ = tether_cli("tasks", home=home, COLUMNS="80")
    assert code == 0 and all(len(line) <= 80 for line in out.splitlines())
    assert "demo.farm_instance" in out and "instance_type (required)" in out and "拟造花萼（金）" in out
    assert "attempts (default 1): integer 1–99" in out and "rarity (required): 2, 3, 4" in out


def test_version(home: Path) -> None:
    code, out, _ = tether_cli("--version", home=home)
    assert code == 0 and out.startswith("tether ") and out.strip().split()[1][0].isdigit()


def test_replies_in_chinese_carry_no_english_status_words() -> None:
    zh = Texts(zh=True)
    running = {"task_id": "demo.loop_farm", "execution_id": "e1", "status": "running"}
    text = zh.job({**running, "data": {"progress": {"fraction": 0.4, "message": "round 2 of 5"}}})
    assert "正在运行" in text and "40%" in text and "running" not in text and "round" not in text
    stopped = zh.result("demo__loop_farm", {"status": "stopped", "message": "stopped after 3 rounds"})
    assert "已停止" in stopped and " stopped：" not in stopped
    blocked = {
        "status": "rejected",
        "message": "resource automation is in use by execution x (demo.loop_farm); stop it",
        "data": {"blocked_by": "x", "blocking_task": "demo.loop_farm", "resource": "automation"},
    }
    assert "正被任务 x（demo.loop_farm）占用" in zh.result("demo__salvage_relics", blocked)


def test_the_live_view_does_not_say_running_running(capsys: object) -> None:
    from tether.interfaces import render
    from tether.interfaces.turnview import render_event

    render.reset()
    event = ToolFinished(
        topic="thread:t", thread_id="t", turn=1, index=1, tool="demo.loop_farm", args={},
        result={"status": "running", "message": "running"},
    )  # fmt: skip
    render_event(event)
    shown = capsys.readouterr().err  # type: ignore[attr-defined]
    assert "running running" not in shown and "demo.loop_farm → running" in shown


def test_durations_and_times_are_for_people() -> None:
    assert human_duration(0.4213) == "0.42 s" and human_duration(125) == "2 min 5 s"
    assert human_duration(3725) == "1 h 2 min"
    assert ":" in human_time(1764763200.0) and "1764763200" not in human_time(1764763200.0)


def test_an_argument_error_names_the_task_once_and_a_huge_value_is_clipped(home: Path) -> None:
    code, out, _ = tether_cli("task", "run", "demo.farm_instance", "-p", "instance_type=nope", home=home)
    assert code == 2 and out.count("demo.farm_instance") == 1, out
    from tether.errors import MAX_MESSAGE_CHARS, ConfigError

    assert len(ConfigError("x" * 900_000).message) <= MAX_MESSAGE_CHARS  # an error never echoes a page
