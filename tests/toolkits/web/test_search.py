"""``web.search``: absent until a provider is set up, SearXNG by URL through the executor, Tavily and
Brave against services that answer like theirs on 127.0.0.1, and their failures said plainly."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, get_args

import pytest

from tests.toolkits.web.conftest import write_research
from tests.toolkits.web.site import Site
from tether.config import ResearchSettings
from tether.credentials import set_key
from tether.errors import TaskFailed
from tether.execution.executor import Executor
from tether.tasks.result import TaskStatus
from tether.toolkits.web.adapters import ADAPTERS, Hit, Request, SearchAdapter, hits_from
from tether.toolkits.web.fetch import Fetcher, Limits
from tether.toolkits.web.guard import Policy
from tether.toolkits.web.providers import Provider, search
from tether.toolkits.web.setup import NOT_SET_UP, setup_problem
from tether.toolkits.web.specs import registry, search_available

SEARX_RESULTS = {
    "query": "信任边界",
    "results": [
        {"title": "Trust <b>boundary</b>", "url": "https://example.com/trust", "content": "What &amp; why"},
        {
            "title": "信任边界 - 维基百科",
            "url": "https://zh.wikipedia.org/wiki/x",
            "content": "计算机安全中的概念",
        },
        {"title": "not a web link", "url": "javascript:alert(1)", "content": "dropped"},
        {"title": "Third", "url": "https://example.org/3", "content": "three"},
    ],
}


@pytest.fixture
def web(make_executor: Callable[..., Executor]) -> Executor:
    return make_executor(registry)


def test_search_is_absent_until_a_provider_is_set_up(web: Executor, home: Path) -> None:
    assert search_available(home) == NOT_SET_UP
    assert registry.spec("web.search").unavailable(home) == NOT_SET_UP
    result = web.execute_sync("web.search", {"query": "anything"}, caller="agent")
    assert result.status is TaskStatus.REJECTED, result
    assert result.message == NOT_SET_UP and result.data["unavailable"] is True


def test_searxng_without_its_url_says_what_to_add(home: Path) -> None:
    write_research(home, search_provider="searxng")
    assert 'needs searxng_url = "http://host:port"' in (search_available(home) or "")


def test_a_broken_research_section_is_the_reason_given(home: Path) -> None:
    write_research(home, search_provider="bing")
    reason = search_available(home) or ""
    assert "[research]" in reason and "search_provider" in reason


def test_searxng_results_through_the_executor(web: Executor, home: Path, site: Site) -> None:
    """No allow_hosts at all: the configured SearXNG's exact host:port is what search may reach."""
    site.json("/search", SEARX_RESULTS)
    write_research(home, search_provider="searxng", searxng_url=site.base)
    assert search_available(home) is None
    result = web.execute_sync("web.search", {"query": " 信任边界 ", "k": 2}, caller="agent")
    assert result.status is TaskStatus.COMPLETED, result
    assert result.data["provider"] == "searxng"
    assert result.data["results"] == [
        {"title": "Trust boundary", "url": "https://example.com/trust", "snippet": "What & why"},
        {
            "title": "信任边界 - 维基百科",
            "url": "https://zh.wikipedia.org/wiki/x",
            "snippet": "计算机安全中的概念",
        },
    ]
    asked = site.requests[-1]
    assert asked["path"] == "/search" and asked["query"] == {"q": ["信任边界"], "format": ["json"]}
    assert "[1] Trust boundary — https://example.com/trust" in result.message


def test_the_searxng_allowance_is_for_search_only(web: Executor, home: Path, site: Site) -> None:
    site.add("/page", "<html><body><p>private page</p></body></html>")
    write_research(home, search_provider="searxng", searxng_url=site.base)
    result = web.execute_sync("web.read_url", {"url": site.url("/page")}, caller="agent")
    assert result.status is TaskStatus.FAILED and "loopback" in result.message, result


def test_searxng_without_the_json_format_says_how_to_enable_it(web: Executor, home: Path, site: Site) -> None:
    site.add("/search", "Forbidden", "text/plain", status=403)
    write_research(home, search_provider="searxng", searxng_url=site.base)
    result = web.execute_sync("web.search", {"query": "x"}, caller="agent")
    assert result.status is TaskStatus.FAILED, result
    assert "add `json` to search.formats in its settings.yml" in result.message


def test_a_searxng_that_is_down_fails_plainly(web: Executor, home: Path) -> None:
    write_research(home, search_provider="searxng", searxng_url="http://127.0.0.1:1")
    result = web.execute_sync("web.search", {"query": "x"}, caller="agent")
    assert result.status is TaskStatus.FAILED, result
    assert "SearXNG at http://127.0.0.1:1" in result.message and "cannot connect" in result.message


@pytest.mark.parametrize(
    ("params", "says"),
    [({"query": "   "}, "at least 1 character"), ({"query": "x", "k": 0}, "greater than or equal to 1"),
     ({"query": "x", "k": 21}, "less than or equal to 20"), ({"q": "x"}, "query")],
)  # fmt: skip
def test_bad_search_arguments_are_rejected_with_the_rule(
    web: Executor, home: Path, site: Site, params: dict[str, object], says: str
) -> None:
    write_research(home, search_provider="searxng", searxng_url=site.base)
    result = web.execute_sync("web.search", params, caller="agent")
    assert result.status is TaskStatus.REJECTED, result
    assert says in result.message


# -- keys --------------------------------------------------------------------------------------------


