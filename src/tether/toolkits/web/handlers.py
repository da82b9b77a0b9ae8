"""The web tasks' handlers. ``read_url`` runs in a worker; ``search`` and ``summarize_text`` inline
(see ``specs``). Heavy libraries load in the modules these call, on first use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tether.config import ResearchSettings
from tether.errors import ConfigError, TaskFailed
from tether.tasks.context import TaskContext

EXCERPT_CHARS = 280
MAX_MESSAGE_SUMMARY_CHARS = 3_000


def _params(ctx: TaskContext) -> Any:
    assert ctx.params is not None
    return ctx.params


def _settings(home: Path) -> ResearchSettings:
    try:
        return ResearchSettings.load(home)
    except ConfigError as exc:
        raise TaskFailed(exc.message, config_error=True) from exc


def clip_text(text: str, limit: int) -> tuple[str, bool]:
    """``text`` within ``limit`` characters, cut at a line or sentence end near the limit when there
    is one, and a note saying how much was left out."""
    if len(text) <= limit:
        return text, False
    cut = text[:limit]
    for mark in ("\n", "。", ". ", "！", "？"):
        at = cut.rfind(mark)
        if at >= limit * 0.8:
            cut = cut[: at + len(mark)]
            break
    return f"{cut.rstrip()}\n\n[clipped: {len(text) - len(cut):,} more characters not shown]", True


def read_url(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    from tether.toolkits.web.extract import extract
    from tether.toolkits.web.fetch import Fetcher, Limits
    from tether.toolkits.web.guard import Policy

    params = _params(ctx)
    settings = _settings(ctx.home)
    try:
        policy = Policy.from_settings(settings)
    except ConfigError as exc:
        raise TaskFailed(exc.message, config_error=True) from exc
    ctx.progress(None, f"reading {params.url}")
    with Fetcher(policy, Limits.from_settings(settings)) as fetcher:
        fetched = fetcher.fetch(params.url, check_stop=ctx.check_stop)
    ctx.check_stop()
    page = extract(fetched)
    text, clipped = clip_text(page.text, params.max_chars)
    data: dict[str, Any] = {
        "url": fetched.url,
        "title": page.title,
        "text": text,
        "excerpt": _excerpt(page.text),
        "content_type": fetched.content_type or "unknown",
        "bytes": len(fetched.body),
        "chars": len(page.text),
        "clipped": clipped,
        "extractor": page.extractor,
    }
    if page.charset:
        data["charset"] = page.charset
    if page.pages is not None:
        data["pages"] = page.pages
    if fetched.redirects:
        data["redirects"] = list(fetched.redirects)
    notes = []
    if fetched.truncated:
        data["body_truncated"] = True
        notes.append(f"only the first {len(fetched.body):,} bytes were read ([research] fetch_max_bytes)")
    if clipped:
        notes.append(f"the text was clipped to {params.max_chars:,} characters")
    if not page.text:
        notes.append("no readable text was found")
    if notes:
        data["note"] = "; ".join(notes)
    what = page.title or fetched.url
    message = f"read {what!r}: {len(page.text):,} characters of {page.kind}"
    if notes:
        message += f" ({'; '.join(notes)})"
    return message, data


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT_CHARS else flat[: EXCERPT_CHARS - 1] + "…"


def search(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    from tether.toolkits.web.providers import search as run_search

    params = _params(ctx)
    settings = _settings(ctx.home)
    try:
        provider, hits = run_search(ctx.home, params.query, params.k, settings)
    except ConfigError as exc:
        raise TaskFailed(exc.message, config_error=True) from exc
    results = [hit.to_dict() for hit in hits]
    if not results:
        message = f"no results for {params.query!r} ({provider})"
    else:
        lines = [f"[{n}] {hit.title} — {hit.url}" for n, hit in enumerate(hits, 1)]
        message = f"{len(results)} results for {params.query!r} ({provider}):\n" + "\n".join(lines)
    return message, {"query": params.query, "provider": provider, "results": results}


def summarize_text(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    from tether.toolkits.web.summarize import Source, summarize

    params = _params(ctx)
    if not params.text.strip():
        raise TaskFailed("there is no text to summarize: the text is only white space")
    source = Source(url=params.source_url, title=params.source_title, number=params.cite_as)
    summary = summarize(ctx.home, params.text, params.focus, source, params.max_sentences)
    data = summary.data()
    if params.source_url.lower().startswith(("http://", "https://")):
        # As documents.generate takes a source: a goal run hands it on (Call.args_from).
        data["source"] = {"title": params.source_title or params.source_url, "url": params.source_url}
    message = summary.text
    if len(message) > MAX_MESSAGE_SUMMARY_CHARS:
        message = message[: MAX_MESSAGE_SUMMARY_CHARS - 1] + "…"
    if summary.sources:
        first = summary.sources[0]
        message += f"\n\n{source.cite} {first['title'] or first['url']}" + (
            f" — {first['url']}" if first["title"] and first["url"] else ""
        )
    if summary.note:
        message += f"\n({summary.note})"
    return message, data
