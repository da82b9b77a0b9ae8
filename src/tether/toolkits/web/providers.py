"""Web search providers behind one protocol: SearXNG (by URL, its JSON API), Tavily, Brave.

Each turns a query into ``[Hit(title, url, snippet)]`` and its service's failures into sentences a
person can act on (no key, a refused key, a quota, a SearXNG without its JSON format). Requests go
through the same guard as page reads; a configured SearXNG's exact host:port is the one address added.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tether.config import ResearchSettings
from tether.errors import TaskFailed
from tether.toolkits.web.fetch import Fetcher, Limits
from tether.toolkits.web.guard import Policy, check_url
from tether.toolkits.web.setup import search_key, setup_problem

TAVILY_URL = "https://api.tavily.com/search"
BRAVE_URL = "https://api.search.brave.com/res/v1/web/search"
MAX_K = 20
MAX_TITLE_CHARS = 300
MAX_SNIPPET_CHARS = 500
_TAGS = re.compile(r"<[^>]{0,200}>")


@dataclass(frozen=True, slots=True, kw_only=True)
class Hit:
    title: str
    url: str
    snippet: str

    def to_dict(self) -> dict[str, str]:
        return {"title": self.title, "url": self.url, "snippet": self.snippet}


class SearchProvider(Protocol):
    name: str

    def search(self, fetcher: Fetcher, query: str, k: int) -> list[Hit]: ...


def _clean(text: Any, limit: int) -> str:
    if not isinstance(text, str):
        return ""
    flat = " ".join(html.unescape(_TAGS.sub("", text)).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _hits(items: Any, k: int, snippet_key: str) -> list[Hit]:
    hits: list[Hit] = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        url = item.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url) > 2000:
            continue
        hits.append(
            Hit(
                title=_clean(item.get("title"), MAX_TITLE_CHARS) or url,
                url=url,
                snippet=_clean(item.get(snippet_key), MAX_SNIPPET_CHARS),
            )
        )
        if len(hits) >= k:
            break
    return hits


def _json(body: bytes, service: str) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise TaskFailed(f"{service}'s answer is not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise TaskFailed(f"{service}'s answer is not a JSON object")
    return document


def _status_failure(exc: TaskFailed, service: str, provider: str | None) -> TaskFailed:
    """``exc`` from a service call, said in terms of that service."""
    status = exc.data.get("status")
    if status in (401, 403) and provider is not None:
        return TaskFailed(
            f"{service} refused the key (HTTP {status}): check it, and store it again with "
            f"`tether auth set {provider}`",
            status=status,
        )
    if status == 429:
        return TaskFailed(f"{service} says too many requests (HTTP 429): the quota is used up; try later",
                          status=status)  # fmt: skip
    if isinstance(status, int) and status >= 500:
        return TaskFailed(f"{service} failed (HTTP {status}); try again later", status=status)
    return TaskFailed(f"{service}: {exc.message}", **exc.data)


class SearXNG:
    name = "searxng"

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    def search(self, fetcher: Fetcher, query: str, k: int) -> list[Hit]:
        try:
            fetched = fetcher.fetch(
                self.base_url + "/search",
                params={"q": query, "format": "json"},
                headers={"Accept": "application/json"},
            )
        except TaskFailed as exc:
            if exc.data.get("status") == 403:
                raise TaskFailed(
                    f"SearXNG at {self.base_url} refused the JSON format (HTTP 403): add `json` to "
                    "search.formats in its settings.yml",
                    status=403,
                ) from None
            raise _status_failure(exc, f"SearXNG at {self.base_url}", None) from None
        return _hits(_json(fetched.body, "SearXNG").get("results"), k, "content")


class Tavily:
    name = "tavily"

    def __init__(self, key: str, base_url: str = TAVILY_URL) -> None:
        self.key = key
        self.base_url = base_url

    def search(self, fetcher: Fetcher, query: str, k: int) -> list[Hit]:
        try:
            fetched = fetcher.fetch(
                self.base_url,
                method="POST",
                json={"query": query, "max_results": k},
                headers={"Authorization": f"Bearer {self.key}"},
            )
        except TaskFailed as exc:
            raise _status_failure(exc, "Tavily", self.name) from None
        return _hits(_json(fetched.body, "Tavily").get("results"), k, "content")


class Brave:
    name = "brave"

    def __init__(self, key: str, base_url: str = BRAVE_URL) -> None:
        self.key = key
        self.base_url = base_url

    def search(self, fetcher: Fetcher, query: str, k: int) -> list[Hit]:
        try:
            fetched = fetcher.fetch(
                self.base_url,
                params={"q": query, "count": k},
                headers={"Accept": "application/json", "X-Subscription-Token": self.key},
            )
        except TaskFailed as exc:
            raise _status_failure(exc, "Brave Search", self.name) from None
        web = _json(fetched.body, "Brave Search").get("web")
        return _hits(web.get("results") if isinstance(web, dict) else None, k, "description")


def provider_from_settings(settings: ResearchSettings) -> tuple[SearchProvider, Policy]:
    """The configured provider and the guard policy its requests go through."""
    problem = setup_problem(settings)
    if problem is not None:
        raise TaskFailed(problem, not_set_up=True)
    if settings.search_provider == "searxng":
        url = check_url(settings.searxng_url)
        port = url.port or (443 if url.scheme == "https" else 80)
        host = url.raw_host.decode("ascii")
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return SearXNG(settings.searxng_url), Policy.from_settings(settings, extra=(where,))
    key = search_key(settings.search_provider)
    assert key is not None
    provider: SearchProvider = Tavily(key) if settings.search_provider == "tavily" else Brave(key)
    return provider, Policy.from_settings(settings)


def search(home: Path, query: str, k: int, settings: ResearchSettings | None = None) -> tuple[str, list[Hit]]:
    """(provider name, hits) for ``query`` with the home's configured provider."""
    settings = settings or ResearchSettings.load(home)
    provider, policy = provider_from_settings(settings)
    with Fetcher(policy, Limits.from_settings(settings)) as fetcher:
        return provider.name, provider.search(fetcher, query, min(max(k, 1), MAX_K))
