"""``tether demo --files``: a few notes and a report to try the documents and files tools on.

Written into the workspace by the workspace and documents tasks themselves, through the executor with
the person's own caller: never around the trust boundary, and a file already there is kept, not replaced.
"""

from __future__ import annotations

import asyncio

from rich.markup import escape

from tether.execution.executor import Executor
from tether.interfaces.render import out
from tether.tasks.result import TaskResult, TaskStatus

NOTES = {
    "notes/太阳能发电.md": """# 太阳能发电

## 原理
- 光伏电池把阳光直接变成电：光子把电子从硅原子中“打”出来，形成电流。
- 晶硅组件的转换效率一般在 20% 到 23% 之间。

## 优点与局限
- 运行时没有排放，组件寿命可达 25 年以上。
- 只在有光时发电：需要储能或电网来平衡昼夜和阴天。
""",
    "notes/batteries.md": """# Home batteries

## What they do
- Store solar power made at noon for the evening peak.
- A typical home battery holds 10 to 15 kWh.

## What to check
- Round-trip efficiency (about 90% for lithium iron phosphate).
- Warranty in cycles, not only in years.
""",
    "notes/grid.md": """# The grid

## Balancing
- Supply must meet demand every second: batteries, hydro and gas plants fill the gaps.
- Solar peaks at noon; demand peaks in the evening.

## 并网
- 家用光伏并网前需要向电网公司申请，并安装双向电表。
""",
}

REPORT_TITLE = "Solar power: a one-page report"
REPORT = """## Summary
Solar panels on homes now pay back their cost in six to nine years in most sunny regions.

## Findings
- Panel prices fell by about 90% between 2010 and 2023.
- A battery moves noon power to the evening, when households use the most.
- Connecting to the grid needs a permit and a two-way meter.

## Recommendation
Start with the roof's orientation and shade; size the battery to the evening use, not the whole day.
"""

TRY = (
    'tether run "把 notes/ 里的 markdown 做成一份 PPT"',
    'tether run "summarize report.pdf"',
)


def make_demo_files(executor: Executor) -> int:
    """Write the notes and the report into the workspace; 0 when each is there afterwards."""
    results = asyncio.run(_make(executor))
    failed = 0
    for name, result in results:
        if result.status is TaskStatus.COMPLETED:
            out.print(f"[green]wrote[/] {escape(name)}")
        elif "exists" in result.message or "overwrite" in result.message:
            out.print(f"[yellow]kept[/]  {escape(name)} (it is there already)")
        else:
            failed += 1
            out.print(f"[red]could not write[/] {escape(name)}: {escape(result.message)}")
    if not failed:
        out.print("\nTry / 试试：")
        for line in TRY:
            out.print(f"  {escape(line)}")
    return 1 if failed else 0


async def _make(executor: Executor) -> list[tuple[str, TaskResult]]:
    done = []
    for path, text in NOTES.items():
        params = {"path": path, "content": text}
        done.append((path, await executor.execute("workspace.write", params, caller="cli")))
    report = {"title": REPORT_TITLE, "content": REPORT, "formats": ["pdf"], "save_to": "report"}
    done.append(("report.pdf", await executor.execute("documents.generate", report, caller="cli")))
    return done
