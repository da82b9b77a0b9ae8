"""Tool calls that a model writes as text instead of in ``tool_calls``.

Small local models rarely produce native tool calls: they write them, in many near-miss shapes —
``<tool_call>{"name": …, "arguments": {…}}</tool_call>`` (Qwen, Hermes), a bare ``{"name": …,
"parameters": {…}}`` (Llama 3.x), a fenced ````json`` block with a sentence around it, one call per
line, ``function_name`` instead of ``name``, the tool's name without its toolkit prefix (``start_game``
for ``demo__start_game``). ``read`` takes such text apart:

- **calls**: every call it makes, when each one names an offered tool unambiguously and its arguments
  fit the tool's schema (only known keys, every required one there). The prose around them stays the
  model's text.
- **attempt**: the text looks like a tool call but cannot be taken as one (an unknown or ambiguous
  name, arguments that do not fit, JSON that does not parse): ``why`` says what is wrong, and the
  client asks the model once to repair it. A call attempt is never shown to a person as an answer.

Text without a call's shape — prose, JSON that is not a call — is neither: it is the answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tether.errors import ModelOutputError
from tether.models.base import ModelResponse, ToolCall, ToolDef
from tether.models.jsonfix import loads_lenient

# Qwen's template asks for <tool_call>; a small model also writes <tools> (the tag its prompt lists the
# tools in) or <function_call>.
TAGGED = re.compile(r"<(tool_call|tools|function_call)>\s*(.*?)\s*(?:</\1>|$)", re.DOTALL)
FENCED = re.compile(r"```[A-Za-z]*[ \t]*\n?(.*?)```", re.DOTALL)
MARKERS = re.compile(r"</?(?:tool_call|tools|function_call)>|<\|python_tag\|>|<function=|\[TOOL_CALLS\]")
# A tool's result in the template's own tag: only tether writes those (a model that writes one made it up).
RESULT_TAG = re.compile(r"<tool_response>.*?(?:</tool_response>|$)", re.DOTALL)
FILLED_RESULT_TAG = re.compile(r"<tool_response>\s*[^<\s]")
# A chat template's markup that a model may echo instead of answering: nothing a person should read.
TEMPLATE = re.compile(r"</?tool_response>|<\|im_(?:start|end)\|>|<\|eot_id\|>|<\|endoftext\|>")
# ``start_game()``, ``demo__farm_instance(instance_name="金币")``: a call in a programming language's form.
CALL_SYNTAX = re.compile(r"(?<![\w.])([A-Za-z_][\w.]*)\s*\((.*?)\)", re.DOTALL)
NAME_KEYS = ("name", "function_name", "tool_name", "tool", "action", "function", "call")
ARGS_KEYS = ("arguments", "parameters", "args", "input", "kwargs")


@dataclass(frozen=True, slots=True)
class TextReading:
    calls: tuple[ToolCall, ...] = ()
    prose: str = ""  # the text without the calls in it
    attempt: bool = False  # a call's shape that could not be taken as a call
    why: str = ""  # what is wrong with the attempt, said so that the model can fix it


def resolve_name(raw: str, tools: Sequence[ToolDef]) -> tuple[str | None, str]:
    """The offered tool ``raw`` names, or (None, why not): the exact name, then the same name written
    with ``.``/``-`` for ``__``/``_`` or in another case, then a unique name without its toolkit prefix."""
    names = [tool.name for tool in tools]
    if raw in names:
        return raw, ""
    folded = raw.strip().lower().replace(".", "__").replace("-", "_")
    exact = [n for n in names if n.lower() == folded]
    if len(exact) == 1:
        return exact[0], ""
    short = folded.rsplit("__", 1)[-1]
    by_suffix = [n for n in names if n.lower().rsplit("__", 1)[-1] == short]
    if len(by_suffix) == 1:
        return by_suffix[0], ""
    if len(by_suffix) > 1:
        return None, f"{raw!r} could be any of {', '.join(sorted(by_suffix))}: name one"
    return None, f"{raw!r} is not a tool; the tools are: {', '.join(sorted(names))}"


def _fits(arguments: dict[str, Any], tool: ToolDef) -> str:
    """Why ``arguments`` do not fit ``tool``'s schema, or ""."""
    schema = tool.parameters
    known = set(schema.get("properties") or {})
    required = set(schema.get("required") or ())
    unknown = sorted(set(arguments) - known)
    missing = sorted(required - set(arguments))
    problems = []
    if unknown:
        problems.append(
            f"it takes no {', '.join(unknown)} (it takes: {', '.join(sorted(known)) or 'nothing'})"
        )
    if missing:
        problems.append(f"it needs {', '.join(missing)}")
    return f"{tool.name}: {'; '.join(problems)}" if problems else ""


