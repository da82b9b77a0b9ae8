"""The workspace tasks' handlers; imported only inside workers.

Every path goes through ``Roots`` (confinement and descriptor-walked opens); results stay small: at
most ``[workspace] max_results`` entries and ``max_read_chars`` characters, with a note when clipped.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from tether.config import WorkspaceSettings
from tether.errors import ConfigError, TaskFailed
from tether.tasks.context import TaskContext
from tether.toolkits.workspace import impact, readers
from tether.toolkits.workspace.paths import Located, Roots

MAX_WALK_ENTRIES = 200_000  # entries visited by one find or grep before it gives up, saying so
MAX_GREP_FILE_BYTES = 4 * 1024 * 1024
MAX_LINE_CHARS = 300
MAX_TEXT_BYTES = 200_000  # UTF-8 bytes of text in one result (results are bounded at 256 KiB)


def _setup(ctx: TaskContext) -> tuple[Any, WorkspaceSettings, Roots]:
    try:
        settings = WorkspaceSettings.load(ctx.home)
        roots = Roots.load(ctx.home, settings)
    except ConfigError as exc:
        raise TaskFailed(f"the workspace is not set up: {exc.message}") from exc
    return ctx.params, settings, roots


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "link"
    return "other"


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


def list_files(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    params, settings, roots = _setup(ctx)
    if len(roots.roots) > 1 and params.path.strip("/. ") == "":
        entries = [{"name": r.name, "kind": "folder", "path": r.name} for r in roots.roots]
        return f"{len(entries)} workspace roots", {"path": ".", "entries": entries, "more": 0}
    located = roots.locate(params.path, must_exist=True)
    if not os.path.isdir(located.path):
        raise TaskFailed(f"{roots.display(located)} is a file, not a folder: read it instead")
    entries: list[dict[str, Any]] = []
    more = 0
    with roots.dir_fd(located) as fd, os.scandir(fd) as scan:
        for entry in sorted(scan, key=lambda e: e.name.casefold()):
            if params.pattern and not fnmatch.fnmatchcase(entry.name.casefold(), params.pattern.casefold()):
                continue
            info = entry.stat(follow_symlinks=False)
            if roots.is_home(info):
                continue
            if len(entries) >= settings.max_results:
                more += 1
                continue
            item: dict[str, Any] = {
                "name": entry.name,
                "kind": _kind(info.st_mode),
                "modified": _when(info.st_mtime),
            }
            if stat.S_ISREG(info.st_mode):
                item["size"] = info.st_size
            entries.append(item)
    shown = roots.display(located)
    message = f"{shown}: {len(entries) + more} entries" + (f" ({more} not shown)" if more else "")
    return message, {"path": shown, "entries": entries, "more": more}


def read_file(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    params, settings, roots = _setup(ctx)
    located, data, size = roots.read_bytes(params.path, limit=settings.max_read_bytes)
    complete = len(data) >= size
    reading = readers.read_document(
        located.parts[-1], data, complete=complete, max_chars=settings.max_read_chars
    )
    text, cut = _clip_bytes(reading.text, MAX_TEXT_BYTES)
    note = reading.note or ("clipped to fit in a result" if cut else "")
    shown = roots.display(located)
    message = f"read {shown} ({reading.kind}, {len(text)} characters{'; ' + note if note else ''})"
    data_out: dict[str, Any] = {
        "path": shown,
        "kind": reading.kind,
        "size": size,
        "chars": len(text),
        "clipped": reading.clipped or cut,
        "text": text,
    }
    if reading.encoding:
        data_out["encoding"] = reading.encoding
    if note:
        data_out["note"] = note
    return message, data_out


def _clip_bytes(text: str, limit: int) -> tuple[str, bool]:
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= limit:
        return text, False
    return encoded[:limit].decode("utf-8", "ignore"), True


def write_file(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    params, settings, roots = _setup(ctx)
    data = params.content.encode(params.encoding)
    if len(data) > settings.max_write_bytes:
        raise TaskFailed(
            f"{len(data)} bytes is more than [workspace] max_write_bytes ({settings.max_write_bytes})",
            size=len(data),
        )
    located = roots.write_bytes(params.path, data, overwrite=params.overwrite)
    shown = roots.display(located)
    verb = "wrote" if params.overwrite else "created"
    return f"{verb} {shown} ({len(data)} bytes)", {"path": shown, "bytes": len(data)}


def move_file(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    params, _settings, roots = _setup(ctx)
    source, target = roots.move(params.src, params.dst, overwrite=params.overwrite)
    src, dst = roots.display(source), roots.display(target)
    return f"moved {src} to {dst}", {"src": src, "dst": dst}


def delete_file(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    params, _settings, roots = _setup(ctx)
    located, gone = roots.delete(params.path, recursive=params.recursive)
    shown = roots.display(located)
    amount = impact.amount(gone, "en")
    return f"deleted the {gone.kind} {shown} ({amount})", {
        "path": shown,
        "kind": gone.kind,
        "files": gone.files,
        "folders": gone.folders,
        "bytes": gone.bytes,
    }


def _walk(ctx: TaskContext, roots: Roots, start: Located) -> Iterator[tuple[Located, os.stat_result, int]]:
    """Every entry below ``start`` (links are not followed; the tether home is skipped), with the
    descriptor of its folder. Stops after ``MAX_WALK_ENTRIES``, raising ``_TooMany``."""
    seen = 0
    with roots.dir_fd(start) as top:
        for folder, dirs, files, dfd in os.fwalk(".", dir_fd=top):
            ctx.check_stop()
            base = () if folder == "." else tuple(folder.removeprefix("./").split("/"))
            for name in sorted([*dirs, *files], key=str.casefold):
                seen += 1
                if seen > MAX_WALK_ENTRIES:
                    raise _TooMany
                info = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if roots.is_home(info):
                    if name in dirs:
                        dirs.remove(name)
                    continue
                yield Located(start.root, (*start.parts, *base, name)), info, dfd


class _TooMany(Exception):
    pass


def _start(roots: Roots, path: str) -> list[Located]:
    if len(roots.roots) > 1 and path.strip("/. ") == "":
        return [Located(root, ()) for root in roots.roots]
    return [roots.locate(path, must_exist=True)]


def find_files(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    params, settings, roots = _setup(ctx)
    pattern = params.pattern.casefold()
    whole_path = "/" in pattern
    found: list[dict[str, Any]] = []
    more, partial = 0, False
    try:
        for start in _start(roots, params.path):
            for located, info, _dfd in _walk(ctx, roots, start):
                shown = roots.display(located)
                subject = shown if whole_path else located.parts[-1]
                if not fnmatch.fnmatchcase(subject.casefold(), pattern):
                    continue
                if len(found) >= settings.max_results:
                    more += 1
                    continue
                found.append({"path": shown, "kind": _kind(info.st_mode)})
    except _TooMany:
        partial = True
    note = f"; only the first {MAX_WALK_ENTRIES} entries were searched" if partial else ""
    message = (
        f"{len(found) + more} found for {params.pattern!r}" + (f" ({more} not shown)" if more else "") + note
    )
    return message, {"pattern": params.pattern, "matches": found, "more": more, "partial": partial}


def grep_files(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    params, settings, roots = _setup(ctx)
    needle = params.text.casefold()
    matches: list[dict[str, Any]] = []
    more, files, skipped, partial = 0, 0, 0, False
    try:
        targets: list[tuple[Located, os.stat_result | None]] = []
        starts = _start(roots, params.path)
        for start in starts:
            if start.parts and not os.path.isdir(start.path):
                targets.append((start, None))
                continue
            for located, info, _dfd in _walk(ctx, roots, start):
                if stat.S_ISREG(info.st_mode):
                    targets.append((located, info))
                    if len(targets) > MAX_WALK_ENTRIES:
                        raise _TooMany
        for located, info in targets:
            ctx.check_stop()
            if info is not None and (info.st_size > MAX_GREP_FILE_BYTES or info.st_nlink > 1):
                skipped += 1
                continue
            text = _text_of(roots, located)
            if text is None:
                skipped += 1
                continue
            files += 1
            for number, line in enumerate(text.splitlines(), 1):
                if needle not in line.casefold():
                    continue
                if len(matches) >= settings.max_results:
                    more += 1
                    continue
                shown = line.strip()
                if len(shown) > MAX_LINE_CHARS:
                    shown = shown[: MAX_LINE_CHARS - 1] + "…"
                matches.append({"path": roots.display(located), "line": number, "text": shown})
    except _TooMany:
        partial = True
    message = f"{len(matches) + more} matching lines in {files} text files" + (
        f" ({more} not shown)" if more else ""
    )
    if skipped:
        message += f"; {skipped} binary, unreadable or large files skipped"
    return message, {
        "text": params.text,
        "matches": matches,
        "more": more,
        "skipped": skipped,
        "partial": partial,
    }


def _text_of(roots: Roots, located: Located) -> str | None:
    if readers.suffix_of(located.parts[-1]) in (".pdf", ".docx", ".pptx", ".xlsx", ".xlsm"):
        return None
    try:
        _, data, size = roots.read_bytes(roots.display(located), limit=MAX_GREP_FILE_BYTES)
    except TaskFailed:
        return None
    encoding = readers.detect_encoding(data, complete=len(data) >= size)
    if encoding is None:
        return None
    return data.decode(encoding, errors="replace")
