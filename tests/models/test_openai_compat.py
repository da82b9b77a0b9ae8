import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_openai import FakeOpenAI, chunk, completion, error
from tether.errors import CircuitOpen, ModelHTTPError, ModelRefused, ModelRequestsForbidden
from tether.models.base import ToolDef
from tether.models.openai_compat import OpenAICompatModel, is_reasoning_model, should_stream
from tether.resilience import BreakerPolicy, BreakerState, ResilienceRegistry, RetryPolicy
from tether.testing import Cassette

TOOL = ToolDef(
    name="demo__farm_instance", description="farm", parameters={"type": "object", "properties": {}}
)
MESSAGES = [{"role": "user", "content": "刷 3 次金币副本"}]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(
    fake: FakeOpenAI, *, model: str = "gpt-4o-mini", stream: bool | None = False, **policy: Any
) -> tuple[OpenAICompatModel, list[float], Clock]:
    slept: list[float] = []
    clock = Clock()

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += seconds

    registry = ResilienceRegistry(
        RetryPolicy(max_attempts=policy.get("attempts", 4), base_delay_s=0.01, max_delay_s=0.05),
        BreakerPolicy(failure_threshold=policy.get("threshold", 5), recovery_s=30.0, half_open_probes=1),
        clock=clock,
        sleep=sleep,
    )
    client = OpenAICompatModel(
        model=model, base_url=fake.url, api_key="sk-test", resilience=registry, stream=stream
    )
    return client, slept, clock


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_tool_calls_are_parsed_and_parallel_calls_are_switched_off(fake_openai: FakeOpenAI) -> None:
    fake_openai.reply(completion(tool_calls=[("c1", "demo__farm_instance", '{"attempts": 3}')]))
    client, _, _ = make(fake_openai)
    response = run(client.complete(MESSAGES, [TOOL]))
    assert response.tool_calls[0].name == "demo__farm_instance"
    assert response.tool_calls[0].arguments == {"attempts": 3}
    assert response.usage.prompt_tokens == 11
    body = fake_openai.requests[0]
    assert (
        body["parallel_tool_calls"] is False and body["tools"][0]["function"]["name"] == "demo__farm_instance"
    )
    assert "stream" not in body


def test_streamed_tool_call_deltas_are_assembled(fake_openai: FakeOpenAI) -> None:
    fake_openai.stream(
        [
            chunk({"role": "assistant", "content": "让我"}),
            chunk({"content": "来刷。"}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "demo__farm", "arguments": ""},
                        }
                    ]
                }
            ),
            chunk(
                {"tool_calls": [{"index": 0, "function": {"name": "_instance", "arguments": '{"instance_'}}]}
            ),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "c2",
                            "type": "function",
                            "function": {"name": "get_task_status", "arguments": '{"execution'},
                        }
                    ]
                }
            ),
            chunk(
                {"tool_calls": [{"index": 0, "function": {"arguments": 'name": "藏珍之蕾", "attempts": 3}'}}]}
            ),
            chunk({"tool_calls": [{"index": 1, "function": {"arguments": '_id": "abc"}'}}]}),
            chunk({}, finish_reason="tool_calls"),
            chunk(None, usage={"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}),  # type: ignore[arg-type]
        ]
    )
    client, _, _ = make(fake_openai, stream=None)
    response = run(client.complete(MESSAGES, [TOOL]))
    assert fake_openai.requests[0]["stream"] is True
    assert response.text == "让我来刷。"
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("c1", "demo__farm_instance", {"instance_name": "藏珍之蕾", "attempts": 3}),
        ("c2", "get_task_status", {"execution_id": "abc"}),
    ]
    assert response.usage.completion_tokens == 9


