"""decide() as a table of scenarios: one citing test per SPEC rule (P, Q, L, E, S, D5, D8).

All pure: a ClusterView, a State, `now` and a Policy in, a Plan out. No Slurm, no clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from slurm_heal.config import Policy, policy_from_dict
from slurm_heal.errors import ConfigError
from slurm_heal.models import (
    Attempt,
    Breaker,
    Command,
    Phase,
    Plan,
    Remediation,
    State,
    idempotency_key,
)
from slurm_heal.reasons import format_marker
from slurm_heal.types import Action, Alert, ClusterView, Evidence, JobInfo, NodeInfo, Severity
from tests.policycore import decide

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
AUTO = {"approvals": {"default": "auto"}}


def node(name: str, *states: str, pool: str = "a", reason: str = "", host: str | None = None,
         boot: datetime | None = None, checked: datetime | None = None) -> NodeInfo:
    ours: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    if host:  # what a migrate records (providers/simulator.py LabHook, extra.HOST_KEY)
        extra["slurm_heal_host"] = {"host": host, "previous": name}
    if checked:
        ours["checked_at"] = checked.isoformat()
    if ours:
        extra["slurm_heal"] = ours
    return NodeInfo(name=name, states=frozenset(states or {"IDLE"}), reason=reason,
                    partitions=(pool,), extra=extra, boot_time=boot)


def alert(n: str, fault: str = "gpu.xid.48", sev: Severity = Severity.CRITICAL,
          since: datetime = T0, seen: datetime | None = None, **kw: Any) -> Alert:
    return Alert(node=n, fault=fault, severity=sev, summary="", first_seen=since,
                 last_seen=seen or since, **kw)


def pol(**over: Any) -> Policy:
    return policy_from_dict({**AUTO, **over})


def rem(n: str = "gpu01", phase: Phase = Phase.DONE, action: Action = Action.REBOOT,
        fault: str = "gpu.xid.48", at: datetime = T0, acted: bool = True, host: str | None = None,
        **kw: Any) -> Remediation:
    rid = kw.pop("id", f"r-{n}-{phase.value}-{at.timestamp():.0f}-{action.value}")
    attempts = (Attempt(key=idempotency_key(rid, "act", 0), effect="act", action=action,
                        started=at, outcome="ok", finished=at),) if acted else ()
    return Remediation(id=rid, node=n, host=host or n, pool="a", fault=fault, action=action,
                       phase=phase, created=at, updated=at, attempts=attempts,
                       phase_times={"cordoned": at, phase.value: at},
                       severity=kw.pop("severity", Severity.CRITICAL),
                       data=kw.pop("data", {"evidence_fault": fault}), **kw)


def run(nodes: list[NodeInfo], alerts: dict[str, list[Alert]] | None = None,
        state: State | None = None, now: datetime = T0, policy: Policy | None = None,
        jobs: tuple[JobInfo, ...] = ()) -> Plan:
    return decide(ClusterView(nodes=tuple(nodes), jobs=jobs), state or State(), now,
                  policy or pol(), alerts or {})


def phases(plan: Plan, n: str | None = None) -> list[tuple[str, str]]:
    return [(r.phase, r.rule) for r in plan.records if n is None or r.node == n]


def kinds(plan: Plan) -> list[str]:
    return [e.kind for e in plan.effects]


def apply(state: State, plan: Plan, outcome: str | None = "ok") -> State:
    """What the daemon does: updates, then an Attempt per effect with an outcome."""
    rems = {r.id: r for r in state.remediations}
    order = [r.id for r in state.remediations]
    for r in plan.updates:
        if r.id not in rems:
            order.append(r.id)
        rems[r.id] = r
    for e in plan.effects:
        if e.remediation:
            r = rems[e.remediation]
            rems[r.id] = r.model_copy(update={"attempts": r.attempts + (Attempt(
                key=e.key, effect=e.kind, action=e.action, started=T0, outcome=outcome,
                finished=T0 if outcome else None),)})
    return state.model_copy(update={
        "remediations": tuple(rems[i] for i in order),
        "inbox": tuple(c for c in state.inbox if c.id not in plan.consumed),
        "breaker": plan.breaker or state.breaker})


# ------------------------------------------------------------------ the thin slice (L1)
def test_alert_is_proposed_auto_approved_and_cordoned_with_our_marker() -> None:
    """SPEC L1/P2: alert -> proposed -> approved -> cordoned, one cordon effect, our marker."""
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]})
    assert phases(plan) == [("proposed", "P1"), ("approved", "P2:default"), ("cordoned", "L1")]
    (eff,) = plan.effects
    r = plan.updates[0]
    assert eff.kind == "cordon" and eff.key == idempotency_key(r.id, "cordon", 0)
    assert eff.reason == format_marker("gpu.xid.48", r.id, "controller", "for reboot")


def test_full_life_cycle_to_resume() -> None:
    """SPEC L1/L5: cordoned -> acting -> returning -> done with a resume of our reason."""
    nodes = [node("gpu01"), node("gpu02")]
    al = {"gpu01": [alert("gpu01")]}
    p1 = run(nodes, al)
    s = apply(State(), p1)
    rid = p1.updates[0].id
    drained = [node("gpu01", "IDLE", "DRAIN", reason=p1.effects[0].reason), node("gpu02")]
    p2 = run(drained, al, s, T0 + timedelta(seconds=30))
    assert phases(p2) == [("acting", "L1")] and kinds(p2) == ["act"]
    assert p2.effects[0].key == idempotency_key(rid, "act", 0)
    s = apply(s, p2, "ok")
    t3 = T0 + timedelta(minutes=1)
    p3 = run(drained, {}, s, t3)
    assert phases(p3) == [("returning", "L5")]
    s = apply(s, p3)
    back = [node("gpu01", "IDLE", "DRAIN", reason=p1.effects[0].reason,
                 boot=t3, checked=t3 + timedelta(seconds=30)), node("gpu02")]
    p4 = run(back, {}, s, t3 + timedelta(minutes=1))
    assert phases(p4) == [("done", "L5")] and kinds(p4) == ["resume"]


# ------------------------------------------------------------------ daemon contract (S6)
def test_deciding_twice_on_the_same_input_gives_the_same_plan() -> None:
    """SPEC S6: deterministic ids and keys, so two replicas agree."""
    args = ([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]})
    assert run(*args) == run(*args)


def test_an_act_in_flight_after_a_crash_is_polled_not_repeated() -> None:
    """SPEC S6: an act Attempt without an outcome is asked about, never re-executed."""
    r = rem(phase=Phase.ACTING, acted=False)
    r = r.model_copy(update={"attempts": (Attempt(key=idempotency_key(r.id, "act", 0),
                                                  effect="act", started=T0),)})
    plan = run([node("gpu01", "DRAIN")], {"gpu01": [alert("gpu01")]}, State(remediations=(r,)),
               T0 + timedelta(minutes=2))
    assert kinds(plan) == ["poll"]
    assert plan.effects[0].ref == idempotency_key(r.id, "act", 0)
    assert plan.effects[0].key == idempotency_key(r.id, "poll", 0)


def test_a_running_operation_is_polled_with_a_fresh_key_each_time() -> None:
    """SPEC S6: keys are never handed out twice."""
    r = rem(phase=Phase.ACTING, acted=False)
    r = r.model_copy(update={"attempts": (
        Attempt(key=idempotency_key(r.id, "act", 0), effect="act", started=T0, outcome="running"),
        Attempt(key=idempotency_key(r.id, "poll", 0), effect="poll", started=T0,
                outcome="running"))})
    plan = run([node("gpu01", "DRAIN")], {}, State(remediations=(r,)), T0 + timedelta(minutes=2))
    assert [e.key for e in plan.effects] == [idempotency_key(r.id, "poll", 1)]


# ------------------------------------------------------------------ P
def test_a_request_without_an_alert_is_held_for_evidence() -> None:
    """SPEC P1/Q4: a request needs a confirmed alert on the node."""
    cmd = Command(id="c1", at=T0, kind="request", by="alice", node="gpu01", action=Action.REBOOT)
    plan = run([node("gpu01"), node("gpu02")], {}, State(inbox=(cmd,)))
    assert ("blocked", "P1") in phases(plan) and "cordon" not in kinds(plan)
    assert plan.consumed == ("c1",)


def test_policy_can_take_a_persons_request_as_evidence_enough() -> None:
    """SPEC P1 (documented choice): requests.operator_is_evidence lets a person's ask run."""
    cmd = Command(id="c1", at=T0, kind="request", by="alice", node="gpu01", action=Action.REBOOT)
    plan = run([node("gpu01"), node("gpu02")], {}, State(inbox=(cmd,)),
               policy=pol(requests={"operator_is_evidence": True}))
    assert kinds(plan) == ["cordon"]
    assert plan.updates[0].approved_by == "alice" and not plan.updates[0].automatic


