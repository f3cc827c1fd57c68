"""A person's hand and our maintenance jobs (SPEC S8, E6, V4, L1; issue 32 items 8, 9, 10),
in decide() and in the validation flow, pure:

* a person's scancel of our GPU reset job (or of the gate's job) hands the remediation
  to them, recorded; it is no failure that climbs to a reboot;
* a node handed to a person is "with a person" only until that person acts on it
  (resumes, drains, re-reasons it): then a new fault is remediated again, while what was
  published when it was handed over opens nothing;
* a person's resume while the remediation returns wins: no gate after it; a person's
  drain after the action is a hand-over, not "the gate was interrupted twice";
* the flow's "restore the previous state" puts back only what it changed, only while the
  node is as it left it (never a stale drain after the controller released the node).

The same on the real lab: tests/integration/test_person_jobs_lab.py.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from slurm_heal import extra
from slurm_heal.models import Attempt, Phase, Plan, Remediation, State, ValidationRun
from slurm_heal.reasons import format_marker
from slurm_heal.types import Action, Alert, ClusterView, Evidence, NodeInfo, Severity
from slurm_heal.validation import flow
from tests.policycore import decide
from tests.unit.test_policy_engine import T0, apply, kinds, node, phases, pol, rem
from tests.unit.test_post_repair_gate import NOW, back, decide_on, final, gate_run

XID = "gpu.xid.119"
ON = {"escalation": {"gpu_reset": True}}


def xid(at: object = T0, line: str = "NVRM: Xid 119 on GPU 1") -> Alert:
    when = at if not isinstance(at, str) else T0
    return Alert(node="gpu01", fault=XID, severity=Severity.CRITICAL, summary="GSP timeout",
                 detector="kernel_log", first_seen=T0, last_seen=when,
                 evidence=(Evidence(source="kernel_log", text=line,
                                    at=when.isoformat()),))  # type: ignore[union-attr]


def gpu01(*states: str, reason: str = "", alerts: tuple[Alert, ...] = ()) -> NodeInfo:
    ours = extra.our_section(list(alerts), T0 + timedelta(minutes=1))
    return NodeInfo(name="gpu01", states=frozenset(states or {"IDLE"}), reason=reason,
                    partitions=("a",), extra={extra.KEY: ours})


def _cancelled_reset() -> tuple[Remediation, str]:
    """A reset_gpu remediation whose act came back ended by a person (their scancel of
    the reset job); the job's end drained the node again under our marker."""
    r = rem(phase=Phase.ACTING, action=Action.RESET_GPU, fault=XID,
            data={"evidence_fault": XID})
    r = r.model_copy(update={"attempts": (r.attempts[0].model_copy(update={
        "outcome": "failed", "by_person": True,
        "detail": "the reset job 12 was cancelled by someone else (scancel), not by "
                  "slurm-heal: a person's hand"}),)})
    return r, format_marker(XID, r.id, "controller", "for reset_gpu")


def _decide(n: NodeInfo, state: State, minutes: int) -> Plan:
    """decide() with the alerts as the node check published them in Extra."""
    return decide(ClusterView(nodes=(n, node("gpu02", pool="b")), jobs=()), state,
                  T0 + timedelta(minutes=minutes), pol(**ON))


# ------------------------------------------------------------------ item 10: scancel
def test_a_persons_scancel_of_the_reset_job_hands_it_to_them_and_nothing_is_rebooted() -> None:
    """SPEC S8, E6: the reset ended by a person: the remediation is cancelled (their
    hand, S8), handed to them and notified; no reboot follows, not in this decision and
    not in the next ones while the node stays as they were handed it."""
    r, marker = _cancelled_reset()
    n = gpu01("IDLE", "DRAIN", reason=marker, alerts=(xid(),))
    plan = _decide(n, State(remediations=(r,)), 5)
    out = final(plan, r.id)
    assert out.phase is Phase.CANCELLED and out.data.handed_to_person
    assert [s.rule for s in out.steps[-2:]] == ["S8", "S8"], out.steps
    assert "ended by a person" in out.steps[-2].why
    assert kinds(plan) == ["notify"]
    assert not [u for u in plan.updates if u.id != r.id]
    state = apply(State(remediations=(r,)), plan)
    for minutes in (6, 30, 120):
        later = _decide(n, state, minutes)
        assert kinds(later) == [] and not later.updates, minutes


