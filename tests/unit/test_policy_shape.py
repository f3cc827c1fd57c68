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
