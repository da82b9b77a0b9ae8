"""Choosing the model from settings: offline by default, an OpenAI-compatible service when configured.

Every way a configuration can be wrong is an error that says what to do: a ``[model]`` that names no
model, a provider with neither a preset nor a ``base_url``, a hosted service with no key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.config import SETTINGS_FILE, ModelSettings, read_settings_file
from tether.credentials import env_names, get_key
from tether.errors import ConfigError, CredentialError
from tether.models.base import Model
from tether.models.offline import OfflineModel
from tether.models.presets import known, preset
from tether.resilience import ResilienceRegistry, breakers_dir


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelChoice:
    """What ``[model]`` resolves to, before any request: shown by ``tether doctor`` and ``tether run``."""

    provider: str
    model: str
    base_url: str
    needs_key: bool
    local: bool

    @property
    def label(self) -> str:
        return "offline" if not self.model else f"{self.provider}/{self.model}"


OFFLINE = ModelChoice(provider="offline", model="", base_url="", needs_key=False, local=True)


def resolve(home: Path, settings: ModelSettings) -> ModelChoice:
    """``settings`` checked and completed from the provider's preset; ``ConfigError`` says what to fix."""
    if not settings.model:
        if "model" in read_settings_file(home):
            raise ConfigError(
                f"{home / SETTINGS_FILE}: [model] does not name a model: add e.g. "
                'model = "deepseek-chat", or remove [model] to use the offline model'
            )
        return OFFLINE
    from tether.models.openai_compat import is_local_url

    known_preset = preset(settings.provider)
    base_url = settings.base_url or (known_preset.base_url if known_preset else "")
    if not base_url:
        raise ConfigError(
            f"[model] provider {settings.provider!r} has no known address: set base_url = "
            f'"https://…/v1", or use a known provider: {known()}'
        )
    local = is_local_url(base_url)
    needs_key = not local if known_preset is None else (known_preset.needs_key and not local)
    return ModelChoice(
        provider=settings.provider, model=settings.model, base_url=base_url, needs_key=needs_key, local=local
    )


def model_from_settings(
    home: Path, settings: ModelSettings | None = None, *, resilience: ResilienceRegistry | None = None
) -> Model:
    """The model ``settings`` name; ``resilience`` is the runtime's registry (one breaker per service)."""
    settings = settings or ModelSettings.load(home)
    choice = resolve(home, settings)
    if not choice.model:
        return OfflineModel()
    from tether.models.openai_compat import OpenAICompatModel

    key = get_key(settings.provider)
    if key is None and choice.needs_key:
        raise CredentialError(
            f"[model] uses {settings.provider} but there is no key for it: run `tether auth set "
            f"{settings.provider}` or set {env_names(settings.provider)[0]}"
        )
    if resilience is None:
        policies = (settings.retry_policy(), settings.breaker_policy())
        resilience = ResilienceRegistry(*policies, state_dir=breakers_dir(home))
    model: Model = OpenAICompatModel(
        model=settings.model,
        base_url=choice.base_url,
        api_key=key,
        resilience=resilience
        or ResilienceRegistry(
            settings.retry_policy(), settings.breaker_policy(), state_dir=breakers_dir(home)
        ),
        timeout_s=settings.timeout_s,
        supports_tools=not settings.json_decisions,
        supports_images=settings.images,
        temperature=settings.temperature,
        first_token_timeout_s=settings.first_token_timeout_s,
        provider=settings.provider,
    )
    if settings.json_decisions:
        from tether.models.jsondecide import JsonDecisionModel

        model = JsonDecisionModel(model)
    return model


def named_settings(settings: ModelSettings, name: str | None) -> ModelSettings | None:
    """``settings`` for the model ``name``: None for the home's own, ``offline``, a model under the
    home's provider (``deepseek-chat``) or ``provider/model`` (another provider: its preset's address
    and its own key). None returned means the offline model."""
    if not name:
        return settings
    if name == "offline":
        return None
    provider, slash, model = name.partition("/")
    if slash and provider and model and provider != settings.provider:
        return ModelSettings(
            provider=provider,
            model=model,
            temperature=settings.temperature,
            json_decisions=settings.json_decisions,
        )
    return settings.model_copy(update={"model": model if slash else name})


def nameable(settings: ModelSettings, name: str) -> bool:
    """Whether ``name`` names a model that can be asked here: ``offline``, the home's model, or
    ``provider/model`` with a known provider (a preset, or the home's own)."""
    if name == "offline" or (settings.model and name == settings.model):
        return True
    provider, slash, model = name.partition("/")
    return bool(slash and model and (provider == settings.provider or preset(provider) is not None))


def models_for(runtime: Any) -> Callable[[str | None], Model]:
    """The models a home's sessions ask, by name (``named_settings``): its ``[model]`` for None."""

    def model_for(name: str | None) -> Model:
        settings = named_settings(runtime.model_settings, name)
        if settings is None:
            return OfflineModel()
        return model_from_settings(runtime.home, settings, resilience=runtime.resilience)

    return model_for