def _handed() -> tuple[State, str]:
    r, marker = _cancelled_reset()
    n = gpu01("IDLE", "DRAIN", reason=marker, alerts=(xid(),))
    plan = _decide(n, State(remediations=(r,)), 5)
    return apply(State(remediations=(r,)), plan), marker


def test_the_hand_over_ends_when_the_person_resumes_and_a_new_fault_is_remediated() -> None:
    """SPEC S8 (issue 32 item 10): the person resumed the node: the hand-over is over.
    The Xid published when it was handed over opens nothing; a new Xid event after it
    (new evidence) is remediated again, as on any node (after the S2 cooldown)."""
    state, _ = _handed()
    same = _decide(gpu01(alerts=(xid(),)), state, 20)
    assert kinds(same) == [] and ("released", "S8") in phases(same)
    (kept,) = same.updates  # the old one, its hand-over marked over: nothing new opens
    assert kept.phase is Phase.CANCELLED and kept.data.handed_ended
    state = apply(state, same)
    new = xid(T0 + timedelta(minutes=35), line="NVRM: Xid 119 on GPU 1, again")
    plan = _decide(gpu01(alerts=(new,)), state, 40)  # past the S2 cooldown
    opened = [u for u in plan.updates if u.phase is not Phase.CANCELLED]
    assert opened and opened[0].fault == XID and opened[0].action is Action.RESET_GPU
    assert "cordon" in kinds(plan)


def test_the_hand_over_holds_while_the_node_is_as_it_was_handed_over() -> None:
    """SPEC E1, S8: the node still drained under our marker (nobody acted): the new Xid
    event opens nothing; a person's own drain ends the hand-over as a resume does."""
    state, marker = _handed()
    new = xid(T0 + timedelta(minutes=15), line="NVRM: Xid 119 on GPU 1, again")
    held = _decide(gpu01("IDLE", "DRAIN", reason=marker, alerts=(new,)), state, 20)
    assert kinds(held) == [] and not held.updates
    assert ("blocked", "E1") in phases(held)
    drained = _decide(gpu01("IDLE", "DRAIN", reason="bob: swapping the riser", alerts=(new,)),
                      state, 20)
    assert ("released", "S8") in phases(drained)


def test_a_resume_between_two_cycles_ends_the_hand_over_too() -> None:
    """SPEC S8: the person resumed the node and a new Xid drained it again (the node
    check's own drain) before the controller looked: the reason it was handed over with
    is gone, so that person acted; the new Xid is remediated."""
    state, _ = _handed()
    new = xid(T0 + timedelta(minutes=35), line="NVRM: Xid 119 on GPU 1, again")
    check = format_marker(XID, by="check", text="Xid 119")
    plan = _decide(gpu01("IDLE", "DRAIN", reason=check, alerts=(new,)), state, 40)
    assert ("released", "S8") in phases(plan)
    assert [u.action for u in plan.updates if not u.phase.terminal] == [Action.RESET_GPU]


def test_the_gates_job_cancelled_by_a_person_hands_the_remediation_to_them() -> None:
    """SPEC S8, V4: the flow cancels its own job only on its way to restoring; a job that
    ends CANCELLED while it is followed was a person's scancel: the run says so, and the
    remediation is handed to them, no gate run again."""
    r, n = back(gates=(("ok", "queued"),))
    running = gate_run(r, 0, "running").model_copy(update={
        "previous": flow.Previous(drained=True, reason=n.reason), "reservation": "g"})
    lifted = node("gpu01", "IDLE", "MAINT", "RESERVED")
    adv = flow.advance(running, flow.Facts(node=lifted, job=_job("CANCELLED")), NOW,
                       flow.Knobs(prefix="slurm-heal-gate-"))
    assert adv.run.phase == "restoring" and adv.run.by_person
    assert ("drain", n.reason) in [(e.kind, e.reason) for e in adv.effects]
    ended = adv.run.model_copy(update={"phase": "interrupted"})
    plan = decide_on(r, n, (ended,))
    out = final(plan, r.id)
    assert out.phase is Phase.CANCELLED and out.data.handed_to_person
    assert out.steps[-2].rule == "S8" and "cancelled the post-repair gate" in out.steps[-2].why
    assert "gate" not in kinds(plan)


def _job(state: str) -> object:
    from slurm_heal.types import JobInfo
    return JobInfo(job_id=42, user="root", state=state, name="slurm-heal-gate-gpu01",
                   nodes=("gpu01",))


