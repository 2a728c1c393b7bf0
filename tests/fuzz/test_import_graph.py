"""The harness's import graph has no cycle: read statically (`ast`) from every module of `fuzz` and `model`,
counting the imports made inside functions as well (a deferred import is still a dependency), and those of a
package's `__init__` when a module below it is imported."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("fuzz", "model")


def modules(package: str, root: Path = ROOT) -> dict[str, Path]:
    """Every module of `package` (a folder of `root`) by dotted name (a package by its own name, for its
    `__init__`)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(tree: ast.AST, name: str, is_package: bool) -> Iterator[str]:
    """The dotted names an `import` or `from ... import` anywhere in `tree` may load (a name imported from a
    package may be a module of it)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, name, is_package)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _absolute(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    package = name.split(".") if is_package else name.split(".")[:-1]
    anchor = package[: len(package) - node.level + 1]
    return ".".join([*anchor, node.module] if node.module else anchor)


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's edges to the modules of `known` it imports (and the packages they load on the way), leaving
    out its own packages: they are loading already when it runs."""
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        own = set(_with_parents(name))
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        loads = {m for target in _imported(tree, name, is_package) for m in _with_parents(target)}
        graph[name] = {m for m in loads if m in known and m not in own}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as the path that closes it (`[a, b, a]`), or None (a depth-first search)."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" once every edge out is explored

    def visit(path: list[str]) -> list[str] | None:
        node = path[-1]
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit([*path, nxt])):
                return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit([start])):
            return cycle
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_the_package_imports_without_a_cycle(package: str) -> None:
    graph = import_graph(modules(package))
    assert graph, f"no modules found under {package}"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_commands_import_their_machinery_one_way() -> None:
    """The entry point imports the commands; no command imports the entry point, and the upstream check does not
    import the mutant scorer (the scorer reads the findings manifest the check reads)."""
    graph = import_graph(modules("fuzz"))
    assert {"fuzz.mutants", "fuzz.upstream_verify", "fuzz.campaign.cli"} <= graph["fuzz.__main__"]
    assert not [name for name, edges in graph.items() if "fuzz.__main__" in edges]
    assert "fuzz.mutants" not in graph["fuzz.upstream_verify"]
    assert "fuzz.upstream_findings" in graph["fuzz.mutants"]
    assert "fuzz.upstream_findings" in graph["fuzz.upstream_verify"]


def test_a_planted_cycle_is_found(tmp_path: Path) -> None:
    """The check can fail: a deferred import closes a loop, and so does a relative one below a package whose
    `__init__` imports its own module (which is no cycle by itself)."""
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg import b\n",
        "pkg/b.py": "def late():\n    from pkg.a import x\n",
        "pkg/sub/__init__.py": "from pkg.sub.c import y\n",
        "pkg/sub/c.py": "from .d import z\n",
        "pkg/sub/d.py": "import pkg.sub.c\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    graph = import_graph(modules("pkg", tmp_path))
    assert graph["pkg.b"] == {"pkg.a"} and graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.sub"] == {"pkg.sub.c"} and graph["pkg.sub.c"] == {"pkg.sub.d"}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]
    del graph["pkg.a"], graph["pkg.b"]
    assert find_cycle(graph) == ["pkg.sub.c", "pkg.sub.d", "pkg.sub.c"]
    graph["pkg.sub.d"] = set()
    assert find_cycle(graph) is None
