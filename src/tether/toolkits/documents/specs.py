"""The documents toolkit's task specs: ``tether.toolkits.documents.specs:registry``.

Light on purpose: the parent process imports this module to validate calls, so it imports pydantic and
tether's task types only; the builders load in the worker (``handlers``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from tether.tasks.spec import EVERYONE, Registry, TaskSpec

H = "tether.toolkits.documents.handlers:"

FORMAT_NAMES = ("md", "html", "pptx", "pdf")  # the same list as tether.artifacts.FORMATS (asserted by a test)
MAX_TITLE_CHARS = 200
# Markdown passed inline: a 40-60 kB English design document fits the executor's 64 KiB on arguments
# (tether.tasks.validation.MAX_PARAMS_BYTES, which names itself when Chinese text outgrows it first);
# anything longer is read from the workspace with content_path, up to the reader's MAX_MARKDOWN_CHARS.
MAX_CONTENT_CHARS = 60_000
MAX_PATH_CHARS = 500
MAX_PARAM_SOURCES = 50
MAX_SOURCE_TITLE_CHARS = 300
MAX_URL_CHARS = 2_000
GENERATE_TIMEOUT_S = 300.0

FormatName = Literal["md", "html", "pptx", "pdf"]


def _unique(formats: list[str]) -> list[str]:
    repeated = sorted({name for name in formats if formats.count(name) > 1})
    if repeated:
        raise ValueError(f"list each format once; repeated: {', '.join(repeated)}")
    return formats


class SourceParam(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: Annotated[
        str, Field(min_length=1, max_length=MAX_SOURCE_TITLE_CHARS, description="what the source is")
    ]
    url: Annotated[
        str,
        Field(
            min_length=8, max_length=MAX_URL_CHARS, pattern=r"^https?://\S+$",
            description="its http:// or https:// address",
        ),
    ]  # fmt: skip


class GenerateParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: Annotated[
        str | None,
        Field(
            min_length=1, max_length=MAX_TITLE_CHARS,
            description="the document's title; left out, it is the content's first '# ' heading",
            json_schema_extra={"labels": {"en": "title", "zh": "标题"}},
        ),
    ] = None  # fmt: skip
    # Plain ``str`` with a default, not optional: a goal's step may fill it from the context
    # (args_from), and a list read from several steps is joined into text for a ``str`` parameter.
    content: Annotated[
        str,
        Field(
            max_length=MAX_CONTENT_CHARS,
            description="the text in Markdown (CommonMark and GFM tables): '## ' headings start sections "
            "(and slides); lists, numbered lists, **bold**, *italic*, `code`, code blocks, tables and "
            "images (![alt](path in the workspace)) are kept; a '## Sources' / '## 来源' list of links "
            "becomes the sources",
            json_schema_extra={"labels": {"en": "content (Markdown)", "zh": "内容（Markdown）"}},
        ),
    ] = ""  # fmt: skip
    content_path: Annotated[
        str | None,
        Field(
            min_length=1, max_length=MAX_PATH_CHARS,
            description="instead of content: a Markdown file in the workspace to read (for long documents; "
            "its pictures are found next to it). Give content or content_path, not both",
            json_schema_extra={"labels": {"en": "Markdown file", "zh": "Markdown 文件"}},
        ),
    ] = None  # fmt: skip
    formats: Annotated[
        list[FormatName],
        Field(
            min_length=1, max_length=len(FORMAT_NAMES),
            description="which files to make, each once: md, html, pptx (slides), pdf",
            json_schema_extra={"labels": {"en": "formats", "zh": "格式"}},
        ),
        AfterValidator(_unique),
    ]  # fmt: skip
    sources: Annotated[
        list[SourceParam],
        Field(max_length=MAX_PARAM_SOURCES, description="sources to cite, besides links in the content"),
    ] = []
    language: Annotated[
        Literal["zh", "en"] | None,
        Field(description="zh or en; detected from the text when left out"),
    ] = None
    save_to: Annotated[
        str | None,
        Field(
            min_length=1, max_length=500,
            description="also save the files into the person's workspace under this path (e.g. "
            "handouts/solar; each format adds its extension). An existing file is replaced only with "
            "overwrite=true",
            json_schema_extra={"labels": {"en": "save to", "zh": "保存到"}},
        ),
    ] = None  # fmt: skip
    overwrite: Annotated[
        bool,
        Field(description="replace existing files at save_to (the person is asked to confirm)"),
    ] = False

    @model_validator(mode="after")
    def _overwrite_needs_a_place(self) -> GenerateParams:
        if self.overwrite and self.save_to is None:
            raise ValueError("overwrite=true only goes with save_to (the workspace path to replace)")
        return self


ALIASES = (
    "生成文件", "生成文档", "做成PPT", "做个PPT", "做幻灯片", "写成讲义", "导出PDF", "生成PDF", "导出网页",
    "generate files", "generate a document", "make slides", "make a deck", "export pdf", "write a handout",
    "export html",
)  # fmt: skip


def add_tasks(registry: Registry) -> None:
    """Add ``documents.generate`` to ``registry``."""
    registry.add(
        TaskSpec(
            task_id="documents.generate",
            handler=H + "generate",
            params=GenerateParams,
            exposed_to=EVERYONE,
            resources=(),
            timeout_s=GENERATE_TIMEOUT_S,
            destructive_if=("overwrite",),
            description=(
                "Write a document from Markdown as files: md, html, pptx slides (laid out to fit, split "
                "when dense) and/or pdf (A4), keeping its tables, code, lists, emphasis and workspace "
                "pictures. Chinese and English. Returns each file's path in the home."
            ),
            aliases=ALIASES,
        )
    )


registry = Registry(ref="tether.toolkits.documents.specs:registry")
add_tasks(registry)
