"""`tether chat` at a real terminal (a pty, driven by pexpect): answers people give, line editing,
Ctrl-C that cancels only the turn, and leaving with background jobs running."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from tests.support.helpers import ROOT, tether_cli, wait_for

TIMEOUT = 30


@pytest.fixture
def chat(home: Path) -> Iterator[pexpect.spawn]:
    tether_cli("task", "run", "demo.start_game", home=home)
    child = pexpect.spawn(
        sys.executable,
        ["-m", "tether.interfaces.cli", "chat"],
        cwd=str(ROOT),
        env={
            **os.environ,
            "TETHER_HOME": str(home),
            "COLUMNS": "100",
            "TETHER_STOP_GRACE_COOPERATIVE_S": "0.5",
        },
        encoding="utf-8",
        timeout=TIMEOUT,
        dimensions=(40, 100),
    )
    child.expect("you> ")
    yield child
    if child.isalive():
        child.sendline("exit")
        with_jobs = child.expect([r"\(s\)\?", pexpect.EOF])
        if with_jobs == 0:
            child.sendline("s")
            child.expect(pexpect.EOF)
    child.close(force=True)


def salvaged(home: Path) -> int:
    _, out, _ = tether_cli("task", "run", "demo.status", "--json", home=home)
    return json.loads(out)["data"]["salvaged_total"]


def active_jobs(home: Path) -> list[dict]:
    _, out, _ = tether_cli("job", "list", "--active", "--json", home=home)
    return json.loads(out)


def test_confirmations_take_the_words_people_use(chat: pexpect.spawn, home: Path) -> None:
    chat.sendline("分解四星遗器")
    chat.expect("确认执行吗？（是/否）")
    chat.sendline("maybe")
    chat.expect("请回答")  # not "invalid input": it says what it accepts, and asks again
    chat.expect("确认执行吗？（是/否）")
    chat.sendline("是")
    chat.expect("tether>.*salvage_relics")
    chat.expect("you> ")
    assert salvaged(home) == 2
    chat.sendline("分解三星遗器")
    chat.expect("确认执行吗")
    chat.sendline("不要")
    chat.expect("取消")
    chat.expect("you> ")
    assert salvaged(home) == 2
    chat.sendline("salvage 2-star relics")
    chat.expect(r"Run it\? \(yes/no\)")
    chat.sendline("n")
    chat.expect("cancelled")
    assert salvaged(home) == 2


def test_up_arrow_recalls_the_last_line(chat: pexpect.spawn) -> None:
    chat.sendline("游戏状态")
    chat.expect("tether>.*demo.status")
    chat.expect("you> ")
    chat.send("\x1b[A")  # ↑
    chat.expect("游戏状态")  # the line comes back, editable, instead of ^[[A
    chat.send("\r")
    chat.expect("tether>.*demo.status")
    assert "^[[A" not in (chat.before or "")


def test_ctrl_c_cancels_the_turn_and_keeps_the_conversation(home: Path) -> None:
    tether_cli("task", "run", "demo.start_game", home=home)
    child = pexpect.spawn(
        sys.executable,
        ["-m", "tether.interfaces.cli", "chat"],
        cwd=str(ROOT),
        env={**os.environ, "TETHER_HOME": str(home), "TETHER_DEMO_STEP_S": "5"},
        encoding="utf-8",
        timeout=TIMEOUT,
    )
    try:
        child.expect("you> ")
        child.sendline("刷 5 次金币")
        child.expect("decides")  # the farm is under way
        child.expect(r"demo\.farm_instance · \d+% · attempt \d/5")  # its progress, live, in the spinner line
        wait_for(lambda: any(j["task_id"] == "demo.farm_instance" for j in active_jobs(home)))
        child.sendintr()
        child.expect("已取消本轮，对话继续")
        child.expect("you> ")
        wait_for(lambda: not active_jobs(home), timeout=20)  # the cancelled turn's job was stopped
        child.sendline("游戏状态")
        child.expect("tether>.*demo.status")
        child.sendline("exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


@pytest.mark.parametrize("answer", ["s", "k"])
def test_leaving_with_background_jobs_asks_keep_or_stop(chat: pexpect.spawn, home: Path, answer: str) -> None:
    chat.sendline("后台一直刷金币")
    chat.expect("tether>.*后台运行")
    chat.expect("you> ")
    chat.sendeof()  # Ctrl-D
    chat.expect("demo.loop_farm")
    chat.expect(r"保留（k）还是停止（s）|keep them \(k\) or stop them \(s\)")
    chat.sendline(answer)
    chat.expect(pexpect.EOF)
    jobs = active_jobs(home)
    if answer == "s":
        assert jobs == []
    else:  # kept: it outlives the chat, detached, and says how to stop it
        assert "tether job stop" in (chat.before or "")
        assert [j["task_id"] for j in jobs] == ["demo.loop_farm"]
        job, thread = jobs[0]["execution_id"], jobs[0]["data"]["origin"].removeprefix("thread:")
        _, listed, _ = tether_cli("job", "list", home=home, COLUMNS="100")
        assert job in listed  # the person's terminal sees it
        # A new chat cannot see another conversation's jobs: it says so at once, and exactly how to
        # reach this one (its thread, tether job list, tether job stop).
        said = subprocess.run(
            [sys.executable, "-m", "tether.interfaces.cli", "chat"],
            input="exit\n",
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "TETHER_HOME": str(home), "COLUMNS": "100"},
            cwd=ROOT,
        ).stdout
        assert f"tether chat --thread {thread}" in said and f"tether job stop {job}" in said, said
        tether_cli("job", "stop", job, home=home)
