"""The store on the controller clock's frame (issue 34 item 5; SPEC P3, L5, P4, S7):
`Store.follow_clock` moves the stored times by a step once, in the write that records
the new frame; another boot moves nothing; a clock without a boot id never takes a
restart for a step."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from slurm_heal import isotime
from slurm_heal.clock import Frame, SteadyClock
from slurm_heal.incidentstore import INCIDENTS_KEY
from slurm_heal.models import Phase, Remediation, State
from slurm_heal.store import DECISIONS_KEY, Store, clock_frame
from slurm_heal.types import Action
from tests.fakes import T0, Clock

STEP = timedelta(hours=2)


def rem(rid: str, phase: Phase) -> Remediation:
    return Remediation(id=rid, node="gpu01", fault="gpu.xid.119", action=Action.REBOOT,
                       phase=phase, created=T0, updated=T0,
                       phase_times={"cordoned": T0})


def seeded(tmp_path: Path, frame: Frame) -> Store:
    store = Store(tmp_path)
    incident = {"id": "i-1", "component": "switch:leaf1", "kind": "switch", "name": "leaf1",
                "group": "ib", "size": 4, "opened": T0.isoformat(),
                "updated": T0.isoformat()}
    with store.transaction() as txn:
        txn.state = State(
            remediations=(rem("r-open", Phase.WAITING), rem("r-done", Phase.DONE)),
            data={"clock": frame.dump(), INCIDENTS_KEY: [incident, {"id": "damaged"}],
                  DECISIONS_KEY: [{"at": T0.isoformat(), "node": "gpu01", "phase": "waiting",
                                   "rule": "P3", "why": "waiting"}]})
    return store


def test_a_step_moves_every_stored_time_once(tmp_path: Path) -> None:
    """SPEC P3, L5, S7: the open and the ended remediations' times, incidents and
    decision records move by the step; an entry this build cannot read stays as it is;
    the open remediation's record says so (P4); the same frame again moves nothing (a
    crash after the write never moves them twice)."""
    before = Frame("boot-1", T0)
    store = seeded(tmp_path, before)
    after = Frame("boot-1", T0 + STEP)
    state, step = store.follow_clock(after, T0 + STEP)
    assert step == STEP
    by_id = {r.id: r for r in state.remediations}
    for r in by_id.values():
        assert r.created == r.updated == r.phase_times["cordoned"] == T0 + STEP
    assert [s.rule for s in by_id["r-open"].steps] == ["P4"]
    assert not by_id["r-done"].steps
    incident, damaged = state.data[INCIDENTS_KEY]
    assert isotime.parse(incident["opened"]) == T0 + STEP
    assert damaged == {"id": "damaged"}
    assert isotime.parse(state.data[DECISIONS_KEY][0]["at"]) == T0 + STEP
    assert clock_frame(store.load()) == after
    assert store.load().data["clock"]["steps"][0]["step"] == "+2:00:00"
    again, none = store.follow_clock(after, T0 + STEP)
    assert none is None and again.remediations == store.load().remediations
    assert {r.id: r.created for r in store.load().remediations} == {
        "r-open": T0 + STEP, "r-done": T0 + STEP}


def test_another_boot_is_recorded_and_moves_nothing(tmp_path: Path) -> None:
    store = seeded(tmp_path, Frame("boot-1", T0))
    state, step = store.follow_clock(Frame("boot-2", T0 + STEP), T0 + STEP)
    assert step is None and all(r.created == T0 for r in state.remediations)
    assert clock_frame(store.load()) == Frame("boot-2", T0 + STEP)


def test_clock_without_a_boot_id_never_continues_another_process() -> None:
    """No /proc: each process is its own boot, so a restart after a reboot is never a
    step of the previous boot's uptime; a step while it runs is still followed."""
    wall, mono = Clock(T0), Clock(50.0)
    one = SteadyClock(wall=wall, monotonic=mono, boot_id=lambda: "")
    two = SteadyClock(wall=wall, monotonic=mono, boot_id=lambda: "")
    assert one.frame.boot and one.frame.boot != two.frame.boot
    two.follow(one.frame)
    assert two.frame.boot != one.frame.boot
    wall.advance(hours=2)
    assert one() == T0 + STEP and one.frame.zero == T0 + STEP - timedelta(seconds=50)


def test_restart_within_the_tolerance_takes_the_stored_frame() -> None:
    """Two reads are not one instant: a restart a second off the store's frame is no
    step, and the clock carries on the store's frame exactly."""
    wall, mono = Clock(T0 + timedelta(seconds=1)), Clock(50.0)
    clock = SteadyClock(wall=wall, monotonic=mono, boot_id=lambda: "b")
    stored = Frame("b", T0 - timedelta(seconds=50))
    clock.follow(stored)
    assert clock.frame == stored and clock() == T0
