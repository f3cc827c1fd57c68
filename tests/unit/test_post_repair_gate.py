"""The post-repair gate (SPEC V4) in the pure life cycle: after the action and the health
check (L5), before the resume, fed by the gate run's verdict from the store; and the
gate run's own steps in the validation flow (origin "gate"). No Slurm here; the same on
the real lab: tests/integration/test_gate_lab.py."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from slurm_heal.config import Policy
from slurm_heal.errors import ConfigError
from slurm_heal.models import Attempt, Phase, Plan, Remediation, State, ValidationRun
from slurm_heal.reasons import format_marker
from slurm_heal.types import Action, NodeInfo
from slurm_heal.validation import flow
from tests.unit.test_policy_engine import T0, alert, kinds, node, phases, pol, rem, run

GATE = {"enabled": True, "suites": {"nvidia": [
    {"name": "diag", "kind": "command", "command": ["dcgmi", "diag", "-r", "1"],
     "timeout": "5m"}]}}
NOW = T0 + timedelta(minutes=10)


def gate_pol(**over: Any) -> Policy:
    return pol(gate={**GATE, **over.pop("gate", {})}, **over)


def back(action: Action = Action.REBOOT, gates: tuple[tuple[str, str | None], ...] = (),
         ) -> tuple[Remediation, NodeInfo]:
    """A remediation whose node is back and passed its health check (L5), with gate
    attempts ``gates`` = ((outcome, detail), ...) already recorded."""
    r = rem(phase=Phase.RETURNING, action=action,
            data={"evidence_fault": "gpu.xid.48", "act_done": T0.isoformat()})
    extra = tuple(Attempt(key=f"{r.id}:gate:{i}", effect="gate", started=NOW - timedelta(minutes=1),
                          outcome=out, detail=detail or "")  # type: ignore[arg-type]
                  for i, (out, detail) in enumerate(gates))
    r = r.model_copy(update={"attempts": r.attempts + extra})
    n = node("gpu01", "IDLE", "DRAIN", reason=format_marker("gpu.xid.48", r.id, "controller",
                                                             "for reboot"),
             boot=T0 + timedelta(minutes=2), checked=T0 + timedelta(minutes=5))
    return r, n


def gate_run(r: Remediation, i: int, phase: str, summary: str = "") -> ValidationRun:
    return ValidationRun.model_validate({
        "id": flow.gate_run_id(r.node, f"{r.id}:gate:{i}"), "node": r.node, "origin": "gate",
        "remediation": r.id, "created": T0, "updated": T0, "phase": phase, "summary": summary,
        "job_id": 42, "results_dir": "/var/lib/slurm-heal/validation/v-x"})


def decide_on(r: Remediation, n: NodeInfo, runs: tuple[ValidationRun, ...] = (),
              policy: Policy | None = None, others: tuple[Remediation, ...] = (),
              **kw: Any) -> Plan:
    state = State(remediations=(*others, r), validations=runs, **kw)
    return run([n, node("gpu02")], {}, state, NOW, policy or gate_pol())


def final(plan: Plan, rid: str) -> Remediation:
    return next(u for u in plan.updates if u.id == rid)


# ------------------------------------------------------------------ the life cycle
def test_without_the_gate_a_checked_node_is_resumed_at_once() -> None:
    """SPEC V4 is off by default: L5 as before (health check passed -> resumed)."""
    r, n = back()
    plan = decide_on(r, n, policy=pol())
    assert ("done", "L5") in phases(plan) and kinds(plan) == ["resume"]
    assert Policy().gate.enabled is False


def test_with_the_gate_a_checked_node_gets_a_gate_job_before_it_is_resumed() -> None:
    """SPEC V4: health check passed -> a gate effect keyed by the remediation, no resume."""
    r, n = back()
    plan = decide_on(r, n)
    assert ("returning", "V4") in phases(plan) and ("done", "L5") not in phases(plan)
    (eff,) = plan.effects
    assert eff.kind == "gate" and eff.key == f"{r.id}:gate:0" and eff.rule == "V4"
    assert "diag as a Slurm job in a maintenance reservation on gpu01" in plan.records[-1].why
    assert plan.next_wake is not None


@pytest.mark.parametrize("phase", ["requested", "reserving", "running", "ticketing"])
def test_a_gate_that_has_not_ended_holds_the_node_out(phase: str) -> None:
    """SPEC V4: queued or running: nothing is resumed, nothing new is sent."""
    r, n = back(gates=(("ok", "queued"),))
    plan = decide_on(r, n, (gate_run(r, 0, phase),))
    assert plan.effects == () and not any(p == "done" for p, _ in phases(plan))


def test_a_gate_run_that_never_ends_is_handed_to_a_person_at_its_bound() -> None:
    """SPEC V4, O6: waits have bounds: a run the flow does not move (its section broken,
    no validator) ends with a person after 2 x gate.timeout + safety.step_timeout."""
    r, n = back(gates=(("ok", "queued"),))
    stuck = (gate_run(r, 0, "requested"),)
    started = NOW - timedelta(minutes=1)
    state = State(remediations=(r,), validations=stuck)
    before = run([n, node("gpu02")], {}, state, started + timedelta(minutes=29), gate_pol())
    assert before.effects == () and before.next_wake == started + timedelta(minutes=30)
    after = run([n, node("gpu02")], {}, state, started + timedelta(minutes=30), gate_pol())
    out = final(after, r.id)
    assert out.phase is Phase.FAILED and out.data.handed_to_person
    assert "did not end within 30m" in out.steps[-2].why and kinds(after) == ["notify"]


def test_a_gate_recorded_but_not_yet_answered_is_waited_for() -> None:
    """SPEC V4, S6: the gate's intent without an outcome is not sent twice."""
    r, n = back(gates=((None, None),))
    plan = decide_on(r, n)
    assert plan.effects == () and plan.next_wake is not None


