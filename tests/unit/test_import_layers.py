"""The package's import graph (ARCHITECTURE "Layout", house style 15; issues 21, 33): no
import cycle, every module ranked in one layer table (`RANKS`) and none importing a module
of a higher rank, nothing outside `commands/` importing from it (cli.py, which wires the
commands, aside), and no rename outside the one atomic write.

The graph is read from the source (ast), every ``import`` counted wherever it stands, a
function's deferred import included: deferring an import hides a cycle from Python, not
from the design. For the cycle test, imports under ``if TYPE_CHECKING:`` are annotations
only and do not count; for the layer table they do (an annotation that names a type of a
higher layer is a dependency on it all the same).
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


# The layers, lowest first: a module may import its own rank and those below, never one
# above. The longest dotted prefix in the table gives a module its rank (a package's row
# covers its modules); a module in no row fails the test, so a new one is placed on
# purpose. Equal ranks are peers.
RANKS: dict[str, int] = {
    # 0 foundation: no slurm-heal import above it; the node check's path.
    "slurm_heal": 0, "slurm_heal.errors": 0, "slurm_heal.jsonsafe": 0,
    "slurm_heal.frozen": 0, "slurm_heal.durations": 0, "slurm_heal.fsio": 0,
    "slurm_heal.nvml": 0, "slurm_heal.components": 0, "slurm_heal.isotime": 0,
    "slurm_heal.sdnotify": 0,  # systemd's notify protocol (issue 38)
    "slurm_heal.checks.paths": 0,  # where the node side keeps its files: read by clock, store
    # 1 values: the cluster's value types, reason grammar, Extra, the fault catalog, the
    # validation suite's step and criteria models, the ticket sinks' settings.
    "slurm_heal.types": 1, "slurm_heal.reasons": 1, "slurm_heal.extra": 1,
    "slurm_heal.catalog": 1, "slurm_heal.suitesteps": 1, "slurm_heal.suitecriteria": 1,
    "slurm_heal.sinks": 1,
    # 2-3 the config: the sections other parts own, then the whole file.
    "slurm_heal.sections": 2,
    "slurm_heal.webconfig": 2,  # /metrics' TLS and users, Prometheus' web config (issue 38)
    # SPEC D13: the site's monitors: their settings, stored alerts and NHC's reasons (the
    # policy reads them); Alertmanager's mapping uses config's host lists.
    "slurm_heal.sources": 2, "slurm_heal.sources.alertmanager": 4,
    # each provider type's table, read by the policy loader (issue 33)
    "slurm_heal.providerconf": 2,
    "slurm_heal.config": 3,
    # 4-5 adapters' bases and the controller's models and files.
    "slurm_heal.slurm": 4, "slurm_heal.topology": 4, "slurm_heal.models": 4,
    "slurm_heal.nodealerts": 4,
    "slurm_heal.incidentstore": 5, "slurm_heal.heartbeat": 5, "slurm_heal.clock": 5,
    "slurm_heal.providers": 5,
    "slurm_heal.ports": 5,  # the controller's ports as Protocols (store, core, validation)
    "slurm_heal.links": 5,  # SPEC O7: the signed links of notifications (daemon and serve)
    # 6 the node check, the store, the site's configuration.
    "slurm_heal.checks": 6, "slurm_heal.store": 6, "slurm_heal.siteconf": 6,
    # 7 the pure core; where things are; the GPU reset job's body (node side).
    "slurm_heal.policy": 7, "slurm_heal.location": 7, "slurm_heal.gpureset_job": 7,
    # 8-9 the machine ledger, the read model.
    "slurm_heal.ledger": 8,
    "slurm_heal.readmodel": 9,
    # issue 42: the fleet map and repairs over time (pure, beside the other read models)
    "slurm_heal.readmodel.fleetmap": 9, "slurm_heal.readmodel.repairs": 9,
    # 10-11 the controller and what runs beside it.
    "slurm_heal.validation": 10, "slurm_heal.controller": 10, "slurm_heal.operations": 10,
    "slurm_heal.simulation": 10, "slurm_heal.install": 10,
    "slurm_heal.gpureset": 11, "slurm_heal.notify": 11,
    # 12-16 the faces: metrics, the API, the policy check, the demo, the commands, the CLI.
    "slurm_heal.metrics": 12, "slurm_heal.api": 12,
    "slurm_heal.configcheck": 13, "slurm_heal.demo": 13,
    "slurm_heal.commands": 14, "slurm_heal.cli": 15, "slurm_heal.entry": 16,
}
# The renames slurm-heal makes: the one atomic write and set-aside (fsio), and the
# store's own set-aside of a corrupt document (which words its failure for a person).
RENAMES_ALLOWED = {"slurm_heal.fsio", "slurm_heal.store"}


def rank(module: str, ranks: dict[str, int] | None = None) -> int | None:
    """The rank of ``module``: its own row, else its longest dotted prefix in the table
    (a package's row) short of the package itself, whose row is only its ``__init__``'s
    (None: unranked)."""
    table = RANKS if ranks is None else ranks
    if module in table:
        return table[module]
    name = module.rpartition(".")[0]
    while "." in name:
        if name in table:
            return table[name]
        name = name.rpartition(".")[0]
    return None


def _type_checking_only(tree: ast.Module) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
                or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            skip.update(id(n) for sub in node.body for n in ast.walk(sub))
    return skip


def _imports(name: str, path: Path, modules: dict[str, Path],
             type_checking: bool = False) -> set[str]:
    """The package's modules ``name`` imports (a submodule when one is named, else the
    module or package itself); with ``type_checking``, those under TYPE_CHECKING too."""
    root = name.split(".")[0]

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set() if type_checking else _type_checking_only(tree)
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


def import_graph(package: Path, type_checking: bool = False) -> dict[str, set[str]]:
    modules = _modules(package)
    return {name: _imports(name, path, modules, type_checking)
            for name, path in modules.items()}


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


def _unranked(graph: dict[str, set[str]], ranks: dict[str, int] | None = None) -> list[str]:
    return sorted(m for m in graph if rank(m, ranks) is None)


def _against_ranks(graph: dict[str, set[str]],
                   ranks: dict[str, int] | None = None) -> Iterator[str]:
    for name, deps in sorted(graph.items()):
        mine = rank(name, ranks)
        for dep in sorted(deps):
            theirs = rank(dep, ranks)
            if mine is not None and theirs is not None and theirs > mine:
                yield f"{name} (rank {mine}) imports {dep} (rank {theirs})"


def _renames(package: Path, allowed: set[str]) -> Iterator[str]:
    """``os.replace``/``os.rename`` (and ``shutil.move``), and a ``.replace(x)`` or
    ``.rename(x)`` with one argument (a Path's: str.replace takes two), outside
    ``allowed``."""
    for name, path in sorted(_modules(package).items()):
        if name in allowed:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            attr, owner = node.func.attr, node.func.value
            if attr not in ("replace", "rename", "move"):
                continue
            module_call = isinstance(owner, ast.Name) and owner.id in ("os", "shutil")
            one_arg = len(node.args) == 1 and not node.keywords and attr != "move"
            if (module_call and (owner.id, attr) != ("shutil", "replace")) or one_arg:
                yield f"{name}:{node.lineno}: {ast.unparse(node.func)}(...)"


def test_every_module_has_a_rank_and_none_imports_upward() -> None:
    """House style 15: the layer table holds; a TYPE_CHECKING import counts (issue 33:
    policy.postgate -> validation.flow, config -> validation.gate, sections ->
    validation.steps and notify.events, types -> topology were upward and are gone)."""
    graph = import_graph(PACKAGE, type_checking=True)
    assert _unranked(graph) == [], "place each new module in RANKS (test_import_layers.py)"
    assert list(_against_ranks(graph)) == []


def test_no_rename_outside_the_one_atomic_write() -> None:
    """House style 5 and 13: a file is replaced only by fsio (a temp file, fsync of the
    file and the directory); the GPU reset's three writes renamed their own (issue 33)."""
    assert list(_renames(PACKAGE, RENAMES_ALLOWED)) == []


def test_the_layer_and_rename_checks_can_fail(tmp_path: Path) -> None:
    """An upward import under TYPE_CHECKING, a deferred one, an unranked module and each
    kind of rename are all found."""
    pkg = tmp_path / "slurm_heal"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("TYPE_CHECKING = False\nif TYPE_CHECKING:\n"
                                "    from slurm_heal.high import X\n")
    (pkg / "mid.py").write_text("def f():\n    from slurm_heal import high\n")
    (pkg / "high.py").write_text("import os\nfrom pathlib import Path\nX = 1\n"
                                 "os.replace('a', 'b')\nos.rename('a', 'b')\n"
                                 "Path('a').replace('b')\n'a'.replace('a', 'b')\n")
    (pkg / "fsio.py").write_text("import os\nos.replace('a', 'b')\n")
    (pkg / "new.py").write_text("")
    ranks = {"slurm_heal": 0, "slurm_heal.low": 0, "slurm_heal.mid": 1,
             "slurm_heal.high": 2, "slurm_heal.fsio": 0}
    graph = import_graph(pkg, type_checking=True)
    assert _unranked(graph, ranks) == ["slurm_heal.new"]
    assert list(_against_ranks(graph, ranks)) == [
        "slurm_heal.low (rank 0) imports slurm_heal.high (rank 2)",
        "slurm_heal.mid (rank 1) imports slurm_heal.high (rank 2)"]
    assert "slurm_heal.high" not in import_graph(pkg)["slurm_heal.low"]  # cycles: annotations
    assert list(_renames(pkg, {"slurm_heal.fsio"})) == [
        "slurm_heal.high:4: os.replace(...)", "slurm_heal.high:5: os.rename(...)",
        "slurm_heal.high:6: Path('a').replace(...)"]


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
