import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.helpers import ROOT, tether_cli


def test_run_json_is_one_document_with_steps(home: Path) -> None:
    code, out, err = tether_cli(
        "run", "启动游戏，然后刷 3 次金币副本", "--new-thread", "t1", "--json", home=home
    )
    assert code == 0, err
    document = json.loads(out)
    assert set(document) >= {"thread_id", "status", "final", "steps", "model"}
    assert document["status"] == "completed" and document["model"] == "offline"
    tools = [s for s in document["steps"] if s["kind"] == "tool"]
    assert [s["tool"] for s in tools] == ["demo.start_game", "demo.farm_instance"]
    assert tools[1]["args"] == {"instance_type": "拟造花萼（金）", "instance_name": "藏珍之蕾", "attempts": 3}
    assert tools[1]["result"]["status"] == "completed" and tools[1]["result"]["execution_id"]
    assert set(document["steps"][0]) == {"index", "kind", "tool", "args", "result"}


def test_run_waits_for_confirmation_and_executes_nothing(home: Path) -> None:
    tether_cli("run", "启动游戏", home=home)
    code, out, _ = tether_cli("run", "分解四星遗器", "--new-thread", "s1", "--json", home=home)
    document = json.loads(out)
    assert code == 3 and document["status"] == "needs_confirmation"  # a distinct exit code
    code, out, err = tether_cli("run", "分解四星遗器", "--new-thread", "s0", home=home)
    assert code == 3 and "tether run --thread s0 --confirm" in err and 'tether run --thread s0 "是"' in err
    code, out, err = tether_cli("run", "salvage the 4-star relics", "--new-thread", "e0", home=home)
    assert code == 3 and 'tether run --thread e0 "yes"' in err and "是" not in err  # the thread's language
    code, out, _ = tether_cli("task", "run", "demo.status", "--json", home=home)
    assert json.loads(out)["data"]["salvaged_total"] == 0
    # --confirm answers the one call the thread waits on; it is not a blanket for a new turn.
    code, out, _ = tether_cli("run", "分解四星遗器", "--confirm", "--json", home=home)
    assert code == 2 and "--thread ID --confirm" in json.loads(out)["error"]["message"]
    code, out, _ = tether_cli("run", "--thread", "other", "--confirm", "--json", home=home)
    assert code == 2 and "no thread 'other'" in json.loads(out)["error"]["message"]
    tether_cli("run", "游戏状态", "--new-thread", "other", home=home)
    code, out, _ = tether_cli("run", "--thread", "other", "--confirm", "--json", home=home)
    assert code == 2 and "not waiting" in json.loads(out)["error"]["message"]
    code, out, _ = tether_cli("run", "--thread", "s1", "--confirm", "--json", home=home)
    assert json.loads(out)["status"] == "completed", out
    code, out, _ = tether_cli("task", "run", "demo.status", "--json", home=home)
    assert json.loads(out)["data"]["salvaged_total"] == 2
    # Confirmed once: a second --confirm finds nothing waiting and runs nothing.
    code, out, _ = tether_cli("run", "--thread", "s1", "--confirm", "--json", home=home)
    assert code == 2
    tether_cli("task", "run", "demo.exit_game", home=home)


def test_threads_and_trace(home: Path) -> None:
    tether_cli("run", "查看游戏状态", "--new-thread", "th-x", home=home)
    code, out, _ = tether_cli("threads", "--json", home=home)
    assert code == 0 and json.loads(out)[0]["thread_id"] == "th-x"
    code, out, _ = tether_cli("trace", "th-x", "--json", home=home)
    steps = json.loads(out)["steps"]
    assert [s["step_id"] for s in steps][:2] == ["th-x:1:0", "th-x:1:1"]
    code, out, _ = tether_cli("trace", "th-x", home=home)
    assert code == 0 and "demo.status" in out
    code, out, _ = tether_cli("trace", "th-", home=home)  # a unique prefix is enough
    assert code == 0 and "demo.status" in out
    code, out, err = tether_cli("run", "查看游戏状态", "--thread", "th-", home=home)
    assert code == 0 and "thread th-x" in out, err
    code, out, err = tether_cli("run", "查看游戏状态", "--thread", "th-y", home=home)  # a typo
    assert code == 2 and "no thread 'th-y'" in err and "th-x" in err
    code, _, _ = tether_cli("threads", "--json", home=home)
    assert len(json.loads(tether_cli("threads", "--json", home=home)[1])) == 1  # nothing new was made
    code, out, _ = tether_cli("trace", "nope", "--json", home=home)
    assert code == 2 and json.loads(out)["error"]["code"] == "not_found"