@pytest.mark.parametrize("outcome", [None, "failed"])
def test_a_controller_that_stopped_after_queueing_the_gate_follows_the_same_run(
        outcome: str | None) -> None:
    """SPEC V4, S6: the run was queued but its outcome never recorded (the controller
    stopped in between; settle() may have failed the attempt since): the engine follows
    that run, never queues a second one."""
    r, n = back(gates=((outcome, "no outcome 10m after it was recorded" if outcome else None),))
    plan = decide_on(r, n, (gate_run(r, 0, "running"),))
    assert "gate" not in kinds(plan) and ("done", "L5") not in phases(plan)
    done = decide_on(r, n, (gate_run(r, 0, "passed", "all 1 step(s) passed"),))
    assert ("done", "L5") in phases(done)


def test_a_gate_pass_resumes_the_node_and_says_so() -> None:
    """SPEC V4: pass -> done (L5) with the gate's words; our marker resumed."""
    r, n = back(gates=(("ok", "queued"),))
    plan = decide_on(r, n, (gate_run(r, 0, "passed", "all 1 step(s) passed"),))
    assert ("done", "L5") in phases(plan) and kinds(plan) == ["resume"]
    assert "the post-repair gate passed (all 1 step(s) passed, job 42)" in plan.records[-1].why


def test_a_gate_failure_fails_the_remediation_with_its_evidence_and_keeps_the_cordon() -> None:
    """SPEC V4, L5, E1: a clear failure -> failed, the next recommendation follows E1; the
    notification carries the gate's evidence; the node is neither resumed nor released
    although its health check is clean."""
    r, n = back(gates=(("ok", "queued"),))
    summary = "nccl fail: busbw 12.0 GB/s < 300 GB/s expected"
    plan = decide_on(r, n, (gate_run(r, 0, "failed", summary),))
    assert ("failed", "V4") in phases(plan)
    assert "resume" not in kinds(plan) and "release" not in kinds(plan)
    (note,) = [e for e in plan.effects if e.kind == "notify"]
    assert summary in note.why and "job 42" in note.why and "v-x" in note.why
    out = final(plan, r.id)
    assert out.phase is Phase.FAILED and out.data.gate_failed
    assert not out.data.handed_to_person  # reboot is not the top of the ladder: E1 follows
    assert summary in out.steps[-1].why and "E1" in out.steps[-1].why


