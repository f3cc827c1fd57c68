"""Invariants of incidents and the blast radius over random event streams (SPEC S7,
hypothesis): eight nodes under two leaf switches (node features ``leaf=l1``/``leaf=l2``),
all of one driver cohort (what the node check publishes, issue 37), random related and
unrelated alerts, clears and people closing incidents, run through the
real simulation with every remediation auto-approved. Every decide() call is checked:

- blast radius: never more than ``topology.blast_radius`` remediations in disruptive
  phases under one leaf;
- an open incident holds its nodes: no cordon in a plan for a node in an open incident
  for a fault of its groups;
- one incident per cause: never two open incidents on one component for one domain kind
  (issue 37), an incident on a leaf only for faults a leaf can cause (IB) and only on
  nodes of its leaf, one on the cohort only for the same Xid;
- S6: the same input gives the same plan.

Each rule is written out here on its own (not by calling the engine's helpers)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_heal.incidentstore import INCIDENTS_KEY, load
from slurm_heal.models import Incident, Phase
from slurm_heal.simulation import Cycle, Simulation, parse_scenario
from tests.policycore import decide

LEAF = {f"gpu0{i}": ("l1" if i <= 4 else "l2") for i in range(1, 9)}
FAULTS = ["ib.link_down", "gpu.xid.79", "gpu.xid.48", "fs.readonly"]
GROUPS = {"ib.link_down": {"ib"}, "gpu.xid.79": {"power", "xid:gpu.xid.79"},
          "gpu.xid.48": {"xid:gpu.xid.48"}}
COHORT = "cohort:driver=570.124.06"
DISRUPTIVE = {Phase.CORDONED, Phase.WAITING, Phase.DRAINING, Phase.ACTING, Phase.RETURNING}

node = st.sampled_from(sorted(LEAF))
event = st.one_of(
    st.fixed_dictionaries({"type": st.just("alert"), "node": node,
                           "fault": st.sampled_from(FAULTS)}),
    st.fixed_dictionaries({"type": st.just("alert"), "node": node,
                           "fault": st.just("ib.link_down")}),
    st.fixed_dictionaries({"type": st.just("clear"), "node": node,
                           "fault": st.sampled_from(FAULTS)}),
    st.fixed_dictionaries({"type": st.just("close_incident"),
                           "incident": st.sampled_from(["leaf:l1", "leaf:l2", COHORT])}),
)


def scenario(events: list[tuple[int, dict[str, Any]]], radius: int) -> dict[str, Any]:
    return {"start": "2026-01-05T00:00:00Z", "until": "+6h",
            "config": {"approvals": {"default": "auto"},
                       "safety": {"concurrency": 8, "one_per_pool": False,
                                  "breaker_threshold": 50},
                       "capacity": {"min_available_percent": 0},
                       "topology": {"blast_radius": radius},
                       "incidents": {"settle": "2m", "window": "10m"}},
            "nodes": [{"name": n, "pool": "a", "features": [f"leaf={leaf}"],
                       "domains": {"driver": "570.124.06"}}
                      for n, leaf in sorted(LEAF.items())],
            "events": [{**e, "at": f"+{minute}m"} for minute, e in events]}


class Checker:
    def __init__(self, sc: Any, radius: int) -> None:
        self.sc, self.radius = sc, radius
        self.problems: list[str] = []
        self.saw_open = 0  # cycles that had an open incident (the invariants bit there)

    def __call__(self, c: Cycle) -> None:
        rems = {r.id: r for r in c.state.remediations}
        rems.update({r.id: r for r in c.plan.updates})
        for leaf in ("l1", "l2"):
            busy = [r.id for r in rems.values() if r.phase in DISRUPTIVE and LEAF[r.node] == leaf]
            if len(busy) > self.radius:
                self.problems.append(f"{c.at}: {len(busy)} disruptive under {leaf}: {busy}")
        data = c.plan.data if c.plan.data is not None else c.state.data
        incs: list[Incident] = list(load(data.get(INCIDENTS_KEY)).values())
        opened = [i for i in incs if i.open]
        self.saw_open += bool(opened)
        for e in c.plan.effects:
            if e.kind != "cordon" or e.remediation is None:
                continue
            rem = rems[e.remediation]
            fault = rem.data.evidence_fault or rem.fault
            for i in opened:
                if e.node in i.nodes and GROUPS.get(fault, set()) & set(i.all_groups):
                    self.problems.append(f"{c.at}: {e.node} cordoned inside open {i.id}")
        keys = [(i.component, i.domain) for i in opened]
        if len(keys) != len(set(keys)):
            self.problems.append(f"{c.at}: two open incidents for one cause: {keys}")
        for i in incs:
            if i.component == COHORT:
                if not all(g.startswith("xid:") for g in i.all_groups):
                    self.problems.append(f"{c.at}: {i.id} on the cohort for {i.all_groups}")
                continue
            leaf = i.component.removeprefix("leaf:")
            if any(LEAF[n] != leaf for n in i.nodes) or set(i.all_groups) != {"ib"}:
                self.problems.append(f"{c.at}: {i.id} on {i.component} has {i.nodes} "
                                     f"for {i.all_groups}")
        again = decide(c.view, c.state, c.at, self.sc.policy, c.alerts)
        if again != c.plan:
            self.problems.append(f"{c.at}: the same input gave another plan (S6)")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(st.tuples(st.integers(0, 120), event), min_size=1, max_size=25),
       radius=st.integers(1, 2))
def test_incident_and_blast_radius_invariants_hold_over_random_event_streams(
        events: list[tuple[int, dict[str, Any]]], radius: int) -> None:
    sc = parse_scenario(scenario(events, radius))
    check = Checker(sc, radius)
    result = Simulation(sc, on_cycle=check).run()
    assert not result.violations, result.violations
    assert not check.problems, check.problems[:5]


def test_the_checker_sees_an_incident_held_then_closed_and_serialised() -> None:
    """The invariants are not vacuous: a leaf's IB failure opens an incident the checker
    watches, a person's close lets the held remediations go on one per leaf."""
    events = [(0, {"type": "alert", "node": n, "fault": "ib.link_down"})
              for n in ("gpu01", "gpu02", "gpu03")]
    events.append((30, {"type": "close_incident", "incident": "leaf:l1"}))
    sc = parse_scenario(scenario(events, 1))
    check = Checker(sc, 1)
    result = Simulation(sc, on_cycle=check).run()
    assert not check.problems, check.problems[:5]
    assert check.saw_open > 0
    done = [r.node for r in result.state.remediations if r.phase is Phase.DONE]
    assert sorted(done) == ["gpu01", "gpu02", "gpu03"]  # after the close, one at a time


def test_the_checker_sees_a_cohort_incident_across_both_leaves() -> None:
    """Issue 37: the same Xid on three nodes of the driver cohort (two leaves) is one
    incident on the cohort, never on a leaf; the checker watches it."""
    events = [(0, {"type": "alert", "node": n, "fault": "gpu.xid.48"})
              for n in ("gpu01", "gpu02", "gpu05")]
    sc = parse_scenario(scenario(events, 1))
    check = Checker(sc, 1)
    result = Simulation(sc, on_cycle=check).run()
    assert not check.problems, check.problems[:5]
    assert check.saw_open > 0
    [inc] = load(result.state.data.get(INCIDENTS_KEY)).values()
    assert (inc.component, inc.domain) == (COHORT, "cohort")