# ------------------------------------------------------------------ item 8: returning
def test_a_persons_resume_while_returning_wins_no_gate_runs_after_it() -> None:
    """SPEC S8, V4: back and checked, the gate about to run, but a person resumed the
    node: the remediation ends with them; no gate effect, no drain."""
    r, n = back()
    resumed = node("gpu01", "IDLE", boot=n.boot_time, checked=T0 + timedelta(minutes=5))
    plan = decide_on(r, resumed)
    out = final(plan, r.id)
    assert out.phase is Phase.CANCELLED and out.data.resumed_by_person
    assert out.steps[-1].rule == "S8" and "resumed by a person" in out.steps[-1].why
    assert kinds(plan) == []


def test_a_persons_resume_during_our_gate_job_is_not_taken_for_ours() -> None:
    """SPEC S8, V4: while the gate's job runs our flow lifted our drain itself: the node
    in service then is ours, not a person's resume."""
    r, n = back(gates=(("ok", "queued"),))
    lifted = node("gpu01", "IDLE", "MAINT", boot=n.boot_time,
                  checked=T0 + timedelta(minutes=5))
    plan = decide_on(r, lifted, (gate_run(r, 0, "running"),))
    assert not [u for u in plan.updates if u.id == r.id and u.phase.terminal]


def test_a_persons_drain_after_the_action_is_a_hand_over_not_an_interrupted_gate() -> None:
    """SPEC S8, V4: back and checked, and a person drained it with their own reason: the
    remediation is handed to them at once (recorded), no gate is queued; never "the gate
    was interrupted 2 times"."""
    r, n = back()
    theirs = node("gpu01", "IDLE", "DRAIN", reason="alice: cable check", boot=n.boot_time,
                  checked=T0 + timedelta(minutes=5))
    plan = decide_on(r, theirs)
    out = final(plan, r.id)
    assert out.phase is Phase.CANCELLED and out.data.handed_to_person
    assert [s.rule for s in out.steps[-2:]] == ["S8", "S8"]
    assert "drained by a person" in out.steps[-2].why
    assert "gate" not in kinds(plan) and "resume" not in kinds(plan)
    # and with a gate that was skipped for it already: the same hand-over, not a retry
    r2, _ = back(gates=(("ok", "queued"),))
    skipped = gate_run(r2, 0, "skipped", "drained by someone else")
    plan = decide_on(r2, theirs, (skipped,))
    assert final(plan, r2.id).phase is Phase.CANCELLED and "gate" not in kinds(plan)


def test_the_gate_never_starts_on_a_node_a_person_resumed() -> None:
    """SPEC S8, V4: the gate's run finds its node in service (the remediation's cordon
    gone: a person's resume): skipped, nothing reserved or drained."""
    r, _ = back()
    queued = ValidationRun(id=flow.gate_run_id("gpu01", f"{r.id}:gate:0"), node="gpu01",
                           origin="gate", remediation=r.id, created=NOW, updated=NOW)
    adv = flow.advance(queued, flow.Facts(node=node("gpu01", "IDLE")), NOW,
                       flow.Knobs(prefix="slurm-heal-gate-"))
    assert adv.run.phase == "skipped" and adv.effects == []
    assert adv.run.steps[-1].rule == "S8"


# ------------------------------------------------------------------ item 9: restore
def _interrupted_with(prev_reason: str, facts: dict[str, object]) -> flow.Advance:
    run = ValidationRun(id="v-1", node="gpu01", origin="request", created=T0, updated=T0,
                        phase="running", job_id=7, reservation="slurm-heal-validate-gpu01",
                        previous=flow.Previous(drained=True, reason=prev_reason))
    return flow.advance(run, flow.Facts(job=_job("TIMEOUT"), **facts),
                        NOW, flow.Knobs())


def test_the_restore_never_puts_back_a_stale_check_drain() -> None:
    """SPEC L1, O6 (issue 32 item 9): the node check's drain the flow lifted is put back
    only while the check still publishes its fault; once it no longer does, putting it
    back would keep a healthy node out with nothing to resume it."""
    check = format_marker(XID, by="check", text="Xid 119")
    stale = _interrupted_with(check, {"node": node("gpu01", "IDLE"),
                                      "check_faults": frozenset()})
    assert [e.kind for e in stale.effects] == ["unreserve"]
    assert "no longer publishes gpu.xid.119" in stale.run.restored
    live = _interrupted_with(check, {"node": node("gpu01", "IDLE"),
                                     "check_faults": frozenset({XID})})
    assert ("drain", check) in [(e.kind, e.reason) for e in live.effects]


