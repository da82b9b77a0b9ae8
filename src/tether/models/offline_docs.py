"""The offline model's plans for research and documents, decided one call at a time from the results so
far: a search names the pages to read, a read gives the text to summarize, the summaries become the
document. The demo's planner (``offline_choosing.py``) decides every call from the request alone; these
requests cannot be planned that way, so they get their own small state machine here.

What it understands, in Chinese and English:

- research — "搜索一下 量子计算 然后写成讲义", "research solar power and make slides":
  search → read the top pages → summarize each → (generate) → an answer citing its sources;
- a URL — "总结一下 https://…", "read https://… and summarize it": read → summarize → (generate);
- a folder of notes — "把 notes/ 里的 markdown 做成一份 PPT": list → read each → generate;
- one file — "summarize report.pdf", "总结 report.pdf": read → summarize → (generate).

"(generate)" happens when the request asks for a document (写成/做成/讲义/PPT/PDF, handout, slides…) or the
person ticked formats. It names the formats the request names; none named and none ticked leaves the
choice to the session's follow-up (``agent/outputs.py``), which this model answers with
``formats_in_words``. "保存到 X" / "save it as X" asks to save into the workspace too, and "覆盖" /
"overwrite" makes that call an overwrite, which the person must confirm.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.models.base import UNABLE, Message, ModelResponse, ToolCall, ToolDef, TurnContext
from tether.models.offline_digest import overview, title_of_notes

SEARCH, READ_URL, SUMMARIZE = "web__search", "web__read_url", "web__summarize_text"
LIST, READ_FILE, GENERATE = "workspace__list", "workspace__read", "documents__generate"
FORMATS = ("md", "html", "pptx", "pdf")
PAGES_TO_READ = 3
FILES_TO_READ = 12
SUMMARY_INPUT_CHARS = 20_000
CONTENT_CHARS = 50_000

URL = re.compile(r"https?://[^\s<>\"'，。、；）)\]】]+")
_NAME = r"[\w\u4e00-\u9fff.-]"
FILE = re.compile(
    rf"(?<![\w/.-])((?:{_NAME}+/)*[\w\u4e00-\u9fff-]{_NAME}*\.(?:pdf|docx|pptx|xlsx|md|txt|csv|html?))\b",
    re.I,
)
FOLDER = re.compile(rf"(?<![\w/.-])((?:{_NAME}+/)+)(?=\s|里|中|下|的|目录|文件夹|$)")
RESEARCH = re.compile(
    "|".join((
        "搜索一下", "搜一下", "搜索", "查一下", "查查", "查找资料", "查资料", "调研", "研究一下", "检索",
        r"\bresearch\b", r"\bsearch(?: the web)?(?: for)?\b", r"\blook up\b", r"\bfind out about\b",
    )),
    re.I,
)  # fmt: skip
SUMMARIZE_WORDS = re.compile(r"总结|概括|摘要|归纳|summari[sz]e|summary|\btl;?dr\b", re.I)
MAKE = re.compile(
    "|".join((
        "写成", "做成", "整理成", "生成", "制作", "讲义", "报告", "幻灯片", "演示文稿", "课件",
        r"\bppt", r"\bpdf\b", "handout", r"slides?\b", r"\bdeck\b", "presentation", r"\breport\b",
        r"write (?:it )?up", r"turn (?:it |them )?into", r"make (?:a|an|the)\b",
    )),
    re.I,
)  # fmt: skip
TEXT_FILE = re.compile(r"\.(?:md|markdown|txt)$", re.I)
MARKDOWN = re.compile(r"markdown|\.md\b|\bmd\b|笔记", re.I)
SAVE = re.compile(
    r"(?:保存到|保存为|存到|存为|save (?:it |them )?(?:to|as|in))\s*[“\"']?"
    r"([\w\u4e00-\u9fff./-]+?)[”\"']?(?=[\s，。,;；]|$)",
    re.I,
)
# Said of the file being saved: "覆盖旧的", "overwrite it", "replace the old one" — not "how to replace a
# battery" in a topic. Read only in the words after the place to save to.
OVERWRITE = re.compile(
    r"覆盖|替换(?:旧|原|掉|现有)|overwrit|replac(?:e|ing) (?:it|them|the (?:old|existing))", re.I
)
THEN = re.compile(
    r"\s*(?:然后|并且|并|再|之后|，|,|。|;|；|\band then\b|\bthen\b"
    r"|\band (?:write|make|turn|summari[sz]e|save)\b)",
    re.I,
)
FILLER = re.compile(r"^(?:一下|关于|有关|一些|下|about|on|for|the web for|information (?:on|about))\s*", re.I)

_FORMAT_WORDS: dict[str, tuple[str, ...]] = {
    "pptx": ("pptx", "ppt", "slides", "slide deck", "deck", "presentation", "幻灯片", "演示文稿", "课件"),
    "pdf": ("pdf", "printable", "handout", "讲义", "打印"),
    "html": ("html", "web page", "webpage", "网页版"),
    "md": ("markdown file", ".md file", "md file", "笔记文件"),
}


def formats_in_words(text: str) -> tuple[str, ...]:
    """The file formats a request names in words (slides → pptx, 讲义 → pdf …), in tether's order."""
    folded = FILE.sub(" ", URL.sub(" ", text)).lower()  # "report.pdf" names a file, not a format
    return tuple(f for f in FORMATS if any(word in folded for word in _FORMAT_WORDS[f]))


