"""Generated files on disk: serving one safely, deleting superseded and unfinished ones.

The record of a file (``store/artifacts.py``) is written with its job's end; this module owns what
happens to the file itself in ``<home>/artifacts``. A path on record is checked again before it is
served (``file_of``): it must be a regular file inside ``<home>/artifacts``, reached without a symbolic
link. ``sweep`` deletes superseded files and then their records (never inside a transaction that may
roll back), and, given the job store, the folders of executions that ended without completing; a
deleted thread takes its files with it (``forget_thread``). Each installation removes only files in
its own home. It sits above both the artifact record and the job store, which records artifacts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from tether.store.artifacts import ARTIFACTS_DIR, Artifact, ArtifactStore
from tether.store.jobs import JobStore


def file_of(home: Path, artifact: Artifact) -> Path | None:
    """The artifact's file, if it is still a regular file inside ``<home>/artifacts`` reached without a
    symbolic link; None otherwise (gone, replaced by a link, or a record that points elsewhere)."""
    parts = PurePosixPath(artifact.path).parts
    if len(parts) != 3 or parts[0] != ARTIFACTS_DIR or ".." in parts:
        return None
    path = home.joinpath(*parts)
    try:
        for step in (home / parts[0], home / parts[0] / parts[1], path):
            if stat.S_ISLNK(os.lstat(step).st_mode):
                return None
        return path if stat.S_ISREG(os.lstat(path).st_mode) else None
    except OSError:
        return None


def remove_files(home: Path, artifacts: Sequence[Artifact]) -> None:
    """Delete the files (and their execution folders once empty); a file already gone is fine."""
    for artifact in artifacts:
        path = file_of(home, artifact)
        if path is None:
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        with contextlib.suppress(OSError):  # not empty: another format of that execution is current
            path.parent.rmdir()


def sweep(home: Path, store: ArtifactStore, jobs: JobStore | None = None) -> int:
    """Delete superseded files, then their records; with ``jobs`` (the job store) also the folders of
    executions that ended without completing (a generate stopped or killed mid-write: none of its files
    is on record). Returns how many records went."""
    old = store.superseded()
    remove_files(home, old)
    if (
        jobs is not None
        and time.monotonic() - _FOLDERS_SWEPT.get(str(home), -FOLDER_SWEEP_S) >= FOLDER_SWEEP_S
    ):
        _FOLDERS_SWEPT[str(home)] = time.monotonic()
        _remove_unfinished_folders(home, store, jobs)
    return store.forget([a.artifact_id for a in old])


SWEEP_FOLDERS = 200  # folders looked at per sweep, the newest first (unfinished ones are recent)
FOLDER_SWEEP_S = 30.0  # a listing looks at folders at most this often (each is a store query or two)
_FOLDERS_SWEPT: dict[str, float] = {}


def _remove_unfinished_folders(home: Path, store: ArtifactStore, jobs: JobStore) -> None:
    try:
        names = [e.name for e in os.scandir(home / ARTIFACTS_DIR) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    ended = []
    for name in sorted(names, reverse=True)[:SWEEP_FOLDERS]:  # the newest first: unfinished ones are recent
        record = jobs.get(name)
        # Unknown, still running, or completed (its files are on record or were superseded): left alone.
        if record is not None and record.terminal and record.status.value != "completed":
            ended.append(name)
    remove_unfinished(home, store, ended)


def forget_thread(home: Path, store: ArtifactStore, thread_id: str) -> int:
    """Remove every file a thread generated in this home, and their records (the thread is being
    deleted); files another installation made for it are that one's to remove."""
    items = store.list(thread_id=thread_id, include_superseded=True, limit=1000)
    remove_files(home, items)
    return store.forget([a.artifact_id for a in items])


def remove_unfinished(home: Path, store: ArtifactStore, execution_ids: Sequence[str]) -> int:
    """Remove the artifact folders of executions that ended without completing (stopped mid-write):
    none of their files is on record. A folder with a file on record is left alone. How many went."""
    removed = 0
    root = home / ARTIFACTS_DIR
    for eid in execution_ids:
        if not eid or "/" in eid or "\\" in eid or eid in (".", ".."):
            continue
        folder = root / eid
        if store.list(execution_id=eid, include_superseded=True, limit=1):
            continue
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed
