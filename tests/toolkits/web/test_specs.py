"""The web toolkit's specs: light to import, the tasks and their policy, words in both languages."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.helpers import ROOT
from tether.tasks.spec import AGENT, CLI, MCP, Danger, Isolation, Registry
from tether.toolkits.web import specs

HEAVY = ("httpx", "httpcore", "trafilatura", "pypdf", "charset_normalizer", "weasyprint", "lxml", "openai")


def test_specs_and_the_availability_check_import_nothing_heavy() -> None:
    script = (
        "import sys, tempfile\nfrom pathlib import Path\n"
        "from tether.toolkits.web.specs import registry, search_available\n"
        "search_available(Path(tempfile.mkdtemp()))\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def test_the_registry_reloads_from_its_ref() -> None:
    assert Registry.load("tether.toolkits.web.specs:registry") is specs.registry


def test_add_tasks_fills_any_registry() -> None:
    other = Registry()
    specs.add_tasks(other)
    assert sorted(spec.task_id for spec in other) == ["web.read_url", "web.search", "web.summarize_text"]


def test_every_task_is_safe_lockless_and_exposed_to_agent_cli_and_mcp() -> None:
    for spec in specs.registry:
        assert spec.danger is Danger.SAFE and spec.resources == ()
        assert spec.exposed_to == {AGENT, CLI, MCP}
        assert spec.description and spec.handler.startswith("tether.toolkits.web.handlers:")
    assert specs.registry.spec("web.read_url").isolation is Isolation.PROCESS
    assert specs.registry.spec("web.search").available == "tether.toolkits.web.specs:search_available"


def test_aliases_are_in_chinese_and_english() -> None:
    han = re.compile(r"[\u4e00-\u9fff]")
    for spec in specs.registry:
        assert any(han.search(alias) for alias in spec.aliases), spec.task_id
        assert any(alias.isascii() for alias in spec.aliases), spec.task_id
    words = {alias for spec in specs.registry for alias in spec.aliases}
    assert {
        "搜索",
        "查一下",
        "search the web",
        "读网页",
        "打开链接",
        "read the page",
        "总结",
        "概括",
        "summarize",
    } <= words
