"""The start gates as one ordered table (`gates.START_GATES`), each gate alone, and a
request's wait for evidence under every other hold (SPEC P1, Q4, O2, O6, D5, S2, S5,
S7, E7; issue 32 item 5, issue 33).

All pure: decide() on a ClusterView and a State.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from slurm_heal.models import Breaker, Command, Phase, Plan, Remediation, State, mark
from slurm_heal.policy.gates import START_GATES, start_hold
from slurm_heal.types import Action, ClusterView
from tests.policycore import begin, decide
from tests.unit.test_incidents import NAMES, TREE, ib
from tests.unit.test_incidents import pol as incident_pol
from tests.unit.test_lemon import lemon_history
from tests.unit.test_policy_engine import T0, alert, apply, node, phases, pol, rem, run

WAIT = timedelta(hours=1)
REQUEST = "heal-request: reboot detector=ibmon id=4711"


def _rem_of(plan: Plan, name: str = "gpu01") -> Remediation:
    return next(r for r in reversed(plan.updates) if r.node == name)


# ------------------------------------------------------------------ the table (issue 33)
def test_the_start_gates_are_asked_in_one_order_with_e7_and_p1_in_it() -> None:
    """The order lives in one table: recommend-only and the pause first, the lemon hold,
    someone else's drain, the incident and the settle wait, the breaker, the cooldown,
    a request's evidence, then room (S3/S4/E5/Q4 and the blast radius)."""
    assert [name for name, _ in START_GATES] == ["O2", "E7", "D5", "S7", "S5", "S2", "P1",
                                                 "room"]


def test_the_pause_speaks_before_the_lemon_hold_and_the_lemon_before_the_cooldown() -> None:
    """SPEC O2 then E7 then S2: the first gate of the table that holds is recorded."""
    hist = lemon_history("gpu01", 5, last=T0 - timedelta(minutes=5))
    nodes = [node("gpu01"), node("gpu02")]
    al = {"gpu01": [alert("gpu01")]}
    paused = run(nodes, al, state=State(remediations=hist, paused=True))
    assert phases(paused, "gpu01")[-1] == ("blocked", "pause")
    lemon = run(nodes, al, state=State(remediations=hist))  # S2 holds too: E7 speaks
    assert phases(lemon, "gpu01")[-1] == ("blocked", "E7")


# One scenario per gate, each alone: (SPEC id, the rule recorded, nodes, alerts, state,
# policy over, what lifts it must name).
GATE_ALONE: list[tuple[str, str, list[Any], dict[str, Any], State, dict[str, Any], str]] = [
    ("O2", "pause", [node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]},
     State(paused=True), {}, "slurm-heal unpause"),
    ("O2", "recommend_only", [node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]},
     State(), {"mode": "recommend_only"}, 'mode = "normal"'),
    ("E7", "E7", [node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]},
     State(remediations=lemon_history("gpu01", 5)), {}, "slurm-heal request gpu01 reboot"),
    ("D5", "D5", [node("gpu01", "IDLE", "DRAIN", reason="fan noise"), node("gpu02")],
     {"gpu01": [alert("gpu01")]}, State(), {},
     "scontrol update nodename=gpu01 state=resume"),
    ("S5", "S5", [node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]},
     State(breaker=Breaker(open=True, why="surge")), {}, "slurm-heal reset-breaker"),
    ("S2", "S2", [node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]},
     State(remediations=(rem("gpu01", at=T0 - timedelta(minutes=10), fault="gpu.xid.40"),)),
     {}, "by itself at"),
    ("P1", "P1", [node("gpu01", "IDLE", "DRAIN", reason=REQUEST), node("gpu02")], {},
     State(), {}, "a confirmed alert on gpu01"),
    ("room", "S3", [node("gpu01"), node("gpu02", "DRAIN", pool="b")],
     {"gpu01": [alert("gpu01")], "gpu02": [alert("gpu02")]},
     State(remediations=(rem("gpu02", Phase.WAITING, acted=False),)), {},
     "by itself when another remediation ends"),
    ("room", "S4", [node("gpu01"), node("gpu02", "DRAIN"), node("gpu03"), node("gpu04")],
     {"gpu01": [alert("gpu01")], "gpu02": [alert("gpu02")]},
     State(remediations=(rem("gpu02", Phase.WAITING, acted=False),)),
     {"safety": {"concurrency": 5}}, "by itself when r-gpu02-waiting-"),
    ("room", "E5", [node("gpu01", pool="a"), node("gpu02", "DRAIN", pool="b"), node("gpu03")],
     {"gpu01": [alert("gpu01", "gpu.xid.79")], "gpu02": [alert("gpu02", "gpu.xid.79")]},
     State(remediations=(rem("gpu02", Phase.ACTING, Action.MIGRATE, "gpu.xid.79",
                             acted=False),)),
     {"escalation": {"migrate_spares": 1}, "safety": {"concurrency": 5}},
     "by itself when another migration ends"),
    ("room", "Q4", [node("gpu01"), node("gpu02", "DOWN", reason="psu"),
                    node("gpu03", "DRAIN", reason="x")], {"gpu01": [alert("gpu01")]},
     State(), {}, "other nodes of pool a are in service"),
]