def test_a_gate_failure_after_the_last_step_of_the_ladder_goes_to_a_person() -> None:
    """SPEC V4, E1: a failed migrate ends with a person, never a loop."""
    r, n = back(action=Action.MIGRATE, gates=(("ok", "queued"),))
    plan = decide_on(r, n, (gate_run(r, 0, "failed", "diag fail: exit status 1"),))
    out = final(plan, r.id)
    assert out.phase is Phase.FAILED and out.data.handed_to_person
    assert ("escalated", "E1") in phases(plan) and "resume" not in kinds(plan)


@pytest.mark.parametrize("phase", ["interrupted", "skipped"])
def test_an_interrupted_gate_is_run_once_more(phase: str) -> None:
    """SPEC V4: interrupted (job cancelled, timed out, peer gone) -> retried once, under a
    new key (a new run), nothing resumed meanwhile."""
    r, n = back(gates=(("ok", "queued"),))
    plan = decide_on(r, n, (gate_run(r, 0, phase, "job 42 ended CANCELLED"),))
    (eff,) = plan.effects
    assert eff.kind == "gate" and eff.key == f"{r.id}:gate:1"
    assert "concluded nothing" in plan.records[-1].why and "try 2 of 2" in plan.records[-1].why


def test_a_gate_the_controller_could_not_queue_counts_as_interrupted() -> None:
    """SPEC V4: the gate effect failed (no validation flow, a store error): run again."""
    r, n = back(gates=(("failed", "this controller runs no validation flow"),))
    plan = decide_on(r, n)
    assert [e.key for e in plan.effects] == [f"{r.id}:gate:1"]
    assert "no validation flow" in plan.records[-1].why


def test_a_gate_interrupted_twice_is_handed_to_a_person_and_stays_cordoned() -> None:
    """SPEC V4: the retry interrupted too -> failed, a person is told; nothing resumed."""
    r, n = back(gates=(("ok", "queued"), ("ok", "queued")))
    runs = (gate_run(r, 0, "interrupted", "x"), gate_run(r, 1, "interrupted", "peer gone"))
    plan = decide_on(r, n, runs)
    out = final(plan, r.id)
    assert out.phase is Phase.FAILED and out.data.handed_to_person
    assert ("escalated", "V4") in phases(plan)
    assert kinds(plan) == ["notify"] and "peer gone" in plan.effects[0].why


def test_retries_zero_hands_the_first_interruption_to_a_person() -> None:
    """SPEC V4: gate.retries = 0."""
    r, n = back(gates=(("ok", "queued"),))
    plan = decide_on(r, n, (gate_run(r, 0, "interrupted", "x"),),
                     policy=gate_pol(gate={"retries": 0}))
    assert final(plan, r.id).data.handed_to_person and "gate" not in kinds(plan)


def test_the_pause_holds_the_gate_job_too() -> None:
    """SPEC O2: while paused nothing disruptive starts: the gate is not queued."""
    r, n = back()
    plan = decide_on(r, n, paused=True)
    assert "gate" not in kinds(plan) and "resume" not in kinds(plan)


def test_a_gate_started_before_the_gate_was_turned_off_is_followed_to_its_end() -> None:
    """SPEC V4: turning the gate off does not resume a node whose gate runs now."""
    r, n = back(gates=(("ok", "queued"),))
    plan = decide_on(r, n, (gate_run(r, 0, "running"),), policy=pol())
    assert plan.effects == () and ("done", "L5") not in phases(plan)


def test_an_interrupted_gate_is_not_run_again_once_the_gate_is_turned_off() -> None:
    """SPEC V4, house style 8: [gate] enabled = false is the kill switch: an interrupted
    gate is not run again, the node is resumed (L5) and the record says why."""
    r, n = back(gates=(("ok", "queued"),))
    plan = decide_on(r, n, (gate_run(r, 0, "interrupted", "job 42 ended CANCELLED"),),
                     policy=pol())
    assert "gate" not in kinds(plan) and kinds(plan) == ["resume"]
    assert "is off now ([gate] enabled = false)" in plan.records[-1].why


