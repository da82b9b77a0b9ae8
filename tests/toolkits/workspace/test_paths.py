"""Confinement: no path, however written, reads or writes outside the workspace roots."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.config import WorkspaceSettings
from tether.errors import ConfigError
from tether.toolkits.workspace.paths import PathRefused, Root, Roots, Tally, check_path_text

SECRET = b"TOP-SECRET-OUTSIDE"


def build_tree(base: Path) -> tuple[Roots, Path, Path]:
    """A workspace full of traps: links and hard links that lead out, loops, a dangling link."""
    ws, outside, home = base / "ws", base / "outside", base / "home"
    for folder in (ws / "sub" / "deep", outside / "dir", home):
        folder.mkdir(parents=True)
    (outside / "secret.txt").write_bytes(SECRET)
    (outside / "dir" / "other.txt").write_bytes(SECRET + b"2")
    (ws / "a.txt").write_text("inside a")
    (ws / "sub" / "b.txt").write_text("inside b")
    (ws / "sub" / "deep" / "c.txt").write_text("inside c")
    os.symlink("../outside", ws / "link_out")
    os.symlink(str(outside / "secret.txt"), ws / "link_secret")
    os.symlink("/etc", ws / "link_abs")
    os.symlink("sub", ws / "link_in")
    os.symlink("loop", ws / "loop")
    os.symlink("../outside/nothing-yet", ws / "dangling_out")
    os.symlink("../../outside", ws / "sub" / "up_out")
    os.link(outside / "secret.txt", ws / "hard")
    return Roots((Root("ws", Path(os.path.realpath(ws))),), home=home), ws, outside


def snapshot(folder: Path) -> dict[str, str]:
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            found[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[str(path.relative_to(folder))] = "link" if path.is_symlink() else "dir"
    return found


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Roots, Path, Path]]:
    yield build_tree(tmp_path_factory.mktemp("confine"))


@pytest.fixture
def fresh(tmp_path: Path) -> tuple[Roots, Path, Path]:
    return build_tree(tmp_path)


def inside(path: Path, root: Path) -> bool:
    real = Path(os.path.realpath(path))
    return real == root or root in real.parents


SEGMENTS = [
    *("a.txt", "sub", "deep", "c.txt", "b.txt", "new.txt", "新文件.md", "secret.txt", "dir", "other.txt"),
    *("link_out", "link_secret", "link_abs", "link_in", "loop", "dangling_out", "up_out", "hard"),
    *("..", ".", "", "etc", "passwd", "CON", "nul.txt", "x\\y", "C:", "~", "a\x00b", "name.", "UP_OUT"),
]
segment = st.one_of(st.sampled_from(SEGMENTS), st.text(max_size=12))


@st.composite
def user_paths(draw: st.DrawFn, ws: str, outside: str) -> str:
    parts = draw(st.lists(segment, max_size=6))
    prefix = draw(st.sampled_from(["", "", "/", ws + "/", outside + "/", "//server/", "C:\\", "./", "../"]))
    return prefix + "/".join(parts)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_path_resolves_outside_the_roots(tree: tuple[Roots, Path, Path], data: st.DataObject) -> None:
    roots, ws, outside = tree
    text = data.draw(user_paths(str(ws), str(outside)))
    for flags in ({}, {"must_exist": True}, {"for_write": True}):
        try:
            resolved = roots.resolve(text, **flags)
        except PathRefused as exc:
            assert exc.message.startswith("path ")
            assert "ws" in exc.message  # the refusal names where paths may go
            continue
        assert inside(resolved, roots.roots[0].path), (text, resolved)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_read_returns_a_file_outside(tree: tuple[Roots, Path, Path], data: st.DataObject) -> None:
    roots, ws, outside = tree
    text = data.draw(user_paths(str(ws), str(outside)))
    try:
        _, content, _ = roots.read_bytes(text, limit=1024)
    except PathRefused:
        return
    assert SECRET not in content, text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_writes_moves_and_deletes_never_land_outside(
    tree: tuple[Roots, Path, Path], data: st.DataObject
) -> None:
    roots, ws, outside = tree
    before = snapshot(outside)
    first = data.draw(user_paths(str(ws), str(outside)))
    second = data.draw(user_paths(str(ws), str(outside)))
    overwrite = data.draw(st.booleans())
    operation = data.draw(st.sampled_from(["write", "move", "delete"]))
    try:
        if operation == "write":
            located = roots.write_bytes(first, b"written by the fuzzer", overwrite=overwrite)
            assert inside(located.path, roots.roots[0].path)
        elif operation == "move":
            roots.move(first, second, overwrite=overwrite)
        else:
            roots.delete(first, recursive=overwrite)
    except PathRefused:
        pass
    assert snapshot(outside) == before, (operation, first, second)
    # Keep the traps for the next example: a move or delete may have taken one away.
    for name, target in (("link_out", "../outside"), ("hard", None)):
        if not os.path.lexists(ws / name):
            if target is None:
                os.link(outside / "secret.txt", ws / name)
            else:
                os.symlink(target, ws / name)


def test_refusals_name_the_problem_and_the_roots(fresh: tuple[Roots, Path, Path]) -> None:
    roots, _ws, _outside = fresh
    cases = {
        "../x": "'..' leaves the root",
        "sub/../../x": "'..' leaves the root",
        "/etc/passwd": "absolute path outside",
        "link_out/secret.txt": "leads outside",
        "link_secret": "leads outside",
        "link_abs/passwd": "leads outside",
        "sub/up_out/dir": "leads outside",
        "dangling_out": "leads outside",
        "C:\\Windows": "'\\' is not accepted",
        "C:foo": "Windows drive",
        "//server/share/x": "UNC",
        "\\\\server\\share": "'\\' is not accepted",
        "a\x00b": "NUL",
        "a\nb": "control character",
        "CON": "device name",
        "sub/com1.txt": "device name",
        "name.": "ends in a dot",
        "x" * 256: "longer than 255 bytes",
        "~/notes": "'~' is not expanded",
    }
    for text, expected in cases.items():
        with pytest.raises(PathRefused) as caught:
            roots.resolve(text)
        assert expected in caught.value.message, (text, caught.value.message)
        assert caught.value.data["roots"] == ["ws"]


def test_links_inside_the_workspace_are_followed(fresh: tuple[Roots, Path, Path]) -> None:
    roots, ws, _ = fresh
    assert roots.resolve("link_in/b.txt") == Path(os.path.realpath(ws / "sub" / "b.txt"))
    assert roots.resolve(str(ws / "sub" / "b.txt")) == Path(os.path.realpath(ws / "sub" / "b.txt"))
    assert roots.resolve(".") == roots.roots[0].path


def test_hard_linked_files_are_never_read(fresh: tuple[Roots, Path, Path]) -> None:
    roots, _, outside = fresh
    with pytest.raises(PathRefused, match="hard-linked"):
        roots.read_bytes("hard", limit=100)
    # An overwrite replaces the name; the inode outside keeps its content.
    roots.write_bytes("hard", b"new", overwrite=True)
    assert (outside / "secret.txt").read_bytes() == SECRET


def test_a_folder_swapped_for_a_link_after_the_check_cannot_redirect_a_write(
    fresh: tuple[Roots, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    roots, ws, outside = fresh
    checked = roots.locate("sub/deep/new.txt", for_write=True)
    # The race: between the check and the open, the folder becomes a link to the outside.
    (ws / "sub" / "deep" / "c.txt").unlink()
    (ws / "sub" / "deep").rmdir()
    os.symlink(str(outside / "dir"), ws / "sub" / "deep")
    monkeypatch.setattr(roots, "locate", lambda *args, **kwargs: checked)
    with pytest.raises(PathRefused, match="became a symbolic link"):
        roots.write_bytes("sub/deep/new.txt", b"redirected?")
    assert not (outside / "dir" / "new.txt").exists()


def test_a_file_name_swapped_for_a_link_is_never_followed(
    fresh: tuple[Roots, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    roots, ws, outside = fresh
    checked = roots.locate("sub/target.txt", for_write=True)
    os.symlink(str(outside / "planted.txt"), ws / "sub" / "target.txt")
    monkeypatch.setattr(roots, "locate", lambda *args, **kwargs: checked)
    with pytest.raises(PathRefused, match="already exists"):
        roots.write_bytes("sub/target.txt", b"through the link?")
    assert not (outside / "planted.txt").exists()
    roots.write_bytes("sub/target.txt", b"replaces the link", overwrite=True)
    assert not (outside / "planted.txt").exists()
    assert not os.path.islink(ws / "sub" / "target.txt")


def test_write_never_clobbers_without_overwrite(fresh: tuple[Roots, Path, Path]) -> None:
    roots, ws, _ = fresh
    with pytest.raises(PathRefused, match="already exists; pass overwrite=true"):
        roots.write_bytes("a.txt", b"clobbered")
    assert (ws / "a.txt").read_text() == "inside a"
    roots.write_bytes("a.txt", b"replaced", overwrite=True)
    assert (ws / "a.txt").read_bytes() == b"replaced"


def test_move_refuses_an_existing_target_and_moves_links_as_links(fresh: tuple[Roots, Path, Path]) -> None:
    roots, ws, outside = fresh
    with pytest.raises(PathRefused, match="already exists"):
        roots.move("a.txt", "sub/b.txt")
    roots.move("link_out", "moved_link")  # the link itself, never the folder it points to
    assert os.path.islink(ws / "moved_link") and (outside / "secret.txt").exists()
    roots.move("a.txt", "sub")  # into a folder
    assert (ws / "sub" / "a.txt").read_text() == "inside a"
    roots.move("sub/a.txt", "sub/b.txt", overwrite=True)
    assert (ws / "sub" / "b.txt").read_text() == "inside a"
    with pytest.raises(PathRefused, match="into itself"):
        roots.move("sub", "sub/deep")


def test_delete_removes_links_not_their_targets(fresh: tuple[Roots, Path, Path]) -> None:
    roots, ws, outside = fresh
    roots.delete("link_out")
    roots.delete("link_secret")
    assert (outside / "secret.txt").read_bytes() == SECRET
    with pytest.raises(PathRefused, match="not empty; pass recursive=true"):
        roots.delete("sub")
    os.symlink("../outside", ws / "sub" / "deep" / "escape")
    roots.delete("sub", recursive=True)
    assert not (ws / "sub").exists() and (outside / "dir" / "other.txt").exists()
    with pytest.raises(PathRefused, match="not a root"):
        roots.delete(".")


def test_the_tether_home_inside_a_root_is_unreachable(tmp_path: Path) -> None:
    user = tmp_path / "user"
    home = user / ".tether"
    home.mkdir(parents=True)
    (home / "settings.toml").write_text("")
    os.symlink(".tether", user / "alias")
    roots = Roots((Root("user", user),), home=home)
    for text in (".tether/settings.toml", "alias/settings.toml", ".tether"):
        with pytest.raises(PathRefused, match="tether home"):
            roots.resolve(text)
    with pytest.raises(PathRefused, match="tether home"):
        roots.write_bytes(".tether/settings.toml", b"[shell]", overwrite=True)


def test_several_roots_are_named(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "code").mkdir()
    home = tmp_path / "home"
    home.mkdir()
    roots = Roots.load(home, WorkspaceSettings(roots=(str(tmp_path / "docs"), str(tmp_path / "code"))))
    assert roots.resolve("docs/a.md") == tmp_path / "docs" / "a.md"
    with pytest.raises(PathRefused, match=r"'a\.md' is not a root"):
        roots.resolve("a.md")
    with pytest.raises(PathRefused, match="names are exact: 'docs'"):
        roots.resolve("DOCS/a.md")


def test_default_root_is_created_private(tmp_path: Path) -> None:
    roots = Roots.load(tmp_path)
    assert roots.roots[0].path == tmp_path.resolve() / "workspace"
    assert (roots.roots[0].path.stat().st_mode & 0o777) == 0o700


def test_bad_roots_in_settings_are_config_errors(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b" / "a").mkdir(parents=True)
    home = tmp_path / "home"
    (home / "executions").mkdir(parents=True)
    for roots, expected in (
        (("relative/dir",), "absolute"),
        ((str(tmp_path / "missing"),), "not an existing folder"),
        ((str(tmp_path / "a"), str(tmp_path / "b" / "a")), "named 'a'"),
        ((str(tmp_path / "b"), str(tmp_path / "b" / "a")), "overlaps"),
        ((str(home / "executions"),), "inside the tether home"),
    ):
        with pytest.raises(ConfigError, match=expected):
            Roots.load(home, WorkspaceSettings(roots=roots))


@given(st.text(max_size=300))
def test_path_syntax_check_never_raises_anything_but_a_refusal(text: str) -> None:
    try:
        assert check_path_text(text) == text
    except PathRefused as exc:
        assert exc.message.startswith("path ")


def test_roots_come_from_settings_toml_with_tilde_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    (tmp_path / "user" / "文档").mkdir(parents=True)
    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.toml").write_text(
        '[workspace]\nroots = ["~/文档"]\nmax_results = 5\n', encoding="utf-8"
    )
    roots = Roots.load(home)
    assert roots.names == ["文档"] and roots.resolve("a.md") == tmp_path / "user" / "文档" / "a.md"
    (home / "settings.toml").write_text("[workspace]\nroots = [1]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"roots\.0"):
        Roots.load(home)


def home_below_a_root(base: Path) -> tuple[Roots, Path, Path]:
    """``<user>/.config/tether`` with the root ``<user>``: the layout of ``~/.config/tether`` and ``~``."""
    user = base / "user"
    home = user / ".config" / "tether"
    (home / "keys").mkdir(parents=True)
    (home / "settings.toml").write_text("[workspace]\n")
    (home / "keys" / "k").write_bytes(b"KEY")
    (user / "proj" / "deep").mkdir(parents=True)
    (user / "proj" / "a.txt").write_text("a")
    return Roots((Root("user", Path(os.path.realpath(user))),), home=home), user, home


def test_the_home_its_folders_above_and_the_root_are_never_moved_or_deleted(tmp_path: Path) -> None:
    roots, user, home = home_below_a_root(tmp_path)
    for text in (
        ".config",
        ".config/",
        "./.config",
        str(user / ".config"),
        ".config/tether",
        ".config/tether/",
    ):
        with pytest.raises(PathRefused, match="tether home"):
            roots.delete(text, recursive=True)
        with pytest.raises(PathRefused, match="tether home"):
            roots.move(text, "elsewhere")
        with pytest.raises(PathRefused, match="tether home"):
            roots.tally(text)
    for text in (".", "/", str(user), str(user) + "/"):
        with pytest.raises(PathRefused):
            roots.delete(text, recursive=True)
    roots.write_bytes("x.txt", b"x")
    with pytest.raises(PathRefused, match="tether home"):
        roots.move("x.txt", ".config/tether/settings.toml", overwrite=True)
    with pytest.raises(PathRefused, match="tether home"):
        roots.write_bytes(".config/tether/keys/k", b"", overwrite=True)
    assert (home / "settings.toml").read_text() == "[workspace]\n"
    assert (home / "keys" / "k").read_bytes() == b"KEY"


def test_a_home_moved_under_a_checked_path_is_still_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    roots, user, home = home_below_a_root(tmp_path)
    checked = roots.locate("proj/deep/new.txt", for_write=True)
    # The race: after the check, the home takes the place of a folder on the checked path.
    (user / "proj" / "deep").rmdir()
    os.rename(home, user / "proj" / "deep")
    monkeypatch.setattr(roots, "locate", lambda *args, **kwargs: checked)
    with pytest.raises(PathRefused, match="tether home"):
        roots.write_bytes("proj/deep/new.txt", b"into the home?")
    assert not (user / "proj" / "deep" / "new.txt").exists()
    # A delete of the folder that now holds it walks the folder first and removes nothing.
    monkeypatch.undo()
    with pytest.raises(PathRefused, match="tether home"):
        roots.delete("proj", recursive=True)
    assert (user / "proj" / "deep" / "keys" / "k").read_bytes() == b"KEY"
    assert (user / "proj" / "a.txt").exists()


def test_a_tally_counts_without_following_links_and_stops_at_its_limit(tmp_path: Path) -> None:
    roots, user, _home = home_below_a_root(tmp_path)
    (user / "proj" / "deep" / "b.bin").write_bytes(b"0" * 2048)
    os.symlink("/etc", user / "proj" / "etc-link")
    _, tally = roots.tally("proj")
    assert tally == Tally(kind="folder", files=3, folders=2, bytes=2049)
    _, partial = roots.tally("proj", limit=2)
    assert not partial.complete and partial.files + partial.folders <= 2
    _, link = roots.tally("proj/etc-link")
    assert (link.kind, link.files, link.bytes) == ("link", 1, 0)


def test_a_root_inside_the_home_is_refused_by_identity(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "keys").mkdir(parents=True)
    os.symlink(home, tmp_path / "alias")
    for root in (home, home / "keys", tmp_path / "alias", tmp_path / "alias" / "keys", str(home) + "/"):
        with pytest.raises(ConfigError, match="inside the tether home"):
            Roots.load(home, WorkspaceSettings(roots=(str(root),)))
    (home / "workspace").mkdir()
    default = Roots.load(home, WorkspaceSettings(roots=(str(home / "workspace"),)))
    assert default.roots[0].path == Path(os.path.realpath(home / "workspace"))


def test_touches_home_tells_a_path_a_program_could_change_the_home_through(tmp_path: Path) -> None:
    roots, user, home = home_below_a_root(tmp_path)
    os.symlink(".config/tether/keys", user / "keys-alias")
    for path in (home, home / "keys" / "k", home / "new", user / ".config", user, user / "keys-alias"):
        assert roots.touches_home(path), path
    for path in (user / "proj", user / "proj" / "a.txt", user / "missing", tmp_path / "elsewhere"):
        assert roots.touches_home(path) is None, path