@pytest.mark.parametrize(("gate", "rule", "nodes", "alerts", "state", "over", "lifts"),
                         GATE_ALONE, ids=[f"{g[0]}-{g[1]}" for g in GATE_ALONE])
def test_each_start_gate_alone_holds_and_says_what_lifts_it(
        gate: str, rule: str, nodes: list[Any], alerts: dict[str, Any], state: State,
        over: dict[str, Any], lifts: str) -> None:
    """SPEC O6: each gate alone holds the start (no cordon), records its rule once, and
    stores with the remediation what holds it and what lifts it."""
    plan = run(nodes, alerts, state=state, policy=pol(**over))
    assert ("blocked", rule) in phases(plan, "gpu01"), phases(plan, "gpu01")
    assert not any(e.kind == "cordon" and e.node == "gpu01" for e in plan.effects)
    held = _rem_of(plan).data.hold
    assert held is not None and held.rule == rule, held
    assert lifts in held.lifts + " " + held.command, held


def _leaf(plan_now: Any, alerted: tuple[str, ...]) -> Plan:
    """decide() on two leaf switches (test_incidents' tree) with IB down on ``alerted``."""
    view = ClusterView(nodes=tuple(node(n) for n in NAMES), topology=TREE)
    return decide(view, State(), plan_now, incident_pol(),
                  {n: [ib(n)] for n in alerted})


def test_the_s7_settle_wait_alone_holds_and_lifts_by_itself() -> None:
    """SPEC S7: a related fault waits incidents.settle; the hold says until when."""
    plan = _leaf(T0, ("gpu01",))
    held = _rem_of(plan).data.hold
    assert ("blocked", "S7") in phases(plan, "gpu01")
    assert held is not None and held.mark == mark("S7", "settle") and held.until is not None
    # issue 33: its blocked step and record carry that mark (the console's badge reads it)
    (step,) = [s for s in _rem_of(plan).steps if s.phase == "blocked"]
    assert step.mark == held.mark == next(r.mark for r in plan.records if r.phase == "blocked")
    assert held.incident is None and "by itself at" in held.lifts


def test_the_s7_incident_alone_holds_and_names_the_incident_and_its_close() -> None:
    """SPEC S7: an open incident holds its nodes' own remediations; the hold names it
    and the command that closes it."""
    plan = _leaf(T0, ("gpu01", "gpu02", "gpu03"))
    for n in ("gpu01", "gpu02", "gpu03"):
        held = _rem_of(plan, n).data.hold
        assert held is not None and held.incident is not None and held.by_incident
        assert held.command == f"slurm-heal incident close {held.incident}"


# --------------------------------------------- P1 under every other hold (issue 32 item 5)
def _detector_request(*states: str) -> Any:
    return dataclasses.replace(node("gpu01", *(states or ("IDLE", "DRAIN")), reason=REQUEST),
                               reason_time=T0)


def _operator_request() -> Command:
    return Command(id="c1", at=T0, kind="request", by="alice", node="gpu01",
                   action=Action.REBOOT)