def test_chat_keeps_working_while_a_background_job_runs_and_asks_inline(home: Path) -> None:
    lines = ["启动游戏", "后台一直刷金币", "进度怎么样", "停下", "分解四星遗器", "y", "退出游戏", "y", "exit"]
    proc = subprocess.run(
        [sys.executable, "-m", "tether.interfaces.cli", "chat", "--new-thread", "c1"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "TETHER_HOME": str(home), "TETHER_STOP_GRACE_COOPERATIVE_S": "0.5"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "已在后台运行" in proc.stdout
    assert "running" in proc.stdout  # the status query answered while the loop held the lock
    assert "salvaged 2 4-star relics" in proc.stdout
    assert "stopped" in proc.stdout and "the game has exited" in proc.stdout


def test_two_answers_to_one_question_run_the_call_once(home: Path) -> None:
    """Review: two `--confirm` at once (a double click, two terminals) both ran the salvage."""
    tether_cli("task", "run", "demo.start_game", home=home)
    _, out, _ = tether_cli("run", "分解三星遗器", "--new-thread", "s2", "--json", home=home)
    assert json.loads(out)["status"] == "needs_confirmation"
    env = {**os.environ, "TETHER_HOME": str(home)}
    answers = [
        subprocess.Popen(
            [sys.executable, "-m", "tether.interfaces.cli", "run", "--thread", "s2", "--confirm", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        for _ in range(3)
    ]
    outcomes = [json.loads(p.communicate(timeout=120)[0]) for p in answers]
    ran = [o for o in outcomes if o.get("status") == "completed"]
    refused = [o for o in outcomes if "error" in o]
    assert len(ran) == 1 and len(refused) == 2, outcomes
    _, out, _ = tether_cli("task", "run", "demo.status", "--json", home=home)
    assert json.loads(out)["data"]["salvaged_total"] == 5  # one 3-star salvage, not three
    tether_cli("task", "run", "demo.exit_game", home=home)


def test_a_thread_id_that_cannot_be_one_is_refused_before_anything_is_recorded(home: Path) -> None:
    code, out, _ = tether_cli("run", "查看游戏状态", "--new-thread", "a" * 300, "--json", home=home)
    assert code == 2 and "thread id" in json.loads(out)["error"]["message"]
    code, out, _ = tether_cli("threads", "--json", home=home)
    assert json.loads(out) == []


def test_run_with_an_image_on_the_offline_model_says_it_cannot_see_and_a_non_image_is_refused(
    home: Path, tmp_path: Path
) -> None:
    from tests.agent.test_images import PNG

    picture = tmp_path / "dot.png"
    picture.write_bytes(PNG)
    code, out, err = tether_cli("run", "这张图里是什么？", "--image", str(picture), "--json", home=home)
    assert code == 1, (out, err)
    turn = json.loads(out)
    assert "我看不到图片" in turn["final"] and not [s for s in turn["steps"] if s["kind"] == "tool"]
    fake = tmp_path / "fake.png"
    fake.write_text("<svg/>")
    code, out, err = tether_cli("run", "what is this?", "--image", str(fake), "--json", home=home)
    assert code == 2 and "PNG, JPEG, GIF or WebP" in json.loads(out)["error"]["message"], (out, err)
    assert len(list((home / "images").iterdir())) == 1  # the refused file was never kept


def test_trace_shows_a_delegation_as_a_tree(home: Path) -> None:
    """Who asked whom, what it did, what it returned: the sub-agent's steps under the call that asked."""
    assert tether_cli("agents", "create", "lead", "-g", "team,automation", home=home)[0] == 0
    assert (
        tether_cli("agents", "create", "looker", "-g", "automation", "--alias", "看守助手", home=home)[0] == 0
    )
    code, _, err = tether_cli(
        "run", "--agent", "lead", "让看守助手查看游戏状态", "--new-thread", "tr-1", home=home
    )
    assert code == 0, err
    code, out, _ = tether_cli("trace", "tr-1", "--json", home=home)
    delegated = next(s for s in json.loads(out)["steps"] if s["kind"] == "tool")
    child = delegated["delegation"]
    assert child["thread_id"] == "tr-1.d1-1"
    assert [s["tool"] for s in child["steps"] if s["kind"] == "tool"] == ["demo.status"]
    code, out, _ = tether_cli("trace", "tr-1", home=home)
    lines = out.splitlines()
    nested = [line for line in lines if line.startswith("     │ ")]
    assert code == 0 and "└─ in thread tr-1.d1-1:" in out
    assert any("demo.status" in line for line in nested) and not any(
        "agents.delegate" in line for line in nested
    )


def test_memory_is_listed_searched_forgotten_and_a_private_thread_is_not_remembered(home: Path) -> None:
    """What the assistant remembers, as the person sees and changes it: `tether memory`, `threads private`."""
    assert tether_cli("agents", "edit", "assistant", "-g", "all,memory", home=home)[0] == 0
    code, _, err = tether_cli("run", "记住：我的经理叫王芳", "--new-thread", "m-1", home=home)
    assert code == 0, err
    assert tether_cli("run", "查看游戏状态", "--new-thread", "m-2", home=home)[0] == 0
    code, out, _ = tether_cli("memory", "--json", home=home)
    listed = json.loads(out)
    assert code == 0 and [f["text"] for f in listed["facts"]] == ["我的经理叫王芳"]
    assert listed["counts"]["turn"] == 1  # the turn that noted a fact is remembered as the fact
    code, out, _ = tether_cli("memory", "search", "经理叫什么", "--json", home=home)
    hits = json.loads(out)["hits"]
    assert code == 0 and hits[0]["text"] == "我的经理叫王芳" and hits[0]["thread_id"] == "m-1"
    code, out, _ = tether_cli("memory", "search", "经理", home=home)
    assert code == 0 and "我的经理叫王芳" in out and f"#{hits[0]['id']}" in out
    # Forgotten: gone from the list and from what the agent recalls.
    assert tether_cli("memory", "forget", str(hits[0]["id"]), home=home)[0] == 0
    code, out, _ = tether_cli("run", "我上次说我的经理叫什么？", "--new-thread", "m-3", home=home)
    assert "王芳" not in out and "没有找到" in out, out
    code, out, _ = tether_cli("memory", "forget", str(hits[0]["id"]), "--json", home=home)
    assert code == 2 and "no memory" in json.loads(out)["error"]["message"]
    # A private thread: what it said is forgotten, and nothing more from it is kept.
    code, out, _ = tether_cli("threads", "private", "m-2", "--json", home=home)
    assert code == 0 and json.loads(out) == {"thread_id": "m-2", "private": True}
    tether_cli("run", "查看游戏状态", "--thread", "m-2", home=home)
    found = json.loads(tether_cli("memory", "search", "查看游戏状态", "--json", home=home)[1])["hits"]
    assert all(h["thread_id"] != "m-2" for h in found)
    code, out, _ = tether_cli("memory", "--agent", "nobody", "--json", home=home)
    assert code == 2 and "agents: assistant" in json.loads(out)["error"]["message"]


def test_the_second_of_two_confirmed_calls_ends_with_both_results_not_a_refusal(home: Path) -> None:
    """ "A, then B": yes to A, yes to B — the reply said "I can't do 'yes'" and listed every tool."""
    tether_cli("run", "启动游戏", home=home)
    code, _, _ = tether_cli("run", "分解四星遗器，然后分解三星遗器", "--new-thread", "c2", home=home)
    assert code == 3
    code, _, _ = tether_cli("run", "--thread", "c2", "是", home=home)
    assert code == 3  # the second call waits for its own yes
    code, out, _ = tether_cli("run", "--thread", "c2", "是", "--json", home=home)
    final = json.loads(out)["final"]
    assert code == 0 and "salvaged 2 4-star" in final and "salvaged 5 3-star" in final, final
    assert "做不到" not in final and "没有对应的工具" not in final
    tether_cli("run", "salvage 4-star relics, then salvage 3-star relics", "--new-thread", "e2", home=home)
    tether_cli("run", "--thread", "e2", "yes", home=home)
    code, out, _ = tether_cli("run", "--thread", "e2", "no", "--json", home=home)
    assert json.loads(out)["final"].startswith("OK, cancelled"), out  # in the request's language
    tether_cli("task", "run", "demo.exit_game", home=home)
