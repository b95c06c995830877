"""The recipe's modules import one another without a circle, deferred imports inside functions included (a circle
that only a function-level import hides still breaks when the import moves, and makes the layering unreadable).
Imports under ``if TYPE_CHECKING:`` never run and are left out."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST):
    """Every node except those under an ``if TYPE_CHECKING:`` block."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def import_graph(root: Path, package: str = "retool") -> dict[str, set[str]]:
    """{module: the package's modules it imports, at module level or inside a function}."""
    files = {module_name(f, root): f for f in (root / package).rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        for node in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in files and t != name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each one as a path that starts and ends at the same module."""
    found, done = [], set()

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt in path:
                found.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in done:
                visit(nxt, path + [nxt])
        done.add(node)

    for start in sorted(graph):
        if start not in done:
            visit(start, [start])
    return found


def test_the_recipe_has_no_import_circle() -> None:
    graph = import_graph(REPO)
    assert {"retool.profiles", "retool.data.sft", "retool.tool_yaml"} <= set(graph)
    assert not circles(graph), "\n".join(" -> ".join(c) for c in circles(graph))


def test_a_circle_hidden_in_a_function_is_found(tmp_path: Path) -> None:
    package = tmp_path / "retool"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "data" / "__init__.py").write_text("")
    (package / "profiles.py").write_text("def check():\n    from retool.data.sft import load\n    return load()\n")
    (package / "data" / "sft.py").write_text("from retool.profiles import check\n\ndef load():\n    return 1\n")
    (package / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from retool.profiles import check\n"
    )
    assert circles(import_graph(tmp_path)) == [["retool.data.sft", "retool.profiles", "retool.data.sft"]]


def test_the_sandbox_package_has_no_circle_and_imports_nothing_of_the_recipe() -> None:
    # retool_sandbox (sandbox/) is its own distribution: the recipe depends on it, never the other way round
    root = REPO / "sandbox"
    graph = import_graph(root, "retool_sandbox")
    assert {"retool_sandbox.server", "retool_sandbox.loadtest", "retool_sandbox.client"} <= set(graph)
    assert not circles(graph), "\n".join(" -> ".join(c) for c in circles(graph))
    offenders = []
    for path in sorted((root / "retool_sandbox").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            offenders += [
                f"{path.relative_to(REPO)}:{node.lineno}: {name}"
                for name in names
                if name.split(".")[0] in ("retool", "verl")
            ]
    assert not offenders, offenders
