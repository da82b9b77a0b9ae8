"""What a workspace call that waits for the person's consent would touch, for the question they answer.

``TaskSpec.impact`` names these functions (``delete``, ``move``, ``write``); the agent calls the one of
the waiting call when it asks, so the counts are those of that moment (the confirmation itself still
covers exactly the call's arguments, whatever the folder holds when it runs). They only look: names are
checked like the task would check them, links are never followed, and a folder is counted up to
``MAX_COUNTED`` entries ("at least …" beyond). A call the worker would refuse (the tether home, a path
outside the roots) is described as refused, with the reason.

Light: the standard library and ``paths``; it runs in the process that asks, never in a worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.errors import TetherError
from tether.toolkits.workspace.paths import Roots, Tally

MAX_COUNTED = 100_000  # entries counted for one question before it says "at least"
_UNITS = ("KB", "MB", "GB", "TB", "PB")
_KIND_ZH = {"file": "文件", "folder": "文件夹", "link": "链接", "other": "特殊文件"}


def size_text(count: int, zh: bool) -> str:
    """``1004 bytes``; past 1 KB also the rounded size first: ``3.4 MB (3565158 bytes)``."""
    exact = f"{count} 字节" if zh else f"{count} byte{'' if count == 1 else 's'}"
    if count < 1024:
        return exact
    value, unit = count / 1024, 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    rounded = f"{value:.1f} {_UNITS[unit]}"
    return f"{rounded}（{exact}）" if zh else f"{rounded} ({exact})"


def amount(tally: Tally, language: str) -> str:
    """``3 files in 2 folders, 1004 bytes`` (``3 个文件、2 个文件夹，共 1004 字节``)."""
    zh = language == "zh"
    size = size_text(tally.bytes, zh)
    if zh:
        text = f"{tally.files} 个文件"
        if tally.kind == "folder":
            text += f"、{tally.folders} 个文件夹"
        return ("至少 " if not tally.complete else "") + f"{text}，共 {size}"
    text = f"{tally.files} file{'' if tally.files == 1 else 's'}"
    if tally.kind == "folder":
        text += f" in {tally.folders} folder{'' if tally.folders == 1 else 's'}"
    return ("at least " if not tally.complete else "") + f"{text}, {size}"


def _kind(kind: str, zh: bool) -> str:
    return _KIND_ZH.get(kind, kind) if zh else kind


def _refused(exc: TetherError, zh: bool) -> str:
    return f"tether 会拒绝执行：{exc.message}" if zh else f"tether will refuse it: {exc.message}"


def _uninspectable(exc: OSError, zh: bool) -> str:
    why = exc.strerror or str(exc)
    return f"现在无法查看它（{why}）" if zh else f"it cannot be inspected now ({why})"


def delete(home: Path, params: Mapping[str, Any], language: str) -> str:
    """What ``workspace.delete`` would remove."""
    zh = language == "zh"
    try:
        roots = Roots.load(home)
        located, tally = roots.tally(str(params["path"]), limit=MAX_COUNTED)
    except TetherError as exc:
        return _refused(exc, zh)
    shown = roots.display(located)
    if tally.kind == "link":
        if zh:
            return f"将删除链接 {shown}（只删除链接本身，不动它指向的内容）"
        return f"it deletes the link {shown} (only the link, not what it points to)"
    if tally.kind != "folder":
        if zh:
            return f"将删除{_kind(tally.kind, zh)} {shown}（{amount(tally, language)}）"
        return f"it deletes the {tally.kind} {shown} ({amount(tally, language)})"
    if tally.files == 0 and tally.folders == 1:
        return f"将删除空文件夹 {shown}" if zh else f"it deletes the empty folder {shown}"
    if not params.get("recursive"):
        if zh:
            return f"文件夹 {shown} 不是空的（{amount(tally, language)}）：没有 recursive=true 什么也不会删除"
        return (
            f"the folder {shown} is not empty ({amount(tally, language)}): without recursive=true "
            "nothing is deleted"
        )
    if zh:
        return f"将删除文件夹 {shown} 及其中的全部内容：{amount(tally, language)}"
    return f"it deletes the folder {shown} and everything in it: {amount(tally, language)}"


def move(home: Path, params: Mapping[str, Any], language: str) -> str:
    """What ``workspace.move`` would move, where to, and what it would replace there."""
    zh = language == "zh"
    try:
        roots = Roots.load(home)
        located, tally = roots.tally(str(params["src"]), limit=MAX_COUNTED)
        target = roots.locate(str(params["dst"]))
        if target.path.is_dir() and not target.path.is_symlink():
            target = roots.locate(roots.display(target) + "/" + located.parts[-1])
        replaced: Tally | None = None
        if target.path.is_symlink() or target.path.exists():
            replaced = roots.tally(roots.display(target), limit=MAX_COUNTED)[1]
    except TetherError as exc:
        return _refused(exc, zh)
    except OSError as exc:
        return _uninspectable(exc, zh)
    src, dst = roots.display(located), roots.display(target)
    if zh:
        text = f"将把{_kind(tally.kind, zh)} {src}（{amount(tally, language)}）移到 {dst}"
        if replaced is not None:
            text += f"，替换那里现有的{_kind(replaced.kind, zh)}（{amount(replaced, language)}）"
        return text
    text = f"it moves the {tally.kind} {src} ({amount(tally, language)}) to {dst}"
    if replaced is not None:
        text += f", replacing the {replaced.kind} there ({amount(replaced, language)})"
    return text


def write(home: Path, params: Mapping[str, Any], language: str) -> str:
    """What ``workspace.write`` with ``overwrite`` would replace."""
    zh = language == "zh"
    path = str(params["path"])
    try:
        new = len(str(params.get("content", "")).encode(str(params.get("encoding") or "utf-8")))
    except (LookupError, UnicodeEncodeError):
        new = len(str(params.get("content", "")).encode("utf-8", "surrogatepass"))
    try:
        roots = Roots.load(home)
        located = roots.locate(path, for_write=True)
        shown = roots.display(located)
        if not located.path.exists():
            if zh:
                return f"{shown} 还不存在：将新建它（{size_text(new, zh)}）"
            return f"{shown} does not exist yet: it is created ({size_text(new, zh)})"
        old = located.path.stat().st_size
    except TetherError as exc:
        return _refused(exc, zh)
    except OSError as exc:
        return _uninspectable(exc, zh)
    if zh:
        return f"将用 {size_text(new, zh)}的新内容替换文件 {shown}（现有 {size_text(old, zh)}）"
    return f"it replaces the file {shown} ({size_text(old, zh)} now) with {size_text(new, zh)} of new text"
