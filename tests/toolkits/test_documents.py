"""``documents.generate`` through a real executor: a worker process writes the files into the home."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.artifacts.samples import EN, ZH
from tether.artifacts import FORMATS
from tether.artifacts.document import MAX_BLOCKS, MAX_MARKDOWN_CHARS, MAX_SECTIONS
from tether.execution.executor import Executor
from tether.tasks.result import TaskStatus
from tether.toolkits.documents.handlers import safe_stem
from tether.toolkits.documents.specs import FORMAT_NAMES, MAX_CONTENT_CHARS, registry


@pytest.fixture
def documents(make_executor: Callable[..., Executor]) -> Executor:
    return make_executor(registry=registry)


def test_generate_writes_every_format_into_a_private_folder(documents: Executor, home: Path) -> None:
    result = documents.execute_sync(
        "documents.generate",
        {"title": "城市更新：社区参与/2024", "content": ZH, "formats": ["md", "html", "pptx", "pdf"],
         "sources": [{"title": "统计年鉴", "url": "https://data.stats.gov.cn/"}]},
        caller="agent",
    )  # fmt: skip
    assert result.status is TaskStatus.COMPLETED, result
    artifacts = result.data["artifacts"]
    folder = f"artifacts/{result.execution_id}"
    assert [a["format"] for a in artifacts] == ["md", "html", "pptx", "pdf"]
    assert all(a["name"].startswith("城市更新：社区参与 2024.") for a in artifacts)  # the "/" is gone
    for artifact in artifacts:
        path = home / artifact["path"]
        assert artifact["path"] == f"{folder}/{artifact['name']}"
        assert path.is_file() and path.stat().st_size == artifact["size"] > 0
    assert artifacts[2]["slides"] >= 6 and artifacts[3]["pages"] >= 1
    assert "slides" not in artifacts[0] and "pages" not in artifacts[0]
    assert stat.S_IMODE((home / folder).stat().st_mode) == 0o700
    assert result.data["language"] == "zh" and result.data["sources"] == 3
    assert "https://data.stats.gov.cn/" in (home / artifacts[0]["path"]).read_text(encoding="utf-8")
    assert len(json.dumps(result.data)) < 2000  # results stay small
    events = (home / "executions" / result.execution_id / "events.jsonl").read_text(encoding="utf-8")
    assert all(f"writing {fmt}" in events for fmt in ("md", "html", "pptx", "pdf"))


def test_generate_in_english_with_only_slides(documents: Executor, home: Path) -> None:
    result = documents.execute_sync(
        "documents.generate", {"title": "Urban renewal", "content": EN, "formats": ["pptx"]}, caller="cli"
    )
    assert result.status is TaskStatus.COMPLETED, result
    [artifact] = result.data["artifacts"]
    assert artifact["name"] == "Urban renewal.pptx" and result.data["language"] == "en"
    assert sorted(p.name for p in (home / "artifacts" / result.execution_id).iterdir()) == [
        "Urban renewal.pptx"
    ]


@pytest.mark.parametrize(
    ("params", "expected"),
    [({"formats": ["docx"]}, "'md', 'html', 'pptx' or 'pdf'"),
     ({"formats": []}, "at least 1 item"),
     ({"formats": ["md", "md"]}, "list each format once; repeated: md"),
     ({"content": "x" * (MAX_CONTENT_CHARS + 1)}, f"at most {MAX_CONTENT_CHARS} characters"),
     ({"sources": [{"title": "x", "url": "javascript:alert(1)"}]}, "https?://"),
     ({"language": "fr"}, "'zh' or 'en'")],
)  # fmt: skip
def test_bad_arguments_are_rejected_naming_what_is_allowed(
    documents: Executor, home: Path, params: dict[str, object], expected: str
) -> None:
    call = {"title": "T", "content": "# T\n\ntext", "formats": ["md"], **params}
    result = documents.execute_sync("documents.generate", call, caller="agent")
    assert result.status is TaskStatus.REJECTED, result
    assert expected in result.message + json.dumps(result.data, ensure_ascii=False)
    assert not (home / "artifacts").exists()


def test_a_document_too_big_for_the_model_fails_with_the_reason(documents: Executor) -> None:
    content = "# T\n\n" + "\n\n".join(f"## 第{i}节\n内容" for i in range(MAX_SECTIONS + MAX_BLOCKS))
    result = documents.execute_sync(
        "documents.generate", {"title": "T", "content": content, "formats": ["md"]}, caller="agent"
    )
    assert result.status is TaskStatus.FAILED, result
    assert f"too long for one document: more than {MAX_SECTIONS} sections" in result.message


def test_the_spec_never_waits_for_the_automation_lock_and_speaks_both_languages() -> None:
    spec = registry.spec("documents.generate")
    assert spec.resources == () and spec.danger == "safe"
    assert {"做成PPT", "导出PDF", "make slides", "export pdf"} <= set(spec.aliases)
    assert spec.exposed("agent") and spec.exposed("cli") and spec.exposed("mcp")
    assert FORMAT_NAMES == FORMATS


def test_specs_module_stays_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys; import tether.toolkits.documents.specs; "
        "names = ('pptx', 'weasyprint', 'PIL', 'markdown_it', 'tether.artifacts'); "
        "heavy = [m for m in names if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("title", "stem"),
    [("城市更新/社区参与", "城市更新 社区参与"), ("../../etc/passwd", "etc passwd"), ("a:b*c?d", "a b c d"),
     ("...", "document"), ("  spaced   out  ", "spaced out"), ("x\x00y", "xy"), ("报告" * 60, "报告" * 40)],
)  # fmt: skip
def test_stems_keep_chinese_and_drop_path_characters(title: str, stem: str) -> None:
    assert safe_stem(title) == stem


@pytest.mark.parametrize("title", ["𠀀" * 80, "😀" * 80, "é" * 200])
def test_a_long_title_of_wide_characters_still_fits_a_file_name(title: str) -> None:
    stem = safe_stem(title)
    assert len(stem.encode("utf-8")) <= 240 and stem and stem == title[: len(stem)]


def test_a_refused_or_taken_place_fails_before_building_and_leaves_nothing(
    documents: Executor, home: Path
) -> None:
    (home / "workspace" / "out").mkdir(parents=True)
    (home / "workspace" / "out" / "r.md").write_text("mine", encoding="utf-8")
    cases = {
        "out/r": "exists in the workspace",
        "../outside": "leaves the root",
        "out/": "names a folder",
        "x.pdf/": "names a folder",
    }
    for save_to, why in cases.items():
        result = documents.execute_sync(
            "documents.generate",
            {"title": "Orphan", "content": "## A\n- x", "formats": ["md", "pdf"], "save_to": save_to},
            caller="cli",
        )
        assert result.status is TaskStatus.FAILED and why in result.message, (save_to, result)
        assert not (home / "artifacts" / result.execution_id).exists(), save_to  # no orphan files
    assert (home / "workspace" / "out" / "r.md").read_text(encoding="utf-8") == "mine"


def test_save_to_copies_into_the_workspace_and_overwrites_only_when_confirmed(
    documents: Executor, home: Path
) -> None:
    args = {"title": "Notes", "content": "## A\n- x", "formats": ["md"], "save_to": "notes/today"}
    first = documents.execute_sync("documents.generate", args, caller="agent")
    assert first.status is TaskStatus.COMPLETED and first.data["saved"] == ["notes/today.md"], first
    forced = {**args, "content": "## B\n- y", "overwrite": True}
    asked = documents.execute_sync("documents.generate", forced, caller="agent")
    assert asked.status is TaskStatus.REJECTED and asked.data["danger"] == "destructive"
    consent = documents.confirm("documents.generate", forced, caller="agent", source="person:test")
    done = documents.execute_sync("documents.generate", forced, caller="agent", confirmation=consent)
    assert done.status is TaskStatus.COMPLETED, done
    assert "- y" in (home / "workspace" / "notes" / "today.md").read_text(encoding="utf-8")


def _picture(path: Path) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (64, 48), "#22c55e").save(path)


def test_pictures_come_only_from_inside_the_workspace(
    documents: Executor, home: Path, tmp_path: Path
) -> None:
    workspace = home / "workspace"
    _picture(workspace / "docs" / "img" / "chart.png")
    _picture(tmp_path / "outside.png")
    (workspace / "docs" / "link.png").symlink_to(tmp_path / "outside.png")
    (workspace / "docs" / "fake.png").write_text("not a picture", encoding="utf-8")
    (home / "secret.png").write_bytes((tmp_path / "outside.png").read_bytes())
    markdown = (
        "# Pictures\n\n![chart](img/chart.png)\n\n![up](../../outside.png)\n\n![link](link.png)\n\n"
        "![fake](fake.png)\n\n![web](http://127.0.0.1:9/x.png)\n\n![home](../secret.png)\n"
    )
    (workspace / "docs" / "pictures.md").write_text(markdown, encoding="utf-8")
    result = documents.execute_sync(
        "documents.generate",
        {"content_path": "docs/pictures.md", "formats": ["html", "pptx"]},
        caller="agent",
    )
    assert result.status is TaskStatus.COMPLETED, result
    assert result.data["images"]["drawn"] == 1 and "1 picture" not in result.message
    not_drawn = result.data["images"]["not_drawn"]
    assert "http://127.0.0.1:9/x.png" in not_drawn and "fake.png" in str(not_drawn)
    assert "refused" in not_drawn["http://127.0.0.1:9/x.png"]  # loopback: the SSRF guard's word
    page = (home / result.data["artifacts"][0]["path"]).read_text(encoding="utf-8")
    assert page.count("<img ") == 1 and "[up]" in page and "[link]" in page and "[home]" in page
    from pptx import Presentation

    deck = Presentation(str(home / result.data["artifacts"][1]["path"]))
    pictures = [shape for slide in deck.slides for shape in slide.shapes if shape.shape_type == 13]
    assert len(pictures) == 1


def test_a_picture_at_a_web_address_is_read_through_the_research_guard(
    documents: Executor, home: Path
) -> None:
    from tests.support.research_site import research_site

    with research_site() as site:
        site.configure(home)  # the guard lets this one loopback site through, as for web.read_url
        markdown = (
            f"# Solar\n\n![chart]({site.base}/chart.png)\n\n![page]({site.base}/solar)\n\n"
            f"![gone]({site.base}/missing.png)\n"
        )
        result = documents.execute_sync(
            "documents.generate", {"content": markdown, "formats": ["html", "pptx"]}, caller="agent"
        )
    assert result.status is TaskStatus.COMPLETED, result
    images = result.data["images"]
    assert images["drawn"] == 1, images
    assert "not a picture" in images["not_drawn"][f"{site.base}/solar"]
    assert "404" in images["not_drawn"][f"{site.base}/missing.png"]
    page = (home / result.data["artifacts"][0]["path"]).read_text(encoding="utf-8")
    assert page.count("<img ") == 1 and "data:image/png" in page
    from pptx import Presentation

    deck = Presentation(str(home / result.data["artifacts"][1]["path"]))
    assert sum(s.shape_type == 13 for slide in deck.slides for s in slide.shapes) == 1  # a picture shape


def test_a_long_design_document_is_accepted_and_a_longer_one_names_the_limit(
    documents: Executor, home: Path
) -> None:
    section = "## Part {i}\n\n" + "The design keeps every promise it makes, and says which. " * 12 + "\n\n"
    design = "# Design\n\n" + "".join(section.format(i=i) for i in range(60))
    assert 38_000 < len(design) < MAX_CONTENT_CHARS
    inline = documents.execute_sync(
        "documents.generate", {"content": design, "formats": ["md"]}, caller="agent"
    )
    assert inline.status is TaskStatus.COMPLETED, inline
    assert inline.data["sections"] == 60
    too_long = documents.execute_sync(
        "documents.generate", {"content": "x" * (MAX_CONTENT_CHARS + 1), "formats": ["md"]}, caller="agent"
    )
    assert too_long.status is TaskStatus.REJECTED and str(MAX_CONTENT_CHARS) in too_long.message
    (home / "workspace").mkdir(exist_ok=True)
    (home / "workspace" / "big.md").write_text(design * 4, encoding="utf-8")
    from_file = documents.execute_sync(
        "documents.generate", {"content_path": "big.md", "formats": ["md"]}, caller="agent"
    )
    assert from_file.status is TaskStatus.COMPLETED, from_file
    (home / "workspace" / "huge.md").write_text("x" * (MAX_MARKDOWN_CHARS + 10), encoding="utf-8")
    huge = documents.execute_sync(
        "documents.generate", {"content_path": "huge.md", "formats": ["md"]}, caller="agent"
    )
    assert huge.status is TaskStatus.FAILED and f"the limit is {MAX_MARKDOWN_CHARS}" in huge.message


def test_the_title_comes_from_the_content_not_a_folder_name(documents: Executor, home: Path) -> None:
    (home / "workspace" / "notes").mkdir(parents=True)
    content = "# Solar power basics\n\n## Cells\n\n- silicon\n"
    result = documents.execute_sync(
        "documents.generate", {"title": "notes", "content": content, "formats": ["md"]}, caller="agent"
    )
    assert (
        result.status is TaskStatus.COMPLETED
        and result.data["artifacts"][0]["name"] == "Solar power basics.md"
    )
    untitled = documents.execute_sync(
        "documents.generate", {"title": "notes", "content": "just text", "formats": ["md"]}, caller="agent"
    )
    assert untitled.status is TaskStatus.COMPLETED and untitled.data["artifacts"][0]["name"] == "notes.md"


def test_the_markdown_comes_from_content_or_a_file_never_both_or_neither(documents: Executor) -> None:
    for args in ({"formats": ["md"]}, {"content": "# A", "content_path": "a.md", "formats": ["md"]}):
        result = documents.execute_sync("documents.generate", args, caller="agent")
        assert result.status is TaskStatus.FAILED and "either as content or as content_path" in result.message