# (SPEC id of the other hold, the node, the state, the policy): each would hold the
# request too; the missing evidence must still be what is said and waited on.
UNDER: list[tuple[str, Any, State, dict[str, Any]]] = [
    ("O2-pause", _detector_request(), State(paused=True), {}),
    ("O2-pause-operator", node("gpu01"), State(paused=True, inbox=(_operator_request(),)),
     {}),
    ("S2", _detector_request(),
     State(remediations=(rem("gpu01", at=T0 - timedelta(minutes=10), fault="gpu.xid.40"),)),
     {}),
    ("S5", _detector_request(), State(breaker=Breaker(open=True, why="surge")), {}),
    ("D5", node("gpu01", "IDLE", "DRAIN", reason="fan noise"),
     State(inbox=(_operator_request(),)), {}),
    ("E7", _detector_request(), State(remediations=lemon_history("gpu01", 5)), {}),
]


@pytest.mark.parametrize(("other", "target", "state", "over"), UNDER,
                         ids=[u[0] for u in UNDER])
@pytest.mark.parametrize("approvals", ["manual", "auto"])
def test_a_request_without_evidence_waits_for_it_whatever_else_holds(
        other: str, target: Any, state: State, over: dict[str, Any], approvals: str) -> None:
    """SPEC P1/Q4, O6: a request without a confirmed alert waits for evidence (recorded
    P1, said so) and is never put to a person's approval, though a pause, a cooldown,
    the breaker, someone else's drain or a lemon hold would hold it too."""
    policy = pol(approvals={"default": approvals}, **over)
    plan = run([target, node("gpu02"), node("gpu03")], {}, state=state, policy=policy)
    got = _rem_of(plan)
    assert ("blocked", "P1") in phases(plan, "gpu01"), phases(plan, "gpu01")
    assert got.phase is Phase.PROPOSED and not got.data.approval_pending, got.steps
    assert got.data.hold is not None and got.data.hold.rule == "P1"
    assert any(e.step == "notify-evidence" for e in plan.effects)


@pytest.mark.parametrize(("other", "target", "state", "over"), UNDER,
                         ids=[u[0] for u in UNDER])
def test_the_wait_for_evidence_ends_by_its_bound_whatever_else_holds(
        other: str, target: Any, state: State, over: dict[str, Any]) -> None:
    """SPEC O6: waits have bounds: after requests.evidence_wait the request is withdrawn,
    paused or not, in a cooldown or not (while paused it stayed proposed for hours)."""
    policy = pol(requests={"evidence_wait": "1h"}, **over)
    nodes = [target, node("gpu02"), node("gpu03")]
    first = run(nodes, {}, state=state, policy=policy)
    later = apply(state, first)
    assert plan_withdrawn(run(nodes, {}, state=later, policy=policy,
                              now=T0 + WAIT + timedelta(minutes=1)))
    assert first.next_wake is not None and first.next_wake <= T0 + WAIT


def plan_withdrawn(plan: Plan) -> bool:
    return ("withdrawn", "P1") in phases(plan, "gpu01")


# ------------------------------------------- a gate alone, on the two values (issue 33)
@pytest.mark.parametrize(("gate", "rule", "nodes", "alerts", "state", "over", "lifts"),
                         GATE_ALONE, ids=[f"{g[0]}-{g[1]}" for g in GATE_ALONE])
def test_each_start_gate_alone_is_a_function_of_the_working_set_and_the_ledger(
        gate: str, rule: str, nodes: list[Any], alerts: dict[str, Any], state: State,
        over: dict[str, Any], lifts: str) -> None:
    """SPEC O6 (issue 33): a gate is asked on a WorkingSet and a Ledger alone, without
    a decide() around it: the table's gate of that name returns the Hold, the table
    returns the same one first, and neither writes anything to the ledger (applying a
    Hold is `holding`'s)."""
    policy = pol(**over)
    held = _rem_of(run(nodes, alerts, state=state, policy=policy))
    ws, led = begin(ClusterView(nodes=tuple(nodes)), state, T0, policy, alerts)
    alone = dict(START_GATES)[gate](ws, led, held)
    first, _ = start_hold(ws, led, held)
    assert alone is not None and alone.rule == rule, alone
    assert first == alone
    assert (led.records, led.effects, led.wakes, led.changed) == ([], [], [], {})
    assert not led.breaker_changed
