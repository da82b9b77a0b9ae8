"""The client against local OpenAI-compatible servers (llama.cpp's llama-server, llama-cpp-python):
what they need that the hosted APIs forgive, replayed from cassettes of their exchanges and run live
against a server that behaves like them. (The cassettes' recorded requests carry ``temperature``
since tether sends it; the servers' answers are as recorded.)"""

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.fake_openai import FakeOpenAI, chunk, completion
from tests.support.llama import llama_chunk, llama_completion
from tether.errors import ModelConnectionError, ModelOutputError
from tether.models.base import ModelResponse, ToolCall, ToolDef, TurnContext
from tether.models.openai_compat import LOCAL_TIMEOUT_S, OpenAICompatModel, default_timeout
from tether.resilience import ResilienceRegistry, RetryPolicy
from tether.testing import Cassette

CASSETTES = Path(__file__).parent / "cassettes"
START = ToolDef(
    name="demo__start_game",
    description="Start the game.",
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
)
FARM = ToolDef(
    name="demo__farm_instance",
    description="Farm.",
    parameters={
        "type": "object",
        "properties": {"instance_name": {"type": "string"}, "attempts": {"type": "integer"}},
        "required": ["instance_name"],
        "additionalProperties": False,
    },
)
MESSAGES = [
    {"role": "system", "content": "You are tether's assistant."},
    {"role": "user", "content": "start the game"},
]


def client(url: str, *, attempts: int = 3, stream: bool = False, **kwargs: Any) -> OpenAICompatModel:
    return OpenAICompatModel(
        model="qwen2.5-coder-1.5b",
        base_url=url,
        stream=stream,
        resilience=ResilienceRegistry(
            RetryPolicy(max_attempts=attempts, base_delay_s=0.01, max_delay_s=0.02)
        ),
        **kwargs,
    )


def replaying(name: str, *, stream: bool) -> tuple[OpenAICompatModel, Cassette]:
    cassette = Cassette(CASSETTES / f"{name}.json", mode="replay")
    model = client(
        "http://127.0.0.1:8080/v1",
        stream=stream,
        http_client=httpx.AsyncClient(transport=cassette.transport()),
    )
    return model, cassette


# -- 1. tool_choice is sent whenever tools are offered ---------------------------------------------


def test_tools_go_with_tool_choice_auto_or_a_strict_server_drops_them() -> None:
    fake = FakeOpenAI(strict=True)
    try:
        fake.reply(completion(tool_calls=[("c1", "demo__start_game", "{}")]))
        fake.reply(completion("hello"))
        response = asyncio.run(client(fake.url).complete(MESSAGES, [START]))
        assert [c.name for c in response.tool_calls] == ["demo__start_game"]
        assert fake.requests[0]["tool_choice"] == "auto"
        asyncio.run(client(fake.url).complete(MESSAGES, []))
        assert "tool_choice" not in fake.requests[1] and "tools" not in fake.requests[1]
    finally:
        fake.close()


# -- 2. an assistant message never carries content: null ------------------------------------------


def test_history_with_tool_calls_is_sent_without_null_content() -> None:
    fake = FakeOpenAI(strict=True)
    try:
        call = ToolCall(id="call_0", name="demo__start_game", arguments={})
        assistant = ModelResponse(tool_calls=(call,)).to_message()
        assert assistant["content"] == ""  # what the session stores
        legacy = {**assistant, "content": None}  # what an older thread may hold
        history = [*MESSAGES, legacy, {"role": "tool", "tool_call_id": "call_0", "content": "{}"}]
        fake.reply(llama_completion("The game is running."))
        response = asyncio.run(client(fake.url, attempts=1).complete(history, [START]))
        assert response.text == "The game is running."
        assert all(m.get("content") is not None for m in fake.requests[0]["messages"])
    finally:
        fake.close()


def test_replay_llama_cpp_python_history_with_tool_calls() -> None:
    """The recorded request has content "" and tool_choice: sending null or no tool_choice differs from
    the recording and fails the replay (the server answered HTTP 500 to null)."""
    model, cassette = replaying("llama_cpp_python_history_with_tool_calls", stream=False)
    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "demo__start_game", "arguments": "{}"},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_0",
            "name": "demo__start_game",
            "content": '{"status": "completed", "message": "the game is running"}',
        },
    ]
    response = asyncio.run(model.complete(history, [START]))
    assert response.text == "The game is running." and response.usage.prompt_tokens == 812
    cassette.assert_consumed()


