"""The controller cycle end to end without Slurm: the real engine, store, http provider
and provider simulator (HTTP on 127.0.0.1) against the in-process simulated cluster, on
a clock the test moves. SPEC L1-L5, P4, Q1-Q3, S5, S6, D5, I5."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from slurm_heal import reasons
from slurm_heal.controller import Controller
from slurm_heal.models import Command, Phase
from slurm_heal.store import Store
from slurm_heal.types import Action, Severity
from tests.fakes import Rig, controller_rig

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
NODES = [("gpu01", "a"), ("gpu02", "a"), ("gpu03", "b"), ("gpu04", "b")]
POLICY = {"approvals": {"default": "manual", "rules": [
    {"fault": "gpu.xid.119", "action": "reboot", "mode": "auto"},
    {"fault": "gpu.xid.79", "mode": "auto"},
    {"fault": "request", "mode": "auto"}]},
    "safety": {"breaker_threshold": 2, "breaker_window": "1h", "concurrency": 4,
               "one_per_pool": False},
    "capacity": {"min_available_percent": 0}}


@contextmanager
def make_rig(tmp_path: Path, return_to_service: int = 2) -> Iterator[Rig]:
    """The simulated cluster whose provider reboots take 3 minutes and whose nodes run
    their health check at boot (a clean log), and the simulator over HTTP."""
    with controller_rig(tmp_path, NODES, POLICY, return_to_service=return_to_service) as r:
        yield r


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with make_rig(tmp_path) as r:
        yield r


def test_xid_on_a_busy_node_is_cordoned_waits_for_the_job_reboots_and_resumes(rig: Rig) -> None:
    """SPEC L1, L5, P3, P4: the whole life cycle with a complete audit record."""
    jid = rig.cluster.submit_job("gpu02", timedelta(minutes=20))
    rig.alert("gpu02", "gpu.xid.119")
    ctl = rig.controller()
    rig.run(ctl, 2)
    node = rig.cluster.node("gpu02")
    assert node.drained and reasons.is_ours(node.reason)  # cordoned: no new jobs
    assert [j.job_id for j in rig.cluster.jobs("gpu02")] == [jid]  # the job still runs
    assert rig.rems("gpu02")[0].phase is Phase.WAITING
    assert rig.sim.stats()["executed"] == {}  # nothing done to the node while the job runs
    rig.run(ctl, 60)  # 30 min of cycles: the job ends, the node reboots, comes back
    rem = rig.rems("gpu02")[0]
    assert rem.phase is Phase.DONE, rem.steps[-1]
    assert not rig.cluster.node("gpu02").drained
    assert rig.cluster.history("gpu02") == ["reboot"]
    assert list(rig.sim.stats()["executed"].values()) == [1]
    # SPEC P4: who requested, who/what approved, the rule that chose the action, phase times
    assert rem.requested_by and rem.approval_rule == "P2:approvals[0]"
    assert rem.action is Action.REBOOT and rem.action_rule
    for phase in ("proposed", "approved", "cordoned", "waiting", "acting", "returning", "done"):
        assert phase in rem.phase_times, phase
    assert all(s.rule and s.why for s in rem.steps)


def test_node_left_down_by_slurm_after_our_reboot_is_resumed(tmp_path: Path) -> None:
    """SPEC L5 with ReturnToService=1: Slurm marks the node we rebooted DOWN, "Node
    unexpectedly rebooted", replacing our marker. That boot is ours, so it is resumed."""
    with make_rig(tmp_path, return_to_service=1) as rig:
        rig.alert("gpu01", "gpu.xid.119")
        rig.run(rig.controller(), 20)
    assert rig.rems("gpu01")[0].phase is Phase.DONE
    node = rig.cluster.node("gpu01")
    assert not node.down and not node.drained, node


@pytest.mark.parametrize("reason", ["PSU fault, ticket 77",
                                    "Reboot pending: BIOS update (bob)"])
def test_node_down_for_a_foreign_reason_after_our_action_is_left_alone(rig: Rig,
                                                                       reason: str) -> None:
    """House style 2: a reason that is not Slurm's own reboot reason stays for a person,
    also one that starts with "Reboot" (issue 8, defect 2)."""
    rig.alert("gpu01", "gpu.xid.119")
    ctl = rig.controller()
    rig.run(ctl, 3)
    rig.clock.advance(minutes=5)  # rebooted by now
    rig.cluster.drain("gpu01", reason)
    rig.run(ctl, 10)
    node = rig.cluster.node("gpu01")
    assert node.drained and node.reason == reason