def test_the_restore_leaves_a_node_released_or_taken_since_as_it_is() -> None:
    """SPEC L1, S8 (issue 32 item 9): our controller's cordon is not put back once its
    remediation has ended (released, or handed to a person); a node drained by a person
    or DOWN meanwhile is left as it is."""
    ours = format_marker(XID, "r-old", "controller", "for reboot")
    released = _interrupted_with(ours, {"node": node("gpu01", "IDLE"),
                                        "closed": frozenset({"r-old"})})
    assert [e.kind for e in released.effects] == ["unreserve"]
    assert "r-old, whose cordon it had, is over" in released.run.restored
    taken = _interrupted_with(ours, {"node": node("gpu01", "IDLE", "DRAIN",
                                                  reason="carol: RMA")})
    assert "drain" not in [e.kind for e in taken.effects]
    open_ = _interrupted_with(ours, {"node": node("gpu01", "IDLE")})
    assert ("drain", ours) in [(e.kind, e.reason) for e in open_.effects]


def test_the_restore_never_resumes_a_drain_it_did_not_set() -> None:
    """SPEC L1, D4 (issue 32 item 9): the node was in service when the validation began;
    the node check drained it during the job for a fault it found: the restore removes
    the reservation and leaves that drain (it was never the validation's)."""
    run = ValidationRun(id="v-2", node="gpu01", origin="request", created=T0, updated=T0,
                        phase="running", job_id=7, reservation="slurm-heal-validate-gpu01",
                        previous=flow.Previous(drained=False))
    check = format_marker(XID, by="check", text="Xid 119")
    adv = flow.advance(run, flow.Facts(node=node("gpu01", "IDLE", "DRAIN", reason=check),
                                       job=_job("TIMEOUT")), NOW, flow.Knobs())
    assert [e.kind for e in adv.effects] == ["unreserve"]


def test_a_drain_sent_again_after_a_restart_is_asked_again_before_it_runs() -> None:
    """SPEC L1 (issue 32 item 9, seen once in 169 kill -9s): the restore's drain was
    recorded before the controller was killed, and the controller released the node
    since: the step sent again finds the node no longer as the flow left it."""
    ours = format_marker(XID, "r-old", "controller", "for reboot")
    run = ValidationRun(id="v-1", node="gpu01", origin="request", created=T0, updated=T0)
    assert flow.drain_hold(run, ours, node("gpu01", "IDLE"), frozenset({"r-old"}), None)
    assert flow.drain_hold(run, ours, node("gpu01", "IDLE"), frozenset(), None) is None
    assert flow.drain_hold(run, ours, node("gpu01", "DOWN"), frozenset(), None)


def test_attempts_keep_a_persons_hand_through_the_store() -> None:
    """SPEC S8, I5: the flag survives the store's round trip (and is left out when off)."""
    a = Attempt(key="r:act:0", effect="act", started=T0, outcome="failed", by_person=True)
    assert Attempt.model_validate(a.model_dump(mode="json")).by_person


def test_the_restore_drain_sent_again_after_a_kill_finds_the_node_released(
        tmp_path: Path) -> None:
    """SPEC L1, O6 (issue 32 item 9): the validator carries out a restore's drain that
    was recorded before a kill -9; meanwhile the remediation whose cordon it had ended
    and the controller released the node: the node is not drained again (the Slurm
    double holds the node as Slurm would; the store is the real one)."""
    from slurm_heal.slurm.memory import MemorySlurm
    from slurm_heal.store import Store
    from slurm_heal.validation.service import Validator

    slurm = MemorySlurm([("gpu01", "a"), ("gpu02", "a")], clock=lambda: NOW)
    store = Store(tmp_path / "state")
    old = rem(phase=Phase.DONE, action=Action.REBOOT, fault=XID, id="r-old")
    with store.transaction() as txn:
        txn.state = txn.state.model_copy(update={"remediations": (old,)})
    v = Validator(store=store, slurm=slurm, state_dir=tmp_path)
    ours = format_marker(XID, "r-old", "controller", "for reboot")
    run = ValidationRun(id="v-1", node="gpu01", origin="request", created=T0, updated=T0,
                        phase="restoring", previous=flow.Previous(drained=True, reason=ours))
    cfg = v.settings(pol())
    effect = flow.VEffect(kind="drain", key="v-1:restoring:drain", node="gpu01", reason=ours)
    outcome, detail, _ = v.execute(effect, run, cfg, NOW, store.load())
    assert outcome == "ok" and detail.startswith("not drained: r-old"), detail
    assert not slurm.node("gpu01").drained
    # with its remediation still open, the same step drains it as before
    with store.transaction() as txn:
        txn.state = txn.state.model_copy(update={"remediations": (
            old.model_copy(update={"phase": Phase.RETURNING}),)})
    outcome, detail, _ = v.execute(effect, run, cfg, NOW, store.load())
    assert outcome == "ok" and slurm.node("gpu01").reason == ours, detail