@dataclass(frozen=True, slots=True, kw_only=True)
class Intent:
    kind: str  # research | url | folder | file | text (the content given after a colon)
    zh: bool
    summarize: bool = False
    topic: str = ""
    url: str = ""
    path: str = ""
    make: bool = False
    save_to: str = ""
    overwrite: bool = False
    content: str = ""


# "做成 PPT：<the text>", "make slides: <the text>": what to make, then the content itself.
INLINE = re.compile(r"^\s*([^\n:：]{1,80}?)\s*[：:]\s*(\S.{19,})$", re.S)


def read_intent(request: str, tools: Sequence[ToolDef], zh: bool) -> Intent | None:
    """What a research or document request asks for; None when it is not one (the demo's planner
    takes it)."""
    names = {tool.name for tool in tools}
    text = " ".join(request.split())
    make = bool(MAKE.search(FILE.sub(" ", URL.sub(" ", text))))  # "report.pdf" names a file, not a format
    save = SAVE.search(text)
    save_to = save.group(1) if save else ""
    common = {
        "summarize": bool(SUMMARIZE_WORDS.search(text)),
        "zh": zh,
        "make": make or bool(save_to),
        "save_to": save_to,
        "overwrite": bool(save and OVERWRITE.search(text[save.start() :])),
    }
    inline = INLINE.match(request)
    if inline and MAKE.search(inline.group(1)) and GENERATE in names:  # the content is in the request
        return Intent(kind="text", topic=_topic(inline.group(1)), content=inline.group(2).strip(), **common)
    url = URL.search(text)
    if url and (SUMMARIZE_WORDS.search(text) or make or re.search(r"读|read|open|打开", text, re.I)):
        return Intent(
            kind="url", url=url.group(0).rstrip(".,"), topic=_topic(text.replace(url.group(0), " ")), **common
        )
    if RESEARCH.search(text):  # planned even without a search tool: the answer then says why not
        return Intent(kind="research", topic=_research_topic(text), **common)
    unsaved = text.replace(save.group(0), " ") if save else text
    folder = FOLDER.search(unsaved)
    if folder and (make or SUMMARIZE_WORDS.search(text)) and LIST in names:
        return Intent(
            kind="folder", path=folder.group(1), topic=folder.group(1).strip("/").split("/")[-1], **common
        )
    file = FILE.search(unsaved)
    if file and (SUMMARIZE_WORDS.search(text) or make) and READ_FILE in names:
        return Intent(
            kind="file", path=file.group(1), topic=_topic(text.replace(file.group(1), " ")), **common
        )
    return None


def _research_topic(text: str) -> str:
    match = RESEARCH.search(text)
    assert match is not None
    rest = text[match.end() :]
    if not rest.strip():  # "量子计算，搜索一下"
        rest = text[: match.start()]
    return _topic(rest)


def _topic(text: str) -> str:
    piece = THEN.split(text.strip(" ：:"), maxsplit=1)[0].strip()
    for _ in range(3):
        piece = FILLER.sub("", piece).strip()
    return piece.strip(" “”\"'：:。.!！?？") or text.strip()[:80]


