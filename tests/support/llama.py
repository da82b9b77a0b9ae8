"""Answers shaped like the local OpenAI-compatible servers people run (llama.cpp's ``llama-server``,
``llama-cpp-python[server]``) with a small model, including their departures from the hosted APIs."""

from __future__ import annotations

from typing import Any

MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
FINGERPRINT = "b4273-0a6d0a1c"


def llama_chunk(content: str | None = None, finish: str | None = None) -> dict[str, Any]:
    """One ``llama-server`` stream chunk (it sends no ``usage`` unless asked, and a fingerprint)."""
    delta: dict[str, Any] = {} if content is None else {"content": content}
    return {
        "choices": [{"finish_reason": finish, "index": 0, "delta": delta}],
        "created": 1733200000,
        "id": "chatcmpl-8RkQx2",
        "model": MODEL,
        "system_fingerprint": FINGERPRINT,
        "object": "chat.completion.chunk",
    }


def llama_completion(content: str, finish: str = "stop") -> dict[str, Any]:
    return {
        "choices": [
            {"finish_reason": finish, "index": 0, "message": {"content": content, "role": "assistant"}}
        ],
        "created": 1733200000,
        "model": MODEL,
        "system_fingerprint": FINGERPRINT,
        "object": "chat.completion",
        "usage": {"completion_tokens": 41, "prompt_tokens": 812, "total_tokens": 853},
        "id": "chatcmpl-8RkQx2",
        "timings": {"prompt_n": 812, "prompt_ms": 9180.2, "predicted_n": 41, "predicted_ms": 2311.9},
    }
