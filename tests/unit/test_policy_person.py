"""A person's hand wins (SPEC S8), in decide(): a node slurm-heal is working on that a
person resumed ends the remediation with them, never drained or rebooted again for the
faults seen so far; only something new (another fault, a newer event, a boot) opens new
work. All pure: the node check's data comes in through Extra, as on a cluster.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from slurm_heal import extra
from slurm_heal.config import Policy, policy_from_dict
from slurm_heal.models import NOT_SENT, Attempt, Phase, Plan, Remediation, State, idempotency_key
from slurm_heal.readmodel.nodes import node_status
from slurm_heal.reasons import format_marker
from slurm_heal.types import Alert, ClusterView, Evidence, NodeInfo, Severity
from tests.policycore import decide

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
XID = "gpu.xid.79"
CHECK_DRAIN = format_marker(XID, by="check", text="GPU fallen off the bus")


def xid(at: datetime = T0, fault: str = XID, line: str = "NVRM: Xid 79") -> Alert:
    return Alert(node="gpu01", fault=fault, severity=Severity.CRITICAL, summary="seen",
                 detector="kernel_log", first_seen=T0, last_seen=at,
                 evidence=(Evidence(source="kernel_log", text=line, at=at.isoformat()),))


def gpu01(*states: str, reason: str = "", alerts: tuple[Alert, ...] = (),
          acked: tuple[Alert, ...] = (), checked: datetime = T0,
          boot: datetime | None = None, drained: bool = False) -> NodeInfo:
    """gpu01 as Slurm shows it, its Extra as the node check published it."""
    ours = extra.our_section(list(alerts), checked, acknowledged=list(acked),
                             drained=drained)
    return NodeInfo(name="gpu01", states=frozenset(states or {"IDLE"}), reason=reason,
                    partitions=("a",), extra={extra.KEY: ours}, boot_time=boot)


def others() -> list[NodeInfo]:
    return [NodeInfo(name=f"gpu{i:02d}", states=frozenset({"IDLE"}), partitions=("a",))
            for i in range(2, 6)]


def pol(default: str = "auto") -> Policy:
    return policy_from_dict({"approvals": {"default": default}})


def run(n: NodeInfo, state: State, now: datetime, policy: Policy | None = None) -> Plan:
    return decide(ClusterView(nodes=(n, *others()), jobs=()), state, now, policy or pol())


def apply(state: State, plan: Plan, outcome: str = "ok") -> State:
    """What the daemon does: updates, then an Attempt per effect with its outcome."""
    rems = {r.id: r for r in state.remediations}
    for r in plan.updates:
        rems[r.id] = r
    for e in plan.effects:
        if e.remediation:
            r = rems[e.remediation]
            rems[r.id] = r.model_copy(update={"attempts": r.attempts + (Attempt(
                key=e.key, effect=e.kind, action=e.action, started=T0, outcome=outcome,
                finished=T0),)})
    return state.model_copy(update={
        "remediations": tuple(rems.values()),
        "paused": plan.paused if plan.paused is not None else state.paused,
        "data": plan.data if plan.data is not None else state.data})


def phases(plan: Plan) -> list[tuple[str, str]]:
    return [(r.phase, r.rule) for r in plan.records if r.node == "gpu01"]


def kinds(plan: Plan) -> list[str]:
    return [e.kind for e in plan.effects]


def cordoned() -> tuple[State, str]:
    """A remediation of XID on gpu01, its cordon applied (the node drained with our marker)."""
    plan = run(gpu01(alerts=(xid(),)), State(), T0)
    assert ("cordoned", "L1") in phases(plan)
    return apply(State(), plan), plan.effects[0].reason or ""


# ------------------------------------------------------------------ item 1: after our cordon
def test_a_resume_the_check_acknowledged_hands_the_remediation_to_the_person_not_l4() -> None:
    """SPEC S8 before L4: our cordon took effect, a person resumed the node, and the node
    check then moved the Xid to ``acknowledged``. That is no cleared alert (L4 withdrawn):
    the remediation ends with the person (S8), recorded; nothing is released or acted."""
    s, _ = cordoned()
    plan = run(gpu01(acked=(xid(),), checked=T0 + timedelta(minutes=2)), s,
               T0 + timedelta(minutes=3))
    assert phases(plan) == [("cancelled", "S8")] and kinds(plan) == []
    (r,) = plan.updates
    assert r.phase is Phase.CANCELLED and r.data.resumed_by_person
    assert "resumed by a person" in r.steps[-1].why and r.steps[-1].rule == "S8"


def test_nothing_is_rebooted_after_a_person_resumed_the_node() -> None:
    """SPEC S8: once handed to the person, later cycles send nothing: no cordon, no act,
    not from the latched alert either (the check has not run again since)."""
    s, _ = cordoned()
    t = T0 + timedelta(minutes=3)
    plan = run(gpu01(alerts=(xid(),)), s, t)
    assert phases(plan) == [("cancelled", "S8")] and kinds(plan) == []
    s = apply(s, plan)
    for minutes in (4, 10, 60):
        later = run(gpu01(alerts=(xid(),)), s, T0 + timedelta(minutes=minutes))
        assert kinds(later) == [] and not later.updates
    done = run(gpu01(acked=(xid(),), checked=T0 + timedelta(minutes=5)), s,
               T0 + timedelta(minutes=6))
    assert kinds(done) == [] and not done.updates


# ------------------------------------------------------------------ item 2: drained by the check
def _proposed_on_a_check_drained_node(policy: Policy, state: State | None = None) -> State:
    """gpu01 drained by the node check; its remediation proposed (or approved, held)."""
    state = state or State()
    plan = run(gpu01("IDLE", "DRAIN", reason=CHECK_DRAIN, alerts=(xid(),)), state, T0, policy)
    assert [u.phase for u in plan.updates] in ([Phase.PROPOSED], [Phase.APPROVED])
    assert "cordon" not in kinds(plan)
    return apply(state, plan)


def test_a_check_drained_node_resumed_before_approval_ends_the_proposal_with_s8() -> None:
    """SPEC S8: the node check drained gpu01, the remediation waits for an approval, a
    person resumes the node before the check runs again (the Xid still in ``alerts``):
    the remediation ends with S8, nothing cordons the node, nothing new opens from that
    alert; the person's later approve finds nothing open."""
    s = _proposed_on_a_check_drained_node(pol("manual"))
    plan = run(gpu01(alerts=(xid(),)), s, T0 + timedelta(minutes=1), pol("manual"))
    assert phases(plan) == [("cancelled", "S8")] and kinds(plan) == []
    s = apply(s, plan)
    again = run(gpu01(alerts=(xid(),)), s, T0 + timedelta(minutes=2), pol("manual"))
    assert kinds(again) == [] and not again.updates


