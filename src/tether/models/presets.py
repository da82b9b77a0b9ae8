"""Known OpenAI-compatible providers: where they answer and whether they need a key.

``[model] provider = "deepseek"`` with no ``base_url`` uses the preset; a provider that is not here needs
its ``base_url``: tether never guesses a service to send a conversation to.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Preset:
    name: str
    base_url: str
    needs_key: bool = True
    example_model: str = ""


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(name="openai", base_url="https://api.openai.com/v1", example_model="gpt-4o-mini"),
        Preset(name="deepseek", base_url="https://api.deepseek.com/v1", example_model="deepseek-chat"),
        Preset(
            name="qwen",
            base_url="https://dashscope.aliyuncs.com/compatible-mode/v1",
            example_model="qwen-plus",
        ),
        Preset(name="moonshot", base_url="https://api.moonshot.cn/v1", example_model="moonshot-v1-8k"),
        Preset(name="zhipu", base_url="https://open.bigmodel.cn/api/paas/v4", example_model="glm-4-flash"),
        Preset(
            name="ollama", base_url="http://127.0.0.1:11434/v1", needs_key=False, example_model="qwen2.5:7b"
        ),
        Preset(name="vllm", base_url="http://127.0.0.1:8000/v1", needs_key=False),
        Preset(name="lm-studio", base_url="http://127.0.0.1:1234/v1", needs_key=False),
        Preset(name="llama-cpp", base_url="http://127.0.0.1:8080/v1", needs_key=False),
    )
}
ALIASES = {
    "dashscope": "qwen",
    "kimi": "moonshot",
    "glm": "zhipu",
    "bigmodel": "zhipu",
    "lmstudio": "lm-studio",
    "llama.cpp": "llama-cpp",
    "llamacpp": "llama-cpp",
    "llama-server": "llama-cpp",
}


def preset(provider: str) -> Preset | None:
    return PRESETS.get(ALIASES.get(provider, provider))


def known() -> str:
    return ", ".join([*PRESETS, *(f"{a} (= {p})" for a, p in ALIASES.items())])