def _shaped(value: Any) -> Iterator[dict[str, Any]]:
    """The call-shaped objects in a decoded value: a call, a list of calls, ``{"tool_calls": [...]}``."""
    if isinstance(value, list):
        for item in value:
            yield from _shaped(item)
    elif isinstance(value, dict):
        if isinstance(value.get("tool_calls"), list):
            yield from _shaped(value["tool_calls"])
        elif any(isinstance(value.get(key), str | dict) for key in NAME_KEYS):
            yield value


def _decode(raw: str, *, lenient: bool) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return loads_lenient(raw) if lenient else None


def _one(item: dict[str, Any], tools: Sequence[ToolDef], index: int) -> ToolCall | str:
    """A call from one call-shaped object, or why it is not one."""
    function = item.get("function")
    if isinstance(function, dict):  # {"type": "function", "function": {"name": …, "arguments": …}}
        item = {**item, **function}
    raw_name = next((item[k] for k in NAME_KEYS if isinstance(item.get(k), str) and item[k].strip()), None)
    if raw_name is None:
        return "a call needs the tool's name"
    name, why = resolve_name(raw_name, tools)
    if name is None:
        return why
    arguments: Any = next((item[k] for k in ARGS_KEYS if k in item), {})
    if isinstance(arguments, str):
        arguments = _decode(arguments, lenient=True) if arguments.strip() else {}
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return f"{name}: its arguments must be a JSON object"
    tool = next(t for t in tools if t.name == name)
    arguments = _unwrapped(arguments, tool)
    problem = _fits(arguments, tool)
    if problem:
        return problem
    return ToolCall(id=f"text_call_{index}", name=name, arguments=arguments)


def _unwrapped(arguments: dict[str, Any], tool: ToolDef) -> dict[str, Any]:
    """Arguments a small model wrote in the shape of the tool's own schema (it echoed the definition
    with its values filled in: ``{"type": "object", "properties": {<the arguments>}}``)."""
    inner = arguments.get("properties")
    known = set(tool.parameters.get("properties") or {})
    if arguments.get("type") == "object" and isinstance(inner, dict) and "properties" not in known:
        return inner
    return arguments


def _pieces(text: str) -> tuple[list[tuple[str, str]], str]:
    """The parts of ``text`` that may hold calls, each with how it was marked (``tag``, ``fence``,
    ``bare``, ``line``), and the prose left around them. Every kind is looked for: a small model mixes
    them (a call on a line of its own, then a fenced block with what it imagines the result to be)."""
    pieces: list[tuple[str, str]] = [(body, "tag") for _, body in TAGGED.findall(text) if body.strip()]
    rest = TAGGED.sub("", text)
    pieces += [(f, "fence") for f in FENCED.findall(rest) if f.strip().startswith(("{", "["))]
    # A fence that held JSON goes with it; code in other languages is an answer, and stays.
    rest = FENCED.sub(lambda m: "" if m.group(1).strip().startswith(("{", "[")) else m.group(0), rest)
    stripped = rest.strip()
    if stripped.startswith(("{", "[")) and _decode(stripped, lenient=False) is not None:
        return [*pieces, (stripped, "bare")], ""
    lines = [line.strip() for line in rest.splitlines()]
    objects = [line for line in lines if line.startswith("{") and line.endswith("}")]
    pieces += [(line, "line") for line in objects]  # one call per line, maybe between sentences
    prose = "\n".join(line for line in lines if line not in objects and line.strip("`") != "")
    return pieces, prose


def _results(value: Any) -> bool:
    """Whether a decoded value is a tool's result the model wrote itself (tether's result shape)."""
    items = value if isinstance(value, list) else [value]
    return any(
        isinstance(i, dict) and "status" in i and ("task_id" in i or "execution_id" in i) for i in items
    )


FABRICATED = (
    "a tool's result was written in the answer instead of calling the tool (a tool runs only when it is "
    "called, and its result comes back from tether)"
)