# -- 4. a stream that ends without a finish reason is not an answer --------------------------------


@pytest.mark.parametrize("done", [False, True])
def test_a_stream_without_a_finish_reason_is_an_error_and_is_retried(done: bool) -> None:
    fake = FakeOpenAI()
    try:
        fake.stream([llama_chunk("The game")], done=done)
        fake.stream([llama_chunk("The game is on."), llama_chunk(None, "stop")])
        response = asyncio.run(client(fake.url, stream=True).complete(MESSAGES, []))
        assert response.text == "The game is on." and len(fake.requests) == 2
        fake.stream([llama_chunk("The ga")], done=done)
        with pytest.raises(ModelConnectionError, match="cut off"):
            asyncio.run(client(fake.url, stream=True, attempts=1).complete(MESSAGES, []))
    finally:
        fake.close()


def test_a_connection_dropped_mid_stream_is_a_connection_error() -> None:
    fake = FakeOpenAI()
    try:
        fake.stream([chunk({"role": "assistant", "content": "Hel"})], cut=True)
        with pytest.raises(ModelConnectionError) as caught:
            asyncio.run(client(fake.url, stream=True, attempts=1).complete(MESSAGES, []))
        # The service was reached and had begun to answer: not "cannot reach".
        assert "cut mid-answer" in caught.value.message and "cannot reach" not in caught.value.message
    finally:
        fake.close()


def test_replay_llama_server_cut_stream_then_retry() -> None:
    model, cassette = replaying("llama_server_cut_stream_then_retry", stream=True)
    response = asyncio.run(model.complete(MESSAGES, []))
    assert response.text == "The game is starting."
    cassette.assert_consumed()


def test_an_empty_answer_is_not_a_success() -> None:
    fake = FakeOpenAI()
    try:
        fake.reply(completion(""))
        with pytest.raises(ModelOutputError, match="nothing"):
            asyncio.run(client(fake.url, attempts=1).complete(MESSAGES, [START]))
        fake.reply(completion("", finish_reason="length"))
        with pytest.raises(ModelOutputError, match="token limit"):
            asyncio.run(client(fake.url, attempts=1).complete(MESSAGES, [START]))
    finally:
        fake.close()


# -- tool calls written as text ------------------------------------------------------------------


def test_replay_llama_server_text_tool_call_in_a_stream_without_done() -> None:
    model, cassette = replaying("llama_server_text_tool_call", stream=True)
    response = asyncio.run(model.complete(MESSAGES, [START]))
    assert [c.name for c in response.tool_calls] == ["demo__start_game"] and response.text == ""
    cassette.assert_consumed()


# -- timeouts that suit a slow local server --------------------------------------------------------


def test_a_local_server_gets_minutes_and_a_timeout_says_what_to_raise() -> None:
    assert default_timeout("http://127.0.0.1:8080/v1") == LOCAL_TIMEOUT_S >= 300
    assert default_timeout("http://192.168.1.20:11434/v1") == LOCAL_TIMEOUT_S
    assert default_timeout("https://api.deepseek.com/v1") == 120
    fake = FakeOpenAI()
    try:
        fake.slow(2.0, completion("late"))
        with pytest.raises(ModelConnectionError, match=r"timeout_s") as caught:
            asyncio.run(client(fake.url, attempts=1, timeout_s=0.3).complete(MESSAGES, []))
        assert "0.3 s" in caught.value.message
    finally:
        fake.close()


def test_cassettes_hold_no_key_and_pin_the_wire_format() -> None:
    for path in CASSETTES.glob("*.json"):
        tape = json.loads(path.read_text(encoding="utf-8"))
        for entry in tape:
            body = entry["request"]["body"]
            assert all(m.get("content") is not None for m in body["messages"]), path.name
            if body.get("tools"):
                assert body["tool_choice"] == "auto", path.name
        assert "authorization" not in path.read_text(encoding="utf-8").lower()


