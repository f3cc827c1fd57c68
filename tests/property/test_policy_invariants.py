"""Invariants of the engine over random event streams (issue 3, hypothesis).

Each example is a random scenario (alerts, clears, jobs, approvals, cancels, requests,
failing actions, breaker resets) on a six-node, three-pool cluster under a random policy,
run through the real simulation. Every decide() call is checked:

- S3/S4: never more remediations in disruptive phases than the limit, never two in a pool;
- P1: never a cordon or an action on a node without a confirmed failure (an active
  alert of at least warning severity that is neither record-only nor Slurm's own
  state); E3: never a migrate without evidence; Q2: never `remove`;
- S5: no automatic remediation starts while the breaker is open (one started before it
  opened may finish), never more automatic starts in the window than the threshold;
  S2: nothing starts within the cooldown after a remediation on the node;
- D5 / house style 2: never a cordon, resume, release, act, signal or eviction on a node
  someone else drained, also when their reason looks like ours ("Reboot ...", "heal
  ...", "NHC: ...");
- O2: while paused, no cordon, signal, eviction or act;
- S6: deciding twice on the same input gives the same plan; no key is handed out twice;
  L3: never two open remediations on one node.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from slurm_heal import catalog as catalog_mod
from slurm_heal.models import Phase, Remediation
from slurm_heal.policy import is_automatic
from slurm_heal.simulation import Cycle, Simulation, parse_scenario
from slurm_heal.types import Action, Alert, NodeInfo, Severity
from tests.policycore import decide

NODES = [f"gpu0{i}" for i in range(1, 7)]
FAULTS = ["gpu.xid.48", "gpu.xid.79", "gpu.xid.119", "service.restart_loop",
          "gpu.row_remap.pending", "gpu.thermal", "disk.low_space"]

# Someone else's reasons, including ones that look like ours or like Slurm's own reboot
# reasons (issue 8): none of them is ever resumed, released or relabelled.
FOREIGN_REASONS = ["bad DIMM, do not use -- bob", "Not responding",
                   "Reboot pending: BIOS update (bob)", "Reboot", "reboot requested by alice",
                   "Node unexpectedly rebooted twice, ticket 4",
                   "healing: memtest running (carol)", "heal later -- dave",
                   "NHC: check_hw_ib: No IB port is ACTIVE", "NHC: heal: not ours"]
# Slurm's own reboot reasons, written out here on their own (slurmctld's exact texts).
SLURM_REBOOT = {"Node unexpectedly rebooted", "reboot requested", "Reboot ASAP",
                "reboot issued", "reboot complete", "reboot timed out"}

alert = st.fixed_dictionaries({"type": st.just("alert"), "node": st.sampled_from(NODES),
                               "fault": st.sampled_from(FAULTS)})
event = st.one_of(
    alert, alert, alert,  # weighted: most of what happens to a cluster is alerts
    st.fixed_dictionaries({"type": st.just("clear"), "node": st.sampled_from(NODES),
                           "fault": st.sampled_from(FAULTS)}),
    st.fixed_dictionaries({"type": st.just("job"), "node": st.sampled_from(NODES),
                           "id": st.integers(1, 50), "ends": st.integers(1, 300)}),
    st.fixed_dictionaries({"type": st.sampled_from(["approve", "deny", "cancel",
                                                    "action_fails"]),
                           "node": st.sampled_from(NODES)}),
    st.fixed_dictionaries({"type": st.just("request"), "node": st.sampled_from(NODES),
                           "action": st.sampled_from(["reboot", "rebuild", "migrate", "remove"]),
                           "who": st.sampled_from(["person", "detector"]),
                           "id": st.sampled_from(["1", "2"])}),
    st.fixed_dictionaries({"type": st.just("reset_breaker")}),
    st.fixed_dictionaries({"type": st.sampled_from(["pause", "unpause"])}),
    # Someone else drains a node (their reason) or resumes it (D5, house style 2).
    st.fixed_dictionaries({"type": st.just("drain"), "node": st.sampled_from(NODES),
                           "reason": st.sampled_from(FOREIGN_REASONS)}),
    st.fixed_dictionaries({"type": st.just("resume"), "node": st.sampled_from(NODES)}),
)
# A busy few hours, so that remediations overlap and the limits matter.
timed = st.tuples(st.integers(0, 240), event)
policies = st.fixed_dictionaries({
    "approvals": st.fixed_dictionaries({"default": st.sampled_from(["auto", "manual"])}),
    "safety": st.fixed_dictionaries({
        "breaker_threshold": st.integers(1, 4),
        "concurrency": st.sampled_from([1, 2, 3]),
        "one_per_pool": st.booleans()}),
    "waiting": st.fixed_dictionaries({"max_wait": st.sampled_from(["30m", "2h", "never"])}),
})


def scenario(events: list[tuple[int, dict[str, Any]]], config: dict[str, Any]) -> dict[str, Any]:
    out = []
    for minute, raw in events:
        e = {k: v for k, v in raw.items() if k != "who"}
        e["at"] = f"+{minute}m"
        if e["type"] == "job":
            e["ends"] = f"+{minute + e['ends']}m"
        if e["type"] == "request":
            if raw["who"] == "person":
                e["by"] = "alice"
            else:
                e["detector"] = "det"
        out.append(e)
    return {"start": "2026-01-05T00:00:00Z", "config": config, "until": "+2d",
            "nodes": [{"name": n, "pool": f"p{i // 2}"} for i, n in enumerate(NODES)],
            "events": out}


def foreign(n: NodeInfo) -> bool:
    """Someone else's drain, defined here on its own (not by calling the engine)."""
    r = n.reason.strip()
    return bool(("DRAIN" in n.states or "DOWN" in n.states) and r
                and not r.startswith(("heal:", "heal-request:"))
                and not all(p.strip() in SLURM_REBOOT for p in r.split(" : ")))


