"""The web research tasks: ``web.search``, ``web.read_url``, ``web.summarize_text``.

Light on purpose: specs and parameters only; the handlers (httpx, trafilatura, pypdf) load where the
task runs. ``web.read_url`` runs in a worker process. ``web.search`` and ``web.summarize_text`` run
inline: they need an API key (a search service's, a model's) from the person's OS keyring, which a
worker cannot reach (workers get no session bus); they are safe, claim no resource, and bound their
own time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from tether.errors import ConfigError
from tether.tasks.spec import EVERYONE, Isolation, Registry, TaskSpec

H = "tether.toolkits.web.handlers:"

MAX_QUERY_CHARS = 500
MAX_K = 20
MAX_URL_CHARS = 2000
DEFAULT_READ_CHARS = 20_000
MAX_READ_CHARS = 60_000  # CJK text is 3 bytes a character: well inside a result's data limit
MAX_SUMMARY_INPUT_CHARS = 200_000


def _http_url(value: str) -> str:
    if not value.lower().startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL, e.g. https://example.com/page")
    return value


HttpUrl = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_URL_CHARS),
    AfterValidator(_http_url),
]


class SearchParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: Annotated[
        str,
        StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_QUERY_CHARS),
        Field(
            description="what to search for, in the person's words",
            json_schema_extra={"labels": {"en": "query", "zh": "搜索词"}},
        ),
    ]
    k: Annotated[
        int,
        Field(
            ge=1,
            le=MAX_K,
            description=f"how many results, 1 to {MAX_K}",
            json_schema_extra={"labels": {"en": "results", "zh": "结果数"}},
        ),
    ] = 5


class ReadUrlParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: Annotated[
        HttpUrl,
        Field(
            description="the page or PDF to read (http or https)",
            json_schema_extra={"labels": {"en": "link", "zh": "链接"}},
        ),
    ]
    max_chars: Annotated[
        int,
        Field(ge=500, le=MAX_READ_CHARS, description=f"the most text to return, 500 to {MAX_READ_CHARS}"),
    ] = DEFAULT_READ_CHARS


class SummarizeParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: Annotated[
        str,
        StringConstraints(min_length=1, max_length=MAX_SUMMARY_INPUT_CHARS),
        Field(
            description="the text to summarize (e.g. what web.read_url returned)",
            json_schema_extra={"labels": {"en": "text", "zh": "文本"}},
        ),
    ]
    focus: Annotated[
        str,
        StringConstraints(strip_whitespace=True, max_length=200),
        Field(
            description="what the summary should concentrate on (optional)",
            json_schema_extra={"labels": {"en": "focus", "zh": "重点"}},
        ),
    ] = ""
    max_sentences: Annotated[int, Field(ge=1, le=12, description="at most this many points, 1 to 12")] = 5
    cite_as: Annotated[
        int,
        Field(
            ge=1, le=99, description="the citation number of the source, [1] unless it is the n-th of several"
        ),
    ] = 1
    source_url: Annotated[
        str,
        StringConstraints(strip_whitespace=True, max_length=MAX_URL_CHARS),
        Field(description="where the text came from, cited as [1] (optional)"),
    ] = ""
    source_title: Annotated[
        str,
        StringConstraints(strip_whitespace=True, max_length=300),
        Field(description="the source's title (optional)"),
    ] = ""


def search_available(home: Path) -> str | None:
    """Why ``web.search`` cannot be used in ``home`` (no provider, no key), else None."""
    from tether.config import ResearchSettings
    from tether.toolkits.web.setup import setup_problem

    try:
        return setup_problem(ResearchSettings.load(home))
    except ConfigError as exc:
        return exc.message


def _page_specs() -> tuple[TaskSpec, ...]:
    """Finding pages and reading one."""
    return (
        TaskSpec(
            task_id="web.search",
            handler=H + "search",
            params=SearchParams,
            exposed_to=EVERYONE,
            resources=(),
            isolation=Isolation.INLINE,
            idempotent=True,
            timeout_s=120.0,
            available="tether.toolkits.web.specs:search_available",
            description=(
                "Search the web; returns titles, links and snippets. Read a result with web.read_url "
                "before relying on it."
            ),
            aliases=(
                "搜索",
                "搜一下",
                "查一下",
                "上网查",
                "网上搜",
                "搜索网页",
                "search the web",
                "web search",
                "search for",
                "look up",
                "look it up online",
            ),
        ),
        TaskSpec(
            task_id="web.read_url",
            handler=H + "read_url",
            params=ReadUrlParams,
            exposed_to=EVERYONE,
            resources=(),
            idempotent=True,
            timeout_s=300.0,
            description=(
                "Read a web page or PDF at a public http(s) URL: its title and main text (clipped, with "
                "a note when clipped). Private and local network addresses are refused."
            ),
            aliases=(
                "读网页",
                "打开链接",
                "读取网页",
                "看看这个网页",
                "读一下这个链接",
                "网页内容",
                "read the page",
                "open the link",
                "read this url",
                "fetch the page",
                "what does this page say",
            ),
        ),
    )


def _summary_specs() -> tuple[TaskSpec, ...]:
    """Summarizing a text while keeping its source."""
    return (
        TaskSpec(
            task_id="web.summarize_text",
            handler=H + "summarize_text",
            params=SummarizeParams,
            exposed_to=EVERYONE,
            resources=(),
            isolation=Isolation.INLINE,
            idempotent=True,
            timeout_s=300.0,
            description=(
                "Summarize a text (optionally with a focus) and cite its source as [1]; give source_url "
                "and source_title when the text came from a page."
            ),
            aliases=(
                "总结",
                "概括",
                "摘要",
                "归纳一下",
                "总结一下",
                "summarize",
                "summarise",
                "sum up",
                "give me the gist",
                "tl;dr",
            ),
        ),
    )


def add_tasks(registry: Registry) -> None:
    """Add the web tasks to ``registry``."""
    for spec in (*_page_specs(), *_summary_specs()):
        registry.add(spec)


# The fork server imports these while idle, so a page read starts with httpx and trafilatura loaded.
PRELOAD = (
    "tether.toolkits.web.handlers",
    "tether.toolkits.web.fetch",
    "tether.toolkits.web.extract",
    "trafilatura",
)

registry = Registry(ref="tether.toolkits.web.specs:registry", preload=PRELOAD)
add_tasks(registry)