def test_an_approved_remediation_held_by_the_pause_does_not_redrain_a_resumed_node() -> None:
    """SPEC S8 / O2: approved while slurm-heal was paused; the person resumes the node the
    check drained, then unpauses: no cordon (which would drain it again under our
    marker), the remediation ends with S8."""
    paused = State(paused=True)
    s = _proposed_on_a_check_drained_node(pol(), paused)
    assert s.remediations[0].phase is Phase.APPROVED
    s = s.model_copy(update={"paused": False})
    plan = run(gpu01(alerts=(xid(),)), s, T0 + timedelta(minutes=1))
    assert "cordon" not in kinds(plan) and ("cancelled", "S8") in phases(plan)
    assert [r.phase for r in plan.updates] == [Phase.CANCELLED]


def test_a_resume_the_controller_never_saw_drained_is_a_persons_when_extra_says_so() -> None:
    """SPEC S8 (issue 32, the deployed suite: a person's resume undone by our cordon
    1.8 s after it): the remediation opened on gpu01 while its Extra was written and the
    check's drain not yet applied, and waited (paused); the check drained the node and
    a person resumed it, both between two looks of the controller. Extra says the
    check's drain holds (``drained``, written after it): the node in service under it
    was resumed by someone, so no cordon: the remediation ends with S8."""
    paused = State(paused=True)
    plan = run(gpu01(alerts=(xid(),)), paused, T0)
    (opened,) = plan.updates
    assert opened.phase is Phase.APPROVED and not opened.data.held_by_check
    s = apply(paused, plan).model_copy(update={"paused": False})
    later = run(gpu01(alerts=(xid(),), drained=True), s, T0 + timedelta(seconds=3))
    assert "cordon" not in kinds(later) and phases(later) == [("cancelled", "S8")]
    (r,) = later.updates
    assert r.data.resumed_by_person and "drained by the node check" in r.steps[-1].why
    s = apply(s, later)
    again = run(gpu01(alerts=(xid(),), drained=True), s, T0 + timedelta(seconds=6))
    assert kinds(again) == [] and not again.updates


