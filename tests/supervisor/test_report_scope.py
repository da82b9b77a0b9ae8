"""The daily report of a home that shares its database with another lists only its own records."""

from __future__ import annotations

from pathlib import Path

from tether.runtime import Runtime
from tether.store.threads import ThreadState
from tether.supervisor.report import extract, gather


def test_two_homes_on_one_database_each_report_only_their_own_runs_and_waiting_calls(tmp_path: Path) -> None:
    shared = tmp_path / "shared.db"
    homes = []
    for name in ("a", "b"):
        home = tmp_path / name
        home.mkdir()
        (home / "settings.toml").write_text(f'[store]\ndatabase_url = "sqlite:///{shared}"\n')
        homes.append(home)
    with Runtime.open(homes[0]) as a, Runtime.open(homes[1]) as b:
        assert a.installation.id != b.installation.id
        for runtime, name in ((a, "mine"), (b, "theirs")):
            runtime.runs.create(f"run-{name}", goal=f"the {name} goal", plan={"tasks": []}, caller="cli")
            runtime.runs.set_status(f"run-{name}", "failed", f"{name} broke")
            runtime.runs.create(f"run-{name}-2", goal=f"{name} waits", plan={"tasks": []}, caller="cli")
            runtime.runs.set_status(f"run-{name}-2", "waiting_for_human")
            thread = f"t-{name}"
            runtime.threads.save(ThreadState(thread_id=thread))
            assert runtime.threads.begin_turn(thread, "salvage", (1, 1.0), lambda pid, started: True) == 1
            state = runtime.threads.load(thread)
            assert state is not None
            state.pending = {"tool": f"{name}.salvage"}
            runtime.threads.save(state)
        report = extract(gather(a))
    assert "the mine goal" in report and "mine waits" in report and "mine.salvage" in report
    assert "theirs" not in report, report