# P1, written out here on its own (not by calling the engine): Slurm's own state and the
# request channel are never evidence; neither is a record-only fault (D8) or an info alert.
SLURM_OR_REQUEST = {"slurm.node_down", "slurm.node_drain", "request", "request.malformed"}
CATALOG = catalog_mod.load()


def confirmed(a: Alert) -> bool:
    return (a.fault not in SLURM_OR_REQUEST and a.severity is not Severity.INFO
            and not (a.fault in CATALOG and CATALOG.get(a.fault).record_only))


def merged(c: Cycle) -> dict[str, Remediation]:
    rems = {r.id: r for r in c.state.remediations}
    rems.update({r.id: r for r in c.plan.updates})
    return rems


class Checker:
    def __init__(self, sc: Any) -> None:
        self.sc = sc
        self.problems: list[str] = []

    def __call__(self, c: Cycle) -> None:
        pol = self.sc.policy
        after = merged(c)
        at = c.at.isoformat()
        # S6: deterministic
        if decide(c.view, c.state, c.at, pol, c.alerts) != c.plan:
            self.problems.append(f"{at}: two decisions on the same input differ")
        disruptive = [r for r in after.values() if r.phase.disruptive]
        limit = pol.safety.concurrency_limit(len(c.view.nodes))
        if len(disruptive) > limit:
            self.problems.append(f"{at}: S3 {len(disruptive)} > {limit}")
        if pol.safety.one_per_pool:
            pools = [r.pool for r in disruptive]
            if len(pools) != len(set(pools)):
                self.problems.append(f"{at}: S4 two in one pool")
        # S5: never more automatic starts within the window (since a reset) than allowed
        breaker = c.plan.breaker or c.state.breaker
        since = c.at - pol.safety.breaker_window
        if breaker.reset_at is not None and breaker.reset_at > since:
            since = breaker.reset_at
        starts = [r for r in after.values() if is_automatic(r)
                  and (t := r.phase_times.get("cordoned")) is not None and t >= since]
        if len(starts) > pol.safety.breaker_threshold:
            self.problems.append(f"{at}: S5 {len(starts)} automatic starts in the window")
        open_nodes = [r.node for r in after.values() if not r.phase.terminal]
        if len(open_nodes) != len(set(open_nodes)):
            self.problems.append(f"{at}: L3 two open remediations on one node")
        # O2 / house style 8: while paused nothing disruptive is sent (eviction included)
        paused = c.plan.paused if c.plan.paused is not None else c.state.paused
        if paused:
            bad = [e.kind for e in c.plan.effects if e.kind in (
                "cordon", "act", "signal_jobs", "requeue_jobs", "cancel_jobs")]
            if bad:
                self.problems.append(f"{at}: O2 {bad} while paused")
        by_name = {n.name: n for n in c.view.nodes}
        for e in c.plan.effects:
            rem = after.get(e.remediation or "")
            if e.kind in ("cordon", "resume", "release", "act", "signal_jobs", "requeue_jobs",
                          "cancel_jobs") and foreign(by_name[e.node]):
                self.problems.append(f"{at}: D5 {e.kind} of {e.node} drained by someone else "
                                     f"({by_name[e.node].reason!r})")
            if e.action is Action.REMOVE:
                self.problems.append(f"{at}: Q2 remove")
            if rem is None or e.kind not in ("cordon", "act"):
                continue
            alerts = [a for a in c.alerts.get(e.node, []) if a.active]
            if not [a for a in alerts if confirmed(a)]:
                self.problems.append(f"{at}: P1 {e.kind} of {e.node} without a confirmed "
                                     "failure")
            if e.kind == "act" and e.action is Action.MIGRATE:
                crit_now = any(a.severity is Severity.CRITICAL for a in alerts)
                crit_past = any(r.host == rem.host and r.severity is Severity.CRITICAL
                                and r.created >= c.at - timedelta(days=10)
                                for r in c.state.remediations)
                if not (crit_now or crit_past):
                    self.problems.append(f"{at}: E3 migrate without evidence")
            # a person's reset in this very cycle lets automatic work start again
            reset_now = any(cmd.kind == "reset_breaker" and cmd.id in c.plan.consumed
                            for cmd in c.state.inbox)
            started_before = (e.kind == "act" and c.state.breaker.opened_at is not None
                              and rem.phase_times.get("cordoned", c.at)
                              <= c.state.breaker.opened_at)
            if c.state.breaker.open and not reset_now and is_automatic(rem) \
                    and not started_before:
                self.problems.append(f"{at}: S5 automatic {e.kind} with the breaker open")
            for r in c.state.remediations:
                end = r.phase_times.get(r.phase.value)
                if (r.node == e.node and r.phase in (Phase.DONE, Phase.FAILED) and end
                        and any(a.effect == "act" for a in r.attempts)
                        and c.at < end + pol.safety.cooldown and e.kind == "cordon"):
                    self.problems.append(f"{at}: S2 cordon of {e.node} within the cooldown")


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events=st.lists(timed, min_size=1, max_size=14), config=policies)
@example(events=[(0, {"type": "alert", "node": "gpu02", "fault": "disk.low_space"}),
                 (1, {"type": "request", "node": "gpu02", "action": "reboot",
                      "who": "detector", "id": "1"})],
         config={"approvals": {"default": "auto"},
                 "safety": {"breaker_threshold": 4, "concurrency": 2, "one_per_pool": True},
                 "waiting": {"max_wait": "2h"}})