@pytest.mark.parametrize(("rules", "fault", "expected"), [
    ([{"fault": "gpu.xid.*", "mode": "auto"}, {"fault": "gpu.xid.48", "mode": "manual"}],
     "gpu.xid.48", ("proposed", "P2:approvals[1]")),
    ([{"pools": ["a"], "mode": "auto"}, {"pools": ["a", "b"], "mode": "deny"}],
     "gpu.xid.48", ("denied", "P2:approvals[1]")),  # tie: the cautious mode wins
    ([{"action": "reboot", "mode": "manual"}, {"fault": "gpu.xid.48", "mode": "auto"}],
     "gpu.xid.48", ("approved", "P2:approvals[1]")),  # an exact fault beats an action
    ([{"fault": "gpu.xid.48", "mode": "auto"},
      {"fault": "gpu.xid.48", "nodes": "gpu[01-02]", "mode": "manual"}],
     "gpu.xid.48", ("proposed", "P2:approvals[1]")),  # node rule beats fault-only rule
    ([{"pools": ["b"], "mode": "auto"}], "gpu.xid.48", ("proposed", "P2:default")),
    ([{"pools": ["a"], "mode": "auto"}], "gpu.xid.48", ("approved", "P2:approvals[0]")),
])
def test_the_most_specific_approval_rule_wins_and_is_recorded(
        rules: list[dict[str, Any]], fault: str, expected: tuple[str, str]) -> None:
    """SPEC P2."""
    p = policy_from_dict({"approvals": {"default": "manual", "rules": rules}})
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01", fault)]}, policy=p)
    assert phases(plan)[1] == expected
    assert plan.updates[0].approval_rule == expected[1]


def test_jobs_hold_the_action_until_the_wait_limit_then_are_requeued() -> None:
    """SPEC P3: wait up to max_wait, then requeue."""
    r = rem(phase=Phase.CORDONED, acted=False)
    job = JobInfo(job_id=7, user="u", state="RUNNING", nodes=("gpu01",))
    st = State(remediations=(r,))
    n = [node("gpu01", "ALLOCATED", "DRAIN", reason=format_marker("gpu.xid.48", r.id))]
    al = {"gpu01": [alert("gpu01")]}
    early = run(n, al, st, T0 + timedelta(hours=1), jobs=(job,))
    assert phases(early) == [("waiting", "P3")] and kinds(early) == []
    late = run(n, al, apply(st, early), T0 + timedelta(hours=2), jobs=(job,))
    assert ("draining", "P3") in phases(late) and kinds(late) == ["requeue_jobs"]


def test_waiting_more_than_24h_is_rejected() -> None:
    """SPEC P3: at most 24h, or "never"."""
    from slurm_heal.errors import ConfigError
    with pytest.raises(ConfigError, match=r"waiting\.max_wait.*24h"):
        policy_from_dict({"waiting": {"max_wait": "25h"}}, "p.toml")


def test_every_step_is_audited_with_rule_why_and_time() -> None:
    """SPEC P4: who requested, who approved (or which rule), the action rule, phase times."""
    cmd = Command(id="c1", at=T0, kind="approve", by="bob", node="gpu01")
    p0 = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]},
             policy=policy_from_dict({}))
    s = apply(State(), p0)
    p1 = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]},
             s.model_copy(update={"inbox": (cmd,)}), T0 + timedelta(minutes=1),
             policy=policy_from_dict({}))
    r = p1.updates[0]
    assert r.approved_by == "bob" and r.requested_by == "slurm-heal"
    assert r.action_rule == "catalog:gpu.xid.48"
    assert {"proposed", "approved", "cordoned"} <= set(r.phase_times)
    assert all(step.rule and step.why for step in r.steps)


# ------------------------------------------------------------------ Q
def test_a_detector_asking_for_removal_is_refused() -> None:
    """SPEC Q2."""
    n = node("gpu01", "IDLE", "DRAIN", reason="heal-request: remove detector=hw id=1")
    plan = run([n, node("gpu02")], {"gpu01": [alert("gpu01")]})
    assert ("denied", "Q2") in phases(plan, "gpu01")
    assert all(e.action is not Action.REMOVE for e in plan.effects)


def test_same_detector_and_id_make_one_remediation() -> None:
    """SPEC Q3."""
    reason = "heal-request: reboot detector=ibmon id=4711"
    n = [node("gpu01", "IDLE", "DRAIN", reason=reason), node("gpu02")]
    al = {"gpu01": [alert("gpu01", "ib.link_down")]}
    p1 = run(n, al, policy=pol())
    s = apply(State(), p1)
    # the first one finished; the detector reports the same problem again
    done = s.remediations[0].model_copy(update={"phase": Phase.DONE})
    p2 = run(n, al, State(remediations=(done,)), T0 + timedelta(hours=2))
    assert not [u for u in p2.updates if u.detector == "ibmon" and u.id != done.id]


def test_a_malformed_request_reason_is_recorded_and_the_node_left_alone() -> None:
    """SPEC Q1: request.malformed, nothing done to the node; O6: a person is told once."""
    n = node("gpu01", "IDLE", "DRAIN", reason="heal-request: reboot detectr=x")
    plan = run([n, node("gpu02")])
    assert phases(plan) == [("alert", "Q1")] and kinds(plan) == ["notify"]
    assert "detectr" in plan.effects[0].why and plan.updates == ()
    again = run([n, node("gpu02")], state=State(data=plan.data or {}),
                now=T0 + timedelta(minutes=5))
    assert again.effects == () and again.records == ()


def test_capacity_holds_a_remediation_when_the_pool_is_short() -> None:
    """SPEC Q4."""
    nodes = [node("gpu01"), node("gpu02", "DOWN", reason="psu"), node("gpu03", "DRAIN",
                                                                     reason="x")]
    plan = run(nodes, {"gpu01": [alert("gpu01")]})
    assert ("blocked", "Q4") in phases(plan, "gpu01") and "cordon" not in kinds(plan)


# ------------------------------------------------------------------ L
def test_one_remediation_per_node_for_several_alerts() -> None:
    """SPEC L3: the worst alert decides; one remediation."""
    al = {"gpu01": [alert("gpu01", "gpu.xid.48"), alert("gpu01", "gpu.xid.79")]}
    plan = run([node("gpu01"), node("gpu02")], al)
    assert len(plan.updates) == 1 and plan.updates[0].action is Action.MIGRATE


def test_the_recommendation_is_withdrawn_when_the_alert_clears() -> None:
    """SPEC L4: and our cordon is released."""
    r = rem(phase=Phase.WAITING, acted=False)
    n = node("gpu01", "DRAIN", reason=format_marker("gpu.xid.48", r.id))
    plan = run([n, node("gpu02")], {}, State(remediations=(r,)), T0 + timedelta(minutes=5))
    assert phases(plan) == [("withdrawn", "L4")] and kinds(plan) == ["release"]


def test_a_foreign_reason_is_never_released() -> None:
    """House style 2 / D5: a node drained by someone else is never resumed by us."""
    r = rem(phase=Phase.WAITING, acted=False)
    plan = run([node("gpu01", "DRAIN", reason="operator: bad fan"), node("gpu02")], {},
               State(remediations=(r,)), T0 + timedelta(minutes=5))
    assert ("withdrawn", "L4") in phases(plan) and "release" not in kinds(plan)


def test_failing_health_check_after_the_action_fails_the_remediation() -> None:
    """SPEC L5: a critical alert newer than the action: not resumed; failed."""
    r = rem(phase=Phase.RETURNING, data={"evidence_fault": "gpu.xid.48",
                                         "act_done": T0.isoformat()})
    t = T0 + timedelta(minutes=10)
    n = node("gpu01", "DRAIN", reason=format_marker("gpu.xid.48", r.id), boot=T0 +
             timedelta(minutes=2), checked=t)
    plan = run([n, node("gpu02")], {"gpu01": [alert("gpu01", since=t, seen=t)]},
               State(remediations=(r,)), t)
    assert ("failed", "L5") in phases(plan) and "resume" not in kinds(plan)