def test_a_node_that_failed_its_gate_is_never_released_as_an_orphan() -> None:
    """SPEC V4, L1: our cordon of a remediation that failed its gate stays (its node
    check is clean, the gate says it is not fit); said once."""
    r, n = back(gates=(("ok", "queued"),))
    r = r.model_copy(update={"phase": Phase.FAILED, "data": r.data.but(gate_failed=True)})
    state = State(remediations=(r,))
    plan = run([n, node("gpu02")], {}, state, NOW, gate_pol())
    assert "release" not in kinds(plan)
    assert ("blocked", "V4") in phases(plan)
    # and one without the gate's failure is released as before (L1)
    plain = r.model_copy(update={"data": r.data.but(gate_failed=False)})
    assert "release" in kinds(run([n, node("gpu02")], {}, State(remediations=(plain,)), NOW,
                                  gate_pol()))


def test_two_gate_failures_count_for_e1_the_next_reboot_becomes_a_rebuild() -> None:
    """SPEC V4 + E1: a remediation that failed its gate is a failed action: the fault
    seen again after two of them climbs the ladder."""
    past = tuple(rem(phase=Phase.FAILED, at=T0 - timedelta(days=d), id=f"r-old-{d}",
                     data={"evidence_fault": "gpu.xid.48", "gate_failed": True})
                 for d in (1, 2))
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01", since=NOW)]},
               State(remediations=past), NOW, gate_pol())
    new = [u for u in plan.updates if u.id not in {p.id for p in past}]
    assert new and new[0].action is Action.REBUILD


# ------------------------------------------------------------------ the section
def test_gate_on_without_a_suite_is_refused_naming_the_key() -> None:
    """SPEC V4: a gate that would run nothing is a configuration error, not a pass."""
    with pytest.raises(ConfigError, match=r"gate: gate.enabled = true but no suite"):
        pol(gate={"enabled": True})