def test_a_plain_json_answer_to_a_streaming_request_is_the_answer(fake_openai: FakeOpenAI) -> None:
    """A server that does not stream answers a streaming request with one application/json
    completion: that is the answer (not 'the stream ended without a finish reason'), and the
    client stops asking that server to stream."""
    fake_openai.reply(completion(tool_calls=[("c1", "demo__farm_instance", '{"attempts": 2}')]))
    fake_openai.reply(completion(content="done"))
    client, _, _ = make(fake_openai, stream=True)
    response = run(client.complete(MESSAGES, [TOOL]))
    assert fake_openai.requests[0]["stream"] is True
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("demo__farm_instance", {"attempts": 2})]
    assert run(client.complete(MESSAGES, [TOOL])).text == "done"
    assert "stream" not in fake_openai.requests[1] and len(fake_openai.requests) == 2


def test_json_that_is_no_completion_names_the_stream_switch(fake_openai: FakeOpenAI) -> None:
    from tether.errors import ModelOutputError

    fake_openai.reply({"status": "busy"})
    client, _, _ = make(fake_openai, stream=True)
    with pytest.raises(ModelOutputError, match="TETHER_MODEL_STREAM=0"):
        run(client.complete(MESSAGES, []))


@pytest.mark.parametrize(
    "model", ["o1-mini", "o3", "o4-mini", "gpt-5", "gpt-5-mini", "deepseek-reasoner", "qwq-32b"]
)
def test_reasoning_models_are_not_streamed(model: str, fake_openai: FakeOpenAI) -> None:
    assert is_reasoning_model(model) and not should_stream(model, {})
    fake_openai.reply(completion(content="ok", model=model))
    client, _, _ = make(fake_openai, model=model, stream=None)
    assert run(client.complete(MESSAGES, [])).text == "ok"
    assert "stream" not in fake_openai.requests[0]


def test_stream_can_be_forced_either_way() -> None:
    assert should_stream("gpt-4o", {}) and not should_stream("gpt-4o", {"TETHER_MODEL_STREAM": "0"})
    assert should_stream("o3", {"TETHER_MODEL_STREAM": "1"})
    assert not is_reasoning_model("gpt-4o-mini") and not is_reasoning_model("qwen2.5-72b-instruct")


def test_429_is_retried_after_the_retry_after_it_names(fake_openai: FakeOpenAI) -> None:
    fake_openai.fail(error(429, "rate_limit_exceeded", "slow down", {"retry-after": "7"}))
    fake_openai.fail(error(503, None, "overloaded"))
    fake_openai.reply(completion(content="done"))
    client, slept, _ = make(fake_openai)
    assert run(client.complete(MESSAGES, [])).text == "done"
    assert len(fake_openai.requests) == 3
    assert slept[0] == 7.0 and 0 <= slept[1] <= 0.05


def test_a_5xx_storm_opens_the_breaker_then_half_open_probes_close_it(fake_openai: FakeOpenAI) -> None:
    for _ in range(4):
        fake_openai.fail(error(502, None, "bad gateway"))
    client, _, clock = make(fake_openai, attempts=2, threshold=4)
    for _ in range(2):
        with pytest.raises(ModelHTTPError) as info:
            run(client.complete(MESSAGES, []))
        assert info.value.data["status"] == 502
    breaker = client._resilience.breaker
    assert breaker.state is BreakerState.OPEN
    with pytest.raises(CircuitOpen):
        run(client.complete(MESSAGES, []))
    assert len(fake_openai.requests) == 4  # the open breaker did not call the service

    clock.now += 31
    assert breaker.state is BreakerState.HALF_OPEN
    fake_openai.reply(completion(content="back"))
    assert run(client.complete(MESSAGES, [])).text == "back"
    assert breaker.state is BreakerState.CLOSED