def test_a_node_that_does_not_come_back_in_time_fails() -> None:
    """SPEC L5: the return timeout."""
    r = rem(phase=Phase.RETURNING, data={"evidence_fault": "gpu.xid.48",
                                         "act_done": T0.isoformat()})
    plan = run([node("gpu01", "DOWN", "DRAIN"), node("gpu02")], {}, State(remediations=(r,)),
               T0 + timedelta(hours=2))
    assert ("failed", "L5") in phases(plan)


@pytest.mark.parametrize(("boot", "now", "failed"), [
    (T0 - timedelta(days=1), T0 + timedelta(minutes=10), False),  # accepted, not restarted yet
    (T0 - timedelta(days=1), T0 + timedelta(hours=1), True),  # never restarted: return timeout
    (T0 + timedelta(minutes=2), T0 + timedelta(minutes=10), True),  # restarted, fault still there
])
def test_a_check_before_the_node_restarted_does_not_fail_the_return(
        boot: datetime, now: datetime, failed: bool) -> None:
    """SPEC L5: a cloud or BMC reports the reboot done when it accepted it; a periodic
    check that ran before the node went down still sees the old fault. That is not the
    health check after the action: the remediation waits for the restart (boot time or
    slurmd start after the act) until the return timeout, then fails."""
    r = rem(phase=Phase.RETURNING, data={"evidence_fault": "gpu.xid.48",
                                         "act_done": T0.isoformat()})
    t = T0 + timedelta(minutes=5)
    n = node("gpu01", "IDLE", "DRAIN", reason=format_marker("gpu.xid.48", r.id), boot=boot,
             checked=t)
    plan = run([n, node("gpu02")], {"gpu01": [alert("gpu01", since=T0 - timedelta(hours=1),
                                                    seen=t)]}, State(remediations=(r,)), now)
    assert (("failed", "L5") in phases(plan)) is failed
    assert "resume" not in kinds(plan) and ("done", "L5") not in phases(plan)


# ------------------------------------------------------------------ E
def history(n: int, action: Action = Action.REBOOT, days_ago: float = 1.0,
            phase: Phase = Phase.DONE, host: str = "gpu01") -> tuple[Remediation, ...]:
    return tuple(rem(phase=phase, action=action, host=host,
                     at=T0 - timedelta(days=days_ago, hours=i)) for i in range(n))


def test_third_reboot_becomes_rebuild() -> None:
    """SPEC E1."""
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]},
               State(remediations=history(2)))
    assert ("escalated", "E1") in phases(plan) and plan.updates[0].action is Action.REBUILD


def test_third_rebuild_becomes_migrate() -> None:
    """SPEC E1 (critical alert active, so E3 evidence holds)."""
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]},
               State(remediations=history(2) + history(2, Action.REBUILD, 2)))
    assert plan.updates[0].action is Action.MIGRATE


def test_a_new_machine_starts_counting_from_zero() -> None:
    """SPEC E1 counts per machine: after migrate the node has a new host identity."""
    plan = run([node("gpu01", host="gpu01~1"), node("gpu02")], {"gpu01": [alert("gpu01")]},
               State(remediations=history(2)))
    assert plan.updates[0].action is Action.REBOOT


@pytest.mark.parametrize(("hist", "why"), [
    (history(2, days_ago=8), "older than the window"),
    (history(2, phase=Phase.CANCELLED), "cancelled"),
    (history(2, phase=Phase.WITHDRAWN), "cleared on their own"),
])
def test_not_counted_for_escalation(hist: tuple[Remediation, ...], why: str) -> None:
    """SPEC E2."""
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]},
               State(remediations=hist))
    assert plan.updates[0].action is Action.REBOOT, why


def test_migrate_without_evidence_becomes_rebuild() -> None:
    """SPEC E3: only a warning now and no critical alert on the machine in 10 days."""
    cmd = Command(id="c1", at=T0, kind="request", by="alice", node="gpu01", action=Action.MIGRATE)
    al = {"gpu01": [alert("gpu01", "service.restart_loop", Severity.WARNING)]}
    plan = run([node("gpu01"), node("gpu02")], al, State(inbox=(cmd,)))
    assert plan.updates[0].action is Action.REBUILD and ("escalated", "E3") in phases(plan)


def test_migrate_with_a_recent_critical_alert_on_the_machine_stays_migrate() -> None:
    """SPEC E3: evidence recorded on the same machine within 10 days counts."""
    cmd = Command(id="c1", at=T0, kind="request", by="alice", node="gpu01", action=Action.MIGRATE)
    al = {"gpu01": [alert("gpu01", "service.restart_loop", Severity.WARNING)]}
    plan = run([node("gpu01"), node("gpu02")], al,
               State(inbox=(cmd,), remediations=history(1, days_ago=9)))
    assert plan.updates[0].action is Action.MIGRATE


@pytest.mark.parametrize(("enabled", "expected"), [(False, Action.MIGRATE),
                                                   (True, Action.POWER_CYCLE)])
def test_power_cycle_is_a_preview_off_unless_enabled(enabled: bool, expected: Action) -> None:
    """SPEC E4."""
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01", "gpu.xid.79")]},
               policy=pol(escalation={"power_cycle": enabled}))
    assert plan.updates[0].action is expected


def test_reserved_spares_limit_concurrent_migrations() -> None:
    """SPEC E5."""
    busy = rem("gpu02", Phase.ACTING, Action.MIGRATE, "gpu.xid.79", acted=False)
    plan = run([node("gpu01", pool="a"), node("gpu02", "DRAIN", pool="b"), node("gpu03")],
               {"gpu01": [alert("gpu01", "gpu.xid.79")], "gpu02": [alert("gpu02", "gpu.xid.79")]},
               State(remediations=(busy,)),
               policy=pol(escalation={"migrate_spares": 1}, safety={"concurrency": 5}))
    assert ("blocked", "E5") in phases(plan, "gpu01")


def test_xid_154_follows_the_drivers_recovery_action() -> None:
    """Catalog: Xid 154 carries the driver's action; "None" means record and notify (D8)."""
    ev = (Evidence(source="kmsg", data={"recovery_action": "None"}),)
    plan = run([node("gpu01"), node("gpu02")],
               {"gpu01": [alert("gpu01", "gpu.xid.154", evidence=ev)]})
    assert phases(plan) == [("notified", "D8")]


# ------------------------------------------------------------------ S
def test_an_alert_must_persist_before_action() -> None:
    """SPEC S1."""
    al = {"gpu01": [alert("gpu01", "gpu.row_remap.pending", Severity.WARNING)]}
    early = run([node("gpu01"), node("gpu02")], al, now=T0 + timedelta(minutes=5))
    assert phases(early) == [("blocked", "S1")] and not early.updates
    assert early.next_wake == T0 + timedelta(minutes=10)
    later = run([node("gpu01"), node("gpu02")], al, now=T0 + timedelta(minutes=10))
    assert later.updates


def test_nothing_within_the_cooldown() -> None:
    """SPEC S2."""
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01", since=T0)]},
               State(remediations=history(1, days_ago=0)), T0 + timedelta(minutes=10))
    assert ("blocked", "S2") in phases(plan) and "cordon" not in kinds(plan)


def test_concurrency_limit_is_derived_from_cluster_size() -> None:
    """SPEC S3: max(1, 5% of nodes) by default."""
    p = pol()
    assert p.safety.concurrency_limit(10) == 1 and p.safety.concurrency_limit(100) == 5
    busy = rem("gpu02", Phase.WAITING, acted=False)
    plan = run([node("gpu01", pool="a"), node("gpu02", "DRAIN", pool="b")],
               {"gpu01": [alert("gpu01")], "gpu02": [alert("gpu02")]}, State(remediations=(busy,)))
    assert ("blocked", "S3") in phases(plan, "gpu01")


def test_one_remediation_at_a_time_per_pool() -> None:
    """SPEC S4."""
    busy = rem("gpu02", Phase.WAITING, acted=False)
    plan = run([node("gpu01"), node("gpu02", "DRAIN"), node("gpu03"), node("gpu04")],
               {"gpu01": [alert("gpu01")], "gpu02": [alert("gpu02")]}, State(remediations=(busy,)),
               policy=pol(safety={"concurrency": 5}))
    assert ("blocked", "S4") in phases(plan, "gpu01")


def test_the_breaker_opens_on_a_surge_and_stops_automatic_remediation() -> None:
    """SPEC S5: N automatic starts in the window open it; only a person closes it."""
    recent = tuple(rem(f"gpu0{i}", Phase.DONE, at=T0 - timedelta(minutes=10 * i))
                   for i in range(2, 4))
    nodes = [node(f"gpu0{i}", pool=f"p{i}") for i in range(1, 5)]
    p = pol(safety={"breaker_threshold": 2, "concurrency": 5})
    plan = run(nodes, {"gpu01": [alert("gpu01")]}, State(remediations=recent), policy=p)
    assert plan.breaker is not None and plan.breaker.open
    assert ("blocked", "S5") in phases(plan) and "cordon" not in kinds(plan)
    # its opening is kept in the breaker's typed history (the console's repairs page)
    assert plan.breaker.openings == (plan.breaker.opened_at,)