def test_resume_rechecks_that_the_reason_is_still_the_one_planned(rig: Rig) -> None:
    """House style 2 (issue 8, defect 2): between the plan and the resume the node check
    drained the node for a new fault (its own marker); the resume planned for our old
    marker leaves it alone."""
    from slurm_heal.models import Effect, Plan

    planned = reasons.format_marker("gpu.xid.48", "r-1", "controller", "for reboot")
    now = reasons.format_marker("gpu.xid.79", None, "check", "GPU fell off the bus")
    rig.cluster.drain("gpu01", now)

    def plan_to_release(*_a: Any) -> Plan:
        return Plan(effects=(Effect(kind="release", node="gpu01", reason=planned),))

    ctl = Controller(slurm=rig.cluster, provider=rig.controller().provider, store=rig.store,
                     policy=rig.policy, clock=rig.clock, decide=plan_to_release)
    report = ctl.cycle()
    assert [e.outcome for e in report.executed] == ["failed"]
    assert "changed since it was planned" in report.executed[0].detail
    node = rig.cluster.node("gpu01")
    assert node.drained and node.reason == now


def test_crash_after_recording_intent_but_before_the_call_acts_once(rig: Rig) -> None:
    """SPEC S6, L1: an act recorded but never sent is resolved by asking the provider
    by its key, and the action runs exactly once."""
    rig.alert("gpu01", "gpu.xid.119")
    ctl = rig.controller()

    class Crash(BaseException):
        """The process dies (kill -9, OOM): not an error the controller can catch; one
        effect's ordinary exception only fails that effect (issue 8, defect 7)."""

    real_submit = ctl.provider.submit

    def crash(*_a: Any, **_k: Any) -> Any:
        raise Crash("controller killed")

    ctl.provider.submit = crash  # type: ignore[method-assign]
    with pytest.raises(Crash):
        rig.run(ctl, 5)
    rem = rig.rems("gpu01")[0]
    assert rem.phase is Phase.ACTING and len(rem.in_flight) == 1
    assert rig.sim.stats()["executed"] == {}
    ctl.provider.submit = real_submit  # type: ignore[method-assign]
    rig.run(rig.controller(), 20)  # a restarted controller
    assert rig.rems("gpu01")[0].phase is Phase.DONE
    assert list(rig.sim.stats()["executed"].values()) == [1]


def test_a_cordon_recorded_before_a_stop_is_resolved_and_the_remediation_finishes(
        rig: Rig) -> None:
    """SPEC L1/S6 (issue 8, defect 1): SIGTERM between recording the cordon and running
    it. The restarted controller sends it again under the same key after
    safety.step_timeout; the node is drained, rebooted once and resumed; no other
    remediation waits behind it forever."""
    rig.alert("gpu01", "gpu.xid.119")
    ctl = rig.controller()
    ctl.stop.set()  # stop between steps: the intent is recorded, the cordon never runs
    ctl.cycle()
    (rem,) = rig.rems("gpu01")
    assert rem.phase is Phase.CORDONED and [a.effect for a in rem.in_flight] == ["cordon"]
    assert not rig.cluster.node("gpu01").drained
    rig.run(rig.controller(), 60)  # a restarted controller, 30 minutes of cycles
    (rem,) = rig.rems("gpu01")
    assert rem.phase is Phase.DONE, rem.steps[-1]
    assert rem.in_flight == ()
    (cordon,) = [a for a in rem.attempts if a.effect == "cordon"]
    assert cordon.resent == 1 and cordon.outcome == "ok"
    assert list(rig.sim.stats()["executed"].values()) == [1]
    assert not rig.cluster.node("gpu01").drained


def test_lost_response_after_the_action_ran_is_not_acted_again(rig: Rig) -> None:
    """SPEC S6: the provider did it but the answer was lost; the retry with the same
    idempotency key returns the same operation."""
    rig.alert("gpu03", "gpu.xid.119")
    rig.sim.set_faults(lose_response=1)
    rig.run(rig.controller(), 20)
    assert rig.rems("gpu03")[0].phase is Phase.DONE
    assert list(rig.sim.stats()["executed"].values()) == [1]


