"""The controller's ports are Protocols, never ``Any`` (ARCHITECTURE house style 15,
issue 33): the store, the pure core and the validation flow it is composed of are typed,
so ``mypy --strict`` checks each adapter passed in against what the cycle calls, and the
controller asks its ports nothing by name at run time (no ``getattr``)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any, get_type_hints

import pytest

from slurm_heal import ports
from slurm_heal.config import Policy
from slurm_heal.controller import Controller
from slurm_heal.policy.incremental import Decide
from slurm_heal.store import Store
from slurm_heal.validation.service import Validator

CONTROLLER = Path(__file__).resolve().parents[2] / "slurm_heal" / "controller.py"


def test_the_controllers_ports_are_typed_by_their_protocols() -> None:
    hints = get_type_hints(Controller.__init__)
    assert hints["store"] is ports.StatePort
    assert hints["policy"] is Policy
    assert hints["decide"] == ports.DecidePort | None
    assert hints["validator"] == ports.ValidatorPort | None
    assert not [name for name, hint in hints.items() if hint is Any]


def test_the_controller_asks_its_ports_nothing_by_name() -> None:
    """A port's attribute read with getattr is invisible to mypy (issue 33 measured
    ``getattr(self.policy, "topology", None)``)."""
    tree = ast.parse(CONTROLLER.read_text(encoding="utf-8"))
    found = [ast.unparse(n) for n in ast.walk(tree)
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id in ("getattr", "hasattr")]
    assert found == []


def _methods(protocol: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(fn) for name, fn in vars(protocol).items()
            if callable(fn) and (not name.startswith("_") or name == "__call__")}


@pytest.mark.parametrize(("protocol", "adapter"), [
    (ports.StatePort, Store), (ports.ValidatorPort, Validator), (ports.DecidePort, Decide),
], ids=["store", "validator", "decide"])
def test_each_real_adapter_has_what_its_port_names(protocol: type, adapter: type) -> None:
    """The real adapter takes every parameter its Protocol names, of the same kind and in
    the same place (mypy checks the types where the controller is composed)."""
    for name, want in _methods(protocol).items():
        have = inspect.signature(getattr(adapter, name))
        params = list(have.parameters.values())
        for i, p in enumerate(want.parameters.values()):
            if p.kind is inspect.Parameter.POSITIONAL_ONLY:  # by place, any name
                assert params[i].kind in (p.kind, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                continue
            assert p.name in have.parameters, (name, p.name)
            q = have.parameters[p.name]
            assert q.kind is p.kind or (
                q.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
                and p.kind is inspect.Parameter.KEYWORD_ONLY), (name, p.name)
            if p.default is inspect.Parameter.empty:
                assert q.default is inspect.Parameter.empty, (name, p.name)
            else:
                assert q.default is not inspect.Parameter.empty, (name, p.name)