def test_without_the_drained_word_the_same_node_is_cordoned_as_before() -> None:
    """The counterpart: Extra does not say the check's drain holds (a fault just
    published, its drain in flight): the approved remediation cordons the node."""
    paused = State(paused=True)
    s = apply(paused, run(gpu01(alerts=(xid(),)), paused, T0))
    s = s.model_copy(update={"paused": False})
    later = run(gpu01(alerts=(xid(),)), s, T0 + timedelta(seconds=3))
    assert ("cordoned", "L1") in phases(later) and "cordon" in kinds(later)


def test_a_new_alert_on_a_node_a_person_resumed_from_the_checks_drain_opens_nothing_disruptive(
        ) -> None:
    """SPEC S8: the controller's first look at gpu01 comes after the check drained it
    and a person resumed it: the alert is still in Extra, and Extra says the check's
    drain holds. No cordon: what opened is handed to the person at once."""
    plan = run(gpu01(alerts=(xid(),), drained=True), State(), T0)
    assert "cordon" not in kinds(plan)
    assert ("cancelled", "S8") in phases(plan)


def test_a_boot_after_the_checks_word_is_slurms_return_not_a_persons_resume() -> None:
    """A node Slurm returned to service after a reboot (booted after the check last
    wrote): the old ``drained`` is not a person's resume; the remediation cordons."""
    boot = T0 + timedelta(seconds=2)
    plan = run(gpu01(alerts=(xid(),), drained=True, boot=boot), State(),
               T0 + timedelta(seconds=3))
    assert ("cordoned", "L1") in phases(plan) and "cordon" in kinds(plan)


def test_the_checks_own_release_of_a_cleared_fault_is_still_withdrawn_l4() -> None:
    """SPEC L4: the check drained the node and released it itself once the Xid cleared
    (our key gone from Extra): no person's resume, the recommendation is withdrawn."""
    s = _proposed_on_a_check_drained_node(pol("manual"))
    n = NodeInfo(name="gpu01", states=frozenset({"IDLE"}), partitions=("a",), extra={})
    plan = run(n, s, T0 + timedelta(minutes=1), pol("manual"))
    assert phases(plan) == [("withdrawn", "L4")]


def test_a_newer_event_or_another_fault_opens_new_work_after_a_persons_resume() -> None:
    """SPEC S8: only a new fault drains the node again: a newer kernel event of the same
    Xid (evidence not seen when the person resumed) or another fault id opens a new
    remediation; the same alert as before does not."""
    s = _proposed_on_a_check_drained_node(pol(), State(paused=True))
    s = s.model_copy(update={"paused": False})
    plan = run(gpu01(alerts=(xid(),)), s, T0 + timedelta(minutes=1))
    s = apply(s, plan)
    t = T0 + timedelta(minutes=5)
    newer = xid(at=t, line="NVRM: Xid 79 (again)")
    renewed = run(gpu01(alerts=(newer,), checked=t), s, t + timedelta(minutes=1))
    assert ("cordoned", "L1") in phases(renewed)
    other = xid(fault="gpu.xid.48", line="NVRM: Xid 48")
    both = run(gpu01(alerts=(xid(), other)), s, t)
    (new,) = [r for r in both.updates if r.phase is not Phase.CANCELLED]
    assert new.fault == "gpu.xid.48" and "cordon" in kinds(both)


