"""The shape of the decision core (ARCHITECTURE "policy/", issue 33): plain functions
over a WorkingSet and a Ledger passed explicitly, no class inheriting another (a
god-class split over files by inheritance is the anti-pattern it replaced), no module
over ~350 lines, and each shared ending written in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import slurm_heal.policy as policy_pkg

POLICY = Path(policy_pkg.__file__).parent
MODULES = sorted(POLICY.glob("*.py"))


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def test_no_class_in_the_core_inherits_another() -> None:
    """A rule's module says what it may call (its imports), not its place in a chain."""
    derived = [f"{p.name}:{c.name}({', '.join(ast.unparse(b) for b in c.bases)})"
               for p in MODULES for c in ast.walk(_tree(p))
               if isinstance(c, ast.ClassDef) and c.bases]
    assert derived == []


def test_no_value_class_of_the_core_calls_a_rule() -> None:
    """The rules are module functions; the classes left are values and their indexes
    (WorkingSet, Ledger, Records, Hold, Climb, ...), whose methods never call a rule
    module (they may use `facts`, the pure facts of a record, a node or the catalog)."""
    rule_modules = {"acting", "cordon", "endings", "engine", "escalation", "gates", "holding",
                    "incidents", "intake", "lemon", "lifecycle", "person", "postgate",
                    "requests"}
    assert rule_modules <= {p.stem for p in MODULES}
    calls = []
    for p in MODULES:
        for c in ast.walk(_tree(p)):
            if not isinstance(c, ast.ClassDef):
                continue
            for n in ast.walk(c):
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) \
                        and n.value.id in rule_modules:
                    calls.append(f"{p.name}:{c.name} -> {n.value.id}.{n.attr}")
    assert calls == []


def test_no_module_of_the_core_is_over_350_lines() -> None:
    sizes = {p.name: p.read_text().count("\n") for p in MODULES}
    assert {n: s for n, s in sizes.items() if s > 350} == {}


def test_the_hand_over_to_a_person_is_written_in_one_place() -> None:
    """SPEC E1, S8: every ending that hands a remediation to a person goes through
    endings.fail_to_person / hand_to_person: no module but endings marks one handed."""
    writers = sorted(p.name for p in MODULES if '"handed_to_person": True' in p.read_text())
    assert writers == ["endings.py"]


# Which module may call which (docs/adding-a-rule.md): a module imports only modules of
# a lower rank, so a rule's place says what it may call and no call goes back up.
RANKS: tuple[tuple[str, ...], ...] = (
    ("facts", "holds", "notices"),  # pure facts; the Hold value; what a notice is about
    ("records", "sitealerts"),  # the store's index; the site's own alerts (D13)
    ("working",),  # the WorkingSet and the Ledger
    ("domains",),  # S7's cause domains: which components can cause which faults (issue 37)
    ("cordon", "person", "lemon", "incidents", "escalation"),  # rules on the two values
    ("gates",),  # START_GATES: each returns a Hold, writes nothing
    ("holding", "endings"),  # a Hold applied; the end of automatic work
    ("postgate",),  # V4 in the return
    ("acting",),  # the act and the return (L1, L5)
    ("lifecycle",),  # a handler per phase
    ("requests", "intake"),  # what comes in: commands, requests, alerts
    ("engine",),  # the fold
    ("incremental", "__init__"),  # what the controller and simulate call
)


def _policy_imports(path: Path) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(_tree(path)):
        if isinstance(n, ast.Import):
            out.update(a.name.split(".")[2] for a in n.names
                       if a.name.startswith("slurm_heal.policy."))
        elif isinstance(n, ast.ImportFrom) and n.module is not None:
            if n.module == "slurm_heal.policy":
                out.update(a.name for a in n.names)
            elif n.module.startswith("slurm_heal.policy."):
                out.add(n.module.split(".")[2])
    return out


def test_each_module_of_the_core_imports_only_lower_ranks() -> None:
    rank = {m: i for i, row in enumerate(RANKS) for m in row}
    assert set(rank) == {p.stem for p in MODULES}, "rank every module of policy/"
    upward = [f"{p.stem} -> {m}" for p in MODULES for m in sorted(_policy_imports(p))
              if rank[m] >= rank[p.stem]]
    assert upward == []
