"""Choosing the model from settings: offline by default, an OpenAI-compatible service when configured."""

from __future__ import annotations

from pathlib import Path

from tether.config import ModelSettings
from tether.credentials import get_key
from tether.models.base import Model
from tether.models.offline import OfflineModel
from tether.resilience import ResilienceRegistry


def model_from_settings(
    home: Path, settings: ModelSettings | None = None, *, resilience: ResilienceRegistry | None = None
) -> Model:
    """The model ``settings`` name; ``resilience`` is the runtime's registry (one breaker per service)."""
    settings = settings or ModelSettings.load(home)
    if not settings.model:
        return OfflineModel()
    from tether.models.openai_compat import OpenAICompatModel

    model: Model = OpenAICompatModel(
        model=settings.model,
        base_url=settings.base_url,
        api_key=get_key(settings.provider),
        resilience=resilience or ResilienceRegistry(settings.retry_policy(), settings.breaker_policy()),
        timeout_s=settings.timeout_s,
        supports_tools=not settings.json_decisions,
    )
    if settings.json_decisions:
        from tether.models.jsondecide import JsonDecisionModel

        model = JsonDecisionModel(model)
    return model