def test_a_person_still_gets_through_an_open_breaker() -> None:
    """SPEC S5: manual remediations stay possible."""
    cmd = Command(id="c1", at=T0, kind="request", by="alice", node="gpu01", action=Action.REBOOT)
    plan = run([node("gpu01"), node("gpu02", pool="b")], {"gpu01": [alert("gpu01")]},
               State(inbox=(cmd,), breaker=Breaker(open=True)))
    assert kinds(plan) == ["cordon"]


def test_pause_holds_everything_disruptive() -> None:
    """House style 8: the global kill switch."""
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]}, State(paused=True))
    assert ("blocked", "pause") in phases(plan) and plan.effects == ()


def test_recommend_only_executes_nothing_but_notifications() -> None:
    """Recommend-only mode (issue 3)."""
    plan = run([node("gpu01"), node("gpu02")],
               {"gpu01": [alert("gpu01")], "gpu02": [alert("gpu02", "gpu.thermal",
                                                            Severity.WARNING)]},
               policy=pol(mode="recommend_only"))
    assert ("blocked", "recommend_only") in phases(plan) and kinds(plan) == ["notify"]


# ------------------------------------------------------------------ D
def test_a_node_down_for_someone_elses_reason_is_recorded_only() -> None:
    """SPEC D5."""
    plan = run([node("gpu01", "DOWN", reason="Not responding"), node("gpu02")])
    assert phases(plan) == [("alert", "D5")] and plan.effects == ()
    again = run([node("gpu01", "DOWN", reason="Not responding"), node("gpu02")],
                state=State(data=plan.data or {}))
    assert again.records == ()  # recorded once, not every cycle


def test_a_fault_without_an_action_is_sent_to_support_once() -> None:
    """SPEC D8."""
    al = {"gpu01": [alert("gpu01", "disk.low_space", Severity.WARNING)]}
    plan = run([node("gpu01"), node("gpu02")], al)
    assert phases(plan) == [("notified", "D8")] and kinds(plan) == ["notify"]
    again = run([node("gpu01"), node("gpu02")], al, State(data=plan.data or {}))
    assert again.effects == ()


# ------------------------------------------------------------------ the end of the ladder
def test_migrates_that_keep_failing_on_a_machine_go_to_a_person_not_a_loop() -> None:
    """SPEC E1/Q2: past the last step: a removal recommendation to a person, no action."""
    hist = tuple(rem(phase=Phase.FAILED, action=Action.MIGRATE, fault="gpu.xid.79",
                     at=T0 - timedelta(days=1, hours=i)) for i in range(2))
    plan = run([node("gpu01", pool="a"), node("gpu02", pool="b")],
               {"gpu01": [alert("gpu01", "gpu.xid.79")]}, State(remediations=hist))
    assert not plan.updates
    assert [(r.phase, r.rule, r.action) for r in plan.records] == [
        ("escalated", "E1", Action.REMOVE)]
    assert kinds(plan) == ["notify"]


def test_a_node_handed_to_a_person_gets_nothing_automatic() -> None:
    """SPEC E1: the failed migrate leaves the node with a person; new alerts don't loop."""
    r = rem(phase=Phase.FAILED, action=Action.MIGRATE, fault="gpu.xid.79",
            data={"evidence_fault": "gpu.xid.79", "handed_to_person": True})
    al = {"gpu01": [alert("gpu01", "gpu.xid.48", since=T0 + timedelta(hours=1))]}
    plan = run([node("gpu01", "DRAIN"), node("gpu02", pool="b")], al, State(remediations=(r,)),
               T0 + timedelta(hours=2))
    assert not plan.updates and ("blocked", "E1") in phases(plan)


def test_a_persons_request_for_removal_is_refused_too() -> None:
    """SPEC Q2: slurm-heal never removes a node itself, whoever asks."""
    cmd = Command(id="c1", at=T0, kind="request", by="alice", node="gpu01", action=Action.REMOVE)
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]},
               State(inbox=(cmd,)), policy=policy_from_dict({}))
    assert ("denied", "Q2") in phases(plan) and not [u for u in plan.updates
                                                     if u.action is Action.REMOVE]


def test_pause_and_unpause_commands_change_the_kill_switch() -> None:
    """House style 8: pause/unpause reach the State through the plan."""
    cmd = Command(id="c1", at=T0, kind="pause", by="alice")
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]}, State(inbox=(cmd,)))
    assert plan.paused is True and "cordon" not in kinds(plan)
    cmd2 = Command(id="c2", at=T0, kind="unpause", by="alice")
    assert run([node("gpu01")], state=State(paused=True, inbox=(cmd2,))).paused is False


def test_cancel_is_refused_once_the_action_runs() -> None:
    """SPEC L1: an action that already runs cannot be taken back."""
    r = rem(phase=Phase.ACTING, acted=False)
    cmd = Command(id="c1", at=T0, kind="cancel", by="alice", node="gpu01")
    plan = run([node("gpu01", "DOWN", "DRAIN")], {"gpu01": [alert("gpu01")]},
               State(remediations=(r,), inbox=(cmd,)), T0 + timedelta(minutes=1))
    assert ("blocked", "L1") in phases(plan) and plan.consumed == ("c1",)


# ------------------------------------------------------------------ someone else's drain
def test_a_critical_alert_never_cordons_over_an_operators_drain() -> None:
    """SPEC D5 / house style 2: an operator's drain is theirs: no cordon (which would
    replace their reason with our marker) and so no resume later; held once with D5."""
    mine = "bad DIMM, do not use -- bob"
    nodes = [node("gpu01", "IDLE", "DRAIN", reason=mine), node("gpu02")]
    al = {"gpu01": [alert("gpu01")]}
    p1 = run(nodes, al)
    assert kinds(p1) == [] and phases(p1, "gpu01")[-1] == ("blocked", "D5")
    s = apply(State(data=p1.data or {}), p1)
    p2 = run(nodes, al, s, T0 + timedelta(minutes=5))
    assert kinds(p2) == [] and p2.records == ()  # once, not every cycle
    s = apply(s.model_copy(update={"data": p2.data or s.data}), p2)
    # The operator resumes the node, with the alert published all along: a person's hand
    # wins (SPEC S8; issue 32, the deployed suite's own-drain): the remediation is handed
    # to them, nothing is cordoned, and the alert they saw opens nothing new.
    p3 = run([node("gpu01"), node("gpu02")], al, s, T0 + timedelta(minutes=10))
    assert kinds(p3) == [] and ("cancelled", "S8") in phases(p3, "gpu01")
    s = apply(s.model_copy(update={"data": p3.data or s.data}), p3)
    p4 = run([node("gpu01"), node("gpu02")], al, s, T0 + timedelta(minutes=15))
    assert kinds(p4) == [] and not [p for p in phases(p4, "gpu01") if p[0] == "proposed"]


def test_a_persons_resume_covers_every_alert_published_then_not_only_its_own() -> None:
    """SPEC S8 (issue 32, the deployed suite's own-drain): a remediation of an Xid 48
    waits under D5 on a node a person drained; an InfiniBand alert is published too. The
    person resumes the node: the remediation is cancelled, and the InfiniBand alert they
    saw opens nothing new before the node check acknowledges it (it was a new remediation
    and our cordon 1 s after their resume). A new record of it after the resume does."""
    mine = "maint: reseat PSU (alice)"
    ev = (Evidence(source="/sys/class/infiniband/mlx5_0/ports/1", text="mlx5_0/1 DOWN",
                   at=T0.isoformat()),)
    ib = alert("gpu01", "ib.link_down", evidence=ev)
    xid = alert("gpu01", evidence=(Evidence(source="kernel_log", text="Xid 48",
                                            at=T0.isoformat()),))
    p1 = run([node("gpu01", "IDLE", "DRAIN", reason=mine)], {"gpu01": [xid, ib]})
    assert kinds(p1) == [] and phases(p1, "gpu01")[-1] == ("blocked", "D5")
    s = apply(State(data=p1.data or {}), p1)
    later = T0 + timedelta(minutes=10)
    p2 = run([node("gpu01")], {"gpu01": [xid, ib]}, s, later)
    assert kinds(p2) == [] and ("cancelled", "S8") in phases(p2, "gpu01")
    s = apply(s.model_copy(update={"data": p2.data or s.data}), p2)
    p3 = run([node("gpu01")], {"gpu01": [xid, ib]}, s, later + timedelta(minutes=1))
    assert kinds(p3) == [] and not [p for p in phases(p3, "gpu01") if p[0] == "proposed"]
    again = alert("gpu01", "ib.link_down", since=later + timedelta(minutes=2),
                  evidence=(Evidence(source="/sys/class/infiniband/mlx5_0/ports/1",
                                     text="mlx5_0/1 DOWN", at=later.isoformat()),))
    p4 = run([node("gpu01")], {"gpu01": [xid, again]}, s, later + timedelta(minutes=3))
    assert ("proposed", "P1") in phases(p4, "gpu01")


