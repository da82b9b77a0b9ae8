from pathlib import Path

from tests.support.helpers import tether_cli


def test_demo_tour_runs_end_to_end_on_a_fresh_home(home: Path) -> None:
    code, out, err = tether_cli("demo", "--core", home=home, timeout=120, TETHER_STOP_GRACE_KILL_S="2")
    assert code == 0, err
    for expected in (
        "is not an allowed value",  # the alias rejection
        "farmed 藏珍之蕾",
        "stop_step: cooperative",
        "stop_step: kill",
        "needs_confirmation: true",
        "exit_code: 3",
        "Tour done.",
    ):
        assert expected in out, expected


def test_agent_tour_on_the_offline_model(home: Path) -> None:
    code, out, err = tether_cli("demo", home=home, timeout=120)
    assert code == 0, err
    for expected in (
        "farmed 藏珍之蕾",  # 启动游戏，然后刷 3 次金币副本
        "is running in the background",
        "确认执行吗",  # the destructive call waits for the person
        "salvaged 2 4-star relics",
        "demo.exit_game",
        "Tour done.",
    ):
        assert expected in out, expected