def test_status_says_handed_to_a_person_only_until_that_person_acts() -> None:
    """SPEC S8, O6: `status` and the console show "handed to a person" for a node whose
    remediation was handed over; once the person acted (here: drained it with their own
    reason), the hand-over has ended and the node is theirs, drained by someone else."""
    from slurm_heal.readmodel import overview

    handed = rem(phase=Phase.CANCELLED, data={"evidence_fault": XID, "handed_to_person": True})
    drained = NodeInfo(name="gpu01", states=frozenset({"IDLE", "DRAIN"}),
                       reason="looking at the GPU (alice)", partitions=("a",))
    line = overview.classify(drained, State(remediations=(handed,)), T0)
    assert line.category == "handed_to_person"
    ended = handed.model_copy(update={"data": handed.data.but(handed_ended=True)})
    line = overview.classify(drained, State(remediations=(ended,)), T0)
    assert line.category == "drained_by_others"


def _published(at_minutes: int, alerts: tuple[Alert, ...], *states: str, reason: str = "",
               acknowledged: tuple[Alert, ...] = ()) -> NodeInfo:
    """gpu01 with what the node check last published ``at_minutes`` after T0."""
    ours = extra.our_section(list(alerts), T0 + timedelta(minutes=at_minutes),
                             acknowledged=list(acknowledged))
    return NodeInfo(name="gpu01", states=frozenset(states or {"IDLE"}), reason=reason,
                    partitions=("a",), extra={extra.KEY: ours})


def test_evidence_published_while_with_the_person_opens_nothing_after_their_resume() -> None:
    """SPEC S8 (the deployed suite's resume-race, seed 3: an Xid event published while
    the node was handed to a person, drained under our marker; their resume; a new
    remediation cordoned the node 0.9 s after it). Everything the check published before
    the controller saw the resume was there for that person to see: it opens nothing
    until the check publishes again; then only what it did not acknowledge is new."""
    state, marker = _handed()
    both = xid(T0 + timedelta(minutes=15), line="NVRM: Xid 119 on GPU 1, again")
    both = replace(both, evidence=xid().evidence + both.evidence)
    # still with the person, the second event published at +15: nothing opens
    held = _decide(_published(15, (both,), "IDLE", "DRAIN", reason=marker), state, 16)
    assert [u for u in held.updates if not u.phase.terminal] == []
    state = apply(state, held)
    # the person resumes it; the check has not run since (its publication is from +15)
    resumed = _decide(_published(15, (both,)), state, 40)
    assert ("released", "S8") in phases(resumed)
    assert [u for u in resumed.updates if not u.phase.terminal] == []
    assert "cordon" not in kinds(resumed)
    state = apply(state, resumed)
    # the check's next run acknowledges both events (published before the resume)
    acked = _decide(_published(41, (), acknowledged=(both,)), state, 41)
    assert [u for u in acked.updates if not u.phase.terminal] == []
    # and a new event after it is a new fault, remediated
    state = apply(state, acked)
    new = xid(T0 + timedelta(minutes=42), line="NVRM: Xid 119 on GPU 1, a third time")
    plan = _decide(_published(42, (new,), acknowledged=(both,)), state, 43)
    assert [u.action for u in plan.updates if not u.phase.terminal] == [Action.RESET_GPU]


def test_the_wait_for_the_check_after_a_resume_ends_with_its_next_publication() -> None:
    """SPEC S8: the covering of what was published before the person acted lasts only
    until the check publishes after it: an event it then still shows active (not
    acknowledged: it was not published before the resume) is remediated."""
    state, _ = _handed()
    both = xid(T0 + timedelta(minutes=15), line="NVRM: Xid 119 on GPU 1, again")
    both = replace(both, evidence=xid().evidence + both.evidence)
    state = apply(state, _decide(_published(15, (both,)), state, 40))
    plan = _decide(_published(41, (both,)), state, 41)
    assert [u.action for u in plan.updates if not u.phase.terminal] == [Action.RESET_GPU]
