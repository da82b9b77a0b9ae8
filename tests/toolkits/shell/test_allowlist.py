"""The allowlist: strict settings, and argv built only from values the patterns allow."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.config import ShellSettings
from tether.errors import ConfigError
from tether.toolkits.shell.allowlist import ArgumentRefused, Command, build_argv, load_commands, unavailable

INJECTIONS = [
    "; rm -rf /",
    "$(id)",
    "`id`",
    "a\nb",
    "a\rb",
    "x && reboot",
    "| cat /etc/passwd",
    "--output=/etc/passwd",
    "-rf",
    "--",
    "${HOME}",
    "a\x00b",
    "../../etc/passwd",
    "'quoted'",
    '"quoted"',
    "> /tmp/x",
]


def command(**overrides: object) -> Command:
    values: dict[str, object] = {
        "name": "tool",
        "program": "/bin/echo",
        "args": ("-n", "{count}", "--name={name}", "{file}"),
        "patterns": {
            "count": re.compile(r"[0-9]{1,3}"),
            "name": re.compile(r"[A-Za-z\u4e00-\u9fff]{1,20}"),
            "file": re.compile(r"[\w.-]{1,50}"),
        },
        "options": frozenset(),
        "cwd": Path("/"),
        "env": ("PATH",),
        "timeout_s": None,
        "background": False,
        "destructive": False,
        "description": "",
    }
    values.update(overrides)
    return Command(**values)  # type: ignore[arg-type]


def test_values_go_in_as_single_arguments() -> None:
    argv = build_argv(command(), {"count": "3", "name": "报告", "file": "notes.md"})
    assert argv == ["/bin/echo", "-n", "3", "--name=报告", "notes.md"]


@pytest.mark.parametrize("value", INJECTIONS)
def test_injection_attempts_are_refused(value: str) -> None:
    for slot in ("count", "name", "file"):
        values = {"count": "1", "name": "a", "file": "f", slot: value}
        with pytest.raises(ArgumentRefused) as caught:
            build_argv(command(), values)
        assert f"args.{slot}" in caught.value.message


def test_double_braces_are_literal() -> None:
    tool = command(
        args=("{{x}}", "{{{count}}}", "f'{{count}}={count}'"), patterns={"count": re.compile("[0-9]")}
    )
    assert build_argv(tool, {"count": "7"})[1:] == ["{x}", "{7}", "f'{count}=7'"]
    assert ShellSettings(commands=[{"name": "py", "program": "/bin/echo", "args": ["{{x}}"]}]).commands  # type: ignore[list-item]


def test_a_leading_dash_needs_the_placeholder_in_options() -> None:
    with pytest.raises(ArgumentRefused, match="may not start with '-'"):
        build_argv(command(), {"count": "1", "name": "a", "file": "-rf"})
    argv = build_argv(command(options=frozenset({"file"})), {"count": "1", "name": "a", "file": "-rf"})
    assert argv[-1] == "-rf"


def test_unknown_and_missing_args_name_the_allowed_ones() -> None:
    with pytest.raises(ArgumentRefused, match=r"takes args \['count', 'file', 'name'\]; unknown: \['x'\]"):
        build_argv(command(), {"count": "1", "name": "a", "file": "f", "x": "y"})
    with pytest.raises(ArgumentRefused, match=r"missing: \['file'\]"):
        build_argv(command(), {"count": "1", "name": "a"})


@given(
    st.dictionaries(
        st.sampled_from(["count", "name", "file"]), st.one_of(st.sampled_from(INJECTIONS), st.text())
    )
)
def test_nothing_passes_unless_every_pattern_allows_it(values: dict[str, str]) -> None:
    tool = command()
    try:
        argv = build_argv(tool, values)
    except ArgumentRefused:
        return
    assert argv[0] == "/bin/echo" and len(argv) == 5
    for name, value in values.items():
        assert tool.patterns[name].fullmatch(value)
        assert not any(char in value for char in ";$`|&<>\n\r\x00'\" ")
    assert not argv[-1].startswith("-")


def test_settings_are_checked_strictly() -> None:
    good = {"name": "echo", "program": "/bin/echo", "args": ["{text}"], "params": {"text": "[a-z]+"}}
    cases = [
        ({**good, "args": ["{txt}"]}, "undefined: ['txt']"),
        ({**good, "params": {"text": "[a-z"}}, "params.text is not a regex"),
        ({**good, "args": ["{text}", "{oops"]}, "has a lone brace"),
        ({**good, "args": ["{text}", "}"]}, "has a lone brace"),
        ({**good, "danger": "yolo"}, "danger"),
        ({**good, "shell": True}, "Extra inputs are not permitted"),
        ({**good, "name": "Rm Rf"}, "name"),
        ({**good, "options": ["nope"]}, "options names unknown placeholders"),
        ({**good, "timeout_s": 0}, "timeout_s"),
    ]
    for entry, expected in cases:
        with pytest.raises(ConfigError) as caught:
            ShellSettings(commands=[entry])  # type: ignore[arg-type]
        assert expected in caught.value.message, (entry, caught.value.message)
    with pytest.raises(ConfigError, match="names must be unique; repeated: echo"):
        ShellSettings(commands=[good, good])  # type: ignore[arg-type]
    assert ShellSettings(commands=[good]).commands[0].danger == "caution"  # type: ignore[arg-type]


def write_settings(home: Path, text: str) -> None:
    (home / "settings.toml").write_text(text, encoding="utf-8")


def test_load_resolves_programs_and_confines_cwd(tmp_path: Path) -> None:
    write_settings(
        tmp_path,
        f"""
