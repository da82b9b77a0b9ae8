"""The house holds its shape: no import cycle anywhere in src/ (imports inside functions count: a lazy
import is still a dependency), no module over 600 lines and no function over 80 (a long table of specs
is split into groups, as the toolkits' are). The layers themselves are pinned in test_public_api.py.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
MODULE_LINES = 600
FUNCTION_LINES = 80


def modules(root: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imported(node: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """Every name ``node`` imports, absolute (``from a import b``: ``a`` and ``a.b``, b maybe a module)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            base = package[: len(package) - (node.level - 1)]
            source = ".".join([*base, *([node.module] if node.module else [])])
        else:
            source = node.module or ""
        yield source
        yield from (f"{source}.{alias.name}" for alias in node.names)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module → the modules of ``root`` it imports, wherever the import statement stands."""
    known = modules(root)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            for target in _imported(node, name, path.name == "__init__.py"):
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    graph[name].add(target)  # a module's own package is not a cycle it makes
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_import_cycle_anywhere_lazy_imports_included() -> None:
    found = cycles(import_graph(SRC))
    assert found == [], "import cycles (untie each by moving the shared piece down):\n" + "\n".join(
        " <-> ".join(group) for group in found
    )


def test_the_cycle_check_sees_a_lazy_import_and_a_relative_one(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def later():\n    from . import c\n")
    (package / "c.py").write_text("def later():\n    import pkg.a\n")
    (package / "d.py").write_text("import pkg.a\n")  # depends on the cycle, is not in it
    assert cycles(import_graph(tmp_path)) == [["pkg.a", "pkg.b", "pkg.c"]]
    (package / "c.py").write_text("")
    assert cycles(import_graph(tmp_path)) == []


def _long_functions(path: Path, module: str) -> Iterator[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))

    def visit(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}.{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    yield name, (child.end_lineno or child.lineno) - first + 1
                yield from visit(child, name)

    yield from visit(tree, module)


def test_no_function_past_its_limit() -> None:
    too_long = []
    for module, path in modules(SRC).items():
        for name, lines in _long_functions(path, module):
            if lines > FUNCTION_LINES:
                too_long.append(f"{name}: {lines} lines (limit {FUNCTION_LINES})")
    assert too_long == [], "split along their steps:\n" + "\n".join(sorted(too_long))


def test_no_module_past_its_limit() -> None:
    big = {
        module: len(path.read_text(encoding="utf-8").splitlines()) for module, path in modules(SRC).items()
    }
    over = sorted(f"{module}: {lines} lines" for module, lines in big.items() if lines > MODULE_LINES)
    assert over == [], f"modules over {MODULE_LINES} lines (split along their seams):\n" + "\n".join(over)
