"""A client for OpenAI-compatible chat completions (OpenAI, DeepSeek, Qwen, Ollama, vLLM, llama.cpp,
LM Studio, …) on the official ``openai`` SDK, with the SDK's own retries off in favour of ours.

What every server accepts, not only the hosted APIs: with tools, ``tool_choice="auto"`` (llama-cpp-python
drops the tools without it) and ``parallel_tool_calls=false``; an assistant message never carries
``content: null`` (llama-cpp-python answers HTTP 500), it carries ``""``. Replies stream, assembling
tool-call deltas, except for reasoning models (o1/o3/o4, gpt-5, deepseek-reasoner, qwq, …);
``TETHER_MODEL_STREAM=0|1`` forces either way. A stream that ends without a finish reason (cut
connection, a server error after HTTP 200) is a connection error, retried like one, never a complete
answer; a server that answers a streaming request with one JSON completion is taken at its word (that
completion is the answer, and the client stops asking it to stream); an answer with neither text nor
a call is an error too. Calls a small model writes as text
(``<tool_call>…</tool_call>`` or a bare JSON call) are taken as calls when they name an offered tool with
fitting arguments, near misses included (``textcalls``); an attempt that cannot be taken gets one
repair request and is never the answer. The ``openai`` package is imported on first use, never at import time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from tether.errors import ModelConnectionError, ModelError, ModelHTTPError, ModelOutputError, ModelRefused
from tether.models import textcalls
from tether.models.base import (
    Message,
    ModelResponse,
    ToolCall,
    ToolDef,
    TurnContext,
    Usage,
    check_request_allowed,
)
from tether.models.refusals import is_refusal
from tether.resilience import ResilienceRegistry

T = TypeVar("T")
STREAM_ENV = "TETHER_MODEL_STREAM"
DEFAULT_TEMPERATURE = 0.2  # choosing tools and arguments wants little randomness
DEFAULT_TIMEOUT_S = 120.0
# A model served on this machine or the local network: a cold CPU turn takes minutes, not seconds.
LOCAL_TIMEOUT_S = 600.0


def is_local_url(base_url: str) -> bool:
    import ipaddress
    from urllib.parse import urlparse

    host = urlparse(base_url).hostname or ""
    if host in ("localhost", "host.docker.internal") or host.endswith(".local"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def default_timeout(base_url: str) -> float:
    return LOCAL_TIMEOUT_S if is_local_url(base_url) else DEFAULT_TIMEOUT_S


# The first token of a streamed answer has its own bound: a server reading a cold prompt on a CPU says
# nothing for minutes (measured: 75-97 s for 9 tools), a hung one forever.
DEFAULT_FIRST_TOKEN_S = 60.0
LOCAL_FIRST_TOKEN_S = 300.0
PROGRESS_EVERY_S = 5.0  # how often a slow answer's progress is told


def default_first_token_timeout(base_url: str) -> float:
    return LOCAL_FIRST_TOKEN_S if is_local_url(base_url) else DEFAULT_FIRST_TOKEN_S


REASONING_MODEL = re.compile(
    r"(^|[/:_-])(o1|o3|o4|gpt-5|deepseek-reasoner|qwq|qvq|r1)([.:_-]|$)", re.IGNORECASE
)


def is_reasoning_model(model: str) -> bool:
    return bool(REASONING_MODEL.search(model)) or "reasoner" in model.lower() or "thinking" in model.lower()


def should_stream(model: str, environ: dict[str, str] | None = None) -> bool:
    forced = (os.environ if environ is None else environ).get(STREAM_ENV, "").strip().lower()
    if forced in ("1", "true", "yes", "on"):
        return True
    if forced in ("0", "false", "no", "off"):
        return False
    return not is_reasoning_model(model)


def _redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret and len(secret) >= 8 else text


def _scrub(value: Any, secret: str | None) -> Any:
    """``value`` with the key taken out of every string in it, however deeply nested."""
    if isinstance(value, str):
        return _redact(value, secret)
    if isinstance(value, dict):
        return {_scrub(k, secret): _scrub(v, secret) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_scrub(v, secret) for v in value)
    return value


def redacted(exc: ModelError, secret: str | None) -> ModelError:
    """The same error with the key removed from its message and from every field of its data (a
    provider may echo the key anywhere: in the message, in its error code, in a nested field)."""
    if not secret:
        return exc
    return type(exc)(_redact(exc.message, secret), **_scrub(exc.data, secret))


class OpenAICompatModel:
    supports_tools = True
    supports_images = False

    def __init__(
        self,
        *,
        model: str,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        resilience: ResilienceRegistry | None = None,
        stream: bool | None = None,
        timeout_s: float | None = None,
        http_client: Any = None,
        supports_tools: bool = True,
        supports_images: bool = False,
        temperature: float | None = DEFAULT_TEMPERATURE,
        first_token_timeout_s: float | None = None,
        progress_every_s: float = PROGRESS_EVERY_S,
        provider: str = "openai",
    ) -> None:
        self.name = model
        self.provider = provider  # [model].provider: who serves it (deepseek, ollama, …), for the record
        self.base_url = base_url
        self.supports_tools = supports_tools
        self.supports_images = supports_images  # image parts in user messages ([model].images)
        # Reasoning models refuse a temperature (o1, o3: HTTP 400): theirs is fixed.
        self.temperature = None if is_reasoning_model(model) else temperature
        self._api_key = api_key
        # Pass the runtime's registry so every session talking to this service shares one breaker.
        self._resilience = (resilience or ResilienceRegistry()).for_url(base_url)
        self._stream = stream
        self._timeout_s = timeout_s if timeout_s is not None else default_timeout(base_url)
        self._first_token_s = min(
            self._timeout_s,
            first_token_timeout_s
            if first_token_timeout_s is not None
            else default_first_token_timeout(base_url),
        )
        self._progress_every_s = progress_every_s
        self._http_client = http_client
        self._client: Any = None

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAICompatModel(model={self.name!r}, base_url={self.base_url!r})"

    def _sdk(self) -> Any:
        if self._client is None:
            from openai import AsyncOpenAI

            self._client = AsyncOpenAI(
                api_key=self._api_key or "not-needed",  # local servers (Ollama, vLLM) take any key
                base_url=self.base_url,
                max_retries=0,
                # Our own bounds decide (first token, whole answer); this only stops a read that hangs.
                timeout=self._timeout_s + 5,
                http_client=self._http_client,
            )
        return self._client

    @property
    def streaming(self) -> bool:
        return self._stream if self._stream is not None else should_stream(self.name)

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolDef], *, context: TurnContext | None = None
    ) -> ModelResponse:
        """``context`` is already in the messages (the session's system prompt) for a remote model."""
        check_request_allowed(self.base_url)
        kwargs: dict[str, Any] = {"model": self.name, "messages": wire_messages(messages)}
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if tools:
            kwargs["tools"] = [tool.openai() for tool in tools]
            kwargs["tool_choice"] = "auto"
            kwargs["parallel_tool_calls"] = False
        progress = context.progress if context is not None else None
        response = await self._resilience.call(lambda: self._attempt(kwargs, progress))
        if not tools:
            return response

        async def again(why: str) -> ModelResponse:
            repair = {
                **kwargs,
                "messages": [
                    *kwargs["messages"],
                    {"role": "assistant", "content": response.text},
                    {"role": "user", "content": textcalls.repair_request(why)},
                ],
            }
            return await self._resilience.call(lambda: self._attempt(repair, progress))

        return await textcalls.settle(response, tools, again)

    async def _attempt(self, kwargs: dict[str, Any], progress: Progress | None = None) -> ModelResponse:
        try:
            return await self._exchange(kwargs, _Watch(self, progress))
        except ModelError as exc:
            raise redacted(exc, self._api_key) from None

    async def _exchange(self, kwargs: dict[str, Any], watch: _Watch) -> ModelResponse:
        import httpx
        import openai

        client = self._sdk()
        try:
            if self.streaming:
                stream = await watch.first(
                    client.chat.completions.create(
                        **kwargs, stream=True, stream_options={"include_usage": True}
                    )
                )
                whole = _whole_answer(stream)
                try:
                    if whole is not None:
                        # A server that does not stream (some proxies, older local servers) answers
                        # a streaming request with one JSON completion: take it as the answer, and
                        # stop asking this server to stream.
                        response = from_completion(await watch.whole(whole))
                        self._stream = False
                    else:
                        response = await assemble_stream(watch.chunks(_chunks(stream)), model=self.name)
                except (openai.APIConnectionError, httpx.TransportError) as exc:
                    # The service answered HTTP 200 and began: it was reached, then the answer stopped.
                    raise ModelConnectionError(
                        f"the connection to the model service at {self.base_url} was cut mid-answer "
                        f"({type(exc).__name__})",
                        truncated=True,
                    ) from None
            else:
                completion = await watch.whole(client.chat.completions.create(**kwargs))
                response = from_completion(completion.model_dump())
        except openai.APIStatusError as exc:
            raise self._translate_status(exc) from None
        except openai.APITimeoutError:
            raise ModelConnectionError(
                f"the model service at {self.base_url} did not answer within {self._timeout_s:g} s "
                "(a model on a CPU can need minutes for a cold turn: raise [model].timeout_s)",
                timeout_s=self._timeout_s,
                timed_out=True,
            ) from None
        except (openai.APIConnectionError, httpx.TransportError) as exc:
            # Before the answer (refused, reset) or in the middle of a stream (the connection was cut).
            raise ModelConnectionError(
                _redact(
                    f"cannot reach the model service at {self.base_url}: {type(exc).__name__}", self._api_key
                )
            ) from None
        except openai.APIError as exc:
            # An error event in the middle of a stream (the answer was cut): worth another try.
            body = exc.body if isinstance(exc.body, dict) else {}
            detail = str(body.get("message") or exc.message or "")[:300]
            raise ModelHTTPError(
                f"the model service failed mid-answer: {detail}", status=502, provider_code=body.get("code")
            ) from None
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            # An answer the SDK or we could not take apart: never a traceback, never the key.
            raise ModelOutputError(
                f"the model service sent an answer that cannot be read ({type(exc).__name__})"
            ) from None
        if is_refusal(finish_reason=response.finish_reason):
            raise ModelRefused(
                f"the model service refused on content-policy grounds ({response.finish_reason})",
                finish_reason=response.finish_reason,
            )
        if not response.tool_calls and not response.text.strip():
            why = " (it hit its token limit)" if response.finish_reason == "length" else ""
            raise ModelOutputError(
                f"the model answered with nothing: no text and no tool call{why}",
                finish_reason=response.finish_reason,
            )
        return response

    def _translate_status(self, exc: Any) -> ModelError:
        status = int(exc.status_code)
        body = exc.body if isinstance(exc.body, dict) else {}
        error = body.get("error", body) if isinstance(body, dict) else {}
        error = error if isinstance(error, dict) else {"message": str(error)}
        code = error.get("code") or error.get("type")
        inner = error.get("innererror")
        if isinstance(inner, dict) and inner.get("code"):
            code = inner["code"]
        message = _redact(str(error.get("message") or exc.message or ""), self._api_key)[:500]
        if status in (400, 403, 422) and is_refusal(code=code, message=message):
            return ModelRefused(
                f"the model service refused on content-policy grounds ({code or status}): {message}",
                status=status,
                provider_code=code,
            )
        retry_after = parse_retry_after(exc.response.headers if exc.response is not None else {})
        return ModelHTTPError(
            f"model service answered HTTP {status}"
            + (f" ({code})" if code else "")
            + (f": {message}" if message else ""),
            status=status,
            provider_code=code,
            retry_after=retry_after,
        )


Progress = Callable[[float, int], Awaitable[None]]


class _Watch:
    """One attempt's clock: the first token within ``first_token_s``, the whole answer within
    ``timeout_s``, and ``progress`` told every ``progress_every_s`` while the model works (seconds
    since asked, tokens so far), so that a person sees a slow model think instead of a frozen run."""

    def __init__(self, model: OpenAICompatModel, progress: Progress | None) -> None:
        self.model = model
        self.progress = progress
        self.started = time.monotonic()
        self.tokens = 0
        self.told = self.started

    def _timed_out(self, first: bool) -> ModelConnectionError:
        model = self.model
        if first:
            return ModelConnectionError(
                f"the model service at {model.base_url} sent no token within {model._first_token_s:g} s "
                "(a model on a CPU can need minutes to read a cold prompt: raise "
                "[model].first_token_timeout_s)",
                timeout_s=model._first_token_s,
                timed_out=True,
            )
        return ModelConnectionError(
            f"the model service at {model.base_url} did not finish its answer within {model._timeout_s:g} s "
            f"({self.tokens} tokens came; raise [model].timeout_s)",
            timeout_s=model._timeout_s,
            timed_out=True,
        )

    async def _tell(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if self.progress is not None and (force or now - self.told >= self.model._progress_every_s):
            self.told = now
            await self.progress(round(now - self.started, 3), self.tokens)

    async def _await(self, waited: Awaitable[T], first: bool) -> T:
        task = asyncio.ensure_future(waited)
        try:
            while True:
                bound = self.model._first_token_s if first else self.model._timeout_s
                left = self.started + bound - time.monotonic()
                if left <= 0:
                    raise self._timed_out(first)
                done, _ = await asyncio.wait({task}, timeout=min(left, self.model._progress_every_s))
                if done:
                    return task.result()
                await self._tell(force=True)
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    async def first(self, waited: Awaitable[T]) -> T:
        """The response's head: a server may hold it back until its first token."""
        return await self._await(waited, first=True)

    async def whole(self, waited: Awaitable[T]) -> T:
        """An answer that is not streamed: only the whole answer's bound applies."""
        return await self._await(waited, first=False)

    async def chunks(self, chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        iterator = chunks.__aiter__()
        while True:
            try:
                chunk = await self._await(iterator.__anext__(), first=self.tokens == 0)
            except StopAsyncIteration:
                return
            self.tokens += _tokens_in(chunk)
            await self._tell()
            yield chunk


def _tokens_in(chunk: dict[str, Any]) -> int:
    """Deltas of text or of a tool call in one streamed chunk (a server sends about one per token)."""
    return sum(
        1
        for choice in chunk.get("choices") or []
        if (choice.get("delta") or {}).get("content") or (choice.get("delta") or {}).get("tool_calls")
    )


def _whole_answer(stream: Any) -> Awaitable[dict[str, Any]] | None:
    """The JSON body of a stream request answered with ``application/json`` instead of events (None
    for a real event stream)."""
    response = getattr(stream, "response", None)
    kind = str(getattr(response, "headers", {}).get("content-type", "")).lower()
    if response is None or "json" not in kind or "event-stream" in kind:
        return None

    async def body() -> dict[str, Any]:
        payload = json.loads(await response.aread())
        if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list):
            raise ModelOutputError(
                "the model service answered a streaming request with JSON that is not a chat completion"
                f" ({str(payload)[:200]}); if it cannot stream, set {STREAM_ENV}=0"
            )
        return payload

    return body()


async def _chunks(stream: Any) -> AsyncIterator[dict[str, Any]]:
    async for chunk in stream:
        yield chunk.model_dump()


def parse_retry_after(headers: Any) -> float | None:
    """Seconds from ``retry-after-ms``, ``Retry-After`` (seconds or an HTTP date), else None."""
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000)
        value = headers.get("retry-after")
    except AttributeError:
        return None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    import time

    return max(0.0, when.timestamp() - time.time())


def wire_messages(messages: Sequence[Message]) -> list[Message]:
    """The messages as every server takes them: ``content`` is never null (``""`` instead)."""
    return [
        {**message, "content": ""} if message.get("content", "") is None else dict(message)
        for message in messages
    ]


def _tool_call(index: int, call_id: str | None, name: str, raw: str) -> ToolCall:
    call_id = call_id or f"call_{index}"
    try:
        arguments = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return ToolCall(
            id=call_id, name=name, arguments={}, error=f"arguments are not valid JSON: {raw[:200]!r}"
        )
    except RecursionError:
        return ToolCall(id=call_id, name=name, arguments={}, error="arguments are nested too deeply")
    if not isinstance(arguments, dict):
        return ToolCall(id=call_id, name=name, arguments={}, error="arguments must be a JSON object")
    return ToolCall(id=call_id, name=name, arguments=arguments)


def usage_of(usage: Any) -> Usage:
    """A completion's ``usage`` (in a plain answer, or the last chunk of a stream asked with
    ``include_usage``); a server that sends none, no counts, or counts that are not whole numbers of
    tokens, has not reported any."""
    if not isinstance(usage, dict):
        return Usage()
    counts = [usage.get(k) for k in ("prompt_tokens", "completion_tokens")]
    if all(c is None for c in counts) or not all(
        c is None or (isinstance(c, int) and not isinstance(c, bool) and c >= 0) for c in counts
    ):
        return Usage()
    prompt, completion = (c or 0 for c in counts)
    return Usage(prompt_tokens=prompt, completion_tokens=completion, reported=True)


def from_completion(payload: dict[str, Any]) -> ModelResponse:
    choice = (payload.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    calls = tuple(
        _tool_call(
            i,
            call.get("id"),
            (call.get("function") or {}).get("name") or "",
            (call.get("function") or {}).get("arguments") or "",
        )
        for i, call in enumerate(message.get("tool_calls") or [])
    )
    return ModelResponse(
        text=message.get("content") or "",
        tool_calls=calls,
        usage=usage_of(payload.get("usage")),
        finish_reason=choice.get("finish_reason"),
        model=payload.get("model") or "",
    )


async def assemble_stream(chunks: AsyncIterator[dict[str, Any]], *, model: str = "") -> ModelResponse:
    """Fold streamed deltas into one response; tool calls are keyed by ``index`` and their argument
    fragments concatenated in arrival order."""
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    usage = Usage()
    finish: str | None = None
    seen_model = model
    received = 0
    async for chunk in chunks:
        received += 1
        seen_model = chunk.get("model") or seen_model
        if chunk.get("usage"):
            usage = usage_of(chunk["usage"])
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                text.append(delta["content"])
            for part in delta.get("tool_calls") or []:
                index = int(part.get("index") or 0)
                slot = calls.setdefault(index, {"id": None, "name": "", "arguments": []})
                if part.get("id"):
                    slot["id"] = part["id"]
                function = part.get("function") or {}
                if function.get("name"):
                    slot["name"] += function["name"]
                if function.get("arguments"):
                    slot["arguments"].append(function["arguments"])
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    if finish is None:
        # No finish reason: the stream was cut (a server error after HTTP 200, a dropped connection),
        # whether or not a [DONE] followed. What arrived is not an answer.
        hint = (
            "" if received else f" (no event came at all: if this server cannot stream, set {STREAM_ENV}=0)"
        )
        raise ModelConnectionError(
            "the model's answer was cut off: the stream ended without a finish reason "
            f"after {sum(map(len, text))} characters{hint}",
            truncated=True,
        )
    return ModelResponse(
        text="".join(text),
        tool_calls=tuple(
            _tool_call(i, slot["id"], slot["name"], "".join(slot["arguments"]))
            for i, slot in sorted(calls.items())
        ),
        usage=usage,
        finish_reason=finish,
        model=seen_model,
    )