def test_a_failed_half_open_probe_opens_the_breaker_again(fake_openai: FakeOpenAI) -> None:
    for _ in range(3):
        fake_openai.fail(error(500, None, "boom"))
    client, _, clock = make(fake_openai, attempts=1, threshold=2)
    for _ in range(2):
        with pytest.raises(ModelHTTPError):
            run(client.complete(MESSAGES, []))
    clock.now += 31
    with pytest.raises(ModelHTTPError):
        run(client.complete(MESSAGES, []))
    assert client._resilience.breaker.state is BreakerState.OPEN


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [
        (400, "content_policy_violation", "Your request was rejected as a result of our safety system."),
        (
            400,
            "content_filter",
            "The response was filtered due to the prompt triggering Azure OpenAI's content management "
            "policy.",
        ),
        (400, "data_inspection_failed", "Input data may contain inappropriate content."),
        (400, None, "Content Exists Risk"),
        (400, "1301", "系统检测到输入或生成内容可能包含不安全或敏感内容"),
    ],
)
def test_content_policy_refusals_are_never_retried(
    fake_openai: FakeOpenAI, status: int, code: str | None, message: str
) -> None:
    fake_openai.fail(error(status, code, message))
    client, _, _ = make(fake_openai)
    with pytest.raises(ModelRefused):
        run(client.complete(MESSAGES, []))
    assert len(fake_openai.requests) == 1
    assert client._resilience.breaker.state is BreakerState.CLOSED


def test_content_filter_finish_reason_is_a_refusal(fake_openai: FakeOpenAI) -> None:
    fake_openai.reply(completion(content="", finish_reason="content_filter"))
    client, _, _ = make(fake_openai)
    with pytest.raises(ModelRefused):
        run(client.complete(MESSAGES, []))
    assert len(fake_openai.requests) == 1


def test_other_4xx_fail_at_once(fake_openai: FakeOpenAI) -> None:
    fake_openai.fail(error(401, "invalid_api_key", "Incorrect API key provided"))
    client, _, _ = make(fake_openai)
    with pytest.raises(ModelHTTPError) as info:
        run(client.complete(MESSAGES, []))
    assert info.value.data["status"] == 401 and len(fake_openai.requests) == 1


def test_real_model_requests_are_forbidden_in_the_suite() -> None:
    client = OpenAICompatModel(model="gpt-4o", base_url="https://api.openai.com/v1", api_key="sk-x")
    with pytest.raises(ModelRequestsForbidden, match="forbidden"):
        run(client.complete(MESSAGES, []))


def test_cassette_records_then_replays_without_the_server(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    import httpx

    tape = tmp_path / "tape.json"
    fake_openai.reply(completion(tool_calls=[("c1", "demo__farm_instance", '{"attempts": 2}')]))
    recorder = Cassette(tape, mode="record")
    client = OpenAICompatModel(
        model="gpt-4o-mini",
        base_url=fake_openai.url,
        api_key="sk-secret-abc",
        stream=False,
        http_client=httpx.AsyncClient(transport=recorder.transport()),
    )
    recorded = run(client.complete(MESSAGES, [TOOL]))
    fake_openai.close()
    assert "sk-secret-abc" not in tape.read_text()

    player = Cassette(tape, mode="replay")
    replayed = run(
        OpenAICompatModel(
            model="gpt-4o-mini",
            base_url=fake_openai.url,
            api_key="other",
            stream=False,
            http_client=httpx.AsyncClient(transport=player.transport()),
        ).complete(MESSAGES, [TOOL])
    )
    assert replayed.tool_calls == recorded.tool_calls
    player.assert_consumed()
    assert json.loads(tape.read_text())[0]["request"]["body"]["parallel_tool_calls"] is False


def test_arguments_nested_absurdly_deep_are_an_answered_error_not_a_crash() -> None:
    """Review: a RecursionError from the model's arguments escaped and killed the turn."""
    from tether.models.openai_compat import from_completion

    deep = "[" * 50_000 + "]" * 50_000
    payload = {
        "choices": [
            {
                "message": {
                    "content": "",
                    "tool_calls": [{"id": "c", "function": {"name": "x", "arguments": deep}}],
                }
            }
        ]
    }
    [call] = from_completion(payload).tool_calls
    assert call.error == "arguments are nested too deeply" and call.arguments == {}
    from tether.models.jsonfix import loads_lenient

    assert loads_lenient('{"a": ' + deep + "}") is None
