"""Fixtures of the web toolkit's tests: the local site, the connection recorder, a PDF, and a home
whose ``[research]`` section lets the toolkit reach exactly the site (nothing else on this machine)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.toolkits.web.site import Recorder, Site


@pytest.fixture
def site() -> Iterator[Site]:
    served = Site()
    yield served
    served.close()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    listener = Recorder()
    yield listener
    listener.close()


def write_research(home: Path, **values: object) -> None:
    """``[research]`` in the home's settings.toml, from Python values (str, bool, int, float, list)."""
    lines = ["[research]"]
    for name, value in values.items():
        if isinstance(value, bool):
            lines.append(f"{name} = {'true' if value else 'false'}")
        elif isinstance(value, str):
            lines.append(f'{name} = "{value}"')
        elif isinstance(value, list):
            lines.append(f"{name} = [{', '.join(f'{chr(34)}{v}{chr(34)}' for v in value)}]")
        else:
            lines.append(f"{name} = {value}")
    (home / "settings.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def research(home: Path, site: Site) -> Callable[..., None]:
    """Writes ``[research]`` allowing the site's host:port only, short limits, plus any overrides."""

    def configure(**values: object) -> None:
        settings: dict[str, object] = {
            "allow_hosts": [f"127.0.0.1:{site.port}"],
            "fetch_timeout_s": 3.0,
            "fetch_max_bytes": 512 * 1024,
        }
        settings.update(values)
        write_research(home, **settings)

    configure()
    return configure


@pytest.fixture(scope="session")
def pdf_bytes() -> bytes:
    """A two-page PDF with Chinese and English text, rendered by WeasyPrint (real fonts, real PDF)."""
    import logging

    from weasyprint import HTML

    logging.getLogger("weasyprint").setLevel(logging.ERROR)
    logging.getLogger("fontTools").setLevel(logging.ERROR)
    document = (
        "<html><head><title>Quarterly research note</title>"
        "<style>body { font-family: 'Noto Sans CJK SC', sans-serif } "
        ".next { page-break-before: always }</style></head><body>"
        "<h1>Quarterly research note</h1><p>Executors are the trust boundary of the agent.</p>"
        "<p>研究报告：执行器是智能体的信任边界。</p>"
        "<p class='next'>Second page: workers run in their own processes.</p></body></html>"
    )
    pdf = HTML(string=document).write_pdf()
    assert pdf is not None
    return pdf