def test_a_tools_drain_it_lifts_itself_is_no_persons_resume() -> None:
    """SPEC D5, S8: LBNL NHC drains with "NHC: ..." and resumes that node by itself once
    its own check passes: no person's hand, so the held remediation goes ahead with our
    own cordon once the node is back in service (never over NHC's reason)."""
    nhc = "NHC: check_fs_mount:  /scratch not mounted"
    nodes = [node("gpu01", "IDLE", "DRAIN", reason=nhc), node("gpu02")]
    al = {"gpu01": [alert("gpu01")]}
    p1 = run(nodes, al)
    assert kinds(p1) == [] and phases(p1, "gpu01")[-1] == ("blocked", "D5")
    s = apply(State(data=p1.data or {}), p1)
    p2 = run([node("gpu01"), node("gpu02")], al, s, T0 + timedelta(minutes=10))
    assert kinds(p2) == ["cordon"] and ("cordoned", "L1") in phases(p2)


# ------------------------------------------------------------------ actions off the ladder (E1)
PC = {"escalation": {"power_cycle": True}}


def test_a_power_cycle_that_keeps_coming_back_ends_with_a_person_not_a_loop() -> None:
    """SPEC E1/E4: power_cycle is never on the ladder; repeating it ends the ladder."""
    hist = tuple(rem(phase=Phase.DONE, action=Action.POWER_CYCLE, fault="gpu.xid.79",
                     at=T0 - timedelta(hours=2 + 2 * i)) for i in range(2))
    plan = run([node("gpu01"), node("gpu02", pool="b")], {"gpu01": [alert("gpu01", "gpu.xid.79")]},
               State(remediations=hist), policy=pol(**PC))
    assert not plan.updates and kinds(plan) == ["notify"]
    assert [(r.phase, r.rule, r.action) for r in plan.records] == [
        ("escalated", "E1", Action.REMOVE)]


def test_a_ladder_without_reboot_does_not_loop_reboots() -> None:
    """SPEC E1: ladder = ["rebuild"]: a reboot-class fault that keeps coming back after
    reboots goes to a person."""
    hist = tuple(rem(phase=Phase.DONE, at=T0 - timedelta(hours=2 + 2 * i)) for i in range(2))
    plan = run([node("gpu01"), node("gpu02", pool="b")], {"gpu01": [alert("gpu01")]},
               State(remediations=hist), policy=pol(escalation={"ladder": ["rebuild"]}))
    assert not plan.updates and ("escalated", "E1") in phases(plan)


def test_a_failed_power_cycle_is_handed_to_a_person() -> None:
    """SPEC E1/L5: a failed action with no next step on the ladder is never retried."""
    r = rem(phase=Phase.ACTING, action=Action.POWER_CYCLE, fault="gpu.xid.79")
    r = r.model_copy(update={"attempts": (r.attempts[0].model_copy(
        update={"outcome": "failed"}),)})
    plan = run([node("gpu01", "DOWN", "DRAIN"), node("gpu02", pool="b")],
               {"gpu01": [alert("gpu01", "gpu.xid.79")]}, State(remediations=(r,)),
               T0 + timedelta(minutes=10), pol(**PC))
    (upd,) = plan.updates
    assert upd.phase is Phase.FAILED and upd.data.handed_to_person
    assert ("escalated", "E1") in phases(plan)


# ------------------------------------------------------------------ act timeout (L5)
def _running(phase: Phase = Phase.ACTING) -> Remediation:
    r = rem(phase=phase)
    return r.model_copy(update={"phase_times": {"cordoned": T0, "acting": T0}, "attempts": (
        r.attempts[0].model_copy(update={"outcome": "running", "finished": None}),)})


def test_an_operation_stuck_running_is_handed_to_a_person_at_the_act_timeout() -> None:
    """SPEC L5: safety.act_timeout (default 2h): the outcome is unknown, so the node stays
    cordoned with a person: no retry, no escalation to another automatic action."""
    nodes = [node("gpu01", "DOWN", "DRAIN"), node("gpu02", pool="b")]
    al = {"gpu01": [alert("gpu01")]}
    early = run(nodes, al, State(remediations=(_running(),)), T0 + timedelta(hours=1))
    assert kinds(early) == ["poll"] and early.next_wake is not None
    late = run(nodes, al, State(remediations=(_running(),)), T0 + timedelta(hours=2))
    assert phases(late)[:2] == [("failed", "L5"), ("escalated", "L5")] and kinds(late) == ["notify"]
    (upd,) = late.updates
    assert upd.phase is Phase.FAILED and upd.data.handed_to_person
    # Nothing automatic follows on that node (E1: a person acts first).
    after = run(nodes, al, State(remediations=late.updates), T0 + timedelta(hours=5))
    assert not after.updates and kinds(after) == []


def test_the_act_timeout_is_a_policy_knob() -> None:
    """SPEC L5: safety.act_timeout is validated like every duration."""
    r = _running()
    nodes = [node("gpu01", "DOWN", "DRAIN"), node("gpu02", pool="b")]
    p = run(nodes, {"gpu01": [alert("gpu01")]}, State(remediations=(r,)),
            T0 + timedelta(hours=3), pol(safety={"act_timeout": "4h"}))
    assert kinds(p) == ["poll"]
    with pytest.raises(ConfigError, match="act_timeout"):
        pol(safety={"act_timeout": "soon"})


# ------------------------------------------------------------------ a cordon that did not hold (L1)
def test_a_failed_cordon_is_sent_again_then_handed_to_a_person() -> None:
    """SPEC L1/S3: a cordon that Slurm refused is re-sent (a new key each try, at most 3);
    then the remediation ends failed with a person, never waits forever holding its slot."""
    nodes = [node("gpu01"), node("gpu02"), node("gpu03")]
    al = {"gpu01": [alert("gpu01")]}
    p = run(nodes, al)
    s = apply(State(), p, outcome="failed")
    rid = p.updates[0].id
    for n in (1, 2):
        p = run(nodes, al, s, T0 + timedelta(minutes=n))
        assert [(e.kind, e.key) for e in p.effects] == [
            ("cordon", idempotency_key(rid, "cordon", n))]
        s = apply(s, p, outcome="failed")
    p = run(nodes, al, s, T0 + timedelta(minutes=3))
    assert phases(p, "gpu01")[:2] == [("failed", "L1"), ("escalated", "L1")]
    assert kinds(p) == ["notify"] and p.updates[0].data.handed_to_person


def test_a_cordon_in_flight_is_waited_for() -> None:
    """SPEC L1/S6: no outcome yet: nothing is sent again."""
    nodes = [node("gpu01"), node("gpu02")]
    al = {"gpu01": [alert("gpu01")]}
    p = run(nodes, al)
    s = apply(State(), p, outcome=None)
    again = run(nodes, al, s, T0 + timedelta(minutes=1))
    assert kinds(again) == [] and not again.updates and again.next_wake is not None


def test_a_node_resumed_by_a_person_after_our_cordon_cancels_the_remediation() -> None:
    """SPEC L1, S8: our cordon was applied, then someone resumed the node: it is theirs
    now; the remediation is cancelled (it no longer holds an S3/S4 slot), rule S8."""
    nodes = [node("gpu01"), node("gpu02")]
    al = {"gpu01": [alert("gpu01")]}
    p = run(nodes, al)
    s = apply(State(), p, outcome="ok")
    p2 = run(nodes, al, s, T0 + timedelta(minutes=1))
    assert phases(p2, "gpu01") == [("cancelled", "S8")] and kinds(p2) == []
    assert "resumed by a person" in p2.records[0].why