def test_tavily_needs_its_own_key(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_research(home, search_provider="tavily")
    monkeypatch.delenv("TETHER_API_KEY_TAVILY", raising=False)
    monkeypatch.setenv("TETHER_API_KEY", "sk-the-models-key-0000")  # the model's: never sent to Tavily
    reason = search_available(home) or ""
    assert "no key for it: run `tether auth set tavily` or set TETHER_API_KEY_TAVILY" in reason
    set_key("tavily", "tvly-test-key-1234")
    assert search_available(home) is None


def test_brave_takes_its_key_from_its_environment_variable(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_research(home, search_provider="brave")
    monkeypatch.setenv("TETHER_API_KEY_BRAVE", "brave-test-key-1234")
    assert search_available(home) is None


# -- Tavily and Brave, against services on 127.0.0.1 that answer like theirs -----------------------


def served(site: Site, name: str, key: str = "k") -> Provider:
    """The ``name`` service's adapter, its requests sent to the local site instead of the service."""
    return Provider(adapter=ADAPTERS[name], url=site.url("/search"), key=key)


@pytest.fixture
def fetcher(site: Site) -> Iterator[Fetcher]:
    policy = Policy(networks=((ipaddress.ip_network("127.0.0.1/32"), site.port),))
    with Fetcher(policy, Limits.from_settings(ResearchSettings(fetch_timeout_s=3.0))) as reader:
        yield reader


def test_tavily_sends_the_key_as_a_bearer_token(site: Site, fetcher: Fetcher) -> None:
    site.json("/search", {"results": [{"title": "T", "url": "https://t.example/", "content": "tee"}]})
    hits = served(site, "tavily", "tvly-key").search(fetcher, "query", 3)
    assert [h.to_dict() for h in hits] == [{"title": "T", "url": "https://t.example/", "snippet": "tee"}]
    asked = site.requests[-1]
    assert asked["method"] == "POST" and asked["headers"]["authorization"] == "Bearer tvly-key"
    assert json.loads(asked["body"]) == {"query": "query", "max_results": 3}


def test_brave_sends_its_subscription_token_and_strips_markup(site: Site, fetcher: Fetcher) -> None:
    site.json(
        "/search",
        {
            "web": {
                "results": [
                    {"title": "B", "url": "https://b.example/", "description": "<strong>bold</strong> x"}
                ]
            }
        },
    )
    hits = served(site, "brave", "brave-key").search(fetcher, "查询", 5)
    assert hits[0].snippet == "bold x"
    asked = site.requests[-1]
    assert asked["headers"]["x-subscription-token"] == "brave-key"
    assert asked["query"] == {"q": ["查询"], "count": ["5"]}


@pytest.mark.parametrize(
    ("status", "says"),
    [(401, "refused the key (HTTP 401)"), (429, "quota is used up"), (503, "failed (HTTP 503)")],
)
def test_service_failures_are_said_in_the_services_terms(
    site: Site, fetcher: Fetcher, status: int, says: str
) -> None:
    site.json("/search", {"detail": "no"}, status=status)
    for provider in (served(site, "tavily"), served(site, "brave")):
        with pytest.raises(TaskFailed, match=says.replace("(", r"\(").replace(")", r"\)")):
            provider.search(fetcher, "x", 3)


def test_an_answer_that_is_not_json_is_said_plainly(site: Site, fetcher: Fetcher) -> None:
    site.add("/search", "<html>oops</html>")
    with pytest.raises(TaskFailed, match="Tavily's answer is not JSON"):
        served(site, "tavily").search(fetcher, "x", 3)


# -- one adapter per service ---------------------------------------------------------------------------


def test_the_settings_admit_exactly_the_services_there_are_adapters_for() -> None:
    """config sits below the toolkits and spells the names itself: this holds the two together."""
    annotation = ResearchSettings.model_fields["search_provider"].annotation
    assert get_args(annotation) == ("", *ADAPTERS)


class Example(SearchAdapter):
    name = "example"
    service = "Example Search"
    url = ""  # set per test: the local site
    url_setting = ""
    needs_key = True

    def request(self, url: str, key: str | None, query: str, k: int) -> Request:
        return Request(url=url, params={"query": query, "n": k}, headers={"X-Key": key or ""})

    def hits(self, answer: dict[str, Any], k: int) -> list[Hit]:
        return hits_from(answer.get("items"), k, snippet="text")


def test_a_new_service_is_one_adapter(home: Path, site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    """The setup check, the key lookup, the request, the hits and the failures all come from the
    adapter table: an adapter added there (and nothing else) is a working service."""
    example = Example()
    example.url = site.url("/search")
    monkeypatch.setitem(ADAPTERS, "example", example)
    settings = ResearchSettings.model_construct(
        search_provider="example", allow_hosts=(f"127.0.0.1:{site.port}",), fetch_timeout_s=3.0
    )
    monkeypatch.delenv("TETHER_API_KEY_EXAMPLE", raising=False)
    assert "run `tether auth set example` or set TETHER_API_KEY_EXAMPLE" in (setup_problem(settings) or "")
    monkeypatch.setenv("TETHER_API_KEY_EXAMPLE", "example-key-1234")
    assert setup_problem(settings) is None

    site.json("/search", {"items": [{"title": "E", "url": "https://e.example/", "text": "<i>found</i>"}]})
    name, hits = search(home, "查询", 3, settings)
    assert name == "example" and [h.to_dict() for h in hits] == [
        {"title": "E", "url": "https://e.example/", "snippet": "found"}
    ]
    asked = site.requests[-1]
    assert asked["headers"]["x-key"] == "example-key-1234"
    assert asked["query"] == {"query": ["查询"], "n": ["3"]}

    site.json("/search", {"detail": "no"}, status=401)
    refused = r"Example Search refused the key \(HTTP 401\).*`tether auth set example`"
    with pytest.raises(TaskFailed, match=refused):
        search(home, "x", 3, settings)
