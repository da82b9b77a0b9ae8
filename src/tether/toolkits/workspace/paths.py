"""Confinement: every path a person or a model names is resolved inside the workspace roots, or refused.

This is a public, reusable API (the documents toolkit saves generated files through it)::

    roots = Roots.load(home)
    target = roots.resolve("reports/周报.md", for_write=True)   # a real path inside a root
    roots.write_bytes("reports/周报.md", data, overwrite=False)   # O_EXCL, walked with O_NOFOLLOW

How a path is written: relative to the first root (``notes/a.md``), or ``<root-name>/notes/a.md`` when
several roots are configured; an absolute path is accepted only when it lies inside a root. ``/`` is
the only separator.

What is refused, and why:
- ``..`` that climbs above its root, absolute paths outside the roots, and symbolic links anywhere in
  the chain whose target lies outside every root (the real path decides, ``os.path.realpath``).
- Windows drive (``C:\\``, ``C:foo``) and UNC (``\\\\server\\share``, ``//server/share``) forms, any
  ``\\``, NUL and other control characters, Windows device names (``CON``, ``nul.txt``, ``COM1`` …),
  names ending in a dot or space (Windows would silently strip them), names over 255 bytes, paths over
  4096 characters, a leading ``~`` (nothing is expanded here).
- The tether home (settings, database, keys, job records) when a root contains it: nothing inside it
  is read, listed, searched or written, and the home, every folder above it, every link tether finds it
  through (``$TETHER_HOME``, the default home) and every root and the folders above a root are never
  moved, deleted or replaced — confirmed or not. All compared by device and inode, so no spelling (case
  on a case-insensitive file system, Unicode forms, trailing ``/``, links, bind mounts) reaches them;
  checked when the path is resolved, again on every folder the descriptor walk opens, and again on the
  name itself just before an ``unlink``/``rename``, and a recursive delete first walks the whole folder
  (without following links) and refuses if anything protected is inside.
- Hard links: a regular file with more than one link is never *read* (its other name may be outside
  the roots). Writes never modify an existing file in place: an overwrite writes a new file and renames
  it over the name, so a hard-linked inode outside is left untouched; moving or deleting a link only
  changes the name inside the root. Both are therefore allowed.

Time of check to time of use: after the check, files are opened by walking the *real* path from the
root's directory descriptor one component at a time with ``O_NOFOLLOW`` (``os.open(..., dir_fd=...)``),
so a symbolic link swapped in after the check fails the open instead of redirecting it; new files are
created with ``O_EXCL``. Case tricks cannot help either: a path never leaves its root's descriptor
except through ``..`` or a symbolic link, and both are refused. (Windows has no ``dir_fd``: there the
descriptor walk is POSIX-only; on Windows these operations are not supported yet.)

May import: ``tether.config``, ``tether.errors``; the standard library. The checking lives in
``confine``; this module adds the operations and is what other toolkits import.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from dataclasses import dataclass

from tether.toolkits.workspace.confine import (
    DEFAULT_ROOT,
    MAX_NAME_BYTES,
    MAX_PATH_CHARS,
    O_CLOEXEC,
    O_NOFOLLOW,
    Confinement,
    Located,
    PathRefused,
    Root,
    check_path_text,
)

__all__ = [
    "DEFAULT_ROOT",
    "MAX_NAME_BYTES",
    "MAX_PATH_CHARS",
    "Located",
    "PathRefused",
    "Root",
    "Roots",
    "Tally",
    "check_path_text",
]

_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Tally:
    """What a delete or a move touches: ``files`` counts every entry that is not a folder (a link is
    one entry, never followed), ``folders`` includes the top one, ``bytes`` sums the regular files.
    ``complete`` is False when counting stopped at its limit (then these are lower bounds)."""

    kind: str  # file, link, folder, other
    files: int = 0
    folders: int = 0
    bytes: int = 0
    complete: bool = True


class Roots(Confinement):
    """The workspace roots of one tether home, and every operation confined to them."""

    def read_bytes(self, user_path: str, *, limit: int) -> tuple[Located, bytes, int]:
        """At most ``limit`` bytes of a regular file, and its full size. Folders, devices, pipes and
        hard-linked files are refused."""
        located = self.locate(user_path, must_exist=True)
        if not located.parts:
            raise self._refuse(user_path, "it is a folder: list it instead", "is_folder")
        with self.dir_fd(located, parent=True) as dfd:
            fd = self._open_file(located, dfd, os.O_RDONLY | _O_NONBLOCK)
        st = os.fstat(fd)
        problem = None
        if stat.S_ISDIR(st.st_mode):
            problem = ("it is a folder: list it instead", "is_folder")
        elif not stat.S_ISREG(st.st_mode):
            problem = ("not a regular file (a device, pipe or socket)", "special")
        elif st.st_nlink > 1:
            problem = ("it is hard-linked (another name for it may be outside the workspace)", "hardlink")
        if problem is not None:
            os.close(fd)
            raise self._refuse(user_path, *problem)
        with os.fdopen(fd, "rb") as handle:
            return located, handle.read(limit), st.st_size

    def write_bytes(self, user_path: str, data: bytes, *, overwrite: bool = False) -> Located:
        """Create ``user_path`` (and missing folders) holding ``data``. Without ``overwrite`` an existing
        name is never clobbered (``O_EXCL``); with it, the new content is renamed over the old name."""
        located = self.locate(user_path, for_write=True)
        name = located.parts[-1]
        with self.dir_fd(located, parent=True, create=True) as dfd:
            if not overwrite:
                try:
                    fd = self._open_file(located, dfd, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
                except PathRefused as exc:
                    if _exists(name, dfd):
                        raise self._exists(user_path) from exc
                    raise
                _write_all(fd, data, cleanup=lambda: os.unlink(name, dir_fd=dfd))
                return located
            temp = f".{name[:100]}.{secrets.token_hex(4)}.tether-tmp"
            fd = os.open(
                temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o666, dir_fd=dfd
            )
            try:
                with contextlib.suppress(FileNotFoundError):
                    old = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                    self._guard_protected(user_path, old)
                    if stat.S_ISDIR(old.st_mode):
                        raise self._refuse(user_path, "it is a folder", "is_folder")
                    if stat.S_ISREG(old.st_mode):
                        os.fchmod(fd, stat.S_IMODE(old.st_mode))
                _write_all(fd, data, cleanup=None)
                os.replace(temp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=dfd)
                raise
        return located

    def _exists(self, user_path: str) -> PathRefused:
        return self._refuse(
            user_path,
            "it already exists; pass overwrite=true to replace it (the person confirms that)",
            "exists",
        )

    def move(self, src: str, dst: str, *, overwrite: bool = False) -> tuple[Located, Located]:
        """Rename ``src`` to ``dst`` (into ``dst`` when that is a folder). Without ``overwrite`` an
        existing file is never replaced: files move by link-then-unlink, which fails if the name exists."""
        source = self.locate_unfollowed(src)  # a link moves as a link
        target = self.locate(dst)
        if os.path.isdir(target.path) and not os.path.islink(target.path):
            target = Located(target.root, (*target.parts, source.parts[-1]))
            self._guard_home(dst, target)
        if not target.parts:
            raise self._refuse(dst, "a root folder cannot be replaced", "root")
        if target.path == source.path or source.path in target.path.parents:
            raise self._refuse(dst, "a file or folder cannot be moved onto or into itself", "into_itself")
        with contextlib.suppress(OSError):
            self._guard_protected(dst, os.lstat(target.path))
        with self.dir_fd(source, parent=True) as sfd, self.dir_fd(target, parent=True, create=True) as tfd:
            old, new = source.parts[-1], target.parts[-1]
            try:
                kind = os.stat(old, dir_fd=sfd, follow_symlinks=False)
                # Checked again on the names themselves, just before the rename: a swap since the
                # check above cannot bring the home (or a root) under either name.
                self._guard_protected(src, kind)
                with contextlib.suppress(FileNotFoundError):
                    self._guard_protected(dst, os.stat(new, dir_fd=tfd, follow_symlinks=False))
                if overwrite:
                    os.replace(old, new, src_dir_fd=sfd, dst_dir_fd=tfd)
                elif stat.S_ISDIR(kind.st_mode):
                    # No portable no-replace rename for folders: a folder rename can only replace an
                    # *empty* folder, so the window below can at worst swallow an empty folder.
                    if _exists(new, tfd):
                        raise self._exists(dst)
                    os.rename(old, new, src_dir_fd=sfd, dst_dir_fd=tfd)
                else:
                    os.link(old, new, src_dir_fd=sfd, dst_dir_fd=tfd, follow_symlinks=False)
                    os.unlink(old, dir_fd=sfd)
            except FileExistsError as exc:
                raise self._exists(dst) from exc
            except OSError as exc:
                import errno

                if exc.errno == errno.EXDEV:
                    raise self._refuse(
                        dst, "it is on another file system: write a copy, then delete", "xdev"
                    ) from exc
                why = exc.strerror or str(exc)
                raise self._refuse(dst, f"the move failed ({why})", "os_error") from exc
        return source, target

    def delete(self, user_path: str, *, recursive: bool = False) -> tuple[Located, Tally]:
        """Remove a file, a link (never its target) or a folder (non-empty only with ``recursive``);
        says what went. A folder holding the home or a root is refused before anything is removed."""
        located = self.locate_unfollowed(user_path)
        with self.dir_fd(located, parent=True) as dfd:
            name = located.parts[-1]
            try:
                info = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                self._guard_protected(user_path, info)
                if not stat.S_ISDIR(info.st_mode):
                    os.unlink(name, dir_fd=dfd)
                    return located, _single(info)
                if not recursive:
                    os.rmdir(name, dir_fd=dfd)
                    return located, Tally(kind="folder", folders=1)
                gone = self._tally(user_path, name, dfd, limit=None)  # refuses what holds the home
                shutil.rmtree(name, dir_fd=dfd)  # the fd-based walk: links inside are not followed
                return located, gone
            except FileNotFoundError as exc:
                raise self._refuse(user_path, "no such file or folder", "missing") from exc
            except OSError as exc:
                import errno

                if exc.errno == errno.ENOTEMPTY:
                    raise self._refuse(
                        user_path,
                        "the folder is not empty; pass recursive=true to delete it all",
                        "not_empty",
                    ) from exc
                raise self._refuse(
                    user_path, f"it cannot be deleted ({exc.strerror or exc})", "os_error"
                ) from exc

    def tally(self, user_path: str, *, limit: int | None = None) -> tuple[Located, Tally]:
        """What deleting or moving ``user_path`` (the name itself: a link is not followed) touches,
        counting at most ``limit`` entries. Refused like a delete when it is or holds the home."""
        located = self.locate_unfollowed(user_path)
        with self.dir_fd(located, parent=True) as dfd:
            return located, self._tally(user_path, located.parts[-1], dfd, limit=limit)

    def _tally(self, user_path: str, name: str, dfd: int, *, limit: int | None) -> Tally:
        try:
            info = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError as exc:
            raise self._refuse(user_path, "no such file or folder", "missing") from exc
        self._guard_protected(user_path, info)
        if not stat.S_ISDIR(info.st_mode):
            return _single(info)
        files = folders = size = 0
        # fwalk opens every folder relative to its parent's descriptor and never follows a link.
        for _path, dirs, names, fd in os.fwalk(name, dir_fd=dfd):
            folders += 1
            self._guard_protected(user_path, os.fstat(fd))  # a bind mount of the home, say
            for entry in (*dirs, *names):
                if limit is not None and files + folders >= limit:
                    return Tally(kind="folder", files=files, folders=folders, bytes=size, complete=False)
                try:
                    st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    continue  # counted when it is walked
                files += 1
                if stat.S_ISREG(st.st_mode):
                    size += st.st_size
        return Tally(kind="folder", files=files, folders=folders, bytes=size)


def _single(info: os.stat_result) -> Tally:
    mode = info.st_mode
    kind = "link" if stat.S_ISLNK(mode) else "file" if stat.S_ISREG(mode) else "other"
    return Tally(kind=kind, files=1, bytes=info.st_size if stat.S_ISREG(mode) else 0)


def _exists(name: str, dfd: int) -> bool:
    try:
        os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _write_all(fd: int, data: bytes, *, cleanup: object) -> None:
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        if callable(cleanup):
            with contextlib.suppress(OSError):
                cleanup()
        raise
