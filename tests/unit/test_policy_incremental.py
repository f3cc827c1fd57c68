"""A cycle's work follows what changed, not the cluster's size (issue 20; SPEC I2).

Not timed: the controller's and simulate's `Decide` keep each node's check data between
cycles, validated once per change of its Extra text; these tests count the validations
(`CheckCache.parses`) cycle by cycle and hold them to the nodes whose Extra changed, and
hold the plans to the ones the bare decide() makes on the same snapshot. The timings
live in benchmarks/.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta, timezone

from slurm_heal.config import policy_from_dict
from slurm_heal.extra import CheckCache, parse_extra, read_check_data
from slurm_heal.models import Plan, State
from slurm_heal.policy.records import Records
from slurm_heal.simulation import Simulation, parse_scenario
from slurm_heal.types import ClusterView, NodeInfo
from tests.policycore import Decide, decide, decide_effort

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
POLICY = policy_from_dict({"approvals": {"default": "auto"}})
NODES = 120


def extra(name: str, checked: datetime, fault: str | None = None) -> str:
    alerts = [] if fault is None else [{
        "fault": fault, "severity": "critical", "summary": "GSP RPC timeout",
        "detector": "kernel_log", "first_seen": (checked - timedelta(hours=1)).isoformat(),
        "last_seen": checked.isoformat(), "evidence": []}]
    return json.dumps({"slurm_heal": {"v": 1, "checked_at": checked.isoformat(),
                                      "host": f"m-{name}", "alerts": alerts}})


def node(i: int, raw: str) -> NodeInfo:
    """A node as a fresh snapshot reads it: a new object, Extra parsed from its text."""
    return NodeInfo(name=f"n{i:03d}", states=frozenset({"IDLE"}), partitions=(f"p{i // 40}",),
                    extra_raw=raw, extra=parse_extra(raw))


def snapshot(texts: dict[int, str]) -> ClusterView:
    return ClusterView(nodes=tuple(node(i, texts[i]) for i in range(NODES)))


def applied(state: State, plan: Plan) -> State:
    rems = {r.id: r for r in state.remediations}
    rems.update({r.id: r for r in plan.updates})
    return state.model_copy(update={"remediations": tuple(rems.values())})


def test_extra_is_validated_once_per_change_of_its_text_and_plans_stay_the_same() -> None:
    """SPEC I2 / issue 20: the first cycle validates every node's Extra; a cycle whose
    snapshot carries the same texts (new objects, as every snapshot makes) validates
    none; one where three nodes' check published something new validates those three.
    Every plan is the one the bare decide() makes."""
    texts = {i: extra(f"n{i:03d}", T0) for i in range(NODES)}
    run = Decide()
    state = State()
    counts = []
    for k, changed in enumerate(((), (), (5, 47, 99), (), (47,))):
        now = T0 + timedelta(seconds=30 * k)
        for i in changed:
            texts[i] = extra(f"n{i:03d}", now, fault="gpu.xid.119")
        view = snapshot(texts)
        before = run.checks.parses
        plan = run(view, state, now, POLICY)
        counts.append(run.checks.parses - before)
        assert plan == decide(view, state, now, POLICY)
        state = applied(state, plan)
    assert counts == [NODES, 0, 3, 0, 1]
    assert {r.node for r in state.remediations} == {"n005", "n047", "n099"}


def test_a_cycle_resolves_contexts_for_the_nodes_with_something_going_on() -> None:
    """Issue 20: the rules resolve a node's context (node, check data, alerts, pool,
    machine) once per call, and only for nodes with something going on: none on a
    quiet cluster, the three alerting nodes once their alerts arrive (and while their
    remediations are open), never the other 117; Extra is validated for the nodes
    whose text changed."""
    texts = {i: extra(f"n{i:03d}", T0) for i in range(NODES)}
    cache = CheckCache()
    records: Records | None = None
    state = State()
    contexts, parses = [], []
    for k, changed in enumerate(((), (), (5, 47, 99), (), (47,), ())):
        now = T0 + timedelta(seconds=30 * k)
        for i in changed:
            texts[i] = extra(f"n{i:03d}", now, fault="gpu.xid.119")
        view = snapshot(texts)
        before = cache.parses
        checks = cache.read_view(view.nodes, now)
        parses.append(cache.parses - before)
        records = Records.of(state.remediations, records)
        plan, effort = decide_effort(view, state, now, POLICY, checks=checks, records=records)
        assert len(effort.contexts) == len(set(effort.contexts))  # once per call
        contexts.append(set(effort.contexts))
        assert plan == decide(view, state, now, POLICY)
        state = applied(state, plan)
    alerting = {"n005", "n047", "n099"}
    assert parses == [NODES, 0, 3, 0, 1, 0]
    assert contexts == [set(), set(), alerting, alerting, alerting, alerting]
    assert {r.node for r in state.remediations} == alerting


def test_a_node_gone_from_the_snapshot_is_forgotten_and_read_again_when_back() -> None:
    cache = CheckCache()
    texts = {i: extra(f"n{i:03d}", T0) for i in range(NODES)}
    view = snapshot(texts)
    cache.read_view(view.nodes, T0)
    cache.read_view(view.nodes[1:], T0)
    before = cache.parses
    cache.read_view(view.nodes, T0)
    assert cache.parses - before == 1


def test_data_whose_validity_depends_on_the_time_is_read_as_at_that_time() -> None:
    """SPEC I2: a time more than a day ahead is broken data *now*, not forever, and an
    alert without first_seen is first seen now: the cache gives what read_check_data
    gives at each time, never a stale verdict."""
    ahead = (T0 + timedelta(days=2)).isoformat()
    raw_ahead = json.dumps({"slurm_heal": {"v": 1, "checked_at": ahead, "alerts": []}})
    raw_unseen = json.dumps({"slurm_heal": {"v": 1, "alerts": [
        {"fault": "gpu.xid.79", "severity": "critical"}]}})
    cache = CheckCache()
    for raw in (raw_ahead, raw_unseen):
        for now in (T0, T0 + timedelta(days=1, hours=1), T0 + timedelta(days=3)):
            got = cache.read("n1", raw, parse_extra(raw), now)
            assert got == read_check_data("n1", parse_extra(raw), now)
    assert cache.read("n1", raw_ahead, parse_extra(raw_ahead), T0).problem is not None
    assert cache.read("n1", raw_ahead, parse_extra(raw_ahead), T0 + timedelta(days=3)).problem \
        is None
    # The same through a whole snapshot read again unchanged (the path that hands out
    # the last result): the verdict still follows the time.
    texts = {i: extra(f"n{i:03d}", T0) for i in range(NODES)}
    texts[7] = raw_ahead
    view = snapshot(texts)
    cache = CheckCache()
    for now in (T0, T0 + timedelta(days=1, hours=1), T0 + timedelta(days=3), T0):
        for _ in range(2):
            got = cache.read_view(snapshot(texts).nodes, now)
            assert got == {n.name: read_check_data(n.name, n.extra, now) for n in view.nodes}
            assert set(got.flagged) == {k for k, v in got.items() if v.alerts or v.problem}


def test_a_node_built_without_its_text_is_keyed_by_its_parsed_extra() -> None:
    """simulate and the tests build NodeInfo from a dict: the same dict object is the
    same data; a new one is read again (never a stale read of changed data)."""
    data = parse_extra(extra("n1", T0))
    cache = CheckCache()
    first = cache.read("n1", "", data, T0)
    assert cache.read("n1", "", data, T0) is first and cache.parses == 1
    bad = {"slurm_heal": {"v": 1, "alerts": 3}}
    assert cache.read("n1", "", bad, T0).problem == \
        "slurm_heal.alerts: expected a list, got a number"
    assert cache.parses == 2
    assert dataclasses.replace(first) == read_check_data("n1", data, T0)


def index_of(r: Records) -> dict[str, object]:
    """What an index says, as plain data (empty per-node maps are no open work)."""
    return {"rems": r.rems, "pos": r.pos, "order": r.order, "by_node": r.by_node,
            "by_host": r.by_host, "known": set(r.known), "started": set(r.started_ids),
            "open": {k: set(v) for k, v in r.open_by_node.items() if v},
            "auto_cordoned": r.auto_cordoned, "unsettled": set(r.unsettled)}


def test_the_store_index_kept_between_cycles_is_the_one_built_afresh() -> None:
    """Issue 20: the index of the last cycle's records is reused for the records that
    are the same objects; over a simulated day of whole life cycles (creations, holds,
    cordons, acts, returns, done) it says exactly what an index built from scratch
    says, and the last cycle's index is left as it was."""
    sc = parse_scenario({
        "start": "2026-01-05T00:00:00Z", "until": "+3h",
        "config": {"approvals": {"default": "auto"}},
        "nodes": [{"name": f"gpu{i:02d}", "pool": f"p{i % 2}"} for i in range(6)],
        "events": [{"at": f"+{10 * i}m", "type": "alert", "node": f"gpu{i:02d}",
                    "fault": "gpu.xid.48"} for i in range(6)]})
    states = []
    result = Simulation(sc, on_cycle=lambda c: states.append(c.state)).run()
    states.append(result.state)
    assert sum(r.phase.value == "done" for r in result.state.remediations) >= 4
    kept: Records | None = None
    reused = 0
    for state in states:
        previous = index_of(kept) if kept is not None else None
        new = Records.of(state.remediations, kept)
        assert index_of(new) == index_of(Records.of(state.remediations))
        if kept is not None:
            assert index_of(kept) == previous
            # Reused, not rebuilt: a node no record of which changed keeps its list.
            reused += any(new.by_node[n] is kept.by_node[n] for n in kept.by_node)
        kept = new
    assert reused > 10
    assert kept is not None
    pruned = states[-1].remediations[1:]  # retention removed one: indexed afresh, the same
    assert index_of(Records.of(pruned, kept)) == index_of(Records.of(pruned))
