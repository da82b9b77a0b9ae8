"""Where a path really is: the syntax every path must pass, the workspace roots, what is protected
(the home, the folders above it and the roots, by device and inode), and the descriptor walk every file
operation opens through. ``paths`` says what is refused and why, and adds the operations to ``Roots``.

May import: ``tether.config``, ``tether.errors``; the standard library.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from tether.config import HOME_ENV, WorkspaceSettings, default_home, private_dir
from tether.errors import ConfigError, TaskFailed

MAX_PATH_CHARS = 4096
MAX_NAME_BYTES = 255
DEFAULT_ROOT = "workspace"  # <home>/workspace when no root is configured

_DEVICES = frozenset(
    {"con", "prn", "aux", "nul", "conin$", "conout$", "clock$"}
    | {f"{kind}{n}" for kind in ("com", "lpt") for n in (*"123456789", "¹", "²", "³")}
)
_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC


class PathRefused(TaskFailed):
    """A path outside the workspace roots, or one that cannot be used safely. ``data``: ``path`` (as
    given, shortened), ``roots`` (their names), ``reason`` (a short key)."""

    code = "path_refused"


def _shown(text: object) -> str:
    value = repr(text)
    return value if len(value) <= 120 else value[:117] + "..."


def check_path_text(text: object) -> str:
    """The syntax checks that need no file system (run at parameter validation too); ``PathRefused``."""

    def refuse(why: str, reason: str) -> PathRefused:
        return PathRefused(f"path {_shown(text)} refused: {why}", path=_shown(text), reason=reason)

    if not isinstance(text, str):
        raise refuse("a path must be text", "type")
    if len(text) > MAX_PATH_CHARS:
        raise refuse(f"longer than {MAX_PATH_CHARS} characters", "too_long")
    if "\x00" in text:
        raise refuse("it contains a NUL character", "nul")
    if _CONTROL.search(text):
        raise refuse("it contains a control character (newline, tab …)", "control")
    if text.startswith("//"):
        raise refuse("network (UNC) paths like //server/share are not accepted", "unc")
    if "\\" in text:
        raise refuse("use '/' between folders; '\\' is not accepted (nor \\\\server\\share)", "backslash")
    if _DRIVE.match(text):
        raise refuse("Windows drive paths (C:\\…, C:foo) are not accepted", "drive")
    if text == "~" or text.startswith("~/"):
        raise refuse("'~' is not expanded here: give a path inside the workspace", "tilde")
    for name in text.split("/"):
        if name in ("", ".", ".."):
            continue
        if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            raise refuse(f"the name {name[:40]!r}… is longer than {MAX_NAME_BYTES} bytes", "name_too_long")
        if name.split(".", 1)[0].rstrip(" ").casefold() in _DEVICES:
            raise refuse(f"{name!r} is a Windows device name", "device")
        if name.endswith((".", " ")):
            raise refuse(f"{name!r} ends in a dot or a space", "trailing")
        if sys.platform == "win32" and ":" in name:
            raise refuse(f"{name!r} contains ':' (an alternate data stream)", "stream")
    return text


_FileId = tuple[int, int]
_HOME = "home"
_ROOT = "root"


def _id(st: os.stat_result) -> _FileId:
    return (st.st_dev, st.st_ino)


def _home_spellings(home: Path) -> list[Path]:
    """The absolute, unresolved paths tether finds ``home`` by: ``$TETHER_HOME`` and the default home,
    where they lead to it. A link on such a path is as much the home as the folder it points to."""
    found: list[Path] = []
    candidates = [os.environ.get(HOME_ENV)]
    with contextlib.suppress(RuntimeError, KeyError, OSError):
        candidates.append(str(default_home()))
    for raw in candidates:
        if not raw or "\x00" in raw:
            continue
        spelled = Path(os.path.abspath(os.path.expanduser(raw)))
        with contextlib.suppress(OSError, ValueError):
            if Path(os.path.realpath(spelled)) == home:
                found.append(spelled)
    return found


def _protected(home: Path, roots: tuple[Root, ...]) -> dict[_FileId, str]:
    """What no task may move, delete or replace, by device and inode: the home, the folders above it
    and the links on the paths tether finds it by (losing any of them makes the next start create a
    fresh, empty home), and each root with the folders above it."""
    ids: dict[_FileId, str] = {}

    def add(path: Path, why: str, *, follow: bool) -> None:
        with contextlib.suppress(OSError, ValueError):
            ids.setdefault(_id(os.stat(path) if follow else os.lstat(path)), why)

    for folder in (home, *home.parents):
        add(folder, _HOME, follow=True)
    for spelled in _home_spellings(home):
        for prefix in (spelled, *spelled.parents):
            add(prefix, _HOME, follow=False)
    for root in roots:
        for folder in (root.path, *root.path.parents):
            add(folder, _ROOT, follow=True)
    return ids


@dataclass(frozen=True, slots=True)
class Root:
    name: str
    path: Path  # its real path


@dataclass(frozen=True, slots=True)
class Located:
    """A checked location: ``root`` and the components of the real path below it (no links, no ``..``)."""

    root: Root
    parts: tuple[str, ...]

    @property
    def path(self) -> Path:
        return self.root.path.joinpath(*self.parts)


class Confinement:
    """The workspace roots of one tether home and where a path is among them: checking, the guards of
    the home and the roots, and the descriptor walk. ``paths.Roots`` adds the operations."""

    def __init__(self, roots: tuple[Root, ...], *, home: Path) -> None:
        if not roots:
            raise ConfigError("[workspace] needs at least one root")
        self.roots = roots
        self.home = home
        self._home_id = _id(os.stat(home))
        self._protected = _protected(Path(os.path.realpath(home)), roots)

    @classmethod
    def load(cls, home: Path, settings: WorkspaceSettings | None = None) -> Self:
        """The roots from ``[workspace] roots`` (``~`` expanded), else ``<home>/workspace``, created."""
        settings = settings if settings is not None else WorkspaceSettings.load(home)
        home = Path(os.path.realpath(home))
        if not settings.roots:
            return cls(
                (Root(DEFAULT_ROOT, Path(os.path.realpath(private_dir(home / DEFAULT_ROOT)))),), home=home
            )
        roots: list[Root] = []
        home_id = _id(os.stat(home))
        for raw in settings.roots:
            configured = Path(os.path.expanduser(raw))
            where = f"[workspace] roots: {raw!r}"
            if "\x00" in raw or not configured.is_absolute():
                raise ConfigError(f"{where} must be an absolute folder path (or start with ~/)")
            if not configured.is_dir():
                raise ConfigError(f"{where} is not an existing folder")
            real = Path(os.path.realpath(configured))
            name = configured.name or real.name
            if _within(real, home_id) and not _same(real, home / DEFAULT_ROOT):
                raise ConfigError(
                    f"{where} is or lies inside the tether home: the home (settings, database, keys) is "
                    "tether's, never the workspace's; only <home>/workspace may be a root there"
                )
            for other in roots:
                if other.name == name:
                    raise ConfigError(
                        f"{where}: two roots are named {name!r}; roots need distinct folder names"
                    )
                if other.path in real.parents or real in other.path.parents or other.path == real:
                    raise ConfigError(f"{where} overlaps the root {other.name!r}")
            roots.append(Root(name, real))
        return cls(tuple(roots), home=home)

    @property
    def names(self) -> list[str]:
        return [root.name for root in self.roots]

    def describe(self) -> str:
        if len(self.roots) == 1:
            return f"paths are relative to the workspace folder {str(self.roots[0].path)!r}"
        listed = ", ".join(f"{root.name} ({root.path})" for root in self.roots)
        return f"paths start with a root name: {listed}"

    def display(self, located: Located) -> str:
        """How the person names ``located``: ``a/b.md``, or ``root/a/b.md`` with several roots."""
        parts = located.parts if len(self.roots) == 1 else (located.root.name, *located.parts)
        return "/".join(parts) or "."

    # -- checking -------------------------------------------------------------------------------

    def _refuse(self, text: object, why: str, reason: str) -> PathRefused:
        return PathRefused(
            f"path {_shown(text)} refused: {why}; {self.describe()}",
            path=_shown(text),
            roots=self.names,
            reason=reason,
        )

    def locate(self, user_path: str, *, must_exist: bool = False, for_write: bool = False) -> Located:
        """Check ``user_path`` and say where it really is. ``PathRefused`` with the roots named."""
        text = self._syntax(user_path)
        root, parts = self._split(text)
        depth = 0
        for part in parts:
            depth += -1 if part == ".." else 1
            if depth < 0:
                raise self._refuse(user_path, f"'..' leaves the root {root.name!r}", "dotdot")
        try:
            real = Path(os.path.realpath(root.path.joinpath(*parts)))
        except (OSError, ValueError) as exc:
            raise self._refuse(user_path, f"it cannot be resolved ({exc})", "unresolvable") from exc
        owner = next((r for r in self.roots if r.path == real or r.path in real.parents), None)
        if owner is None:
            raise self._refuse(
                user_path, "it leads outside the workspace (through a symbolic link)", "outside"
            )
        located = Located(owner, real.relative_to(owner.path).parts)
        self._guard_home(user_path, located)
        try:
            info = os.lstat(real)
        except FileNotFoundError:
            info = None
        except OSError as exc:
            raise self._refuse(
                user_path, f"it cannot be inspected ({exc.strerror or exc})", "unresolvable"
            ) from exc
        if must_exist and info is None:
            raise self._refuse(user_path, "no such file or folder", "missing")
        if for_write:
            if not located.parts:
                raise self._refuse(user_path, "a root folder itself cannot be written", "root")
            if info is not None and stat.S_ISDIR(info.st_mode):
                raise self._refuse(user_path, "it is a folder", "is_folder")
        return located

    def _syntax(self, user_path: object) -> str:
        try:
            return check_path_text(user_path)
        except PathRefused as exc:
            raise PathRefused(f"{exc.message}; {self.describe()}", **exc.data, roots=self.names) from exc

    def resolve(self, user_path: str, *, must_exist: bool = False, for_write: bool = False) -> Path:
        """The real path of ``user_path`` inside a root; ``PathRefused`` otherwise."""
        return self.locate(user_path, must_exist=must_exist, for_write=for_write).path

    def _split(self, text: str) -> tuple[Root, list[str]]:
        if text.startswith("/"):
            normal = Path(os.path.normpath(text))
            for root in self.roots:
                if normal == root.path or root.path in normal.parents:
                    return root, list(normal.relative_to(root.path).parts)
            raise self._refuse(text, "an absolute path outside the workspace roots", "outside")
        parts = [part for part in text.split("/") if part not in ("", ".")]
        if len(self.roots) == 1:
            return self.roots[0], parts
        if not parts:
            raise self._refuse(text, "name one of the roots", "no_root")
        for root in self.roots:
            if root.name == parts[0]:
                return root, parts[1:]
        close = [r.name for r in self.roots if r.name.casefold() == parts[0].casefold()]
        hint = f" (names are exact: {close[0]!r})" if close else ""
        raise self._refuse(text, f"{parts[0]!r} is not a root{hint}", "no_root")

    def _guard_home(self, user_path: str, located: Located) -> None:
        """Nothing inside the tether home is reachable, by any spelling: compared by device and inode."""
        if located.root.path == self.home or self.home in located.root.path.parents:
            return  # the default root lives inside the home; nothing below it is the home's state
        current = located.root.path
        for part in located.parts:
            current = current / part
            try:
                st = os.lstat(current)
            except OSError:
                return
            if _id(st) == self._home_id:
                raise self._inside_home(user_path)

    def _inside_home(self, user_path: str) -> PathRefused:
        return self._refuse(
            user_path,
            "it is inside the tether home (its settings, database and keys), which is tether's, not the "
            "workspace's",
            "home",
        )

    def _guard_protected(self, user_path: str, st: os.stat_result) -> None:
        """Refuse to move, delete or replace what ``st`` (an ``lstat``) names when it is the home, a
        folder above it, a link tether finds it through, a root or a folder above a root."""
        why = self._protected.get(_id(st))
        if why == _HOME:
            raise self._refuse(
                user_path,
                "it is or holds the tether home (its settings, database and keys): no task may move, "
                "delete or replace it, confirmed or not",
                "home",
            )
        if why == _ROOT:
            raise self._refuse(
                user_path,
                "it is or holds a workspace root, which no task may move, delete or replace",
                "root",
            )

    def touches_home(self, path: Path) -> str | None:
        """Why a program handed ``path`` could change the tether home — it is the home, lies inside it,
        or holds it (a folder above it, a link tether finds it through) — else None. For toolkits that
        pass paths on to programs (a command's argument resolved against its folder): links followed,
        and the name itself."""
        with contextlib.suppress(OSError, ValueError):
            if self._protected.get(_id(os.lstat(path))) == _HOME:
                return "it is or holds the tether home (its settings, database and keys)"
        with contextlib.suppress(OSError, ValueError):
            real = Path(os.path.realpath(path))
            if _within(real, self._home_id):
                return "it is inside the tether home (its settings, database and keys)"
            if self._protected.get(_id(os.stat(real))) == _HOME:
                return "it is or holds the tether home (its settings, database and keys)"
        return None

    def is_home(self, st: os.stat_result) -> bool:
        return (st.st_dev, st.st_ino) == self._home_id

    # -- descriptors ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def dir_fd(self, located: Located, *, parent: bool = False, create: bool = False) -> Iterator[int]:
        """A descriptor of ``located`` (or its parent) reached from the root with ``O_NOFOLLOW`` at
        every step; ``create`` makes missing folders on the way."""
        parts = located.parts[:-1] if parent else located.parts
        try:
            fd = os.open(located.root.path, os.O_RDONLY | _O_DIRECTORY | O_CLOEXEC)
        except OSError as exc:
            raise self._refuse(self.display(located), f"the root cannot be opened ({exc})", "root") from exc
        try:
            for name in parts:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o777, dir_fd=fd)
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise self._walk_error(located, name, exc, fd) from exc
                os.close(fd)
                fd = child
                if _id(os.fstat(fd)) == self._home_id:  # the home was moved here after the check
                    raise self._inside_home(self.display(located))
            yield fd
        finally:
            os.close(fd)

    def _walk_error(self, located: Located, name: str, exc: OSError, dfd: int) -> PathRefused:
        shown = self.display(located)
        import errno

        with contextlib.suppress(OSError):  # O_DIRECTORY on a link says ENOTDIR: tell the two apart
            if stat.S_ISLNK(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
                exc = OSError(errno.ELOOP, "a symbolic link")
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            return self._refuse(shown, f"{name!r} became a symbolic link after it was checked", "swapped")
        if exc.errno == errno.ENOTDIR:
            return self._refuse(shown, f"{name!r} is not a folder", "not_folder")
        if exc.errno == errno.ENOENT:
            return self._refuse(shown, f"the folder {name!r} does not exist", "missing")
        return self._refuse(shown, f"{name!r} cannot be opened ({exc.strerror or exc})", "os_error")

    def _open_file(self, located: Located, dfd: int, flags: int, mode: int = 0o666) -> int:
        try:
            return os.open(located.parts[-1], flags | O_NOFOLLOW | O_CLOEXEC, mode, dir_fd=dfd)
        except OSError as exc:
            raise self._walk_error(located, located.parts[-1], exc, dfd) from exc

    def locate_unfollowed(self, user_path: str) -> Located:
        """Like ``locate`` for the *name itself*: a final symbolic link is the thing meant (deleting a
        link deletes the link), while its folder must still resolve inside a root."""
        text = self._syntax(user_path)
        head, _, last = text.rstrip("/").rpartition("/")
        if last in ("", ".", ".."):
            raise self._refuse(user_path, "name a file or folder, not a root", "root")
        if text.startswith("/") and not head:
            raise self._refuse(user_path, "an absolute path outside the workspace roots", "outside")
        folder = self.locate(head or ".", must_exist=True)
        located = Located(folder.root, (*folder.parts, last))
        try:
            info = os.lstat(located.path)
        except OSError as exc:
            raise self._refuse(user_path, "no such file or folder", "missing") from exc
        self._guard_home(user_path, located)
        self._guard_protected(user_path, info)
        return located


def _within(path: Path, folder_id: _FileId) -> bool:
    """Whether ``path`` is the folder ``folder_id`` or lies below it, by device and inode (a path's
    spelling, its case on a case-insensitive file system or a bind mount cannot hide it)."""
    for current in (path, *path.parents):
        with contextlib.suppress(OSError):
            if _id(os.stat(current)) == folder_id:
                return True
    return False


def _same(path: Path, other: Path) -> bool:
    try:
        return os.path.samefile(path, other)
    except OSError:
        return False