@pytest.mark.parametrize(("gate", "words"), [
    ({"timeout": "3h"}, "gate.timeout: more than the 2h"),
    ({"timeout": "10s"}, "gate.timeout: must be at least 1m"),
    ({"retries": 5}, "gate.retries"),
    ({"steps": []}, "gate.steps: unknown key"),
    ({"suites": {"nvidia": [{"name": "a", "command": ["x", "{nodes}"], "timeout": "1m"}]}},
     "names {nodes}"),
    ({"suites": {"nvidia": [{"name": "ib", "command": ["ibstat"]}]}},
     "gate: suites.nvidia[0] (ib): its timeout 30m is longer than gate.timeout 10m"),
])
def test_bad_gate_keys_are_refused_with_the_key(gate: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        pol(gate=gate)


def test_the_gate_reuses_the_validation_suite_steps_and_judges() -> None:
    """SPEC V4: a gate step is a validation Step (kind, criteria, peer) with its judge."""
    p = gate_pol(gate={"vendor": "nvidia", "suites": {"nvidia": [
        {"name": "nccl", "kind": "nccl", "command": ["all_reduce_perf", "-g", "{gpus}"],
         "criteria": {"min_busbw_gbps": 100}, "timeout": "4m"},
        {"name": "pair", "kind": "command", "command": ["ib_write_bw", "{peer}"],
         "peer": True, "timeout": "2m"}]}})
    assert [s.kind for s in p.gate.steps()] == ["nccl", "command"]
    assert p.gate.needs_peer and p.gate.timeout == timedelta(minutes=10)


# ------------------------------------------------------------------ the gate's run (flow)
MARKER = format_marker("gpu.xid.48", "r-1", "controller", "for reboot")
GATE_KNOBS = flow.Knobs(prefix="slurm-heal-gate-", pending_limit=timedelta(minutes=10))


def _gate_run(**kw: Any) -> ValidationRun:
    return ValidationRun.model_validate({"id": "v-g", "node": "gpu01", "origin": "gate",
                                         "remediation": "r-1", "created": T0, "updated": T0,
                                         **kw})


def _done(adv: flow.Advance, operation: str | None = None) -> ValidationRun:
    keys = {e.key for e in adv.effects}
    return adv.run.model_copy(update={"attempts": tuple(
        a.model_copy(update={"outcome": "ok", "finished": T0, "operation": operation})
        if a.key in keys else a for a in adv.run.attempts)})


def _running() -> tuple[ValidationRun, NodeInfo]:
    drained = NodeInfo(name="gpu01", states=frozenset({"IDLE", "DRAIN"}), reason=MARKER,
                       partitions=("gpu",))
    # the remediation it gates is open on the node: a gate does not wait for it (L3)
    adv = flow.advance(_gate_run(), flow.Facts(node=drained, open_remediation="r-1"), T0,
                       GATE_KNOBS)
    assert adv.run.phase == "reserving"
    assert [(e.kind, e.reason) for e in adv.effects] == [("reserve", ""), ("lift", MARKER)]
    assert adv.run.reservation == "slurm-heal-gate-gpu01"
    lifted = NodeInfo(name="gpu01", states=frozenset({"IDLE"}), partitions=("gpu",))
    adv = flow.advance(_done(adv), flow.Facts(node=lifted), T0, GATE_KNOBS)
    adv = flow.advance(_done(adv, "42"), flow.Facts(node=lifted), T0, GATE_KNOBS)
    assert adv.run.phase == "running" and adv.run.job_id == 42
    return adv.run, lifted


def _job(state: str) -> Any:
    from slurm_heal.types import JobInfo
    return JobInfo(job_id=42, user="root", state=state, nodes=("gpu01",),
                   name="slurm-heal-gate-gpu01")


def test_gate_run_pass_only_frees_the_reservation_and_files_no_ticket() -> None:
    """SPEC V4: the remediation resumes the node (L5); the flow only ends the hold."""
    r, lifted = _running()
    res = flow.Results(final=True, outcome="pass", summary="all 1 step(s) passed")
    adv = flow.advance(r, flow.Facts(node=lifted, job=_job("COMPLETED"), results=res,
                                     open_remediation="r-1"), T0, GATE_KNOBS)
    assert adv.run.phase == "returning" and [e.kind for e in adv.effects] == ["unreserve"]
    adv = flow.advance(_done(adv), flow.Facts(node=lifted), T0, GATE_KNOBS)
    assert adv.run.phase == "passed" and adv.run.steps[-1].rule == "V4"


def test_gate_run_failure_drains_again_with_the_remediations_cordon_no_ticket() -> None:
    """SPEC V4: a clear failure -> the node drained again with the reason it had (our
    cordon of the remediation), the reservation removed, no ticket."""
    r, lifted = _running()
    res = flow.Results(final=True, outcome="fail", summary="diag fail: exit status 1")
    adv = flow.advance(r, flow.Facts(node=lifted, job=_job("FAILED"), results=res), T0,
                       GATE_KNOBS)
    assert [(e.kind, e.reason) for e in adv.effects] == [("drain", MARKER), ("unreserve", "")]
    adv = flow.advance(_done(adv), flow.Facts(node=lifted), T0, GATE_KNOBS)
    assert adv.run.phase == "failed" and adv.run.ticket == ""
    assert "diag fail: exit status 1" in adv.run.steps[-1].why


def test_gate_run_cancelled_job_restores_the_cordon_and_is_interrupted() -> None:
    """SPEC V4 (V2's restore): a cancelled gate job -> interrupted, drained as before."""
    r, lifted = _running()
    adv = flow.advance(r, flow.Facts(node=lifted, job=_job("CANCELLED")), T0, GATE_KNOBS)
    assert ("drain", MARKER) in [(e.kind, e.reason) for e in adv.effects]
    adv = flow.advance(_done(adv), flow.Facts(node=lifted), T0, GATE_KNOBS)
    assert adv.run.phase == "interrupted"


def test_gate_run_whose_remediation_ended_is_cancelled_and_restored() -> None:
    """SPEC V4: the remediation stopped waiting for its gate (failed L5 meanwhile): the
    job is cancelled first, the node drained again."""
    r, lifted = _running()
    adv = flow.advance(r, flow.Facts(node=lifted, job=_job("RUNNING"),
                                     abandoned="remediation r-1 is failed"), T0, GATE_KNOBS)
    assert [e.kind for e in adv.effects][:1] == ["cancel"] and adv.run.phase == "restoring"


def test_a_gate_whose_remediation_ended_while_it_held_the_node_submits_no_job() -> None:
    """SPEC V4, S8 (issue 32, the deployed suite's our-jobs): the gate held the node (its
    reservation, the drain lifted), then its remediation failed L5 in the next cycle: no
    job is submitted for it (one was, and cancelled 2 s later, never run); the node is
    put back as it was and the run is interrupted."""
    drained = NodeInfo(name="gpu01", states=frozenset({"IDLE", "DRAIN"}), reason=MARKER,
                       partitions=("gpu",))
    adv = flow.advance(_gate_run(), flow.Facts(node=drained, open_remediation="r-1"), T0,
                       GATE_KNOBS)
    assert adv.run.phase == "reserving"
    lifted = NodeInfo(name="gpu01", states=frozenset({"IDLE"}), partitions=("gpu",))
    adv = flow.advance(_done(adv), flow.Facts(node=lifted, open_remediation="r-1",
                                              abandoned="remediation r-1 is failed"),
                       T0, GATE_KNOBS)
    kinds = [e.kind for e in adv.effects]
    assert "submit" not in kinds and "cancel" not in kinds
    assert kinds == ["unreserve", "drain"] and adv.run.phase == "restoring"
    adv = flow.advance(_done(adv), flow.Facts(node=drained), T0, GATE_KNOBS)
    assert adv.run.phase == "interrupted" and adv.run.job_id is None


def test_gate_run_waiting_for_a_peer_is_time_boxed() -> None:
    """SPEC V4, O6: no healthy idle peer within the gate's timeout -> skipped (the life
    cycle counts it as interrupted)."""
    n = NodeInfo(name="gpu01", states=frozenset({"IDLE", "DRAIN"}), reason=MARKER,
                 partitions=("gpu",))
    facts = flow.Facts(node=n, needs_peer=True)
    adv = flow.advance(_gate_run(), facts, T0 + timedelta(minutes=5), GATE_KNOBS)
    assert adv.run.phase == "requested" and "peer" in adv.run.steps[-1].why
    adv = flow.advance(adv.run, facts, T0 + timedelta(minutes=11), GATE_KNOBS)
    assert adv.run.phase == "skipped" and adv.run.steps[-1].rule == "V4"
    # and so is its wait behind another validation still open on the node
    busy = flow.Facts(node=n, open_validation="v-0")
    adv = flow.advance(_gate_run(), busy, T0 + timedelta(minutes=5), GATE_KNOBS)
    assert adv.run.phase == "requested" and "v-0" in adv.run.steps[-1].why
    adv = flow.advance(adv.run, busy, T0 + timedelta(minutes=11), GATE_KNOBS)
    assert adv.run.phase == "skipped" and "v-0" in adv.run.steps[-1].why


# ------------------------------------------------------------------ simulate
def test_simulate_refuses_an_unknown_gate_end_and_knows_gate_duration() -> None:
    """SPEC V4: `simulate` reads the gate's keys (sim.gate_duration, gate_fails.mode)."""
    from slurm_heal.errors import ScenarioError
    from slurm_heal.simulation import parse_scenario

    doc: dict[str, Any] = {"start": "2026-01-05T00:00:00Z", "nodes": [{"name": "gpu01"}],
                           "config": {"gate": GATE}, "sim": {"gate_duration": "90s"},
                           "events": [{"at": "+0s", "type": "gate_fails", "node": "gpu01",
                                       "mode": "explode"}]}
    with pytest.raises(ScenarioError, match=r"events\[0\]\.mode: 'explode' is not one of"):
        parse_scenario(doc)
    doc["events"][0]["mode"] = "interrupt"
    sc = parse_scenario(doc)
    assert sc.gate_duration == timedelta(seconds=90) and sc.policy.gate.enabled


# ------------------------------------------------------------------ the controller's side
def test_policy_check_names_a_bad_gate_key(tmp_path: Any) -> None:
    """SPEC V4: `slurm-heal policy check` knows [gate]: a typo is exit 2 naming the key."""
    from slurm_heal.configcheck import check_config

    conf = tmp_path / "heal.toml"
    conf.write_text('[provider]\ntype = "simulator"\n[gate]\nenabled = true\ntimeot = "5m"\n')
    with pytest.raises(ConfigError, match=r"gate\.timeot: unknown key"):
        check_config(conf, build_provider=False)
    conf.write_text('[provider]\ntype = "simulator"\n[gate]\nenabled = true\n'
                    '[[gate.suites.default]]\nname = "ib"\nkind = "ib"\n'
                    'command = ["ibstat"]\ntimeout = "1m"\ncriteria = { min_rate_gbps = 400 }\n')
    report = check_config(conf, build_provider=False)
    assert report.policy.gate.enabled and report.policy.gate.steps()[0].kind == "ib"


def test_the_controller_queues_one_gate_run_per_key_with_the_gates_settings(
        tmp_path: Any) -> None:
    """SPEC V4, S6: the gate effect queues a run named by its key (the same key again:
    the same run); the run gets [gate]'s suite and time box and [validation]'s job
    settings; its facts say when its remediation stopped waiting for it."""
    from slurm_heal.store import Store
    from slurm_heal.types import ClusterView
    from slurm_heal.validation.service import Validator

    store = Store(tmp_path / "state")
    v = Validator(store=store, slurm=None, state_dir=tmp_path)  # type: ignore[arg-type]
    r, n = back()
    key = f"{r.id}:gate:0"
    first = v.gate(remediation=r.id, node="gpu01", key=key, now=NOW)
    again = v.gate(remediation=r.id, node="gpu01", key=key, now=NOW + timedelta(minutes=1))
    assert first.id == again.id == flow.gate_run_id("gpu01", key)
    assert len(store.load().validations) == 1 and first.origin == "gate"
    p = gate_pol(gate={"timeout": "7m"}, validation={"results_dir": str(tmp_path / "res"),
                                                    "scratch": "/scratch"})
    cfg = v.gate_settings(p)
    assert [s.name for s in cfg.suite_for(cfg.vendor)] == ["diag"]
    assert cfg.job_time_limit == timedelta(minutes=7) and cfg.scratch == "/scratch"
    assert cfg.reservation_prefix == "slurm-heal-gate-" and cfg.results_dir
    view = ClusterView(nodes=(n,))
    returning = State(remediations=(r,), validations=(first,))
    assert v.facts(first.model_copy(update={"phase": "returning"}), view,
                   returning.model_copy(update={"validations": ()}), cfg).abandoned == ""
    over = r.model_copy(update={"phase": Phase.FAILED})
    facts = v.facts(first.model_copy(update={"phase": "returning"}), view,
                    State(remediations=(over,)), cfg)
    assert facts.abandoned == f"remediation {r.id} is failed"


def test_status_names_a_gate_run_as_the_post_repair_gate() -> None:
    """SPEC V4, O6: `status` shows the gate that holds a node, as the gate it is."""
    from slurm_heal.readmodel.overview import gather, render

    r, n = back(gates=(("ok", "queued"),))
    state = State(remediations=(r,), validations=(gate_run(r, 0, "running"),))
    lines = render(gather(state, [n], NOW, heartbeat=None))
    (line,) = [ln for ln in lines if ln.startswith("  gpu01 running job 42")]
    assert "(post-repair gate, SPEC V4)" in line


@pytest.mark.parametrize("gate_failed", [True, False])
def test_a_persons_request_after_a_failed_gate_has_the_gate_as_its_evidence(
        gate_failed: bool) -> None:
    """SPEC V4, P1: the node failed its post-repair gate (no alert: its health check is
    clean): a person's request for the next action is not held for evidence; the gate's
    failure is the confirmed failure. Without it, P1 holds the request as before."""
    from slurm_heal.models import Command

    r, n = back(gates=(("ok", "queued"),))
    r = r.model_copy(update={"phase": Phase.FAILED,
                             "data": r.data.but(gate_failed=gate_failed)})
    later = T0 + timedelta(hours=2)  # past the S2 cooldown
    cmd = Command(id="c1", at=later, kind="request", by="alice", node="gpu01",
                  action=Action.REBUILD)
    plan = run([n, node("gpu02")], {}, State(remediations=(r,), inbox=(cmd,)), later,
               gate_pol())
    assert (("blocked", "P1") in phases(plan)) is not gate_failed
    assert ("cordon" in kinds(plan)) is gate_failed
