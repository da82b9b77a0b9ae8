import subprocess
import sys

import tether


def test_all_is_sorted_and_every_name_resolves() -> None:
    assert tether.__all__ == sorted(tether.__all__)
    for name in tether.__all__:
        assert getattr(tether, name) is not None


def test_importing_tether_and_the_worker_stays_light() -> None:
    """The worker's start path must not pull in the CLI, psutil or anything heavy."""
    code = (
        "import sys, tether.execution.worker\n"
        "heavy = [m for m in ('typer', 'rich', 'psutil', 'sqlite3', 'openai', 'tether.execution.executor') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
