"""The package's import graph (ARCHITECTURE "Layout", issue 21): no import cycle, and
nothing outside `commands/` imports from it (cli.py, which wires the commands, aside).

The graph is read from the source (ast), every ``import`` counted wherever it stands, a
function's deferred import included: deferring an import hides a cycle from Python, not
from the design. Imports under ``if TYPE_CHECKING:`` are annotations only and do not
count.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "slurm_heal"

# None left: a new cycle fails the test (the nvidia detector <-> check runner one went
# with the Detector protocol of issue 21).
ALLOWED_CYCLES: list[frozenset[str]] = []
# The entry point loads each command group (by name, importlib) and may import them.
COMMANDS_WIRING = {"slurm_heal.cli"}


def _modules(package: Path) -> dict[str, Path]:
    out = {}
    for f in package.rglob("*.py"):
        parts = list(f.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def _type_checking_only(tree: ast.Module) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
                or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            skip.update(id(n) for sub in node.body for n in ast.walk(sub))
    return skip


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules ``name`` imports (a submodule when one is named, else the
    module or package itself)."""
    root = name.split(".")[0]

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_only(tree)
    found: set[str | None] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(resolve(a.name) for a in node.names if a.name.split(".")[0] == root)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                here = here[:len(here) - node.level + 1]
                base = ".".join([*here, base] if base else here)
            if base.split(".")[0] != root:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else resolve(base))
    found.discard(None)
    found.discard(name)
    return {m for m in found if m is not None}


def import_graph(package: Path) -> dict[str, set[str]]:
    modules = _modules(package)
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _upward(graph: dict[str, set[str]]) -> Iterator[str]:
    for name, deps in sorted(graph.items()):
        if name.startswith("slurm_heal.commands") or name in COMMANDS_WIRING:
            continue
        for dep in sorted(deps):
            if dep == "slurm_heal.commands" or dep.startswith("slurm_heal.commands."):
                yield f"{name} imports {dep}"


def test_the_package_has_no_import_cycle() -> None:
    found = [sorted(c) for c in cycles(import_graph(PACKAGE)) if c not in ALLOWED_CYCLES]
    assert found == [], f"import cycles (move the shared types to their own module): {found}"


def test_nothing_outside_commands_imports_from_it() -> None:
    """The API and the console read the read model (slurm_heal.readmodel), never a
    command's helpers: commands/ is the top layer."""
    assert list(_upward(import_graph(PACKAGE))) == []


def test_the_graph_sees_a_cycle_through_a_deferred_import_and_an_upward_import(
        tmp_path: Path) -> None:
    """The checks above can fail: a cycle closed by an import inside a function, and a
    module importing a command, are both found; TYPE_CHECKING imports are not counted."""
    pkg = tmp_path / "slurm_heal"
    (pkg / "commands").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "commands" / "__init__.py").write_text("")
    (pkg / "commands" / "status.py").write_text("X = 1\n")
    (pkg / "a.py").write_text("from slurm_heal import b\n")
    (pkg / "b.py").write_text("def f():\n    from slurm_heal.a import thing\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from slurm_heal import d\n")
    (pkg / "d.py").write_text("from . import c\nfrom .commands.status import X\n")
    graph = import_graph(pkg)
    assert cycles(graph) == [frozenset({"slurm_heal.a", "slurm_heal.b"})]
    assert list(_upward(graph)) == ["slurm_heal.d imports slurm_heal.commands.status"]


def test_the_node_check_path_stays_free_of_pydantic_click_and_requests() -> None:
    """docs/checks.md: the check path imports neither click, pydantic nor requests (it runs
    on every node at every HealthCheckInterval). The one duration syntax and the one
    atomic write it shares with the controller (durations.py, fsio.py) keep to that."""
    import subprocess
    import sys

    code = ("import sys, slurm_heal.checks.fastcli, slurm_heal.checks.runner, "
            "slurm_heal.checks.config, slurm_heal.checks.state, slurm_heal.durations, "
            "slurm_heal.fsio; print(sorted(m for m in ('pydantic', 'click', 'requests') "
            "if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=PACKAGE.parent, timeout=60)
    assert res.stdout.strip() == "[]"
