"""``tether artifacts``: the files the agent generated (md, html, pptx, pdf), listed and copied out —
what the page's file list and download links do. Registered on the main app by ``cli.py``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from tether.interfaces.base import JsonFlag, guarded, state
from tether.interfaces.render import err, human_size, out

artifacts_app = typer.Typer(help="Files the agent generated: list them, copy one out.", no_args_is_help=False)


def _copy(source: Path, target: Path, *, replace: bool) -> None:
    """Copy without following a link at ``target``: created exclusively, or (``replace``) renamed over it."""
    data = source.read_bytes()
    if not replace:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as out_file:
            out_file.write(data)
        return
    temp = target.with_name(f".{target.name}.tether-{os.getpid()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as out_file:
        out_file.write(data)
    os.replace(temp, target)


@artifacts_app.callback(invoke_without_command=True)
def list_artifacts(
    ctx: typer.Context,
    thread: Annotated[str | None, typer.Option("--thread", "-t", help="Only this thread's files")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 50,
    as_json: JsonFlag = False,
) -> None:
    """The generated files, newest first (a thread keeps its newest per format)."""
    if ctx.invoked_subcommand is not None:
        return

    def body() -> int:
        from tether.runtime import Runtime
        from tether.store.artifact_files import sweep

        with Runtime.open(state.home) as runtime:
            sweep(runtime.home, runtime.artifacts, runtime.jobs)
            items = runtime.artifacts.list(thread_id=thread, limit=limit)
            home = runtime.home
        if as_json:
            rows = [{**a.to_dict(), "file": str(home / a.path)} for a in items]
            print(json.dumps({"items": rows}, ensure_ascii=False))
            return 0
        if not items:
            out.print('no files yet: ask for one, e.g. tether run --format pdf "…"', markup=False)
        for a in items:
            where = f"thread {a.thread_id}" if a.thread_id else (a.origin or f"job {a.execution_id}")
            head = f"{a.artifact_id:>5}  {a.format:<4}  {human_size(a.size):>10}"
            out.print(f"{head}  {a.name}  ({where}, {a.created_at[:19]})", markup=False)
        if items:
            err.print("copy one out: tether artifacts get ID [--out PATH]")
        return 0

    guarded(as_json, body)


@artifacts_app.command("get")
def get_artifact(
    artifact_id: Annotated[int, typer.Argument(min=1, help="The file's id (from `tether artifacts`)")],
    out_path: Annotated[
        Path | None, typer.Option("--out", "-o", help="Where to write it; a folder keeps its name")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing file at --out")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Copy a generated file out (into the current folder by default)."""

    def body() -> int:
        from tether.errors import ConfigError
        from tether.runtime import Runtime
        from tether.store.artifact_files import file_of

        with Runtime.open(state.home) as runtime:
            artifact = runtime.artifacts.get(artifact_id)
            source = None if artifact is None or artifact.superseded_at else file_of(runtime.home, artifact)
        if artifact is None or source is None:
            raise ConfigError(
                f"no file {artifact_id} (it may have been replaced by a newer one): see tether artifacts"
            )
        target = out_path or Path.cwd()
        if target.is_dir():
            target = target / Path(artifact.name).name  # a plain name, whatever the record says
        if os.path.lexists(target) and not force:
            raise ConfigError(f"{target} exists: give another --out, or --force to replace it")
        _copy(source, target, replace=force)
        if as_json:
            print(json.dumps({"artifact_id": artifact_id, "file": str(target)}, ensure_ascii=False))
        else:
            out.print(f"wrote {target} ({human_size(artifact.size)})", markup=False)
        return 0

    guarded(as_json, body)
