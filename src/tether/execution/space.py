"""What removing an execution's folders gives back to the disk."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def blocks_freed(folders: list[Path]) -> int:
    """The disk space removing ``folders`` gives back: allocated blocks (``st_blocks`` * 512), not file
    sizes (a 200-byte log still takes a 4 KiB block, and every folder takes one), each inode counted
    once (a claim is hard-linked into place), and a file only when all its links are among the removed
    (a name elsewhere keeps its blocks). Symbolic links are not followed."""
    inodes: dict[tuple[int, int], list[int]] = {}  # (device, inode) -> [bytes, names seen, links]
    for folder in folders:
        names = [str(folder)]
        for parent, dirs, files in os.walk(folder):
            names += [os.path.join(parent, entry) for entry in (*dirs, *files)]
        for name in names:
            try:
                info = os.lstat(name)
            except OSError:  # gone meanwhile: it frees nothing more
                continue
            # A folder's link count includes its subfolders' "..": a folder goes with its tree.
            links = 1 if stat.S_ISDIR(info.st_mode) else info.st_nlink
            entry = inodes.setdefault((info.st_dev, info.st_ino), [info.st_blocks * 512, 0, links])
            entry[1] += 1
    return sum(size for size, seen, links in inodes.values() if seen >= links)