[[shell.commands]]
name = "py"
program = {sys.executable!r}
args = ["-c", "print(1)"]

[[shell.commands]]
name = "ls"
program = "ls"
args = ["-1"]
cwd = "sub"
""",
    )
    (tmp_path / "workspace" / "sub").mkdir(parents=True)
    commands = load_commands(tmp_path)
    assert commands["ls"].program.endswith("/ls") and commands["ls"].program.startswith("/")
    assert commands["ls"].cwd == (tmp_path / "workspace" / "sub").resolve()
    assert unavailable(tmp_path) is None


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ('program = "no-such-program-anywhere"', "not found on PATH"),
        ('program = "./run.sh"', "absolute path or a bare name"),
        ('program = "/etc/passwd"', "not an executable file"),
        ('program = "/bin/ls"\ncwd = "../.."', "'..' leaves the root"),
    ],
)
def test_bad_commands_make_the_tasks_unavailable_with_the_reason(
    tmp_path: Path, entry: str, expected: str
) -> None:
    write_settings(tmp_path, f'[[shell.commands]]\nname = "bad"\n{entry}\n')
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_commands(tmp_path)
    reason = unavailable(tmp_path)
    assert reason is not None and expected in reason


def test_no_commands_means_unavailable(tmp_path: Path) -> None:
    assert (
        unavailable(tmp_path) == "no shell command is allow-listed: add [[shell.commands]] to settings.toml"
    )


def test_specs_module_stays_light() -> None:
    import subprocess

    code = (
        "import sys, tether.toolkits.shell.specs, tether.toolkits.workspace.specs\n"
        "heavy = {'pypdf', 'docx', 'pptx', 'openpyxl', 'weasyprint', 'charset_normalizer', "
        "'tether.toolkits.shell.handlers', 'tether.toolkits.workspace.handlers'} & set(sys.modules)\n"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_placeholder_at_the_start_of_an_argument_cannot_make_an_option() -> None:
    tool = command(args=("{name}.txt", "{a}{b}"), patterns={"name": re.compile(r"[\w.=-]+"),
                   "a": re.compile(r".{0,3}"), "b": re.compile(r"[a-z]*")})  # fmt: skip
    for values in ({"name": "--help=x", "a": "x", "b": "y"}, {"name": "ok", "a": "-", "b": "rf"}):
        with pytest.raises(ArgumentRefused, match="may not make an argument start with '-'"):
            build_argv(tool, values)
    assert build_argv(tool, {"name": "ok", "a": "x", "b": "rf"})[1:] == ["ok.txt", "xrf"]


@pytest.mark.parametrize(
    "value", ["/etc/passwd.md", "../../x.md", "a/../../x.md", "~/x.md", "C:/x.md", "..\\x.md"]
)
def test_a_value_never_names_a_place_outside_the_commands_folder(value: str) -> None:
    tool = command(args=("{src}",), patterns={"src": re.compile(r".+")})
    with pytest.raises(ArgumentRefused, match="outside the command's folder"):
        build_argv(tool, {"src": value})
    assert build_argv(tool, {"src": "notes/a..b.md"})[1:] == ["notes/a..b.md"]
