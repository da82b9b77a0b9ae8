"""Choosing the model from settings: offline by default, an OpenAI-compatible service when configured."""

from __future__ import annotations

from pathlib import Path

from tether.config import ModelSettings
from tether.credentials import get_key
from tether.models.base import Model
from tether.models.offline import OfflineModel
from tether.models.resilience import BreakerPolicy, ResilienceRegistry, RetryPolicy

_REGISTRIES: dict[tuple[RetryPolicy, BreakerPolicy], ResilienceRegistry] = {}


def resilience_for(settings: ModelSettings) -> ResilienceRegistry:
    """One registry per policy, shared by every session of this process (so breakers are shared)."""
    retry = RetryPolicy(
        max_attempts=settings.retry_max_attempts,
        base_delay_s=settings.retry_base_delay_s,
        max_delay_s=settings.retry_max_delay_s,
    )
    breaker = BreakerPolicy(
        failure_threshold=settings.breaker_failure_threshold,
        recovery_s=settings.breaker_recovery_s,
        half_open_probes=settings.breaker_half_open_probes,
    )
    return _REGISTRIES.setdefault((retry, breaker), ResilienceRegistry(retry, breaker))


def model_from_settings(home: Path, settings: ModelSettings | None = None) -> Model:
    settings = settings or ModelSettings.load(home)
    if not settings.model:
        return OfflineModel()
    from tether.models.openai_compat import OpenAICompatModel

    model: Model = OpenAICompatModel(
        model=settings.model,
        base_url=settings.base_url,
        api_key=get_key(settings.provider),
        resilience=resilience_for(settings),
        timeout_s=settings.timeout_s,
        supports_tools=not settings.json_decisions,
    )
    if settings.json_decisions:
        from tether.models.jsondecide import JsonDecisionModel

        model = JsonDecisionModel(model)
    return model
