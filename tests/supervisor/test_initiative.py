"""Initiative with real processes: signals decided and recorded, proactive messages posted and rated,
schedules fired once per tick by two executors and across a restart, and notifications reaching a fake
Telegram Bot API and a real SMTP server on 127.0.0.1 with the exact call that waits — never approving it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.channels import FakeHttp, FakeSmtp, free_port
from tests.support.helpers import ROOT, tether_cli, wait_for

FLOWS = "tests.support.flowkit:flows"
pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
TOKEN = "123456789:ABCdefGHIjklMNOpqrSTUvwxYZ012345678"


class Worker:
    def __init__(self, home: Path, env: dict[str, str], log: Path, registry: str = FLOWS) -> None:
        self.log = log.open("ab")
        chosen = ["--registry", registry] if registry else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tether.interfaces.cli", *chosen, "worker"],
            env={**os.environ, "TETHER_HOME": str(home), "TETHER_CLI_SERVER": "0", **env}, cwd=ROOT,
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        wait_for(lambda: "runs the flows" in log.read_text(errors="replace"), timeout=60, what="the worker")

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.log.close()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.close()


def _json(home: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    code, out, err = tether_cli("--registry", FLOWS, *args, "--json", home=home, env=env)
    assert code == 0, (args, out, err)
    return json.loads(out)


def _decisions(home: Path) -> list[dict[str, Any]]:
    return _json(home, "initiative", "list", "-n", "1000")["decisions"]


# -- signals, decisions, ratings ---------------------------------------------------------------------


def test_a_seeded_signal_fires_a_proactive_message_and_a_neutral_one_does_not(home: Path) -> None:
    fired = _json(home, "signal", "the nightly backup failed: disk full on /data", "--source", "backup.sh")
    assert fired["fired"] and fired["category"] == "alert" and fired["thread_id"] == "notices-assistant"
    assert "backup.sh: the nightly backup failed" in fired["message"]
    neutral = _json(home, "signal", "heartbeat: nothing new, all good")
    assert not neutral["fired"] and neutral["message"] is None and "under the threshold" in neutral["reason"]
    zh = _json(home, "signal", "服务器宕机了，请尽快处理", "--source", "监控")
    assert zh["fired"] and zh["category"] == "alert"
    assert not _json(home, "signal", "例行同步完成，一切正常")["fired"]
    # The message is a turn of the agent's notices thread, as the person and the model read it.
    steps = _json(home, "trace", "notices-assistant")["steps"]
    assert [s["kind"] for s in steps] == ["proactive", "proactive"]
    assert steps[0]["text"].startswith("⚠ backup.sh:")
    # Every decision is on record with its inputs, silent ones too.
    found = _decisions(home)
    assert len(found) == 4 and found[-1]["signal"]["source"] == "backup.sh"
    assert sum(d["fired"] for d in found) == 2


def test_keys_repeats_and_the_hourly_limit_keep_an_agent_from_spamming(home: Path) -> None:
    first = _json(home, "signal", "deploy failed on web-2", "--key", "ci:991")
    again = _json(home, "signal", "deploy failed on web-2 (retried)", "--key", "ci:991")
    assert again["id"] == first["id"] and again["message"] == first["message"]  # decided once
    repeat = _json(home, "signal", "deploy failed on web-2")
    assert not repeat["fired"] and "said the same" in repeat["reason"]
    _json(home, "signal", "the database is down")
    _json(home, "signal", "certificate expired on mail.example.com")
    held = _json(home, "signal", "disk error on /dev/sdb")
    assert not held["fired"] and held["decided_by"] == "guard" and "in the last hour" in held["reason"]
    assert len([d for d in _decisions(home) if d["fired"]]) == 3


def test_ratings_move_the_agents_threshold_once_per_message(home: Path) -> None:
    (home / "settings.toml").write_text("[initiative]\nmax_per_hour = 20\n")
    posted = _json(home, "signal", "the build failed on main")
    down = _json(home, "initiative", "rate", str(posted["id"]), "down", "--note", "not now")
    assert down["rating"] == -1 and down["rating_note"] == "not now" and down["agent_threshold"] == 0.55
    again = _json(home, "initiative", "rate", str(posted["id"]), "down")
    assert again["agent_threshold"] == 0.55  # rating twice never counts twice
    up = _json(home, "initiative", "rate", str(posted["id"]), "up")
    assert up["agent_threshold"] == pytest.approx(0.48)
    silent = _json(home, "signal", "nothing changed today")
    code, out, _ = tether_cli("initiative", "rate", str(silent["id"]), "up", "--json", home=home)
    assert code == 2 and "posted no message" in json.loads(out)["error"]["message"]
    code, out, _ = tether_cli("initiative", "rate", str(posted["id"]), "meh", "--json", home=home)
    assert code == 2 and "up or down" in json.loads(out)["error"]["message"]
    # A raised threshold silences what used to pass: a reminder scores 0.6.
    for branch in ("alpha", "beta", "gamma"):
        posted = _json(home, "signal", f"the build failed on branch {branch}")
        _json(home, "initiative", "rate", str(posted["id"]), "down")
    assert not _json(home, "signal", "the invoice is due tomorrow")["fired"]


def test_bad_signals_get_one_clear_line(home: Path) -> None:
    for args, said in [
        (("signal", "x", "--kind", "schedule"), "message, outside or file"),
        (("signal", "x", "--priority", "top"), "normal, high or urgent"),
        (("signal", "x", "--agent", "nobody"), "no agent 'nobody'"),
        (("signal", "x" * 5000), "not a signal"),
    ]:
        code, out, _ = tether_cli(*args, "--json", home=home)
        assert code == 2 and said in json.loads(out)["error"]["message"], (args, out)


# -- schedules ---------------------------------------------------------------------------------------


def test_schedules_are_checked_listed_and_removed(home: Path) -> None:
    for args, said in [
        (("schedule", "add", "Bad Name", "--cron", "0 8 * * *"), "short lowercase word"),
        (("schedule", "add", "x", "--cron", "every day"), "not a cron expression"),
        (("schedule", "add", "x", "--cron", "0 8 * * *", "--tz", "Mars/Base"), "not a time zone"),
        (("schedule", "add", "x", "--cron", "0 8 * * *", "--agent", "nobody"), "no agent"),
        (("schedule", "run-now", "ghost"), "no schedule 'ghost'"),
        (("schedule", "remove", "ghost"), "no schedule 'ghost'"),
    ]:
        code, out, _ = tether_cli(*args, "--json", home=home)
        assert code == 2 and said in json.loads(out)["error"]["message"], (args, out)
    made = _json(home, "schedule", "add", "daily", "--cron", "0 8 * * *", "--tz", "Asia/Shanghai")
    assert made["action"] == "report" and made["timezone"] == "Asia/Shanghai"
    code, out, _ = tether_cli("schedule", "add", "daily", "--cron", "0 9 * * *", "--json", home=home)
    assert code == 2 and "exists already" in json.loads(out)["error"]["message"]
    assert [s["name"] for s in _json(home, "schedule", "list")["schedules"]] == ["daily"]
    _json(home, "schedule", "remove", "daily")
    assert _json(home, "schedule", "list")["schedules"] == []


def test_a_schedule_fires_once_per_tick_across_two_executors_and_a_restart(
    home: Path, tmp_path: Path, workers: list[Worker]
) -> None:
    workers += [Worker(home, {}, tmp_path / "w1.log"), Worker(home, {}, tmp_path / "w2.log")]
    _json(
        home,
        "schedule",
        "add",
        "stretch",
        "--cron",
        "*/2 * * * * *",
        "--remind",
        "stand up and stretch 起来活动",
    )

    def ticks(n: int) -> list[dict[str, Any]] | None:
        found = [d for d in _decisions(home) if d["kind"] == "schedule"]
        return found if len(found) >= n else None

    wait_for(lambda: ticks(3), timeout=60, what="three ticks with two executors")
    workers.pop(0).close()  # one executor dies; the other goes on alone
    before = len(ticks(0) or [])
    wait_for(lambda: ticks(before + 2), timeout=60, what="ticks with one executor")
    workers.append(Worker(home, {}, tmp_path / "w3.log"))  # and a new one starts beside it
    before = len(ticks(0) or [])
    wait_for(lambda: ticks(before + 3), timeout=60, what="ticks after the restart")
    _json(home, "schedule", "remove", "stretch")

    def settled() -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        """Every tick decided so far has its message (a tick under way at the removal ends too)."""
        turns = _json(home, "trace", "notices-assistant")["steps"]
        found = ticks(0) or []
        return (found, turns) if len(turns) == len([d for d in found if d["turn"]]) == len(found) else None

    found, turns = wait_for(settled, timeout=60, what="the last ticks to be posted")
    at = Counter(d["signal"]["data"]["at"] for d in found)
    assert max(at.values()) == 1, at  # no tick decided twice
    assert all(d["fired"] and d["category"] == "reminder" for d in found)  # the guards spare what was asked
    assert Counter(d["turn"] for d in found).most_common(1)[0][1] == 1  # one message per tick
    assert {t["text"] for t in turns} == {"stand up and stretch 起来活动"}
    # DBOS ran one workflow per tick, however many executors saw it come.
    from tether.runtime import Runtime
    from tether.supervisor import durable

    with Runtime.open(home) as runtime, durable.client(runtime) as c:
        runs = c.list_workflows(name=durable.SCHEDULE_WORKFLOW, load_input=False, load_output=False)
    assert len(runs) == len({r.workflow_id for r in runs}) >= len(found)


def test_the_daily_report_says_what_failed_and_what_waits(
    home: Path, tmp_path: Path, workers: list[Worker]
) -> None:
    workers.append(Worker(home, {}, tmp_path / "w.log"))
    flow = tmp_path / "broken.yaml"
    flow.write_text(
        yaml.safe_dump({"caller": "cli", "tasks": [{"id": "b", "call": {"task": "f.broken", "args": {}}}]})
    )
    _, out, _ = tether_cli("--registry", FLOWS, "flow", "run", str(flow), "--json", home=home)
    run = json.loads(out)
    assert run["status"] == "waiting_for_human"  # a failed task asks the person by default
    _json(home, "schedule", "add", "daily", "--cron", "0 8 * * *")
    _json(home, "schedule", "run-now", "daily")
    posted = wait_for(
        lambda: [d for d in _decisions(home) if d["kind"] == "schedule" and d["message"]],
        timeout=60,
        what="the report",
    )[0]
    assert posted["category"] == "report" and posted["message"].startswith("Daily report:")
    assert "Waiting for you (1)" in posted["message"] and run["run_id"] in posted["message"]
    # Cancelled, the run ends: a signal of its own, which the agent keeps quiet about (the person
    # stopped it), and the next report counts it.
    _json(home, "flow", "cancel", run["run_id"])
    ended = wait_for(
        lambda: [d for d in _decisions(home) if d["kind"] == "ended"], timeout=60, what="the end"
    )
    assert not ended[0]["fired"] and "cancelled" in ended[0]["reason"]


# -- notifications -----------------------------------------------------------------------------------


@pytest.fixture
def telegram() -> Iterator[FakeHttp]:
    server = FakeHttp()
    yield server
    server.close()


@pytest.fixture
def smtp() -> Iterator[FakeSmtp]:
    server = FakeSmtp()
    yield server
    server.close()


def test_an_approval_waiting_reaches_telegram_and_email_with_the_exact_call_and_approves_nothing(
    home: Path, tmp_path: Path, workers: list[Worker], telegram: FakeHttp, smtp: FakeSmtp
) -> None:
    (home / "settings.toml").write_text(f'[initiative]\ntelegram_api = "{telegram.url}"\n')
    env = {
        "TETHER_API_KEY_NOTIFY_PHONE": f"tgram://{TOKEN}/4242/",
        "TETHER_API_KEY_NOTIFY_MAIL": smtp.address(),
    }
    added = _json(home, "notify", "add", "phone", "--on", "approval", env=env)
    assert added["scheme"] == "tgram" and added["address_from"] == "TETHER_API_KEY_NOTIFY_PHONE"
    _json(home, "notify", "add", "mail", "--on", "approval,proactive", env=env)
    listed = _json(home, "notify", "list", env=env)["channels"]
    assert [c["name"] for c in listed] == ["mail", "phone"] and TOKEN not in json.dumps(listed)
    workers.append(Worker(home, env, tmp_path / "w.log", registry=""))  # the demo's tasks
    tether_cli("run", "启动游戏", home=home)
    code, out, _ = tether_cli("run", "分解四星遗器", "--new-thread", "s1", "--json", home=home)
    assert code == 3 and json.loads(out)["status"] == "needs_confirmation"
    sent = wait_for(lambda: telegram.received, timeout=60, what="the fake Telegram to be told")
    path, body = sent[0]
    assert path == f"/bot{TOKEN}/sendMessage" and body["chat_id"] == 4242
    assert "demo.salvage_relics" in body["text"] and '"rarity": 4' in body["text"].replace("&quot;", '"')
    assert "tether chat --thread s1" in body["text"]
    mail = wait_for(lambda: smtp.messages, timeout=60, what="the SMTP server to be given a message")[0]
    assert "demo.salvage_relics" in mail and "Nothing runs until you answer" in mail
    # Told is not approved: nothing was salvaged, the call still waits.
    code, out, _ = tether_cli("task", "run", "demo.status", "--json", home=home)
    assert json.loads(out)["data"]["salvaged_total"] == 0
    log = _json(home, "notify", "log")["notifications"]
    assert {(n["channel"], n["event"], n["status"]) for n in log} == {
        ("phone", "approval", "sent"),
        ("mail", "approval", "sent"),
    }
    # A proactive message goes to the channel that takes it.
    _json(home, "signal", "the nightly backup failed", env=env)
    wait_for(lambda: len(smtp.messages) == 2, timeout=60, what="the proactive message by e-mail")
    assert "the nightly backup failed" in smtp.messages[1] and len(telegram.received) == 1
    tether_cli("task", "run", "demo.exit_game", home=home)


def test_a_failing_channel_is_retried_with_backoff_and_reported_never_blocking(
    home: Path, tmp_path: Path, workers: list[Worker]
) -> None:
    env = {"TETHER_API_KEY_NOTIFY_HOOK": f"json://127.0.0.1:{free_port()}/hook"}  # nobody listens there
    _json(home, "notify", "add", "hook", "--on", "proactive", env=env)
    workers.append(Worker(home, env, tmp_path / "w.log"))
    posted = _json(home, "signal", "the nightly backup failed", env=env)
    assert posted["fired"]  # the signal's command never waited on the channel

    def retried() -> dict[str, Any] | None:
        found = _json(home, "notify", "log")["notifications"]
        return found[0] if found and found[0]["attempts"] >= 2 else None

    item = wait_for(retried, timeout=60, what="the second attempt")
    assert (
        item["status"] in ("pending", "sending")
        and item["error"]
        and env["TETHER_API_KEY_NOTIFY_HOOK"] not in item["error"]  # the address (a secret) is never logged
    )
    code, out, _ = tether_cli("notify", "test", "hook", "--json", home=home, env=env)
    assert code == 1 and json.loads(out)["sent"] is False and json.loads(out)["error"]


def test_bad_channels_get_one_clear_line(home: Path) -> None:
    env = {"TETHER_API_KEY_NOTIFY_X": "nonsense-address"}
    for args, said in [
        (("notify", "add", "Bad Name"), "short lowercase word"),
        (("notify", "add", "x", "--on", "everything"), "approval, review, ended, proactive"),
        (("notify", "add", "x"), "Apprise does not understand"),
        (("notify", "remove", "ghost"), "no channel 'ghost'"),
        (("notify", "test", "ghost"), "no channel 'ghost'"),
    ]:
        code, out, _ = tether_cli(*args, "--json", home=home, env=env)
        assert code == 2 and said in json.loads(out)["error"]["message"], (args, out)


def test_a_notice_carries_its_message_when_its_event_is_out(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page reloads its notices when a proactive message's event arrives: a decision whose message
    was written only after that event showed an empty notice (the suite caught it under load). The
    decision carries its message before the thread's turn, and its event, are written."""
    import asyncio

    from tether.agent.decider import Signal
    from tether.runtime import Runtime
    from tether.supervisor import initiative

    seen: list[str | None] = []
    with Runtime.open(home) as runtime, Runtime.open(home) as reader:
        posting = runtime.threads.post

        def post(thread_id: str, *args: Any, **kwargs: Any) -> Any:
            # what a page reading the decisions as this turn is written finds
            seen.extend(d.message for d in reader.initiative.decisions(fired=True, limit=1))
            return posting(thread_id, *args, **kwargs)

        monkeypatch.setattr(runtime.threads, "post", post)
        signal = Signal(kind="message", text="服务器宕机了", source="监控", key="t:1")
        record = asyncio.run(initiative.consider(runtime, signal))
        assert record.fired and record.turn is not None
        assert seen == [record.message] and "服务器宕机了" in (record.message or "")

        # A message that could not be posted (the person stayed in a turn there) leaves no notice.
        monkeypatch.setattr(initiative, "POST_TRIES", 1)
        monkeypatch.setattr(runtime.threads, "post", lambda *args, **kwargs: None)
        other = Signal(kind="message", text="数据库宕机了", source="监控", key="t:2")
        kept = asyncio.run(initiative.consider(runtime, other))
        assert kept.fired and runtime.initiative.get(kept.decision_id).message is None  # type: ignore[union-attr]