# ------------------------------------------------------------------ what counts as evidence (P1)
@pytest.mark.parametrize(("fault", "sev", "cordoned"), [
    ("disk.low_space", Severity.WARNING, False),  # record-only by design (D8)
    ("gpu.xid.48", Severity.INFO, False),  # an info alert is not a confirmed failure
    ("gpu.xid.48", Severity.WARNING, True),
    ("slurm.node_drain", Severity.WARNING, False),  # Slurm's own state
])
def test_only_a_confirmed_failure_is_evidence_for_a_request(fault: str, sev: Severity,
                                                            cordoned: bool) -> None:
    """SPEC P1/Q4/D8: a detector's request needs an active alert of at least warning
    severity that is not record-only and not Slurm's own state."""
    n = node("gpu01", "IDLE", "DRAIN", reason="heal-request: reboot detector=ibmon id=1")
    plan = run([n, node("gpu02", pool="b")], {"gpu01": [alert("gpu01", fault, sev)]})
    assert ("cordon" in kinds(plan)) is cordoned
    if not cordoned:
        assert ("blocked", "P1") in phases(plan, "gpu01")


# ------------------------------------------------------------------ our cordon left behind (L1)
def _left_behind() -> tuple[Remediation, NodeInfo]:
    r = rem("gpu01", Phase.CANCELLED, acted=False)
    return r, node("gpu01", "IDLE", "DRAIN",
                   reason=format_marker("gpu.xid.48", r.id, "controller", "for reboot"))


def test_our_cordon_left_after_a_cancel_is_undone_once_the_node_is_healthy() -> None:
    """House style 2 / L1: release() skipped the node while a critical fault was active;
    when it clears, the orphaned cordon is released (keyed on the marker), not left."""
    r, n = _left_behind()
    sick = run([n, node("gpu02", pool="b")], {"gpu01": [alert("gpu01")]},
               State(remediations=(r,)), T0 + timedelta(hours=1))
    assert "release" not in kinds(sick) and ("blocked", "L1") in phases(sick, "gpu01")
    again = run([n, node("gpu02", pool="b")], {"gpu01": [alert("gpu01")]},
                State(remediations=(r,), data=sick.data or {}), T0 + timedelta(hours=2))
    assert ("blocked", "L1") not in phases(again, "gpu01")  # told once
    well = run([n, node("gpu02", pool="b")], {}, State(remediations=(r,)), T0 + timedelta(days=1))
    (eff,) = well.effects
    assert eff.kind == "release" and eff.reason == n.reason
    same = run([n, node("gpu02", pool="b")], {}, State(remediations=(r,)), T0 + timedelta(days=2))
    assert same.effects[0].key == eff.key  # deterministic (S6)


def test_a_node_handed_to_a_person_is_not_released_by_the_orphan_sweep() -> None:
    """SPEC E1: a node left cordoned for a person stays cordoned."""
    r, n = _left_behind()
    r = r.model_copy(update={"phase": Phase.FAILED,
                             "data": r.data.but(handed_to_person=True)})
    plan = run([n, node("gpu02", pool="b")], {}, State(remediations=(r,)), T0 + timedelta(days=1))
    assert "release" not in kinds(plan)


def test_someone_elses_marker_is_not_swept() -> None:
    """House style 2: the node check's own drain (by=check) is not ours to undo here."""
    n = node("gpu01", "IDLE", "DRAIN", reason=format_marker("gpu.xid.48", None, "check"))
    assert "release" not in kinds(run([n, node("gpu02", pool="b")], {}))


# ------------------------------------------------------------------ the health check after the act (L5)
def _back(checked: datetime | None) -> tuple[Remediation, NodeInfo]:
    r = rem(phase=Phase.RETURNING, data={"evidence_fault": "gpu.xid.48",
                                         "act_done": T0.isoformat()})
    return r, node("gpu01", "IDLE", "DRAIN", reason=format_marker("gpu.xid.48", r.id),
                   boot=T0 + timedelta(minutes=2), checked=checked)


@pytest.mark.parametrize(("checked", "mode", "done"), [
    (None, "required", False),  # no node check has published: not resumed (default)
    (T0 - timedelta(minutes=1), "required", False),  # a check from before the action
    (T0 + timedelta(minutes=5), "required", True),
    (None, "if_present", True),  # a site that runs no slurm-heal node check
    (T0 - timedelta(minutes=1), "if_present", False),  # present: it must be fresh
])
def test_a_node_returns_only_after_its_health_check_ran(checked: datetime | None, mode: str,
                                                        done: bool) -> None:
    """SPEC L5 with safety.health_check (default "required")."""
    r, n = _back(checked)
    plan = run([n, node("gpu02")], {}, State(remediations=(r,)), T0 + timedelta(minutes=10),
               pol(safety={"health_check": mode}))
    assert (("done", "L5") in phases(plan)) is done
    assert ("resume" in kinds(plan)) is done


@pytest.mark.parametrize(("before_boot", "done"), [
    (timedelta(milliseconds=500), True),  # the check slurmd ran as it started (seen, 22.05)
    (timedelta(minutes=1), False),  # after the act but well before the boot: from before it
])
def test_the_check_slurmd_runs_at_start_counts_although_slurms_boot_time_rounds_up(
        before_boot: timedelta, done: bool) -> None:
    """SPEC L5: Slurm's BootTime is now - uptime in whole seconds, so the health check
    slurmd runs as it starts can carry a time a fraction of a second before it; that
    check ran on the rebooted node (the next one is HealthCheckInterval away)."""
    r, n = _back(T0 + timedelta(minutes=2) - before_boot)
    plan = run([n, node("gpu02")], {}, State(remediations=(r,)), T0 + timedelta(minutes=10))
    assert (("done", "L5") in phases(plan)) is done
    assert ("resume" in kinds(plan)) is done


def test_a_node_that_never_reports_its_health_check_fails_at_the_return_timeout() -> None:
    """SPEC L5: with health_check = "required", silence is not a pass."""
    r, n = _back(None)
    plan = run([n, node("gpu02")], {}, State(remediations=(r,)), T0 + timedelta(hours=1))
    assert ("failed", "L5") in phases(plan) and "resume" not in kinds(plan)


def test_the_request_help_says_what_happens_to_a_persons_remove() -> None:
    """SPEC Q2: the CLI help and the engine agree: a person's remove is recorded and
    refused; removal is done by a person outside slurm-heal."""
    from click.testing import CliRunner

    from slurm_heal.cli import cli
    text = " ".join(CliRunner().invoke(cli, ["request", "--help"]).output.split())
    assert "records the request and refuses it" in text and "is accepted" not in text
    cmd = Command(id="c1", at=T0, kind="request", by="alice", node="gpu01", action=Action.REMOVE)
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]}, State(inbox=(cmd,)))
    assert ("denied", "Q2") in phases(plan)


# ------------------------------------------------------------------ issue 8: trust under faults
@pytest.mark.parametrize("reason", ["Reboot pending: BIOS update (bob)", "Reboot",
                                    "reboot requested by alice"])
def test_a_persons_reboot_like_drain_is_not_resumed_after_our_action(reason: str) -> None:
    """House style 2 / SPEC L5 (issue 8, defect 2): a person's reason that starts with
    "Reboot" is not Slurm's own reboot reason; the node is theirs and is not resumed."""
    r, _ = _back(T0 + timedelta(minutes=5))
    n = node("gpu01", "IDLE", "DRAIN", reason=reason, boot=T0 + timedelta(minutes=2),
             checked=T0 + timedelta(minutes=5))
    plan = run([n, node("gpu02")], {}, State(remediations=(r,)), T0 + timedelta(minutes=10))
    assert "resume" not in kinds(plan)
    assert ("done", "L5") in phases(plan) and "not resumed" in plan.records[-1].why


def test_slurms_own_reboot_reason_after_our_boot_is_resumed() -> None:
    """SPEC L5: Slurm's exact "Node unexpectedly rebooted" after the boot our action
    caused is ours to clear."""
    r, _ = _back(T0 + timedelta(minutes=5))
    n = node("gpu01", "DOWN", "DRAIN", reason="Node unexpectedly rebooted",
             boot=T0 + timedelta(minutes=2), checked=T0 + timedelta(minutes=5))
    plan = run([n, node("gpu02")], {}, State(remediations=(r,)), T0 + timedelta(minutes=10))
    assert kinds(plan) == ["resume"] and plan.effects[0].reason == "Node unexpectedly rebooted"


