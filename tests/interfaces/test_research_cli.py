"""Done-when, in the CLI: a researched handout on a topic served by local pages, as PPTX and PDF, saved
over existing files only after the person approves that overwrite, then copied out with tether artifacts."""

from __future__ import annotations

import io
import json
from pathlib import Path

from pptx import Presentation
from pypdf import PdfReader

from tests.support.helpers import tether_cli
from tests.support.research_site import research_site

REQUEST = "搜索一下 太阳能发电 然后写成讲义 保存到 handouts/solar 覆盖旧的"


def deck_text(data: bytes) -> str:
    deck = Presentation(io.BytesIO(data))
    return "\n".join(
        shape.text_frame.text  # type: ignore[attr-defined]
        for slide in deck.slides
        for shape in slide.shapes
        if shape.has_text_frame
    )


def test_a_researched_handout_overwrites_only_after_approval_and_can_be_downloaded(
    home: Path, tmp_path: Path
) -> None:
    workspace = home / "workspace" / "handouts"
    workspace.mkdir(parents=True)
    (workspace / "solar.pptx").write_bytes(b"old deck")
    (workspace / "solar.pdf").write_bytes(b"old pdf")
    with research_site() as site:
        site.configure(home)
        code, out, err = tether_cli("run", "--json", "--format", "pptx,pdf", REQUEST, home=home, timeout=120)
        assert code == 3, (out, err)  # waits for the person: the call would overwrite their files
        asked = json.loads(out)
        assert asked["status"] == "needs_confirmation" and "documents.generate" in asked["final"]
        assert site.queries == ["太阳能发电"]
        tools = [s["tool"] for s in asked["steps"] if s["kind"] == "tool"]
        assert tools == ["web.search"] + ["web.read_url"] * 3 + ["web.summarize_text"] * 3
        assert (workspace / "solar.pptx").read_bytes() == b"old deck"  # nothing replaced before the yes
        thread = asked["thread_id"]
        code, out, err = tether_cli("run", "--json", "--thread", thread, "--confirm", home=home, timeout=120)
        assert code == 0, (out, err)
        final = json.loads(out)["final"]
        assert "已生成文件" in final and "[1] 太阳能发电原理" in final
    deck, pdf = (workspace / "solar.pptx").read_bytes(), (workspace / "solar.pdf").read_bytes()
    assert deck.startswith(b"PK") and pdf.startswith(b"%PDF")
    text = deck_text(deck)
    assert "光伏效应" in text and f"{site.base}/grid" in text  # the content, and its sources cited
    assert "太阳能" in "".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf)).pages)
    code, out, err = tether_cli("artifacts", "--json", "--thread", thread, home=home)
    assert code == 0, err
    items = {item["format"]: item for item in json.loads(out)["items"]}
    assert set(items) == {"pptx", "pdf"} and items["pptx"]["thread_id"] == thread
    target = tmp_path / "copy.pptx"
    code, out, err = tether_cli(
        "artifacts", "get", str(items["pptx"]["artifact_id"]), "--out", str(target), home=home
    )
    assert code == 0, err
    assert target.read_bytes() == deck


def test_without_the_word_to_overwrite_an_existing_file_is_left_alone_and_the_answer_says_how(
    home: Path,
) -> None:
    workspace = home / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "notes.md").write_text("mine", encoding="utf-8")
    with research_site() as site:
        site.configure(home)
        code, out, err = tether_cli(
            "run", "--json", "read " + site.base + "/solar and summarize it, save it as notes.md", home=home,
            timeout=120,
        )  # fmt: skip
    assert code == 1, (out, err)  # what was asked (save it as notes.md) was not done: the exit says so
    final = json.loads(out)["final"]
    assert "notes.md exists" in final and "overwrite" in final
    assert (workspace / "notes.md").read_text(encoding="utf-8") == "mine"


def test_a_format_that_is_not_allowed_is_refused_naming_the_allowed_ones(home: Path) -> None:
    code, _, err = tether_cli("run", "--format", "docx", "写一份讲义", home=home)
    assert code == 2 and "md, html, pptx, pdf" in err


def test_a_pdf_in_the_workspace_is_read_and_summarized_and_a_folder_of_notes_becomes_a_deck(
    home: Path,
) -> None:
    from weasyprint import HTML

    workspace = home / "workspace"
    (workspace / "notes").mkdir(parents=True)
    report = "<h1>年度报告</h1><p>今年收入增长了百分之十二。</p><p>成本下降，前景稳定。</p>"
    HTML(string=f"<html><body>{report}</body></html>").write_pdf(workspace / "report.pdf")
    code, out, err = tether_cli("run", "--json", "总结一下 report.pdf", home=home, timeout=120)
    assert code == 0, (out, err)
    answer = json.loads(out)
    assert [s["tool"] for s in answer["steps"] if s["kind"] == "tool"] == [
        "workspace.read",
        "web.summarize_text",
    ]
    assert "收入增长了百分之十二" in answer["final"]
    (workspace / "notes" / "a.md").write_text("# 光伏\n\n## 原理\n\n- 光伏效应", encoding="utf-8")
    (workspace / "notes" / "b.md").write_text("## Cost\n\n- down 90% in ten years", encoding="utf-8")
    code, out, err = tether_cli(
        "run", "--json", "把 notes/ 里的 markdown 做成一份 PPT", home=home, timeout=120
    )
    assert code == 0, (out, err)
    (made,) = [s for s in json.loads(out)["steps"] if s["tool"] == "documents.generate"]
    assert made["args"]["title"] == "光伏 · Cost"  # the notes' own headings, not the folder's name
    code, out, err = tether_cli("artifacts", "--json", home=home)
    (deck,) = json.loads(out)["items"]
    text = deck_text((home / deck["path"]).read_bytes())
    assert deck["format"] == "pptx" and "光伏效应" in text and "down 90% in ten years" in text
