"""The workspace tasks: ``tether.toolkits.workspace.specs:registry`` (and ``add_tasks`` for composing).

Light on purpose: the parameter models and specs only. Paths are checked for syntax here already
(NUL, ``\\``, drives, UNC, device names …), so the executor rejects them before any worker starts; the
handler then confines them to the roots (``paths.Roots``).

Consent: a delete is destructive; a write that replaces a file or a move that replaces one at its
destination is destructive for that call (``overwrite``); every other move is ``caution`` — the agent
asks the person before it moves anything (a folder move can carry a whole tree away from where the
person and their programs look for it), while a person typing the command is consenting to it. The
question says what the call touches (``impact``: files, folders and bytes, counted when it is asked).

Resources: reads claim none (they never wait for a lock and may run side by side). Writes, moves and
deletes claim ``workspace``: two changes to the person's files (an agent and a supervisor run in
parallel, say) are applied one after the other, and the supervisor never schedules two of them at
once. None is a background task, so the lock is held for milliseconds.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.config import JsonDict

from tether.errors import TaskFailed
from tether.tasks.spec import EVERYONE, Danger, Registry, TaskSpec
from tether.toolkits.workspace.paths import check_path_text

H = "tether.toolkits.workspace.handlers:"
IMPACT = "tether.toolkits.workspace.impact:"
WRITES = ("workspace",)
MAX_PATTERN_CHARS = 200
MAX_GREP_CHARS = 500


def _path(value: str) -> str:
    try:
        return check_path_text(value)
    except TaskFailed as exc:
        raise ValueError(exc.message) from exc


def _label(en: str, zh: str) -> JsonDict:
    return {"labels": {"en": en, "zh": zh}}


WorkspacePath = Annotated[
    str,
    Field(
        max_length=4096,
        description="a path inside the workspace, '/' between folders (e.g. notes/周报.md)",
        json_schema_extra=_label("path", "路径"),
    ),
    AfterValidator(_path),
]
Pattern = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_PATTERN_CHARS,
        description="a name pattern: * any text, ? one character, [abc] one of; e.g. *.md or 报告*",
        json_schema_extra=_label("pattern", "匹配模式"),
    ),
]


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ListParams(_Params):
    path: WorkspacePath = "."
    pattern: Pattern | None = None


class ReadParams(_Params):
    path: WorkspacePath


class WriteParams(_Params):
    path: WorkspacePath
    content: Annotated[str, Field(description="the whole new text of the file")]
    overwrite: Annotated[
        bool, Field(description="replace an existing file; the person is asked to confirm that")
    ] = False
    encoding: Literal["utf-8", "utf-8-sig", "gb18030"] = "utf-8"


class MoveParams(_Params):
    src: WorkspacePath
    dst: Annotated[WorkspacePath, Field(description="new path, or an existing folder to move into")]
    overwrite: Annotated[
        bool, Field(description="replace an existing file at dst; the person is asked to confirm that")
    ] = False


class DeleteParams(_Params):
    path: WorkspacePath
    recursive: Annotated[bool, Field(description="also delete a folder that is not empty")] = False


class FindParams(_Params):
    pattern: Pattern
    path: WorkspacePath = "."


class GrepParams(_Params):
    text: Annotated[
        str,
        Field(
            min_length=1,
            max_length=MAX_GREP_CHARS,
            description="text to look for (case-insensitive)",
            json_schema_extra=_label("text", "要搜索的文字"),
        ),
    ]
    path: WorkspacePath = "."


def add_tasks(registry: Registry) -> None:
    """Add the workspace tasks to ``registry``."""
    for spec in (*_browse_specs(), *_change_specs(), *_search_specs()):
        registry.add(spec)


def _browse_specs() -> tuple[TaskSpec, ...]:
    """Looking at a folder or a file: read only."""
    return (
        TaskSpec(
            task_id="workspace.list",
            handler=H + "list_files",
            params=ListParams,
            exposed_to=EVERYONE,
            resources=(),
            idempotent=True,
            description="List the files and folders in a workspace folder (optionally only names matching a "
            "pattern such as *.md).",
            aliases=(
                "列出文件",
                "查看文件夹",
                "有哪些文件",
                "文件列表",
                "list files",
                "show the folder",
                "ls",
            ),
        ),
        TaskSpec(
            task_id="workspace.read",
            reads=("path",),
            handler=H + "read_file",
            params=ReadParams,
            exposed_to=EVERYONE,
            resources=(),
            idempotent=True,
            description="Read a file of the workspace as text: plain text in any encoding, PDF, Word "
            "(.docx), PowerPoint (.pptx) or Excel (.xlsx). Long files are clipped, saying so.",
            aliases=(
                "读文件",
                "读取文件",
                "打开文件",
                "看看文件",
                "read the file",
                "open the file",
                "show the file",
            ),
        ),
    )


def _change_specs() -> tuple[TaskSpec, ...]:
    """Changing the workspace: each holds its resource and describes its impact for the consent."""
    return (
        TaskSpec(
            task_id="workspace.write",
            writes=("path",),
            handler=H + "write_file",
            params=WriteParams,
            exposed_to=EVERYONE,
            resources=WRITES,
            danger=Danger.SAFE,
            destructive_if=("overwrite",),
            impact=IMPACT + "write",
            description="Write a new text file in the workspace (folders are created). An existing file is "
            "never replaced unless overwrite=true, which the person must confirm.",
            aliases=(
                "写文件",
                "保存文件",
                "新建文件",
                "创建文件",
                "write a file",
                "save the file",
                "create a file",
            ),
        ),
        TaskSpec(
            task_id="workspace.move",
            writes=("src", "dst"),
            handler=H + "move_file",
            params=MoveParams,
            exposed_to=EVERYONE,
            resources=WRITES,
            danger=Danger.CAUTION,
            destructive_if=("overwrite",),
            impact=IMPACT + "move",
            description="Move or rename a file or folder inside the workspace; the person confirms each "
            "move. An existing file at the destination is never replaced unless overwrite=true.",
            aliases=("移动文件", "重命名", "改名", "move the file", "rename the file", "rename"),
        ),
        TaskSpec(
            task_id="workspace.delete",
            writes=("path",),
            handler=H + "delete_file",
            params=DeleteParams,
            exposed_to=EVERYONE,
            resources=WRITES,
            danger=Danger.DESTRUCTIVE,
            impact=IMPACT + "delete",
            description="Delete a file, a link, or a folder (a non-empty folder only with recursive=true). "
            "Destructive: the person confirms.",
            aliases=("删除文件", "删掉文件", "删除文件夹", "delete the file", "remove the file", "delete"),
        ),
    )


def _search_specs() -> tuple[TaskSpec, ...]:
    """Finding files by name or by content: read only."""
    return (
        TaskSpec(
            task_id="workspace.find",
            handler=H + "find_files",
            params=FindParams,
            exposed_to=EVERYONE,
            resources=(),
            idempotent=True,
            description="Find files and folders by name anywhere in the workspace (a pattern such as "
            "*.pdf or 报告*; case-insensitive; a pattern with '/' matches the whole path).",
            aliases=("查找文件", "找文件", "搜索文件", "find files", "find the file", "search file names"),
        ),
        TaskSpec(
            task_id="workspace.grep",
            handler=H + "grep_files",
            params=GrepParams,
            exposed_to=EVERYONE,
            resources=(),
            idempotent=True,
            description="Search the text files of the workspace (or of one folder or file) for some text; "
            "answers path, line number and line. Binary files are skipped.",
            aliases=("搜索内容", "查找内容", "全文搜索", "搜索文字", "search the files", "grep", "find text"),
        ),
    )


registry = Registry(ref="tether.toolkits.workspace.specs:registry")
add_tasks(registry)
