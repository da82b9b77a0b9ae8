"""``documents.generate``: runs in the worker; the only place the artifact builders are loaded."""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import tempfile
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tether.artifacts import Document, DocumentError, build, from_markdown, make_document
from tether.artifacts.build import MAX_STEM_CHARS, Built, Format
from tether.artifacts.document import MAX_MARKDOWN_CHARS, MAX_SOURCES
from tether.errors import TaskFailed, TetherError
from tether.tasks.context import TaskContext
from tether.toolkits.documents.inputs import ImageFinder, read_markdown, web_reader

ARTIFACTS_DIR = "artifacts"
PRIVATE_DIR = 0o700
DEFAULT_STEM = "document"
MAX_STEM_BYTES = 240  # 80 Chinese characters; with ".pptx" within the 255 bytes of a file name
# Characters a file name may not carry on some system we serve (Windows' set includes POSIX's "/").
_UNSAFE = re.compile(r'[\\/:*?"<>|\x00-\x1f\x7f]')


def safe_stem(title: str) -> str:
    """A file name stem from a title: letters of any script kept (中文 too), path and shell-hostile
    characters dropped, spaces made single, no leading dot, at most ``MAX_STEM_CHARS``."""
    text = unicodedata.normalize("NFC", title)
    text = "".join(ch for ch in text if unicodedata.category(ch)[0] != "C")
    text = _UNSAFE.sub(" ", text)
    text = " ".join(text.split()).strip(" .")[:MAX_STEM_CHARS]
    # File names are limited in bytes (255 on most systems): 80 four-byte characters would not fit.
    while len(text.encode("utf-8")) > MAX_STEM_BYTES:
        text = text[:-1]
    return text.rstrip(" .") or DEFAULT_STEM


def _folder(home: Path, execution_id: str) -> Path:
    folder = home / ARTIFACTS_DIR / execution_id
    for path in (home / ARTIFACTS_DIR, folder):
        path.mkdir(mode=PRIVATE_DIR, exist_ok=True)
    return folder


def _entry(built: Built, home: Path) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "format": built.format,
        "path": built.path.relative_to(home).as_posix(),
        "name": built.path.name,
        "size": built.size,
    }
    if built.slides is not None:
        entry["slides"] = built.slides
    if built.pages is not None:
        entry["pages"] = built.pages
    return entry


def _read(ctx: TaskContext, params: Any, pictures: Path, fetch: Any = None) -> tuple[Document, ImageFinder]:
    """The document from the content (or the workspace file), its pictures checked and copied."""
    from tether.toolkits.workspace.paths import Roots

    if bool(params.content) == (params.content_path is not None):  # checked here: a goal fills content late
        raise TaskFailed(
            "give the Markdown either as content or as content_path (a workspace file), not both"
        )
    roots = Roots.load(ctx.home)
    text = params.content
    base = ""
    if params.content_path is not None:
        text = read_markdown(roots, params.content_path, MAX_MARKDOWN_CHARS)
        base = posixpath.dirname(params.content_path)
    title = params.title
    if title is not None and _names_a_folder(roots, title):
        title = None  # a planner's folder name ("notes") is not a title: the content's heading is
    try:
        try:
            finder = ImageFinder(roots=roots, folder=pictures, base=base, fetch=fetch)
            doc = from_markdown(text, title=title, language=params.language, resolve_image=finder.resolve)
        except DocumentError:
            if title == params.title:
                raise
            # no heading: the name it is
            finder = ImageFinder(roots=roots, folder=pictures, base=base, fetch=fetch)
            doc = from_markdown(
                text, title=params.title, language=params.language, resolve_image=finder.resolve
            )
        if params.sources:
            known = {source.url for source in doc.sources}
            extra = [s.model_dump() for s in params.sources if s.url not in known]
            merged = [source.model_dump() for source in doc.sources] + extra
            doc = make_document(**{**doc.model_dump(), "sources": merged[:MAX_SOURCES]})
    except DocumentError as exc:
        raise TaskFailed(exc.message, **exc.data) from exc
    return doc, finder


def _names_a_folder(roots: Any, title: str) -> bool:
    """Is ``title`` just the name of a workspace folder (what a planner passes for "the notes in notes/")?"""
    if not re.fullmatch(r"[\w.-]+/?", title):
        return False
    try:
        return roots.locate(title.rstrip("/"), must_exist=True).path.is_dir()
    except TetherError:
        return False


