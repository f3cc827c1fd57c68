"""SPEC S7 in decide(): related alerts under one switch open one incident and hold the
nodes' own remediations; a person's close or the alerts clearing ends it; at most
topology.blast_radius disruptive remediations at once under one component. Pure: a
ClusterView (with its topology), a State, `now` and a Policy in, a Plan out; the plans
are applied through the real JSON store (its incidents merge, SPEC S6)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from slurm_heal.config import Policy, policy_from_dict
from slurm_heal.errors import ConfigError
from slurm_heal.incidentstore import INCIDENTS_KEY, load, merge
from slurm_heal.models import Command, Incident, Phase, Plan, State
from slurm_heal.store import Store
from slurm_heal.topology import Topology, parse_topology
from slurm_heal.types import Alert, ClusterView, Evidence, NodeInfo, Severity
from tests.policycore import decide

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
# Two leaf switches of four nodes each (topology.conf syntax).
TREE = parse_topology("SwitchName=leaf1 Nodes=gpu[01-04]\nSwitchName=leaf2 Nodes=gpu[05-08]\n"
                      "SwitchName=spine Switches=leaf[1-2]\n")
NAMES = [f"gpu{i:02d}" for i in range(1, 9)]
NVL = "gpu.nvlink.down"


def pol(**over: Any) -> Policy:
    return policy_from_dict({"approvals": {"default": "auto"}, "safety": {"concurrency": 10,
                             "one_per_pool": False}, "capacity": {"min_available_percent": 0},
                             **over})


def ib(n: str, since: datetime = T0, fault: str = "ib.link_down") -> Alert:
    return Alert(node=n, fault=fault, severity=Severity.CRITICAL, summary="mlx5_0 port 1 down",
                 first_seen=since, last_seen=since)


class World:
    """The nodes (drained by our cordon when one is planned), the store, the clock."""

    def __init__(self, tmp: Path, topology: Topology | None = TREE,
                 policy: Policy | None = None,
                 published: dict[str, dict[str, str]] | None = None,
                 features: dict[str, tuple[str, ...]] | None = None) -> None:
        self.store = Store(tmp)
        self.features = features or {}
        # What each node's check published of its domains (issue 37, D12).
        self.published = published or {}
        self.topology = topology
        self.policy = policy or pol()
        self.drained: dict[str, str] = {}
        self.alerts: dict[str, list[Alert]] = {}

    def view(self) -> ClusterView:
        return ClusterView(nodes=tuple(
            NodeInfo(name=n, states=frozenset({"IDLE", "DRAIN"} if n in self.drained
                                              else {"IDLE"}),
                     reason=self.drained.get(n, ""), partitions=("a",),
                     features=self.features.get(n, ()),
                     extra={"slurm_heal": {"v": 1, "domains": self.published[n]}}
                     if n in self.published else None) for n in NAMES),
            topology=self.topology)

    def cycle(self, now: datetime) -> Plan:
        plan = decide(self.view(), self.store.load(), now, self.policy, self.alerts)
        self.store.apply(plan, now)
        for e in plan.effects:
            if e.kind == "cordon":
                self.drained[e.node] = e.reason
        return plan

    def incidents(self) -> list[Incident]:
        return list(load(self.store.load().data.get(INCIDENTS_KEY)).values())

    def phase(self, node: str) -> Phase:
        return next(r.phase for r in self.store.load().remediations if r.node == node)


def kinds(plan: Plan) -> list[tuple[str, str]]:
    return [(e.kind, e.node) for e in plan.effects]


def test_ib_down_on_three_nodes_of_one_switch_opens_one_incident_and_cordons_none(
        tmp_path: Path) -> None:
    w = World(tmp_path)
    for i, n in enumerate(["gpu01", "gpu02", "gpu03"]):
        w.alerts[n] = [ib(n, T0 + timedelta(seconds=20 * i))]
    plan = w.cycle(T0 + timedelta(seconds=40))
    [inc] = w.incidents()
    assert (inc.component, inc.group, inc.nodes, inc.size) == (
        "switch:leaf1", "ib", ("gpu01", "gpu02", "gpu03"), 4)
    assert {a.node for a in inc.alerts} == {"gpu01", "gpu02", "gpu03"}  # every node's evidence
    assert [k for k, _ in kinds(plan)] == ["notify"]  # one notice, no cordon
    assert "slurm-heal incident close" in plan.effects[0].why
    held = [r for r in plan.records if r.phase == "blocked" and r.rule == "S7"]
    assert {r.node for r in held} == {"gpu01", "gpu02", "gpu03"}
    assert all(inc.id in r.why for r in held)
    # Long after the settle wait: still held, nothing drained, no second notice.
    later = w.cycle(T0 + timedelta(hours=1))
    assert kinds(later) == [] and not w.drained
    assert {w.phase(n) for n in ("gpu01", "gpu02", "gpu03")} == {Phase.APPROVED}


def test_a_fourth_node_joins_the_open_incident_and_is_held(tmp_path: Path) -> None:
    w = World(tmp_path)
    for n in ("gpu01", "gpu02", "gpu03"):
        w.alerts[n] = [ib(n)]
    w.cycle(T0)
    w.alerts["gpu04"] = [ib("gpu04", T0 + timedelta(minutes=20))]  # past the window: joins
    plan = w.cycle(T0 + timedelta(minutes=20))
    [inc] = w.incidents()
    assert inc.nodes == ("gpu01", "gpu02", "gpu03", "gpu04")
    assert [r.why for r in plan.records if r.node == "gpu04" and r.rule == "S7"][0].startswith(
        "gpu04 joins incident")
    assert kinds(plan) == []


def test_one_faulty_node_waits_the_settle_time_then_goes_on_alone(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.alerts["gpu01"] = [ib("gpu01")]
    first = w.cycle(T0)
    assert kinds(first) == [] and first.next_wake == T0 + timedelta(minutes=5)
    assert "incidents.settle" in next(r.why for r in first.records if r.rule == "S7")
    plan = w.cycle(T0 + timedelta(minutes=5))
    assert kinds(plan) == [("cordon", "gpu01")] and w.incidents() == []


def test_two_nodes_of_a_two_node_block_are_half_of_it_one_node_never_is(
        tmp_path: Path) -> None:
    # Issue 37: NVLink faults are counted under the NVLink block (an IB link is not).
    topo = parse_topology("BlockName=b1 Nodes=gpu[01-02]\nBlockName=b2 Nodes=gpu[03-08]\n")
    w = World(tmp_path, topology=topo)
    w.alerts["gpu03"] = [ib("gpu03", fault=NVL)]  # 1 of 6: no incident
    w.alerts["gpu01"] = [ib("gpu01", fault=NVL)]  # 1 of 2 = 50 %, but one node is no incident
    w.cycle(T0)
    assert w.incidents() == []
    w.alerts["gpu02"] = [ib("gpu02", T0 + timedelta(minutes=1), fault=NVL)]  # 2 of 2
    w.cycle(T0 + timedelta(minutes=1))
    assert [(i.component, i.nodes) for i in w.incidents()] == [("block:b1", ("gpu01", "gpu02"))]


def test_alerts_first_seen_further_apart_than_the_window_are_no_incident(
        tmp_path: Path) -> None:
    w = World(tmp_path, policy=pol(incidents={"window": "10m", "settle": "1m"}))
    w.alerts["gpu01"] = [ib("gpu01")]
    w.alerts["gpu02"] = [ib("gpu02", T0 + timedelta(minutes=30))]
    w.alerts["gpu03"] = [ib("gpu03", T0 + timedelta(minutes=60))]
    plan = decide(w.view(), State(), T0 + timedelta(minutes=60), w.policy, w.alerts)
    assert INCIDENTS_KEY not in (plan.data or {})
    # gpu01's and gpu02's waits are over: they go on (one per switch); gpu03 settles.
    assert [e.node for e in plan.effects if e.kind == "cordon"] == ["gpu01"]


def test_different_xid_codes_are_not_related_the_same_code_is_a_cohort_incident(
        tmp_path: Path) -> None:
    """Issue 37: the same Xid on several nodes is counted over their driver cohort
    (published by the node check), across leaves; different codes are not related."""
    w = World(tmp_path, published={n: {"driver": "570.124.06"} for n in NAMES})
    w.alerts = {"gpu01": [ib("gpu01", fault="gpu.xid.79")],
                "gpu02": [ib("gpu02", fault="gpu.xid.48")],
                "gpu03": [ib("gpu03", fault="gpu.xid.119")]}
    w.cycle(T0)
    assert w.incidents() == []
    w.alerts["gpu05"] = [ib("gpu05", T0 + timedelta(minutes=1), fault="gpu.xid.119")]
    w.alerts["gpu06"] = [ib("gpu06", T0 + timedelta(minutes=1), fault="gpu.xid.119")]
    w.cycle(T0 + timedelta(minutes=1))
    # gpu03 under leaf1, gpu05 and gpu06 under leaf2: one driver cohort, 3 nodes.
    [inc] = w.incidents()
    assert (inc.group, inc.domain, inc.component, inc.nodes) == (
        "xid:gpu.xid.119", "cohort", "cohort:driver=570.124.06", ("gpu03", "gpu05", "gpu06"))
    assert "driver/firmware/image cohort can cause gpu.xid.119" in inc.why


def test_a_persons_close_lets_the_held_remediations_go_on_one_per_switch(
        tmp_path: Path) -> None:
    w = World(tmp_path)
    for n in ("gpu01", "gpu02", "gpu03"):
        w.alerts[n] = [ib(n)]
    w.cycle(T0)
    [inc] = w.incidents()
    w.store.add_command(Command(id="c1", at=T0, kind="close_incident", by="alice",
                                incident=inc.id, reason="the switch was fine; node faults"))
    plan = w.cycle(T0 + timedelta(minutes=10))
    [closed] = w.incidents()
    assert (closed.state, closed.resolved_by) == ("resolved", "alice")
    assert "closed by alice" in closed.resolution
    # Blast radius 1 per switch: one cordon, the others held by S7 for the switch.
    [(_, first)] = [k for k in kinds(plan) if k[0] == "cordon"]
    radius = [r for r in plan.records if r.rule == "S7" and "topology.blast_radius" in r.why]
    assert {r.node for r in radius} | {first} == {"gpu01", "gpu02", "gpu03"}
    assert first not in {r.node for r in radius}
    # The same alerts never open the incident again.
    w.cycle(T0 + timedelta(minutes=11))
    assert [i.state for i in w.incidents()] == ["resolved"]


def test_the_incidents_metric_shows_each_open_incident_until_it_ends(tmp_path: Path) -> None:
    """SPEC S7 / O4: slurm_heal_incidents_open{component,kind} is the nodes an open
    incident holds, set after each cycle, gone once a person closed it."""
    from slurm_heal.controller import CycleFacts
    from slurm_heal.metrics import Metrics

    w, metrics = World(tmp_path), Metrics(policy=pol())

    def seen(plan: Plan, now: datetime) -> float | None:
        state = w.store.load()
        metrics.observe(CycleFacts(at=now, view=w.view(), before=state, after=state,
                                   plan=plan, executed=(), duration_s=0.1))
        return metrics.registry.get_sample_value(
            "slurm_heal_incidents_open", {"component": "switch:leaf1", "kind": "switch"})

    assert seen(w.cycle(T0), T0) is None  # no alert, no incident
    for n in ("gpu01", "gpu02", "gpu03"):
        w.alerts[n] = [ib(n)]
    assert seen(w.cycle(T0 + timedelta(minutes=1)), T0 + timedelta(minutes=1)) == 3
    [inc] = w.incidents()
    w.store.add_command(Command(id="c1", at=T0, kind="close_incident", by="alice",
                                incident=inc.id))
    assert seen(w.cycle(T0 + timedelta(minutes=2)), T0 + timedelta(minutes=2)) is None


def test_closing_by_component_and_an_unknown_id(tmp_path: Path) -> None:
    w = World(tmp_path)
    for n in ("gpu05", "gpu06", "gpu07"):
        w.alerts[n] = [ib(n)]
    w.cycle(T0)
    w.store.add_command(Command(id="c1", at=T0, kind="close_incident", by="bob",
                                incident="i-000000000000"))
    plan = w.cycle(T0 + timedelta(minutes=1))
    assert any("ignored: no open incident" in r.why for r in plan.records)
    w.store.add_command(Command(id="c2", at=T0, kind="close_incident", by="bob",
                                incident="switch:leaf2"))
    w.cycle(T0 + timedelta(minutes=2))
    assert [(i.component, i.resolved_by) for i in w.incidents()] == [("switch:leaf2", "bob")]


def test_the_alerts_clearing_ends_the_incident_and_withdraws_the_held_work(
        tmp_path: Path) -> None:
    w = World(tmp_path)
    for n in ("gpu01", "gpu02", "gpu03"):
        w.alerts[n] = [ib(n)]
    w.cycle(T0)
    w.alerts = {}
    plan = w.cycle(T0 + timedelta(minutes=30))
    [inc] = w.incidents()
    assert inc.state == "resolved" and inc.resolved_by is None
    assert "cleared" in inc.resolution
    assert {w.phase(n) for n in ("gpu01", "gpu02", "gpu03")} == {Phase.WITHDRAWN}
    assert not [e for e in plan.effects if e.kind == "cordon"]


def test_blast_radius_holds_a_second_remediation_under_the_same_switch_only(
        tmp_path: Path) -> None:
    w = World(tmp_path, policy=pol(incidents={"enabled": False}))
    w.alerts = {"gpu01": [ib("gpu01", fault="gpu.xid.48")],
                "gpu02": [ib("gpu02", fault="fs.readonly")],
                "gpu05": [ib("gpu05", fault="gpu.xid.48")]}
    plan = w.cycle(T0)
    assert sorted(k for k in kinds(plan) if k[0] == "cordon") == [
        ("cordon", "gpu01"), ("cordon", "gpu05")]
    held = [r for r in plan.records if r.node == "gpu02" and r.rule == "S7"]
    assert len(held) == 1 and "switch leaf1 already has 1 remediation(s)" in held[0].why


def test_blast_radius_of_two_lets_two_run_under_one_switch(tmp_path: Path) -> None:
    w = World(tmp_path, policy=pol(incidents={"enabled": False},
                                   topology={"blast_radius": 2}))
    w.alerts = {n: [ib(n, fault="gpu.xid.48")] for n in ("gpu01", "gpu02", "gpu03")}
    plan = w.cycle(T0)
    assert len([k for k in kinds(plan) if k[0] == "cordon"]) == 2


def test_node_features_are_the_topology_when_slurm_has_none() -> None:
    view = ClusterView(nodes=tuple(
        NodeInfo(name=n, states=frozenset({"IDLE"}), partitions=("a",),
                 features=("rack=r1",)) for n in ("gpu01", "gpu02", "gpu03")))
    # Issue 37: a rack can cause hosts to be unreachable (not an IB link down).
    alerts = {n: [ib(n, fault="host.unreachable")] for n in ("gpu01", "gpu02", "gpu03")}
    plan = decide(view, State(), T0, pol(), alerts)
    assert plan.data is not None
    [inc] = load(plan.data[INCIDENTS_KEY]).values()
    assert inc.component == "rack:r1" and inc.source == "features"
    off = decide(view, State(), T0, pol(topology={"source": "none"}), alerts)
    assert [e.kind for e in off.effects] == ["cordon"] * 3  # no topology: no S7 at all


def test_an_unreadable_topology_is_recorded_and_deciding_goes_on() -> None:
    view = ClusterView(nodes=(NodeInfo(name="gpu01", states=frozenset({"IDLE"}),
                                       partitions=("a",)),),
                       topology=Topology(source="file", problem="topology.conf line 3: x"))
    plan = decide(view, State(), T0, pol(), {"gpu01": [ib("gpu01")]})
    assert any(r.rule == "S7" and "cannot be read (topology.conf line 3" in r.why
               for r in plan.records)
    assert [e.kind for e in plan.effects] == ["cordon"]  # no topology: no settle, no incident


def test_two_plans_incidents_are_joined_an_ended_one_stays_ended() -> None:
    a = Incident(id="i-a", component="switch:leaf1", kind="switch", name="leaf1", group="ib",
                 size=4, opened=T0, updated=T0, nodes=("gpu01",))
    b = a.model_copy(update={"id": "i-b", "component": "switch:leaf2"})
    ended = a.model_copy(update={"state": "resolved", "resolved": T0, "resolved_by": "alice"})
    joined = load(merge([ended.model_dump(mode="json")],
                        [a.model_dump(mode="json"), b.model_dump(mode="json")]))
    assert sorted(joined) == ["i-a", "i-b"] and joined["i-a"].state == "resolved"


def test_incident_keys_are_validated_with_the_key_named() -> None:
    with pytest.raises(ConfigError, match="incidents: .*each_fault names 'gpu'"):
        pol(incidents={"each_fault": ["gpu"]})
    with pytest.raises(ConfigError, match="incidents.min_nodes"):
        pol(incidents={"min_nodes": 1})
    with pytest.raises(ConfigError, match="topology.blast_radius"):
        pol(topology={"blast_radius": 0})


def test_the_incidents_notice_is_one_critical_incident_event_with_every_nodes_evidence(
        tmp_path: Path) -> None:
    from slurm_heal.notify.events import cycle_events

    w = World(tmp_path)
    for n in ("gpu01", "gpu02", "gpu03"):
        w.alerts[n] = [Alert(node=n, fault="ib.link_down", severity=Severity.CRITICAL,
                             summary="", first_seen=T0, last_seen=T0, evidence=(
                                 Evidence(source="sysfs", text=f"{n} port 1 DOWN"),))]
    before = w.store.load()
    plan = w.cycle(T0)
    after = w.store.load()
    [event] = cycle_events(before, after, plan, plan.effects, w.alerts, T0)
    assert (event.kind, event.severity) == ("incident", "critical")
    assert event.title == "incident on switch leaf1: 3 of 4 nodes (ib.link_down)"
    assert [e["evidence"][0]["text"] for e in event.evidence] == [
        "gpu01 port 1 DOWN", "gpu02 port 1 DOWN", "gpu03 port 1 DOWN"]
    assert "slurm-heal incident close" in event.body()


def test_two_controllers_deciding_on_the_same_store_record_one_incident(
        tmp_path: Path) -> None:
    """SPEC S6: replicas A and B decide on the same snapshot and store; both plans are
    applied (A's first): one incident, the same id."""
    w = World(tmp_path)
    for n in ("gpu01", "gpu02", "gpu03"):
        w.alerts[n] = [ib(n)]
    state = w.store.load()
    plan_a = decide(w.view(), state, T0, w.policy, w.alerts)
    plan_b = decide(w.view(), state, T0 + timedelta(seconds=1), w.policy, w.alerts)
    w.store.apply(plan_a, T0)
    w.store.apply(plan_b, T0 + timedelta(seconds=1))
    assert len(w.incidents()) == 1
    assert {r.id for r in w.store.load().remediations} == {r.id for r in plan_a.updates}