# -- a call written as text that cannot be taken ---------------------------------------------------


def test_a_call_attempt_gets_one_repair_request_and_is_never_the_answer() -> None:
    fake = FakeOpenAI()
    try:
        # A near miss is taken at once: no repair needed.
        fake.reply(completion('{"name": "start_game", "arguments": {}}'))
        response = asyncio.run(client(fake.url).complete(MESSAGES, [START, FARM]))
        assert [c.name for c in response.tool_calls] == ["demo__start_game"] and len(fake.requests) == 1

        # An attempt that cannot be taken: the model is told why, once, and its second answer counts.
        fake.reply(completion('{"name": "farm_instance", "arguments": {}}'))
        fake.reply(
            completion(
                '<tool_call>{"name": "farm_instance", "arguments": {"instance_name": "x"}}</tool_call>'
            )
        )
        response = asyncio.run(client(fake.url).complete(MESSAGES, [START, FARM]))
        assert [(c.name, c.arguments) for c in response.tool_calls] == [
            ("demo__farm_instance", {"instance_name": "x"})
        ]
        repair = fake.requests[-1]["messages"][-1]["content"]
        assert "needs instance_name" in repair and "<tool_call>" in repair

        # Twice unusable: an error, never a completed answer made of a call.
        fake.reply(completion("<tool_call>start it</tool_call>"))
        fake.reply(completion('I would call {"name": "demo__start_game", "arguments": {}} now.'))
        with pytest.raises(ModelOutputError, match="even after one repair request"):
            asyncio.run(client(fake.url).complete(MESSAGES, [START, FARM]))

        # Repaired into plain words: that is the answer.
        fake.reply(completion("start_game()"))
        fake.reply(completion("The game is not running yet."))
        response = asyncio.run(client(fake.url).complete(MESSAGES, [START, FARM]))
        assert response.text == "The game is not running yet." and not response.tool_calls
    finally:
        fake.close()


def test_a_native_call_by_a_near_miss_name_reaches_the_offered_tool() -> None:
    fake = FakeOpenAI()
    try:
        fake.reply(completion(None, tool_calls=[("call_1", "start_game", "{}")]))
        response = asyncio.run(client(fake.url).complete(MESSAGES, [START, FARM]))
        assert [c.name for c in response.tool_calls] == ["demo__start_game"]
    finally:
        fake.close()


def test_a_low_temperature_is_sent_for_tool_use_but_never_to_a_reasoning_model() -> None:
    from tether.config import ModelSettings
    from tether.models.openai_compat import DEFAULT_TEMPERATURE

    assert ModelSettings().temperature == DEFAULT_TEMPERATURE <= 0.3
    fake = FakeOpenAI()
    try:
        fake.reply(completion("ok"))
        asyncio.run(client(fake.url).complete(MESSAGES, [START]))
        assert fake.requests[-1]["temperature"] == DEFAULT_TEMPERATURE
        fake.reply(completion("ok"))
        asyncio.run(client(fake.url, temperature=0.0).complete(MESSAGES, [START]))
        assert fake.requests[-1]["temperature"] == 0.0
        fake.reply(completion("ok"))
        reasoning = OpenAICompatModel(model="o3-mini", base_url=fake.url, stream=False)
        asyncio.run(reasoning.complete(MESSAGES, [START]))
        assert "temperature" not in fake.requests[-1]
    finally:
        fake.close()


# -- a model that thinks for long, or never answers -------------------------------------------------


def test_the_first_token_is_awaited_for_its_own_bound_and_a_timeout_is_tried_once_more() -> None:
    """A hung local server held a run ~40 minutes (600 s x 4 attempts) before saying anything."""
    fake = FakeOpenAI()
    try:
        for _ in range(4):
            fake.stream([chunk({"role": "assistant", "content": "late"}, "stop")], first_delay=5.0)
        model = client(fake.url, stream=True, attempts=4, first_token_timeout_s=0.3, timeout_s=60)
        with pytest.raises(ModelConnectionError) as caught:
            asyncio.run(model.complete(MESSAGES, []))
        assert (
            "no token within 0.3 s" in caught.value.message
            and "first_token_timeout_s" in caught.value.message
        )
        assert len(fake.requests) == 2  # one retry (the server's cache may have filled): not four
    finally:
        fake.close()


