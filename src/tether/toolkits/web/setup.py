"""Whether web search is set up in a home: light (no HTTP client), so the registry can ask it in the
parent process without loading the toolkit."""

from __future__ import annotations

from tether.config import ResearchSettings
from tether.credentials import env_names, get_key, key_info

NOT_SET_UP = (
    'web search is not set up: set [research] search_provider = "searxng" and searxng_url, or '
    "tavily/brave with `tether auth set tavily`"
)


def search_key(provider: str) -> str | None:
    """The provider's own key (keyring, or ``TETHER_API_KEY_<PROVIDER>``). The generic
    ``TETHER_API_KEY`` is the model's: it is never sent to a search service."""
    if key_info(provider).source not in ("keyring", env_names(provider)[0]):
        return None
    return get_key(provider)


def setup_problem(settings: ResearchSettings) -> str | None:
    """Why search cannot run with ``settings``, or None."""
    provider = settings.search_provider
    if not provider:
        return NOT_SET_UP
    if provider == "searxng":
        if not settings.searxng_url:
            return '[research] search_provider = "searxng" needs searxng_url = "http://host:port"'
        return None
    if search_key(provider) is None:
        return (
            f"web search uses {provider} but there is no key for it: run `tether auth set {provider}` "
            f"or set {env_names(provider)[0]}"
        )
    return None