def test_provider_errors_while_polling_leave_the_action_in_flight(rig: Rig) -> None:
    """SPEC S6, L5: a 503 while asking about a running reboot says nothing about the
    reboot; the act is neither failed (which would lead to a second action) nor repeated."""
    rig.sim.duration = 1.0  # the operation stays "running" for a (real) second
    rig.alert("gpu02", "gpu.xid.119")
    ctl = rig.controller()
    ctl.cycle()  # cordon
    ctl.cycle()  # act: accepted, running
    rig.sim.set_faults(error_5xx=3)  # the provider has attempts=3: the poll gives up
    ctl.cycle()
    rem = rig.rems("gpu02")[0]
    acts = [a for a in rem.attempts if a.effect == "act"]
    assert rem.phase is Phase.ACTING and [a.outcome for a in acts] == ["running"], acts
    time.sleep(1.2)
    rig.run(ctl, 20)
    assert rig.rems("gpu02")[0].phase is Phase.DONE
    assert list(rig.sim.stats()["executed"].values()) == [1]


def test_ambiguous_act_failure_is_asked_again_with_the_same_key(rig: Rig) -> None:
    """SPEC S6: the create gave up on 503s (did it run?); the next cycle asks by the same
    idempotency key and the action runs exactly once."""
    rig.alert("gpu03", "gpu.xid.119")
    ctl = rig.controller()
    ctl.cycle()  # cordon
    rig.sim.set_faults(error_5xx=3)
    ctl.cycle()  # act: 503 x3
    rem = rig.rems("gpu03")[0]
    assert rem.phase is Phase.ACTING and len(rem.in_flight) == 1
    rig.run(ctl, 20)
    assert rig.rems("gpu03")[0].phase is Phase.DONE
    assert list(rig.sim.stats()["executed"].values()) == [1]


def test_a_persons_drain_right_after_the_snapshot_stops_the_act(rig: Rig) -> None:
    """House style 2 (issue 8, defect 11): a person drains the node after this cycle's
    snapshot and before its act: the controller's last look finds their reason, sends
    nothing, and the remediation ends with a person (not an E1 failure); their reason
    stays."""
    rig.alert("gpu01", "gpu.xid.119")
    ctl = rig.controller()
    ctl.cycle()  # cordon
    rig.clock.advance(seconds=30)

    class PersonDrainsAfterTheSnapshot:
        """The cluster, where bob drains gpu01 the moment the snapshot was read."""

        def __getattr__(self, name: str) -> Any:
            return getattr(rig.cluster, name)

        def snapshot(self) -> Any:
            view = rig.cluster.snapshot()
            rig.cluster.drain("gpu01", "bad PSU, do not touch -- bob")
            return view

    ctl.slurm = PersonDrainsAfterTheSnapshot()  # type: ignore[assignment]
    report = ctl.cycle()
    (act,) = [e for e in report.executed if e.effect.kind == "act"]
    assert act.outcome == "failed" and act.detail.startswith("not sent: ")
    assert rig.sim.stats()["executed"] == {}
    ctl.slurm = rig.cluster
    rig.run(ctl, 5)
    (rem,) = rig.rems("gpu01")
    assert rem.phase is Phase.FAILED and rem.data.handed_to_person
    assert rig.sim.stats()["executed"] == {}
    assert rig.cluster.node("gpu01").reason == "bad PSU, do not touch -- bob"


def test_cordon_never_relabels_a_foreign_drain(rig: Rig) -> None:
    """House style 2, as the controller's last guard: whatever a plan says, a drain by
    someone else is not overwritten."""
    from slurm_heal.models import Effect, Plan

    rig.cluster.drain("gpu01", "bad DIMM, ticket 1234")

    def plan_to_cordon(*_a: Any) -> Plan:
        return Plan(effects=(Effect(kind="cordon", node="gpu01", reason="heal: gpu.xid.48"),))

    ctl = Controller(slurm=rig.cluster, provider=rig.controller().provider, store=rig.store,
                     policy=rig.policy, clock=rig.clock, decide=plan_to_cordon)
    report = ctl.cycle()
    assert [e.outcome for e in report.executed] == ["failed"]
    assert rig.cluster.node("gpu01").reason == "bad DIMM, ticket 1234"