def read(text: str, tools: Sequence[ToolDef]) -> TextReading:
    """What ``text`` is: calls to offered tools, an attempt at one that cannot be taken, or an answer."""
    if not tools or not text.strip():
        return TextReading(prose=text)
    pieces, prose = _pieces(text)
    calls: list[ToolCall] = []
    problems: list[str] = []
    made_up = bool(FILLED_RESULT_TAG.search(text))
    for raw, kind in pieces:
        value = _decode(raw.strip(), lenient=kind in ("tag", "fence"))
        items = list(_shaped(value)) if value is not None else []
        if not items:
            if value is not None and _results(value):
                made_up = True  # never shown to the person, never taken for what happened
            elif kind == "tag":  # marked as a call, yet not one
                problems.append(f"{raw.strip()[:80]!r} is not a JSON call")
            continue
        for item in items:
            made = _one(item, tools, len(calls))
            if isinstance(made, ToolCall):
                calls.append(made)
            else:
                problems.append(made)
    if calls and not problems:
        return TextReading(calls=tuple(calls), prose=RESULT_TAG.sub("", prose).strip())
    if problems:
        return TextReading(prose=text, attempt=True, why="; ".join(problems))
    if made_up:
        return TextReading(prose=text, attempt=True, why=FABRICATED)
    if MARKERS.search(text):
        return TextReading(prose=text, attempt=True, why="a tool-call marker without a readable call")
    if TEMPLATE.search(text) and not TEMPLATE.sub("", text).strip():
        # Only the chat template's own markup (a small model echoing an empty tool response): no answer.
        return TextReading(prose=text, attempt=True, why="only template markup, no answer for the person")
    why = _embedded(text, tools) or _call_syntax(text, tools)
    if why:
        return TextReading(prose=text, attempt=True, why=why)
    return TextReading(prose=text)


EMBEDDED_TRIES = 20  # '{' positions tried in one answer: bounded work on any text


def _embedded(text: str, tools: Sequence[ToolDef]) -> str:
    """Why a call-shaped JSON object inside a sentence is an attempt, or ""."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    for _ in range(EMBEDDED_TRIES):
        if start < 0:
            return ""
        try:
            value, _end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            value = None
        for item in _shaped(value):
            made = _one(item, tools, 0)
            return "a tool call inside a sentence" + ("" if isinstance(made, ToolCall) else f" ({made})")
        start = text.find("{", start + 1)
    return ""


def _call_syntax(text: str, tools: Sequence[ToolDef]) -> str:
    """Why ``start_game()``-style text is an attempt to call an offered tool, or ""."""
    for match in CALL_SYNTAX.finditer(text):
        name, _ = resolve_name(match.group(1), tools)
        if name is not None:
            return f"{match.group(0)[:80]!r} is written as code, not as a tool call"
    return ""


def calls_in_text(text: str, tools: Sequence[ToolDef]) -> tuple[ToolCall, ...]:
    """The calls ``text`` makes, or () (see ``read`` for what it is instead)."""
    return read(text, tools).calls


REPAIR = (
    "Your answer looks like a tool call but cannot be used: {why}. To call a tool, reply with only "
    '<tool_call>{{"name": "<tool name>", "arguments": {{...}}}}</tool_call> using a tool name and '
    "arguments from the tool list. If no tool is needed, answer the person in plain words, with no "
    "JSON and no code."
)


def echoes_repair(text: str) -> bool:
    """Whether an answer repeats the repair request instead of answering it."""
    return REPAIR.split("{why}")[0].strip() in text


def repair_request(why: str) -> str:
    """What the model is told, once, when its answer was a call attempt that cannot be taken."""
    return REPAIR.format(why=why)


def named(response: ModelResponse, tools: Sequence[ToolDef]) -> ModelResponse:
    """Native calls with a near-miss name (``start_game`` for ``demo__start_game``) renamed to the one
    offered tool they name; any other name is left for the executor to answer ``not_found``."""
    offered = {tool.name for tool in tools}
    calls = []
    for call in response.tool_calls:
        if call.name not in offered:
            name, _ = resolve_name(call.name, tools)
            if name is not None:
                call = replace(call, name=name)
        calls.append(call)
    return replace(response, tool_calls=tuple(calls))


async def settle(
    response: ModelResponse, tools: Sequence[ToolDef], again: Callable[[str], Awaitable[ModelResponse]]
) -> ModelResponse:
    """``response`` with the calls it wrote as text taken as calls; an attempt that cannot be taken is
    sent back once (``again(why)`` asks the model with the repair request), and never returned as the
    answer: a second unusable attempt is ``ModelOutputError``."""
    if response.tool_calls:
        return named(response, tools)
    reading = read(response.text, tools)
    if reading.calls:
        return replace(response, text=reading.prose, tool_calls=reading.calls)
    if not reading.attempt:
        return response
    second = await again(reading.why)
    usage = response.usage + second.usage
    if second.tool_calls:
        return replace(named(second, tools), usage=usage)
    reread = read(second.text, tools)
    if echoes_repair(second.text):  # a small model repeated the instructions back
        reread = TextReading(prose=second.text, attempt=True, why="it repeated the request")
    if reread.calls:
        return replace(second, text=reread.prose, tool_calls=reread.calls, usage=usage)
    if reread.attempt:
        raise ModelOutputError(
            f"the model wrote a tool call that cannot be used, even after one repair request: {reread.why}",
            answer=second.text[:500],
        )
    return replace(second, usage=usage)
