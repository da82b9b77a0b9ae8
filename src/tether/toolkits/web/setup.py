"""Whether web search is set up in a home: light (no HTTP client), so the registry can ask it in the
parent process without loading the toolkit. Every service-dependent step reads ``adapters.ADAPTERS``."""

from __future__ import annotations

from tether.config import ResearchSettings
from tether.credentials import env_names, get_key, key_info
from tether.toolkits.web.adapters import ADAPTERS, SearchAdapter

_SELF_RUN = [a for a in ADAPTERS.values() if a.url_setting]
_KEYED = [a for a in ADAPTERS.values() if a.needs_key]
NOT_SET_UP = (
    "web search is not set up: set [research] search_provider = "
    + " or ".join(f'"{a.name}" and {a.url_setting}' for a in _SELF_RUN)
    + ", or "
    + " or ".join(f'"{a.name}"' for a in _KEYED)
    + " with its key (`tether auth set <name>`)"
)


def search_key(provider: str) -> str | None:
    """The provider's own key (keyring, or ``TETHER_API_KEY_<PROVIDER>``). The generic
    ``TETHER_API_KEY`` is the model's: it is never sent to a search service."""
    if key_info(provider).source not in ("keyring", env_names(provider)[0]):
        return None
    return get_key(provider)


def configured_url(adapter: SearchAdapter, settings: ResearchSettings) -> str:
    """The address ``[research]`` gives a service the person runs; "" for a hosted one."""
    return str(getattr(settings, adapter.url_setting)) if adapter.url_setting else ""


def setup_problem(settings: ResearchSettings) -> str | None:
    """Why search cannot run with ``settings``, or None."""
    if not settings.search_provider:
        return NOT_SET_UP
    adapter = ADAPTERS[settings.search_provider]  # the settings admit only the table's names
    name = adapter.name
    if adapter.url_setting and not configured_url(adapter, settings):
        return f'[research] search_provider = "{name}" needs {adapter.url_setting} = "http://host:port"'
    if adapter.needs_key and search_key(name) is None:
        return (
            f"web search uses {name} but there is no key for it: run `tether auth set {name}` "
            f"or set {env_names(name)[0]}"
        )
    return None