def test_one_effects_unexpected_error_fails_that_effect_and_the_cycle_goes_on(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    """House style 5/6 (issue 8, defect 7): a notifier whose disk is full (OSError) and a
    node Slurm no longer knows (NotFound) fail their own effects; the cordon after them
    still runs; the unexpected error's traceback is logged once."""
    from slurm_heal.models import Effect, Plan

    def full_disk(_effect: Effect, _now: datetime) -> None:
        raise OSError(28, "No space left on device")

    def plan(*_a: Any) -> Plan:
        return Plan(effects=(
            Effect(kind="notify", node="gpu01", why="D8"),
            Effect(kind="cordon", node="gpu99", reason="heal: gpu.xid.48"),
            Effect(kind="cordon", node="gpu02", reason="heal: gpu.xid.48")))

    ctl = Controller(slurm=rig.cluster, provider=rig.controller().provider, store=rig.store,
                     policy=rig.policy, clock=rig.clock, notifier=full_disk, decide=plan)
    report = ctl.cycle()
    assert [e.outcome for e in report.executed] == ["failed", "failed", "ok"]
    assert "No space left" in report.executed[0].detail
    assert "NotFound" in report.executed[1].detail
    assert rig.cluster.node("gpu02").drained
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and "notify" in tracebacks[0].getMessage()


def test_a_busy_store_lock_skips_the_cycle_and_names_the_holder(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    """SPEC I5 / house style 5 (issue 8, defect 10): StoreLocked does not kill the
    daemon; the cycle is skipped with a log line that says who holds the lock."""
    import os

    from slurm_heal.controller import run_forever
    from slurm_heal.store import Store

    rig.alert("gpu01", "gpu.xid.119")
    ctl = rig.controller()
    ctl.store = Store(rig.store.dir, lock_timeout=0.2)
    import threading

    cycles: list[int] = []
    with rig.store.transaction():  # another process's CLI command, stuck
        # in a thread: run_forever installs signal handlers only on the main thread
        t = threading.Thread(target=lambda: cycles.append(run_forever(ctl, 0.01, None, 2)))
        t.start()
        t.join(30)
    assert cycles == [2]
    busy = [r.getMessage() for r in caplog.records if "store is busy" in r.getMessage()]
    assert len(busy) == 2 and f"pid {os.getpid()}" in busy[0]
    assert not rig.cluster.node("gpu01").drained
    ctl.cycle()  # the lock is free again: work goes on
    assert rig.cluster.node("gpu01").drained


def test_two_controllers_on_one_store_make_one_remediation_and_one_action(rig: Rig) -> None:
    """SPEC S6: two replicas working on the same node, each with its own store on the one
    state directory, their cycles running at the same time in two threads: each cycle
    reads the cluster, then waits until the other replica has read it too, so both
    decide on the same view and race to apply and to act."""
    rig.alert("gpu04", "gpu.xid.119")
    both_read = threading.Barrier(2, timeout=30)
    go, ended = threading.Barrier(3, timeout=60), threading.Barrier(3, timeout=60)
    failures: list[BaseException] = []

    class ReadTogether:
        """The cluster, where a snapshot returns once both replicas have taken theirs."""

        def __getattr__(self, name: str) -> Any:
            return getattr(rig.cluster, name)

        def snapshot(self) -> Any:
            view = rig.cluster.snapshot()
            both_read.wait()
            return view

    a, b = rig.controller(), rig.controller()
    b.store = Store(rig.store.dir)  # a second replica: its own handle on the state dir
    for ctl in (a, b):
        ctl.slurm = ReadTogether()  # type: ignore[assignment]

    def replica(ctl: Controller) -> None:
        for _ in range(20):
            go.wait()
            try:
                ctl.cycle()
            except BaseException as exc:  # the test thread reports it
                failures.append(exc)
                both_read.abort()
            finally:
                ended.wait()

    threads = [threading.Thread(target=replica, args=(ctl,)) for ctl in (a, b)]
    for t in threads:
        t.start()
    for _ in range(20):
        go.wait()  # both cycles start
        ended.wait()  # both cycles have ended
        rig.sim.wait_idle(5)
        rig.clock.advance(seconds=30)
    for t in threads:
        t.join(30)
    assert not failures, failures
    rems = rig.rems("gpu04")
    assert len(rems) == 1 and rems[0].phase is Phase.DONE
    assert list(rig.sim.stats()["executed"].values()) == [1]


def test_request_through_reason_string_repeated_makes_one_remediation(rig: Rig) -> None:
    """SPEC Q1, Q3: the operator's detector writes a heal-request reason, twice."""
    rig.alert("gpu02", "ib.link_down")
    reason = "heal-request: reboot detector=ibmon id=4711 port 1 flapping"
    rig.cluster.drain("gpu02", reason)
    ctl = rig.controller()
    rig.run(ctl, 1)
    rig.cluster.drain("gpu02", reason)  # the detector fires again
    rig.run(ctl, 20)
    rems = rig.rems("gpu02")
    assert len(rems) == 1
    assert (rems[0].detector, rems[0].request_id, rems[0].action) == ("ibmon", "4711",
                                                                      Action.REBOOT)
    assert rems[0].phase is Phase.DONE


def test_foreign_drain_is_reported_never_resumed_or_relabelled(rig: Rig) -> None:
    """SPEC D5, house style 2."""
    rig.cluster.drain("gpu03", "bad DIMM, ticket 1234")
    rig.run(rig.controller(), 5)
    node = rig.cluster.node("gpu03")
    assert node.drained and node.reason == "bad DIMM, ticket 1234"
    assert rig.sim.stats()["executed"] == {}
    assert not [r for r in rig.rems("gpu03") if r.action is not Action.NONE]


def test_malformed_request_is_a_clear_alert_and_the_node_is_left_as_it_is(rig: Rig) -> None:
    """Issue 5 / SPEC Q1: a request that does not parse does nothing to the node."""
    rig.cluster.drain("gpu02", "heal-request: rebot detector=ibmon id=1")
    ctl = rig.controller()
    reports = [ctl.cycle() for _ in range(3)]
    node = rig.cluster.node("gpu02")
    assert node.drained and node.reason == "heal-request: rebot detector=ibmon id=1"
    assert not rig.rems("gpu02") and rig.sim.stats()["executed"] == {}
    records = [r for rep in reports for r in rep.records if r.node == "gpu02"]
    assert any("rebot" in r.why for r in records), records


def test_burst_of_failures_opens_the_breaker_manual_requests_still_run(rig: Rig) -> None:
    """SPEC S5: automatic remediation stops until a person resets it."""
    for n in ("gpu01", "gpu02", "gpu03"):
        rig.alert(n, "gpu.xid.119")
    ctl = rig.controller()
    rig.run(ctl, 30)
    state = rig.store.load()
    assert state.breaker.open
    automatic_done = [r for r in state.remediations if r.phase is Phase.DONE]
    assert len(automatic_done) == 2  # threshold 2 within the window; started ones finish
    assert len(rig.sim.stats()["executed"]) == 2
    held = [r for r in state.remediations if r.node == "gpu03"]
    assert held and not held[0].phase.disruptive  # the third never started
    assert not rig.cluster.node("gpu03").drained or reasons.parse_marker(
        rig.cluster.node("gpu03").reason).by == "check"
    # a person's request still goes through while the breaker is open
    rig.alert("gpu04", "ib.link_degraded", Severity.WARNING)
    rig.store.add_command(Command(id="c1", at=rig.clock(), kind="request", by="alice",
                                  node="gpu04", action=Action.REBOOT, reason="flapping"))
    rig.run(ctl, 30)
    manual = [r for r in rig.rems("gpu04") if r.origin == "operator"]
    assert manual and manual[0].phase is Phase.DONE and not manual[0].automatic
    assert rig.store.load().breaker.open
    assert len(rig.sim.stats()["executed"]) == 3


def test_corrupt_store_fails_closed(rig: Rig) -> None:
    """House style 5: nothing disruptive runs until a person acts."""
    rig.store.file.parent.mkdir(parents=True, exist_ok=True)
    rig.store.file.write_text("{not json")
    rig.alert("gpu01", "gpu.xid.119")
    report = rig.controller().cycle()
    assert report.failed_closed
    assert not rig.cluster.node("gpu01").drained
    assert rig.sim.stats()["executed"] == {}


def test_a_store_set_aside_mid_action_never_resumes_the_node(rig: Rig) -> None:
    """SPEC I5/L5, house style 5 (issue 8, defect 16): the store is set aside while
    gpu01 reboots for us. With no record of what we were doing, our marker on the node
    means "a person looks", never a release: the node stays drained and a person is told."""
    rig.alert("gpu01", "gpu.xid.119")
    ctl = rig.controller()
    rig.run(ctl, 2)  # cordon, act: the reboot runs
    assert rig.rems("gpu01")[0].phase is Phase.ACTING
    rig.store.file.write_text("{not json")
    rig.run(ctl, 20)  # the reboot finishes, the node's check at boot is clean
    node = rig.cluster.node("gpu01")
    assert node.drained and reasons.is_ours(node.reason), node
    assert not [r for r in rig.rems("gpu01") if r.phase is not Phase.PROPOSED]
    notes = [json.loads(x) for x in rig.notes.read_text().splitlines()]
    assert [n["rule"] for n in notes if n["node"] == "gpu01"] == ["I5"]


def test_no_action_fault_is_sent_to_support(rig: Rig) -> None:
    """SPEC D8: recorded and routed to the support channel, never a reboot."""
    rig.alert("gpu01", "gpu.pcie.replay_rate", Severity.WARNING)
    rig.run(rig.controller(), 30, step=60)
    assert rig.sim.stats()["executed"] == {}
    lines = [json.loads(x) for x in rig.notes.read_text().splitlines()]
    assert any(x["node"] == "gpu01" for x in lines)