@example(events=[(0, {"type": "drain", "node": "gpu01", "reason": "bad DIMM, do not use"}),
                 (1, {"type": "alert", "node": "gpu01", "fault": "gpu.xid.79"})],
         config={"approvals": {"default": "auto"},
                 "safety": {"breaker_threshold": 4, "concurrency": 2, "one_per_pool": True},
                 "waiting": {"max_wait": "2h"}})
@example(events=[(0, {"type": "alert", "node": "gpu01", "fault": "gpu.xid.48"}),
                 (3, {"type": "drain", "node": "gpu01",
                      "reason": "Reboot pending: BIOS update (bob)"})],
         config={"approvals": {"default": "auto"},
                 "safety": {"breaker_threshold": 4, "concurrency": 2, "one_per_pool": True},
                 "waiting": {"max_wait": "2h"}})  # issue 8, defect 2: not Slurm's reason
@example(events=[(0, {"type": "job", "node": "gpu01", "id": 1, "ends": 10}),
                 (0, {"type": "alert", "node": "gpu01", "fault": "gpu.xid.48"}),
                 (2, {"type": "drain", "node": "gpu01", "reason": "NHC: heal: not ours"})],
         config={"approvals": {"default": "auto"},
                 "safety": {"breaker_threshold": 4, "concurrency": 2, "one_per_pool": True},
                 "waiting": {"max_wait": "2h"}})  # issue 8, defect 11: drained before the act
@example(events=[(0, {"type": "job", "node": "gpu01", "id": 1, "ends": 200}),
                 (0, {"type": "alert", "node": "gpu01", "fault": "gpu.xid.48"}),
                 (5, {"type": "pause"})],
         config={"approvals": {"default": "auto"},
                 "safety": {"breaker_threshold": 4, "concurrency": 2, "one_per_pool": True},
                 "waiting": {"max_wait": "30m"}})  # issue 8, defect 8: paused at the limit
@example(events=[(0, {"type": "request", "node": "gpu01", "action": "reboot", "who": "person",
                      "id": "1"}),
                 (0, {"type": "approve", "node": "gpu01"})],
         config={"approvals": {"default": "auto"},
                 "safety": {"breaker_threshold": 1, "concurrency": 1, "one_per_pool": False},
                 "waiting": {"max_wait": "30m"}})  # O6: approved while waiting for evidence
def test_invariants_hold_over_random_event_streams(events: list[tuple[int, dict[str, Any]]],
                                                   config: dict[str, Any]) -> None:
    sc = parse_scenario(scenario(events, config))
    check = Checker(sc)
    result = Simulation(sc, on_cycle=check).run()
    assert not result.violations, result.violations  # S6: no key handed out twice
    assert not check.problems, check.problems[:5]


