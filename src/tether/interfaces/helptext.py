"""How ``--help`` reads: prose that wraps to the terminal, and values named the way a person types them.

Typer prints every parameter's Python annotation as a tag (``<bool>``, ``<list[str]>``) and keeps the
single line breaks of a docstring, so a command's help broke mid-sentence wherever its source line
ended. ``polish`` walks the built click command once (``guard.command_of``) and fixes both for every
command, present and future: a docstring paragraph becomes one line that the help renderer wraps to
the terminal's width, a flag shows no value at all, and a value shows a plain name (``TEXT``,
``INTEGER``, ``PATH``, ``[md|html]``), as click, gh and cargo print them.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, get_args

from rich.markup import escape
from typer import _click
from typer.core import TyperArgument, TyperOption

# A line that starts a list item keeps its own line when a paragraph is re-flowed.
_ITEM = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s")
_VALUE_NAMES = {"str": "TEXT", "int": "INTEGER", "float": "NUMBER", "datetime": "DATETIME"}


def reflow(text: str | None) -> str | None:
    """``text`` with every paragraph on one line (paragraphs stay apart; ``\\b`` keeps one as written,
    as in click; a list item keeps its own line), and brackets shown as written: the help is rendered
    as Rich markup, which took ``[workspace]`` for a style and dropped it."""
    if not text:
        return text
    body = inspect.cleandoc(text).partition("\f")[0]
    paragraphs = []
    for paragraph in body.split("\n\n"):
        if paragraph.startswith("\b"):
            paragraphs.append(paragraph)
            continue
        lines: list[str] = []
        for line in paragraph.splitlines():
            if lines and not _ITEM.match(line):
                lines[-1] = f"{lines[-1]} {line.strip()}"
            else:
                lines.append(line.strip())
        paragraphs.append("\n".join(lines))
    return escape("\n\n".join(paragraphs).strip())


def value_name(param: Any) -> str:
    """The plain name of the value ``param`` takes: empty for a flag, the choices for a choice."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return ""
    if param.metavar is not None and isinstance(param, TyperOption):
        return str(param.metavar)
    described = param.type_descriptor
    if described.is_choice:
        return "[" + "|".join(str(getattr(c, "value", c)) for c in described.choices or ()) + "]"
    if described.is_path or described.is_file:
        return "PATH"
    annotation = described.annotation
    if described.is_list or described.is_tuple:
        inner = get_args(annotation)
        annotation = inner[0] if inner else str
    name = getattr(annotation, "__name__", str(annotation))
    if name == "Path":
        return "PATH"
    return _VALUE_NAMES.get(name, name.upper())


class _Option(TyperOption):
    def display_type_rich(self, ctx: Any) -> str | None:
        return value_name(self)


class _Argument(TyperArgument):
    def display_type_rich(self, ctx: Any) -> str | None:
        named = value_name(self)
        return "" if named == self.display_name_raw else named  # not "TEXT  TEXT"

    @property
    def display_name_raw(self) -> str:  # GOAL, as click and gh name an argument
        return str(self.metavar or self.name or "").upper()

    def _usage_display_name(self) -> str:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return f"{name}..." if self.nargs != 1 else name


def polish(command: Any) -> Any:
    """Fix ``command``'s help and that of every command under it, in place; returns it."""
    command.help = reflow(command.help)
    command.short_help = reflow(command.short_help)
    command.epilog = reflow(command.epilog)
    context = _click.Context(command, info_name=command.name, **(command.context_settings or {}))
    helper = command.get_help_option(context)  # made on first use: made here, to be polished too
    if getattr(command, "commands", None) and not getattr(command, "invoke_without_command", True):
        command.no_args_is_help = True  # a bare group shows its commands, not "Missing command."
    for param in [*command.params, *([helper] if helper is not None else [])]:
        param.help = reflow(param.help)
        if "default" in (param.help or "").lower():
            param.show_default = False  # its help names the default in words: not twice
        # Same attributes, another class: only how the help names the value changes.
        if type(param) is TyperOption:
            param.__class__ = _Option
        elif type(param) is TyperArgument:
            param.__class__ = _Argument
    for sub in (getattr(command, "commands", None) or {}).values():
        polish(sub)
    return command