def test_a_thinking_model_reports_its_progress_while_it_works() -> None:
    fake = FakeOpenAI()
    seen: list[tuple[float, int]] = []

    async def progress(elapsed: float, tokens: int) -> None:
        seen.append((elapsed, tokens))

    try:
        words = [chunk({"content": f"w{n} "}) for n in range(6)] + [chunk({}, "stop")]
        fake.stream(words, first_delay=0.5, gap=0.15)
        model = client(fake.url, stream=True, progress_every_s=0.1)
        context = TurnContext(progress=progress)
        response = asyncio.run(model.complete(MESSAGES, [], context=context))
        assert response.text == "w0 w1 w2 w3 w4 w5 "
        assert seen and seen[0][1] == 0  # thinking before the first token: elapsed time, no token yet
        assert max(tokens for _, tokens in seen) >= 3  # then the tokens as they stream
        assert [e for e, _ in seen] == sorted(e for e, _ in seen)
    finally:
        fake.close()


def test_an_answer_that_repeats_the_repair_request_is_not_the_answer() -> None:
    """Qwen2.5-Coder-1.5B answered the repair request by repeating it, and that was shown as the answer."""
    from tether.models.textcalls import repair_request

    fake = FakeOpenAI()
    try:
        fake.reply(completion('I will do it: {"name": "demo__start_game", "arguments": {}}'))
        fake.reply(completion(repair_request("a tool call inside a sentence")))
        with pytest.raises(ModelOutputError, match="repeated the request"):
            asyncio.run(client(fake.url).complete(MESSAGES, [START, FARM]))
    finally:
        fake.close()


# -- usage, as the service reports it --------------------------------------------------------------


def test_replayed_usage_is_read_from_a_streams_last_chunk_and_from_a_plain_answer() -> None:
    """The exchange a llama.cpp-style server has when asked with ``include_usage`` (recorded from the
    suite's fake server in that shape): a stream whose last chunk has no choices and the usage, then a
    plain answer with its usage. Both are the service's own counts; a stream without that chunk (the
    cut-then-retried recording above) reports none, and says so rather than 0."""
    cassette = Cassette(CASSETTES / "stream_and_plain_usage.json", mode="replay")
    ask = [
        {"role": "system", "content": "You are tether's assistant."},
        {"role": "user", "content": "is the game on?"},
    ]
    transport = httpx.AsyncClient(transport=cassette.transport())
    streamed = asyncio.run(
        client("http://127.0.0.1:8080/v1", stream=True, http_client=transport).complete(ask, [])
    )
    plain = asyncio.run(
        client("http://127.0.0.1:8080/v1", stream=False, http_client=transport).complete(ask, [])
    )
    cassette.assert_consumed()
    assert (streamed.usage.prompt_tokens, streamed.usage.completion_tokens, streamed.usage.reported) == (
        731,
        6,
        True,
    )
    assert streamed.finish_reason == "stop" and streamed.text == "The game is running."
    assert (plain.usage.prompt_tokens, plain.usage.completion_tokens, plain.usage.reported) == (733, 8, True)
    model, retried = replaying("llama_server_cut_stream_then_retry", stream=True)
    silent = asyncio.run(model.complete(MESSAGES, []))
    retried.assert_consumed()
    assert silent.usage.reported is False


@pytest.mark.parametrize(
    "usage",
    [None, "lots", [], {}, {"prompt_tokens": None}, {"prompt_tokens": "abc"}, {"prompt_tokens": "12"},
     {"prompt_tokens": -1, "completion_tokens": 3}, {"prompt_tokens": 1.5}, {"completion_tokens": True}],
)  # fmt: skip
def test_usage_a_server_garbled_is_not_reported_rather_than_a_crash(usage: object) -> None:
    """A server's usage is outside text: counts that are not whole numbers of tokens count as not
    reported (``int("abc")`` once stood between the answer and the turn)."""
    from tether.models.openai_compat import from_completion

    payload = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "usage": usage}
    response = from_completion(payload)
    assert response.text == "ok" and not response.usage.reported and response.usage.prompt_tokens == 0