def test_a_boot_since_the_resume_ends_the_acknowledgement() -> None:
    """SPEC S8: a node Slurm returns to service after a reboot with the fault still there
    is new work again (the check drains it again too)."""
    s = _proposed_on_a_check_drained_node(pol(), State(paused=True))
    s = s.model_copy(update={"paused": False})
    s = apply(s, run(gpu01(alerts=(xid(),)), s, T0 + timedelta(minutes=1)))
    plan = run(gpu01(alerts=(xid(),), boot=T0 + timedelta(minutes=3)), s,
               T0 + timedelta(minutes=5))
    assert ("cordoned", "L1") in phases(plan)


# ------------------------------------------------------------------ item 3: not sent
def _acting(detail: str) -> Remediation:
    rid = "r-gpu01-acting"
    return Remediation(
        id=rid, node="gpu01", host="gpu01", pool="a", fault=XID, action="reboot",
        phase=Phase.ACTING, created=T0, updated=T0, severity=Severity.CRITICAL,
        alert_first_seen=T0, phase_times={"cordoned": T0, "acting": T0},
        data={"evidence_fault": XID},
        attempts=(Attempt(key=idempotency_key(rid, "act", 0), effect="act", action="reboot",
                          started=T0, outcome="failed", finished=T0, detail=detail),))


def test_an_act_not_sent_because_a_person_resumed_the_node_is_recorded_as_s8() -> None:
    """SPEC S8 (the controller's last look found gpu01 in service again): the act was not
    sent; the remediation ends with the person under S8, not as someone else's drain
    (D5), and is not handed on as a failure."""
    r = _acting(NOT_SENT + "gpu01 was resumed by someone else (in service again, IDLE)")
    plan = run(gpu01(alerts=(xid(),)), State(remediations=(r,)), T0 + timedelta(minutes=1))
    assert phases(plan) == [("cancelled", "S8")] and kinds(plan) == []
    assert "not sent" in plan.updates[0].steps[-1].why


def test_an_eviction_not_sent_because_a_person_resumed_the_node_is_recorded_as_s8() -> None:
    """SPEC S8: at the wait limit the requeue was not sent (the last look found gpu01 in
    service again): the remediation ends with the person, no eviction is tried again."""
    s, _ = cordoned()
    (r,) = s.remediations
    requeue = Attempt(key=idempotency_key(r.id, "requeue", 0), effect="requeue_jobs",
                      started=T0, outcome="failed", finished=T0,
                      detail=NOT_SENT + "gpu01 was resumed by someone else")
    r = r.model_copy(update={"phase": Phase.DRAINING, "attempts": r.attempts + (requeue,),
                             "data": r.data.but(evict_n=1, evict_at=T0)})
    plan = run(gpu01(alerts=(xid(),)), State(remediations=(r,)), T0 + timedelta(hours=30))
    assert phases(plan) == [("cancelled", "S8")] and kinds(plan) == []


def test_an_act_not_sent_because_someone_drained_the_node_stays_d5() -> None:
    """House style 2 / D5: a node someone else drained with their own reason is theirs;
    the not-sent act fails with D5 as before."""
    r = _acting(NOT_SENT + "gpu01 was drained by someone else ('bad fan')")
    n = gpu01("IDLE", "DRAIN", reason="bad fan", alerts=(xid(),))
    plan = run(n, State(remediations=(r,)), T0 + timedelta(minutes=1))
    assert ("failed", "D5") in phases(plan)


# ------------------------------------------------------------------ item 4: shown
def test_acknowledged_faults_are_read_from_extra_and_shown_in_the_node_status() -> None:
    """SPEC S8 / I2: the check data's ``acknowledged`` is read (validated like alerts)
    and shown beside the active alerts; a wrong type there names the field."""
    n = gpu01(acked=(xid(),))
    data = extra.read_check_data("gpu01", n.extra, T0)
    assert data.problem is None and data.alerts == ()
    assert [a.fault for a in data.acknowledged] == [XID]
    status: dict[str, Any] = node_status(n, T0)
    assert status["alerts"] == [] and [a["fault"] for a in status["acknowledged"]] == [XID]
    bad = {extra.KEY: {"v": 1, "acknowledged": 3}}
    assert extra.read_check_data("gpu01", bad, T0).problem == (
        "slurm_heal.acknowledged: expected a list, got a number")