def generate(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    params: Any = ctx.params
    formats: list[Format] = list(params.formats)
    ctx.progress(0.0, "reading the content")
    fetch, close = web_reader(ctx.home)
    try:
        with tempfile.TemporaryDirectory(prefix="tether-pictures-") as pictures:
            doc, finder = _read(ctx, params, Path(pictures), fetch)
            return _generate(ctx, params, formats, doc, finder)
    finally:
        close()


def _generate(
    ctx: TaskContext, params: Any, formats: list[Format], doc: Document, finder: ImageFinder
) -> tuple[str, dict[str, Any]]:
    if params.save_to is not None:  # a refused or taken place fails now, before minutes of building
        _check_save(ctx, params.save_to, formats, overwrite=params.overwrite)
    folder = _folder(ctx.home, ctx.execution_id)
    stem = safe_stem(doc.title)

    def before_each(fmt: Format, index: int) -> None:
        ctx.check_stop()
        ctx.progress(index / len(formats), f"writing {fmt}", format=fmt)

    try:
        built = build(doc, formats, folder, stem, before_each=before_each)
        saved = _save(ctx, built, params.save_to, overwrite=params.overwrite) if params.save_to else None
    except BaseException as exc:
        # Nothing of an unfinished generate stays: its files were never going to be on record.
        shutil.rmtree(folder, ignore_errors=True)
        if isinstance(exc, DocumentError):  # the CJK font missing, above all: the message names the package
            raise TaskFailed(exc.message, **exc.data) from exc
        raise
    ctx.progress(1.0, "done")
    artifacts = [_entry(item, ctx.home) for item in built]
    names = ", ".join(item["name"] for item in artifacts)
    message = f"wrote {len(artifacts)} file(s) to {ARTIFACTS_DIR}/{ctx.execution_id}: {names}"
    data: dict[str, Any] = {
        "artifacts": artifacts,
        "language": doc.lang,
        "sections": len(doc.sections),
        "sources": len(doc.sources),
    }
    if finder.drawn or finder.missing:
        data["images"] = {"drawn": len(finder.drawn), "not_drawn": dict(list(finder.missing.items())[:10])}
        if finder.missing:
            message += f"; {len(finder.missing)} picture(s) not drawn (their alt text stands in)"
    if saved is not None:
        data["saved"] = saved
        message += f"; saved to {', '.join(saved)}"
    return message, data


def save_targets(save_to: str, formats: Sequence[str]) -> dict[str, str]:
    """Where each format goes in the workspace: ``handouts/solar`` → ``handouts/solar.pptx``…; a path
    that already ends in one of the formats keeps it for that format and lends its stem to the others."""
    stem, dot, suffix = save_to.rpartition(".")
    if not (dot and suffix.lower() in ("md", "html", "pptx", "pdf") and "/" not in suffix):
        stem = save_to
    return {fmt: f"{stem}.{fmt}" for fmt in formats}


def _check_save(ctx: TaskContext, save_to: str, formats: Sequence[str], *, overwrite: bool) -> None:
    """Refuse a place outside the roots, a folder for a name, or (without ``overwrite``) a taken file."""
    from tether.toolkits.workspace.paths import Roots

    if save_to.endswith(("/", "\\")) or save_to.rstrip("/").rsplit("/", 1)[-1] in ("", ".", ".."):
        raise TaskFailed(f"save_to {save_to!r} names a folder: give a file name, e.g. handouts/solar")
    roots = Roots.load(ctx.home)
    targets = save_targets(save_to, formats)
    resolved = {t: roots.resolve(t, for_write=True) for t in targets.values()}  # PathRefused names the roots
    if not overwrite:
        taken = [t for t, path in resolved.items() if os.path.lexists(path)]
        if taken:
            raise TaskFailed(
                f"{', '.join(taken)} exists in the workspace: to replace it, call again with overwrite=true "
                "(the person is asked to confirm)",
                exists=taken,
            )


def _save(ctx: TaskContext, built: list[Built], save_to: str, *, overwrite: bool) -> list[str]:
    """Copy the files into the workspace, confined to its roots. Without ``overwrite`` nothing existing
    is touched (checked before the build, and each file is created exclusively now)."""
    from tether.toolkits.workspace.paths import Roots

    roots = Roots.load(ctx.home)
    targets = save_targets(save_to, [item.format for item in built])
    contents = [(targets[item.format], item.path.read_bytes()) for item in built]
    # A stop is honoured before the first copy, not between them: the person's files are all replaced
    # or none is (the copies are quick; a crash in between is the only way to get some of them).
    ctx.check_stop()
    return [roots.display(roots.write_bytes(target, data, overwrite=overwrite)) for target, data in contents]