# Liveness (issue 20): a decide() that never acts passes every safety invariant above, so
# it must fail here. An automatically approved critical alert on an idle node that nobody
# else drained, with the controller running and the breaker closed, is cordoned within
# LIVENESS_CYCLES cycles from the alert's arrival (S1: by default a critical alert needs no
# persistence; L1: the cordon is the first step, idle or not).
LIVENESS_CYCLES = 3
CRITICAL = sorted(f.id for f in CATALOG.faults.values()
                  if f.severity is Severity.CRITICAL and f.action is not Action.NONE
                  and not f.record_only and f.id not in SLURM_OR_REQUEST)
live_policies = st.fixed_dictionaries({
    "approvals": st.just({"default": "auto"}),
    "safety": st.fixed_dictionaries({
        "breaker_threshold": st.integers(1, 4),
        "concurrency": st.sampled_from([1, 2, 3]),
        "one_per_pool": st.booleans()}),
    "waiting": st.fixed_dictionaries({"max_wait": st.sampled_from(["30m", "2h", "never"])}),
})
# Elsewhere on the cluster jobs come and go (they make cycles of their own).
others_busy = st.lists(st.tuples(st.integers(0, 240), st.sampled_from(NODES),
                                 st.integers(1, 300)), max_size=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node=st.sampled_from(NODES), fault=st.sampled_from(CRITICAL),
       minute=st.integers(0, 240), jobs=others_busy, config=live_policies)
def test_critical_alert_on_an_idle_node_is_cordoned_within_a_few_cycles(
        node: str, fault: str, minute: int, jobs: list[tuple[int, str, int]],
        config: dict[str, Any]) -> None:
    """Liveness: deciding nothing is no safe answer. SPEC P2 (auto), S1, L1."""
    events: list[tuple[int, dict[str, Any]]] = [
        (at, {"type": "job", "node": other, "id": i + 1, "ends": ends})
        for i, (at, other, ends) in enumerate(jobs) if other != node]
    events.append((minute, {"type": "alert", "node": node, "fault": fault}))
    sc = parse_scenario(scenario(sorted(events, key=lambda e: e[0]), config))
    arrived = sc.start + timedelta(minutes=minute)
    seen: list[tuple[str, list[str]]] = []  # (cycle time, effects on the node)

    def watch(c: Cycle) -> None:
        if c.at >= arrived:
            seen.append((c.at.isoformat(), [e.kind for e in c.plan.effects if e.node == node]))

    Simulation(sc, on_cycle=watch).run()
    cordoned = [i for i, (_, kinds) in enumerate(seen) if "cordon" in kinds]
    assert cordoned and cordoned[0] < LIVENESS_CYCLES, \
        f"{fault} on idle {node} at +{minute}m: no cordon within {LIVENESS_CYCLES} " \
        f"cycles; cycles seen: {seen[:LIVENESS_CYCLES + 2]}"


# The one classifier of reasons (slurm_heal.reasons.owner) the engine, the controller
# and the node check ask agrees with the D5 oracle above (written out on its own) on our
# markers, requests, Slurm's own reboot reasons (alone and appended to ours) and the
# lookalikes, and on any text at all.
_REASONS = st.one_of(
    st.sampled_from(FOREIGN_REASONS), st.sampled_from(sorted(SLURM_REBOOT)),
    st.sampled_from(["heal: gpu.xid.79 rem=r-1 by=controller for reboot",
                     "heal: gpu.xid.79 by=check GPU fell off the bus",
                     "heal: gpu.xid.79 rem=r-1 by=controller for reboot : reboot issued",
                     "heal-request: reboot detector=ibmon id=4711 flapping",
                     "heal-request: explode", "reboot issued : Reboot ASAP", "",
                     " heal: x", "reboot issued : bob's BIOS update"]),
    st.text(max_size=40))


@settings(max_examples=300, deadline=None)
@given(reason=_REASONS, down=st.booleans())
def test_the_reason_classifier_agrees_with_the_d5_oracle(reason: str, down: bool) -> None:
    """D5 / house style 2: a node out of service is someone else's exactly when owner()
    says "person"; Slurm's own reboot reasons are "slurm", never a person's."""
    from slurm_heal.reasons import owner

    n = NodeInfo(name="gpu01", states=frozenset({"IDLE", "DOWN" if down else "DRAIN"}),
                 reason=reason)
    assert foreign(n) == (owner(reason) == "person" and bool(reason.strip()))
    if reason.strip() and all(p.strip() in SLURM_REBOOT for p in reason.strip().split(" : ")):
        assert owner(reason) == "slurm"