@pytest.mark.parametrize("phase", [Phase.CORDONED, Phase.WAITING])
def test_a_persons_drain_before_the_act_holds_the_remediation(phase: Phase) -> None:
    """House style 2 / D5 (issue 8, defect 11): the node's reason stopped being ours
    after our cordon: nothing disruptive runs (no act), the hold is recorded and a person
    is told, once."""
    r = rem(phase=phase, acted=False, alert_first_seen=T0)
    r = r.model_copy(update={"attempts": (Attempt(
        key=idempotency_key(r.id, "cordon", 0), effect="cordon", started=T0, outcome="ok",
        finished=T0),)})
    nodes = [node("gpu01", "IDLE", "DRAIN", reason="bad fan, do not use -- bob"), node("gpu02")]
    al = {"gpu01": [alert("gpu01")]}
    plan = run(nodes, al, State(remediations=(r,)), T0 + timedelta(minutes=5))
    assert kinds(plan) == ["notify"] and ("blocked", "D5") in phases(plan, "gpu01")
    assert plan.effects[0].rule == "D5" and "bob" in plan.effects[0].why
    s = apply(State(remediations=(r,)), plan)
    again = run(nodes, al, s.model_copy(update={"data": plan.data or {}}),
                T0 + timedelta(minutes=10))
    assert kinds(again) == [] and not [u for u in again.updates if u.phase is not phase]
    # the person resumes the node: the remediation is cancelled (S8), never acted, and
    # its alert does not cordon the node again
    s = apply(s, again)
    after = run([node("gpu01"), node("gpu02")], al, s, T0 + timedelta(minutes=15))
    assert phases(after, "gpu01") == [("cancelled", "S8")] and kinds(after) == []


def test_a_persons_drain_at_the_wait_limit_stops_the_eviction() -> None:
    """SPEC P3 / house style 2 (issue 8, defect 11): no signal, requeue or cancel on a
    node someone else took over."""
    r = rem(phase=Phase.WAITING, acted=False)
    job = JobInfo(job_id=7, user="u", state="RUNNING", nodes=("gpu01",))
    n = [node("gpu01", "ALLOCATED", "DRAIN", reason="Reboot pending: BIOS update (bob)")]
    plan = run(n, {"gpu01": [alert("gpu01")]}, State(remediations=(r,)),
               T0 + timedelta(hours=3), jobs=(job,))
    assert kinds(plan) == ["notify"] and ("blocked", "D5") in phases(plan)


@pytest.mark.parametrize("alerts", [{}, {"gpu01": [alert("gpu01", "gpu.xid.79")]}])
def test_after_a_fresh_store_our_marker_mid_action_goes_to_a_person(
        alerts: dict[str, list[Alert]]) -> None:
    """SPEC I5/L5, house style 5 (issue 8, defect 16): the store was set aside; gpu01 is
    DOWN+DRAIN with our marker (mid-rebuild) and there is no record of it. Never a
    release (a resume without the L5 health check) and no new remediation: a person is
    told, once."""
    marker = format_marker("gpu.xid.79", "r-5e1f00000000", "controller", "for rebuild")
    nodes = [node("gpu01", "DOWN", "DRAIN", reason=marker), node("gpu02", pool="b")]
    plan = run(nodes, alerts, State(), T0 + timedelta(minutes=5))
    assert kinds(plan) == ["notify"] and not plan.updates
    assert ("blocked", "I5") in phases(plan, "gpu01")
    again = run(nodes, alerts, State(data=plan.data or {}), T0 + timedelta(minutes=10))
    assert kinds(again) == [] and not again.updates


def test_a_node_that_carries_our_marker_on_record_is_still_released() -> None:
    """House style 2 / L1: the orphan sweep still undoes our cordon when its remediation
    is on record and over (only an unrecorded marker goes to a person)."""
    r, n = _left_behind()
    plan = run([n, node("gpu02", pool="b")], {}, State(remediations=(r,)), T0 + timedelta(days=1))
    assert kinds(plan) == ["release"]


def test_a_detectors_request_does_not_override_a_node_handed_to_a_person() -> None:
    """SPEC E1/Q4 (issue 8, defect 4): the hand-to-person hold holds for reason-string
    requests too; a person's own request still goes through."""
    r = rem(phase=Phase.FAILED, action=Action.MIGRATE, fault="gpu.xid.79",
            data={"evidence_fault": "gpu.xid.79", "handed_to_person": True})
    n = node("gpu01", "IDLE", "DRAIN", reason="heal-request: reboot detector=ibmon id=9")
    al = {"gpu01": [alert("gpu01", "gpu.xid.48", since=T0 + timedelta(hours=1))]}
    plan = run([n, node("gpu02", pool="b")], al, State(remediations=(r,)),
               T0 + timedelta(hours=2))
    assert not plan.updates and plan.effects == () and ("blocked", "E1") in phases(plan)
    cmd = Command(id="c1", at=T0, kind="request", by="alice", node="gpu01",
                  action=Action.REBOOT)
    person = run([node("gpu01", "IDLE", "DRAIN", reason="bob: look at it"),
                  node("gpu02", pool="b")], al, State(remediations=(r,), inbox=(cmd,)),
                 T0 + timedelta(hours=2))
    assert [u.requested_by for u in person.updates] == ["alice"]


def test_a_detector_without_an_id_is_heard_again_after_its_remediation_ended() -> None:
    """SPEC Q3 (issue 8, defect 9): without `id=`, a request is de-duplicated only
    against the open remediation; the same detector's next request, after the first one
    ended, makes a new remediation."""
    old = rem(phase=Phase.DONE, fault="request", at=T0, detector="ibmon",
              data={"evidence_fault": "ib.link_down"})
    old = old.model_copy(update={"origin": "request", "automatic": True})
    later = T0 + timedelta(days=2)
    n = NodeInfo(name="gpu01", states=frozenset({"IDLE", "DRAIN"}),
                 reason="heal-request: reboot detector=ibmon", reason_time=later,
                 partitions=("a",))
    plan = run([n, node("gpu02", pool="b")], {"gpu01": [alert("gpu01", "ib.link_down",
                                                                 since=later)]},
               State(remediations=(old,)), later + timedelta(minutes=1))
    new = [u for u in plan.updates if u.id != old.id]
    assert len(new) == 1 and new[0].detector == "ibmon" and new[0].request_id is None


def test_every_dropped_request_is_recorded_with_why() -> None:
    """SPEC Q3/P4 (issue 8, defect 9): a repeat of a request already handled (same
    detector and id) is dropped with a record that says so, once."""
    old = rem(phase=Phase.DONE, fault="request", at=T0, detector="ibmon", request_id="4711")
    n = node("gpu01", "IDLE", "DRAIN", reason="heal-request: reboot detector=ibmon id=4711")
    al = {"gpu01": [alert("gpu01", "ib.link_down")]}
    plan = run([n, node("gpu02", pool="b")], al, State(remediations=(old,)),
               T0 + timedelta(hours=2))
    assert not [u for u in plan.updates if u.detector == "ibmon"]
    (q3,) = [r for r in plan.records if r.rule == "Q3"]
    assert q3.phase == "blocked" and "dropped" in q3.why and old.id in q3.why
    again = run([n, node("gpu02", pool="b")], al, State(remediations=(old,),
                                                       data=plan.data or {}),
                T0 + timedelta(hours=3))
    assert not [r for r in again.records if r.rule == "Q3"]


@pytest.mark.parametrize(("at", "signal"), [(timedelta(hours=3), None),
                                            (timedelta(minutes=115), "USR1")])
def test_pause_holds_signalling_and_eviction_too(at: timedelta, signal: str | None) -> None:
    """SPEC O2 / house style 8 (issue 8, defect 8): while paused, jobs are not signalled,
    requeued or cancelled at the wait limit; unpaused, the eviction goes on."""
    r = rem(phase=Phase.WAITING, acted=False)
    job = JobInfo(job_id=7, user="u", state="RUNNING", nodes=("gpu01",))
    n = [node("gpu01", "ALLOCATED", "DRAIN", reason=format_marker("gpu.xid.48", r.id)),
         node("gpu02", pool="b")]
    p = pol(waiting={"signal": signal} if signal else {})
    al = {"gpu01": [alert("gpu01")]}
    plan = run(n, al, State(remediations=(r,), paused=True), T0 + at, p, jobs=(job,))
    assert plan.effects == () and ("blocked", "pause") in phases(plan, "gpu01")
    going = run(n, al, State(remediations=(r,)), T0 + at, p, jobs=(job,))
    assert kinds(going) == (["signal_jobs"] if signal else ["requeue_jobs"])


