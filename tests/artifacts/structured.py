"""A Markdown document with every structure a conversion must keep, and helpers to read what was built.

Not one of the samples the layouts were tuned on: numbered lists that start at 3, nesting three deep,
text after a list, indented Python, an aligned table, a long table, a picture, a quote, a task list,
emoji, Chinese and English.
"""

from __future__ import annotations

from pathlib import Path

LONG_ROWS = 40


def picture(path: Path) -> Path:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (480, 270), "#0ea5e9")
    ImageDraw.Draw(image).rectangle((160, 60, 320, 210), fill="#f59e0b")
    image.save(path)
    return path


MARKDOWN = (
    """# Release plan 🚀

## Steps

The plan has **three phases** and one *risky* step; see `deploy.sh` and [the runbook](https://runbook.example/r).

3. Build the wheel
4. Test it
   - unit tests
     - fast ones first
   - integration tests
5. Publish

After the list comes this sentence, and it stays after it.

```python
def publish(version):
    if not version:
        raise ValueError("no version")
    return upload(version)
```

| Phase | Owner | Days |
|:------|:-----:|-----:|
| Build | 小王 | 2 |
| Test | Ana | 5 |
| Publish | 小李 | 1 |

![The pipeline diagram](pipeline.png)

> Quoted *advice*: ship small.

- [x] tag the release
- [ ] write the notes 🎉

## 数据表

"""
    + "| 序号 | 城市 | 说明 |\n|---|---|---|\n"
    + "\n".join(f"| {i} | 城市{i} | 第{i}行的说明文字，用来把表格撑长 |" for i in range(1, LONG_ROWS + 1))
    + "\n"
)
