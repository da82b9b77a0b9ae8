"""Web search through the configured service: one ``Provider`` (an adapter from ``adapters``, its
address and its key) turns a query into hits, and the service's failures into sentences a person can
act on (no key, a refused key, a quota, a service of their own that is down or misconfigured).

Requests go through the same guard as page reads; the address of a service the person runs (its
exact host:port from ``[research]``) is the one address added.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.config import ResearchSettings
from tether.errors import TaskFailed
from tether.toolkits.web.adapters import ADAPTERS, Hit, SearchAdapter
from tether.toolkits.web.fetch import Fetcher, Limits
from tether.toolkits.web.guard import Policy, check_url
from tether.toolkits.web.setup import configured_url, search_key, setup_problem
from tether.toolkits.web.specs import MAX_K

__all__ = ["Hit", "Provider", "provider_from_settings", "search"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Provider:
    """A search service as this home reaches it."""

    adapter: SearchAdapter
    url: str
    key: str | None = None

    @property
    def name(self) -> str:
        return self.adapter.name

    @property
    def where(self) -> str:
        """How messages name the service: a self-run one by its address too (there may be several)."""
        service = self.adapter.service
        return f"{service} at {self.url.rstrip('/')}" if self.adapter.url_setting else service

    def search(self, fetcher: Fetcher, query: str, k: int) -> list[Hit]:
        request = self.adapter.request(self.url, self.key, query, k)
        try:
            fetched = fetcher.fetch(
                request.url,
                method=request.method,
                json=request.json,
                params=request.params,
                headers=request.headers,
            )
        except TaskFailed as exc:
            raise self._failure(exc) from None
        return self.adapter.hits(_json(fetched.body, self.adapter.service), k)

    def _failure(self, exc: TaskFailed) -> TaskFailed:
        """``exc`` from a service call, said in terms of that service."""
        status = exc.data.get("status")
        own = self.adapter.explain(status)
        if own is not None:
            return TaskFailed(f"{self.where} {own}", status=status)
        if status in (401, 403) and self.adapter.needs_key:
            return TaskFailed(
                f"{self.where} refused the key (HTTP {status}): check it, and store it again with "
                f"`tether auth set {self.name}`",
                status=status,
            )
        if status == 429:
            quota = "says too many requests (HTTP 429): the quota is used up; try later"
            return TaskFailed(f"{self.where} {quota}", status=status)
        if isinstance(status, int) and status >= 500:
            return TaskFailed(f"{self.where} failed (HTTP {status}); try again later", status=status)
        return TaskFailed(f"{self.where}: {exc.message}", **exc.data)


def _json(body: bytes, service: str) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise TaskFailed(f"{service}'s answer is not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise TaskFailed(f"{service}'s answer is not a JSON object")
    return document


def _host_port(url: str) -> str:
    """``url``'s exact host:port, as ``[research] allow_hosts`` writes it."""
    checked = check_url(url)
    port = checked.port or (443 if checked.scheme == "https" else 80)
    host = checked.raw_host.decode("ascii")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def provider_from_settings(settings: ResearchSettings) -> tuple[Provider, Policy]:
    """The configured provider and the guard policy its requests go through."""
    problem = setup_problem(settings)
    if problem is not None:
        raise TaskFailed(problem, not_set_up=True)
    adapter = ADAPTERS[settings.search_provider]
    configured = configured_url(adapter, settings)
    key = search_key(adapter.name) if adapter.needs_key else None
    provider = Provider(adapter=adapter, url=configured or adapter.url, key=key)
    # A service the person runs is reachable at exactly the address they gave it, for search only.
    extra = (_host_port(configured),) if configured else ()
    return provider, Policy.from_settings(settings, extra=extra)


def search(home: Path, query: str, k: int, settings: ResearchSettings | None = None) -> tuple[str, list[Hit]]:
    """(provider name, hits) for ``query`` with the home's configured provider."""
    settings = settings or ResearchSettings.load(home)
    provider, policy = provider_from_settings(settings)
    with Fetcher(policy, Limits.from_settings(settings)) as fetcher:
        return provider.name, provider.search(fetcher, query, min(max(k, 1), MAX_K))
