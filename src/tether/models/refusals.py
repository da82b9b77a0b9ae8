"""Recognising permanent content-policy refusals across providers (never retried).

Codes and phrases as providers document or return them: OpenAI and Azure OpenAI, Google Gemini's
OpenAI-compatible endpoint, and common Chinese providers (Alibaba DashScope/Qwen, Baidu Qianfan/ERNIE,
Zhipu GLM, Moonshot/Kimi, DeepSeek, ByteDance Volcengine/Doubao, MiniMax, Tencent Hunyuan).
"""

from __future__ import annotations

REFUSAL_CODES = frozenset(
    {
        # OpenAI / Azure OpenAI
        "content_policy_violation",
        "content_filter",
        "responsibleaipolicyviolation",
        "invalid_prompt",
        # Gemini (finish reasons and block reasons surfaced as codes)
        "safety",
        "prohibited_content",
        "blocklist",
        "spii",
        # Alibaba DashScope / Qwen
        "data_inspection_failed",
        "datainspectionfailed",
        # Baidu Qianfan / ERNIE
        "336003",
        "336105",
        # Zhipu GLM
        "1301",
        # Volcengine / Doubao
        "sensitivecontentdetected",
        "inputtextsensitivecontentdetected",
        "outputtextsensitivecontentdetected",
        "inputimagesensitivecontentdetected",
        # MiniMax
        "1026",
        "1027",
        # Tencent Hunyuan
        "operationdenied.textillegaldetected",
    }
)

REFUSAL_PHRASES = (
    "content management policy",
    "content_policy",
    "content filter",
    "safety system",
    "responsible ai",
    "content exists risk",  # DeepSeek
    "inappropriate content",  # Qwen
    "sensitive content",
    "敏感",
    "违规",
    "不合规",
    "安全审核",
)

REFUSAL_FINISH_REASONS = frozenset(
    {"content_filter", "safety", "prohibited_content", "blocklist", "spii", "sensitive"}
)


def is_refusal(*, code: object = None, message: str = "", finish_reason: str | None = None) -> bool:
    if finish_reason is not None and finish_reason.lower() in REFUSAL_FINISH_REASONS:
        return True
    if code is not None and str(code).strip().lower() in REFUSAL_CODES:
        return True
    text = message.lower()
    return any(phrase in text for phrase in REFUSAL_PHRASES)
