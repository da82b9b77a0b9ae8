"""The web search services, each described once by an adapter: its name, where it answers, whether
it needs a key, how a query becomes a request, how its answer becomes hits, and any failure it words
its own way. ``ADAPTERS`` is the one table everything else reads: the setup check (``setup``), the
key lookup and the requests (``providers``).

Adding a service is one adapter here and its name in ``[research] search_provider`` (``tether.config``
sits below the toolkits and cannot read this table; a test holds the two together).

Light on purpose (no HTTP client): the registry asks ``setup`` in the parent process.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

MAX_TITLE_CHARS = 300
MAX_SNIPPET_CHARS = 500
MAX_HIT_URL_CHARS = 2000
_TAGS = re.compile(r"<[^>]{0,200}>")


@dataclass(frozen=True, slots=True, kw_only=True)
class Hit:
    title: str
    url: str
    snippet: str

    def to_dict(self) -> dict[str, str]:
        return {"title": self.title, "url": self.url, "snippet": self.snippet}


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One HTTP request to a search service, before it goes through the guard."""

    url: str
    method: str = "GET"
    params: Mapping[str, str | int] | None = None
    json: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict[str, str])


class SearchAdapter(Protocol):
    """What tether knows of one search service. Adapters subclass this for ``explain``'s default."""

    name: str  # the [research] search_provider value, and the key's name (`tether auth set <name>`)
    service: str  # how messages name the service
    url: str  # where it answers; "" when the person runs it and [research] says where (``url_setting``)
    url_setting: str  # the [research] setting holding a self-run service's address, else ""
    needs_key: bool

    def request(self, url: str, key: str | None, query: str, k: int) -> Request: ...

    def hits(self, answer: dict[str, Any], k: int) -> list[Hit]:
        """At most ``k`` hits from the service's JSON answer."""
        ...

    def explain(self, status: object) -> str | None:
        """The service's own reason for an HTTP ``status``, said after its name; None: the usual one."""
        return None


class SearXNG(SearchAdapter):
    name = "searxng"
    service = "SearXNG"
    url = ""
    url_setting = "searxng_url"
    needs_key = False

    def request(self, url: str, key: str | None, query: str, k: int) -> Request:
        return Request(
            url=url.rstrip("/") + "/search",
            params={"q": query, "format": "json"},
            headers={"Accept": "application/json"},
        )

    def hits(self, answer: dict[str, Any], k: int) -> list[Hit]:
        return hits_from(answer.get("results"), k, snippet="content")

    def explain(self, status: object) -> str | None:
        if status == 403:  # a SearXNG answers HTML only until its settings allow JSON
            return "refused the JSON format (HTTP 403): add `json` to search.formats in its settings.yml"
        return None


class Tavily(SearchAdapter):
    name = "tavily"
    service = "Tavily"
    url = "https://api.tavily.com/search"
    url_setting = ""
    needs_key = True

    def request(self, url: str, key: str | None, query: str, k: int) -> Request:
        return Request(
            url=url,
            method="POST",
            json={"query": query, "max_results": k},
            headers={"Authorization": f"Bearer {key}"},
        )

    def hits(self, answer: dict[str, Any], k: int) -> list[Hit]:
        return hits_from(answer.get("results"), k, snippet="content")


class Brave(SearchAdapter):
    name = "brave"
    service = "Brave Search"
    url = "https://api.search.brave.com/res/v1/web/search"
    url_setting = ""
    needs_key = True

    def request(self, url: str, key: str | None, query: str, k: int) -> Request:
        return Request(
            url=url,
            params={"q": query, "count": k},
            headers={"Accept": "application/json", "X-Subscription-Token": key or ""},
        )

    def hits(self, answer: dict[str, Any], k: int) -> list[Hit]:
        web = answer.get("web")
        return hits_from(web.get("results") if isinstance(web, dict) else None, k, snippet="description")


ADAPTERS: dict[str, SearchAdapter] = {adapter.name: adapter for adapter in (SearXNG(), Tavily(), Brave())}


def _clean(text: Any, limit: int) -> str:
    if not isinstance(text, str):
        return ""
    flat = " ".join(html.unescape(_TAGS.sub("", text)).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def hits_from(items: Any, k: int, *, snippet: str) -> list[Hit]:
    """Hits from a list of ``{"title", "url", <snippet>}`` objects: web links only, markup stripped,
    lengths bounded; anything else in the list is skipped."""
    hits: list[Hit] = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        url = item.get("url")
        if (
            not isinstance(url, str)
            or not url.startswith(("http://", "https://"))
            or len(url) > MAX_HIT_URL_CHARS
        ):
            continue
        hits.append(
            Hit(
                title=_clean(item.get("title"), MAX_TITLE_CHARS) or url,
                url=url,
                snippet=_clean(item.get(snippet), MAX_SNIPPET_CHARS),
            )
        )
        if len(hits) >= k:
            break
    return hits