@dataclass(frozen=True, slots=True)
class Done:
    name: str
    args: dict[str, Any]
    result: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.result.get("status") in ("completed", "running")

    @property
    def data(self) -> dict[str, Any]:
        data = self.result.get("data")
        return data if isinstance(data, dict) else {}


def done_calls(messages: Sequence[Message], anchor: int) -> list[Done]:
    """The calls answered after the request (a confirmation's wait is not an answer)."""
    import json

    asked: dict[str, tuple[str, dict[str, Any]]] = {}
    done: list[Done] = []
    for message in messages[anchor + 1 :]:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            raw = function.get("arguments") or "{}"
            try:
                args = raw if isinstance(raw, dict) else json.loads(raw)
            except (TypeError, ValueError):
                args = {}
            asked[str(call.get("id"))] = (str(function.get("name")), args if isinstance(args, dict) else {})
        if message.get("role") == "tool":
            name, args = asked.get(str(message.get("tool_call_id")), ("tool", {}))
            try:
                result = json.loads(str(message.get("content") or "{}"))
            except ValueError:
                result = {}
            if isinstance(result, dict) and result.get("status") != "needs_confirmation":
                done.append(Done(name, args, result))
    return done


class DocsPlan:
    """The next call of one research/document request, or the answer once it is done."""

    def __init__(self, intent: Intent, request: str, tools: Sequence[ToolDef], context: TurnContext) -> None:
        self.intent = intent
        self.request = request
        self.tools = {tool.name: tool for tool in tools}
        self.context = context
        self.zh = intent.zh

    def respond(self, done: Sequence[Done], number: int) -> ModelResponse:
        failed = next((d for d in done if not d.ok), None)
        if failed is not None:
            return self._say(self._failed(failed))
        step = self._next(done)
        if isinstance(step, str):
            return self._say(step)
        name, args = step
        if name not in self.tools:  # the tool it needs is not set up here: the work is not done
            return ModelResponse(text=self._missing(name), model="offline", finish_reason=UNABLE)
        return ModelResponse(
            tool_calls=(ToolCall(id=f"offline_{number}", name=name, arguments=args),), model="offline"
        )

    def _say(self, text: str) -> ModelResponse:
        return ModelResponse(text=text, model="offline")

    # -- the state machine ----------------------------------------------------------------------

    def _next(self, done: Sequence[Done]) -> tuple[str, dict[str, Any]] | str:
        i = self.intent
        of = lambda name: [d for d in done if d.name == name]  # noqa: E731
        summaries = of(SUMMARIZE)
        if i.kind == "text":
            made = of(GENERATE)
            return self._answer([], [], made) if made else (GENERATE, self._inline_args())
        if i.kind == "research":
            searches = of(SEARCH)
            if not searches:
                return SEARCH, {"query": i.topic[:500], "k": 5}
            hits = [h for h in searches[0].data.get("results") or [] if isinstance(h, dict) and h.get("url")]
            if not hits:
                return (
                    f"没有搜到关于“{i.topic}”的结果。"
                    if self.zh
                    else f"The search found nothing about {i.topic!r}."
                )
            pages = [h["url"] for h in hits[:PAGES_TO_READ]]
            texts = self._read(done, pages, READ_URL, "url")
        elif i.kind == "url":
            texts = self._read(done, [i.url], READ_URL, "url")
        elif i.kind == "folder":
            listings = of(LIST)
            if not listings:
                pattern = "*.md" if MARKDOWN.search(self.request) else "*"
                return LIST, {"path": i.path.rstrip("/") or ".", "pattern": pattern}
            folder = str(listings[0].data.get("path") or i.path).rstrip("/")
            entries = [
                e
                for e in listings[0].data.get("entries") or []
                if isinstance(e, dict) and e.get("kind") == "file" and TEXT_FILE.search(str(e.get("name")))
            ]
            if not entries:
                return (
                    f"{folder}/ 里没有 Markdown 文件。"
                    if self.zh
                    else f"There are no Markdown files in {folder}/."
                )
            names = [f"{folder}/{e['name']}" for e in entries[:FILES_TO_READ]]
            texts = self._read(done, names, READ_FILE, "path")
        else:
            texts = self._read(done, [i.path], READ_FILE, "path")
        if isinstance(texts, tuple):
            return texts
        direct = i.kind == "folder" or (i.kind == "file" and i.make and not i.summarize)
        if not direct and len(summaries) < len(texts):
            source = texts[len(summaries)]
            args = {
                "text": source.data.get("text", "")[:SUMMARY_INPUT_CHARS] or "(empty)",
                "focus": i.topic[:200],
                "source_url": str(source.data.get("url") or "")[:2000],
                "source_title": str(source.data.get("title") or source.data.get("path") or "")[:300],
            }
            if "cite_as" in self._params(SUMMARIZE):  # the n-th source is cited [n]
                args["cite_as"] = len(summaries) + 1
            return SUMMARIZE, args
        generated = of(GENERATE)
        if (i.make or self.context.formats) and not generated:
            return GENERATE, self._generate_args(texts, summaries, direct)
        return self._answer(texts, summaries, generated)

    def _read(
        self, done: Sequence[Done], targets: list[str], tool: str, key: str
    ) -> list[Done] | tuple[str, dict[str, Any]]:
        reads = [d for d in done if d.name == tool]
        if len(reads) < len(targets):
            target = targets[len(reads)]
            return tool, {key: target}
        return reads

    # -- what it writes -------------------------------------------------------------------------

    def _title(self) -> str:
        topic = self.intent.topic.strip() or ("资料整理" if self.zh else "Notes")
        if re.search(r"讲义|handout", self.request, re.I) and not re.search(r"讲义|handout", topic, re.I):
            return f"{topic}：讲义" if self.zh else f"{topic}: a handout"
        return topic

    def _sources(self, texts: Sequence[Done]) -> list[dict[str, str]]:
        sources = []
        for d in texts:
            url = str(d.data.get("url") or "")
            if url.startswith(("http://", "https://")):
                sources.append({"title": str(d.data.get("title") or url)[:300], "url": url[:2000]})
        return sources

    def _generate_args(
        self, texts: Sequence[Done], summaries: Sequence[Done], direct: bool
    ) -> dict[str, Any]:
        i = self.intent
        parts: list[str] = []
        title = self._title()
        if direct:
            headings = []
            for d in texts:
                body = str(d.data.get("text") or "").strip()
                name = str(d.data.get("path") or "").rsplit("/", 1)[-1].rsplit(".", 1)[0]
                top = re.match(r"\s*# (.+)", body) or re.search(r"(?m)^## (.+)", body)
                headings.append(top.group(1).strip() if top else name)
                if not re.match(r"\s*#", body):
                    body = f"## {name}\n\n{body}"
                parts.append(re.sub(r"(?m)^# ", "## ", body))
            if i.kind == "folder":  # the notes' own headings, not the folder's name
                title = title_of_notes(headings, title)
        else:
            points = overview(
                [
                    (str(s.data.get("title") or ""), self._points(m))
                    for s, m in zip(texts, summaries, strict=False)
                ],
                i.topic,
            )
            heading = "概述" if self.zh else "Overview"
            parts.append(f"## {heading}\n\n" + "\n".join(f"- {p}" for p in points))
            for n, (source, summary) in enumerate(zip(texts, summaries, strict=False), start=1):
                heading = str(source.data.get("title") or source.data.get("path") or f"{n}")[:120]
                points = "\n".join(f"- {p} [{n}]" for p in self._points(summary))
                parts.append(f"## {heading}\n\n{points}")
            sources = self._sources(texts)
            if sources:
                head = "来源" if self.zh else "Sources"
                lines = "\n".join(f"{n}. [{s['title']}]({s['url']})" for n, s in enumerate(sources, start=1))
                parts.append(f"## {head}\n\n{lines}")
        args: dict[str, Any] = {"title": title[:200], "content": "\n\n".join(parts)[:CONTENT_CHARS]}
        named = formats_in_words(self.request)
        suffix = i.save_to.rsplit(".", 1)[-1].lower() if "." in i.save_to else ""
        if suffix in FORMATS and suffix not in named:  # "save it as handout.pdf"
            named = (*named, suffix)
        if named:
            args["formats"] = list(named)
        if i.save_to and "save_to" in self._params(GENERATE):
            args["save_to"] = i.save_to
            if i.overwrite and "overwrite" in self._params(GENERATE):
                args["overwrite"] = True
        return args

    def _inline_args(self) -> dict[str, Any]:
        """``documents.generate`` of the content the request gave: titled by its heading, else its first
        line (citations and list marks left out)."""
        content = self.intent.content
        heading = re.search(r"(?m)^#{1,2} (.+)$", content)
        first = heading.group(1) if heading else next((ln for ln in content.splitlines() if ln.strip()), "")
        title = re.sub(r"\s*\[\d+\]", "", first).strip(" -*•#")[:80] or self._title()
        args: dict[str, Any] = {"title": title, "content": content[:CONTENT_CHARS]}
        named = formats_in_words(self.request.split(content, 1)[0])
        if named:
            args["formats"] = list(named)
        return args

    def _params(self, name: str) -> Mapping[str, Any]:
        tool = self.tools.get(name)
        return (tool.parameters.get("properties") or {}) if tool is not None else {}

    @staticmethod
    def _points(summary: Done) -> list[str]:
        text = str(summary.data.get("summary") or "")
        points = [re.sub(r"\s*\[\d+\]\s*$", "", line.lstrip("-•* ").strip()) for line in text.splitlines()]
        return [p for p in points if p]

    def _answer(self, texts: Sequence[Done], summaries: Sequence[Done], generated: Sequence[Done]) -> str:
        lines: list[str] = []
        zh = self.zh
        i = self.intent
        if i.kind == "research":
            lines.append(
                f"我搜索了“{i.topic}”，读了 {len(texts)} 个网页："
                if zh
                else f"I searched for {i.topic!r} and read {len(texts)} pages:"
            )
        elif i.kind == "folder":
            lines.append(
                f"我读了 {i.path} 里的 {len(texts)} 个文件。"
                if zh
                else f"I read {len(texts)} files in {i.path}."
            )
        for n, summary in enumerate(summaries, start=1):
            lines.extend(f"- {p} [{n}]" for p in self._points(summary))
        sources = self._sources(texts)
        if sources:
            lines.append("来源：" if zh else "Sources:")
            lines.extend(f"[{n}] {s['title']} — {s['url']}" for n, s in enumerate(sources, start=1))
        for d in generated:
            files = [a for a in d.data.get("artifacts") or [] if isinstance(a, dict)]
            if files:
                names = (
                    "、".join(str(a.get("name")) for a in files)
                    if zh
                    else ", ".join(str(a.get("name")) for a in files)
                )
                lines.append(
                    f"已生成文件：{names}（可在页面或用 tether artifacts 下载）"
                    if zh
                    else f"Files made: {names} (download them on the page, or with tether artifacts)."
                )
            elif d.data.get("formats") == []:
                lines.append(
                    "没有生成文件：请求里没有指定格式。"
                    if zh
                    else "No file was made: the request named no format."
                )
            saved = d.data.get("saved")
            if isinstance(saved, list) and saved:
                shown = ", ".join(str(s) for s in saved)
                lines.append(f"已保存到：{shown}" if zh else f"Saved to: {shown}")
        return "\n".join(lines)

    def _failed(self, failed: Done) -> str:
        message = str(failed.result.get("message") or failed.result.get("status"))
        tool = failed.name.replace("__", ".")
        if self.zh:
            return f"{tool} 没有成功：{message}。其余步骤没有继续。"
        return f"{tool} did not succeed: {message}. I stopped there."

    def _missing(self, name: str) -> str:
        why = dict(self.context.unavailable).get(name)
        tool = name.replace("__", ".")
        if why:
            return f"现在不能用 {tool}：{why}" if self.zh else f"I cannot use {tool} here: {why}"
        return f"这里没有 {tool} 这个工具。" if self.zh else f"There is no {tool} tool here."


def respond(
    request: str,
    messages: Sequence[Message],
    anchor: int,
    tools: Sequence[ToolDef],
    context: TurnContext,
    zh: bool,
) -> ModelResponse | None:
    """The offline model's response to a research/document request, or None when it is not one."""
    intent = read_intent(request, tools, zh)
    if intent is None:
        return None
    plan = DocsPlan(intent, request, tools, context)
    done = done_calls(messages, anchor)
    return plan.respond(done, len(done))