def test_pause_holds_a_cordon_sent_again() -> None:
    """SPEC O2 (issue 8, defect 8): a failed cordon is not re-sent while paused."""
    nodes = [node("gpu01"), node("gpu02"), node("gpu03")]
    al = {"gpu01": [alert("gpu01")]}
    p = run(nodes, al)
    s = apply(State(), p, outcome="failed")
    again = run(nodes, al, s.model_copy(update={"paused": True}), T0 + timedelta(minutes=1))
    assert again.effects == () and ("blocked", "pause") in phases(again, "gpu01")


def _cordon_in_flight(resent: int = 0, at: datetime = T0) -> tuple[State, str]:
    nodes = [node("gpu01"), node("gpu02"), node("gpu03")]
    p = run(nodes, {"gpu01": [alert("gpu01")]})
    s = apply(State(), p, outcome=None)
    (r,) = s.remediations
    (a,) = r.attempts
    r = r.model_copy(update={"attempts": (a.model_copy(update={"started": at,
                                                                "resent": resent}),)})
    return State(remediations=(r,)), a.key


def test_a_cordon_recorded_but_never_run_is_sent_again_with_the_same_key() -> None:
    """SPEC L1/S6 (issue 8, defect 1): the controller stopped between recording the
    cordon and running it. After safety.step_timeout the cordon is sent again under the
    same key (the store hands it out once more); before that it is waited for."""
    nodes = [node("gpu01"), node("gpu02"), node("gpu03")]
    al = {"gpu01": [alert("gpu01")]}
    s, key = _cordon_in_flight()
    early = run(nodes, al, s, T0 + timedelta(minutes=9))
    assert early.effects == () and early.next_wake == T0 + timedelta(minutes=10)
    late = run(nodes, al, s, T0 + timedelta(minutes=10))
    (eff,) = late.effects
    assert (eff.kind, eff.key, eff.resend) == ("cordon", key, True)
    assert any("same key" in r.why for r in late.records)
    custom = run(nodes, al, s, T0 + timedelta(minutes=10), pol(safety={"step_timeout": "1h"}))
    assert custom.effects == ()


def test_a_cordon_that_never_reports_is_handed_to_a_person_in_bounded_time() -> None:
    """SPEC L1 (issue 8, defect 1): after RESEND_TRIES sends without an outcome the
    remediation fails and a person is told: it never holds its S3 slot forever."""
    nodes = [node("gpu01"), node("gpu02"), node("gpu03")]
    s, _ = _cordon_in_flight(resent=2, at=T0 + timedelta(minutes=20))
    plan = run(nodes, {"gpu01": [alert("gpu01")]}, s, T0 + timedelta(minutes=30))
    assert phases(plan, "gpu01")[:2] == [("failed", "L1"), ("escalated", "L1")]
    assert kinds(plan) == ["notify"] and plan.updates[0].data.handed_to_person


@pytest.mark.parametrize("kind", ["requeue_jobs", "signal_jobs", "resume"])
def test_a_step_left_without_an_outcome_is_settled_not_left_in_flight(kind: str) -> None:
    """SPEC L1 (issue 8, defect 1): an eviction, a signal or a resume recorded but never
    run is failed (with why, recorded) after safety.step_timeout; none is re-sent blindly."""
    r = rem(phase=Phase.DONE if kind == "resume" else Phase.DRAINING, acted=kind == "resume")
    key = idempotency_key(r.id, kind, 0)
    r = r.model_copy(update={"attempts": r.attempts + (Attempt(key=key, effect=kind,
                                                               started=T0),)})
    n = node("gpu01", "IDLE", "DRAIN", reason=format_marker("gpu.xid.48", r.id, "controller"))
    plan = run([n, node("gpu02", pool="b")], {"gpu01": [alert("gpu01")]},
               State(remediations=(r,)), T0 + timedelta(minutes=11))
    (upd,) = [u for u in plan.updates if u.id == r.id]
    (a,) = [a for a in upd.attempts if a.key == key]
    assert a.outcome == "failed" and "no outcome" in a.detail
    assert not [e for e in plan.effects if e.key == key]
    assert any(key in rec.why for rec in plan.records)


def _evict_until_done(policy: Policy, cycles: int = 20) -> tuple[list[str], Plan]:
    """A job that never leaves (--no-requeue, a failing scontrol): every eviction fails."""
    r = rem(phase=Phase.WAITING, acted=False)
    job = JobInfo(job_id=7, user="u", state="RUNNING", nodes=("gpu01",))
    n = [node("gpu01", "ALLOCATED", "DRAIN", reason=format_marker("gpu.xid.48", r.id)),
         node("gpu02", pool="b")]
    s, sent = State(remediations=(r,)), []
    t = T0 + timedelta(hours=2)
    for _ in range(cycles):
        plan = run(n, {"gpu01": [alert("gpu01")]}, s, t, policy, jobs=(job,))
        sent += [e.kind for e in plan.effects]
        s = apply(s, plan, outcome="failed")
        if any(u.phase is Phase.FAILED for u in plan.updates):
            return sent, plan
        t += timedelta(minutes=5)
    raise AssertionError(f"eviction never ended: {sent}")


def test_eviction_is_bounded_then_a_person_decides() -> None:
    """SPEC P3 (issue 8, defect 5): a job that does not leave is requeued at most
    waiting.evict_tries times; then the remediation fails (freeing its S3/S4 slot) and a
    person is told, with the last failure."""
    sent, last = _evict_until_done(pol())
    assert sent == ["requeue_jobs"] * 3 + ["notify"]
    assert phases(last, "gpu01")[:2] == [("failed", "P3"), ("escalated", "P3")]
    assert last.updates[0].data.handed_to_person


def test_eviction_cancels_when_policy_allows_before_a_person_decides() -> None:
    """SPEC P3 (issue 8, defect 5): with waiting.cancel_when_stuck the requeues are
    followed by cancels, then a person."""
    sent, _ = _evict_until_done(pol(waiting={"evict_tries": 2, "cancel_when_stuck": True}))
    assert sent == ["requeue_jobs"] * 2 + ["cancel_jobs"] * 2 + ["notify"]


def test_an_act_the_controller_did_not_send_counts_for_no_escalation() -> None:
    """SPEC E1/E2 (issue 8, defect 11): an act recorded as "not sent" (the node was taken
    over before it ran) did not happen: it is no reboot towards the ladder."""
    hist = tuple(r.model_copy(update={"attempts": (r.attempts[0].model_copy(update={
        "outcome": "failed", "sent": False,
        "detail": "not sent: gpu01 was drained by someone else"}),)})
        for r in history(2, phase=Phase.FAILED))
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]},
               State(remediations=hist))
    assert plan.updates[0].action is Action.REBOOT


def test_a_reboot_someone_requested_after_ours_is_not_cleared() -> None:
    """SPEC L5 / house style 2 (issue 8, defect 2): Slurm's own "reboot requested" with
    the REBOOT_REQUESTED flag after our action finished is someone else's reboot, read
    from the node's flags: not resumed (which would cancel it)."""
    r, _ = _back(T0 + timedelta(minutes=5))
    n = node("gpu01", "IDLE", "DRAIN", "REBOOT_REQUESTED", reason="reboot requested",
             boot=T0 + timedelta(minutes=2), checked=T0 + timedelta(minutes=5))
    plan = run([n, node("gpu02")], {}, State(remediations=(r,)), T0 + timedelta(minutes=10))
    assert "resume" not in kinds(plan)


def test_a_notice_to_a_person_recorded_but_never_sent_is_sent_again() -> None:
    """SPEC L1/O3 (issue 8, defect 1): the hand-to-person notice of a finished
    remediation was recorded but the controller stopped before sending it: it is sent
    again under the same key (at most twice), then settled as failed."""
    r = rem(phase=Phase.FAILED, data={"evidence_fault": "gpu.xid.48", "handed_to_person": True})
    key = idempotency_key(r.id, "notify", 0)
    r = r.model_copy(update={"attempts": r.attempts + (Attempt(key=key, effect="notify",
                                                               started=T0),)})
    nodes = [node("gpu01", "IDLE", "DRAIN"), node("gpu02", pool="b")]
    plan = run(nodes, {}, State(remediations=(r,)), T0 + timedelta(minutes=10))
    (eff,) = plan.effects
    assert (eff.kind, eff.key, eff.resend) == ("notify", key, True)
    spent = r.model_copy(update={"attempts": r.attempts[:-1] + (r.attempts[-1].model_copy(
        update={"resent": 2}),)})
    last = run(nodes, {}, State(remediations=(spent,)), T0 + timedelta(minutes=10))
    assert last.effects == ()
    (a,) = [a for a in last.updates[0].attempts if a.key == key]
    assert a.outcome == "failed"
