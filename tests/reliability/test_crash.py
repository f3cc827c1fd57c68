"""Crash suite (issue 8): `slurm-heal daemon` killed with SIGKILL at random points.

The real daemon as a process against the Slurm lab, the provider simulator over HTTP.
Each round starts the daemon and kills its whole process group (its `scontrol` children
too, as systemd's cgroup kill does) at a point from a seeded schedule: after a random
time, or while a cordon, an action or a resume is recorded and not yet answered (an
``scontrol`` wrapper slows every update and the simulator answers slowly, so the kill
lands inside one). The schedule holds each of those points at least once, and a point
not reached in its round (the kill fell back to a timed one) is tried again instead of
a later timed round: the test asserts that a kill landed inside every one of them
(issue 22 item 11). Between rounds new alerts keep remediations coming; then one last
daemon runs without kills.

Afterwards (SPEC L1, S6, I5, D5, house style 2 and 5):
- the store is valid (it loads, nothing was set aside);
- no provider action ran twice for one idempotency key (the simulator's own count);
- the reason of the node someone else drained was never changed;
- every remediation reached a terminal phase, and no node is left drained by us without
  an open remediation (or a hand-to-person record).

The kill phase ends at its step target or its time budget (CI: 50 s); the last daemon
gets 75 s (CI; ``SLURM_HEAL_CRASH_SETTLE`` sets it) to finish. The figures (kills,
steps, remediations, duplicates) are printed; the seed too, so a failure replays with
``SLURM_HEAL_SEED``. ``SLURM_HEAL_RELIABILITY=long`` runs ≥ 200 steps.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_heal.providers.simulator import SimulatorServer
from slurm_heal.slurm.cli import CliSlurm
from tests.lab import Lab
from tests.reliability.harness import (
    LONG,
    Figures,
    ForeignTouched,
    assert_act_once,
    assert_all_terminal,
    assert_no_orphan_drain,
    handed_to_person,
    rng,
    scaled,
)
from tests.reliability.labrig import InstantBoot, LabDaemon, scontrol_wrapper, wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.reliability]

WORK = ("gpu01", "gpu02", "gpu03")
FOREIGN = "gpu04"
# A person's drain whose reason starts like one of Slurm's own reboot reasons.
FOREIGN_REASON = "Reboot pending: BIOS update (bob)"
IN_FLIGHT = ("cordon", "act", "resume")
STEPS = scaled(30, 200)
MAX_ROUNDS = scaled(24, 400)
KILL_PHASE = scaled(50, 1500)  # seconds of kills at most (CI budget), whatever the steps
# Seconds the last daemon gets to finish everything (a stranded step must be resolved
# "within a bounded time", issue 8 defect 1: this must be longer than that bound).
SETTLE = float(os.environ.get("SLURM_HEAL_CRASH_SETTLE", scaled(75, 240)))
IN_FLIGHT_WAIT = 8.0  # seconds a round waits for its in-flight point before killing anyway


@pytest.fixture
def rig(lab_clean: Lab, tmp_path: Path) -> Iterator[tuple[LabDaemon, SimulatorServer]]:
    hook = InstantBoot(CliSlurm(slurm_conf=str(lab_clean.conf)))
    with SimulatorServer(port=0, on_action=hook, duration=0.2) as sim:
        sim.set_faults(latency=0.4)  # every provider call answers slowly: kills land inside
        wrapper = scontrol_wrapper(tmp_path / "bin", update_delay=0.4)
        d = LabDaemon(lab_clean, tmp_path, sim, path_prefix=wrapper)
        try:
            yield d, sim
        finally:
            d.close()


def _in_flight(d: LabDaemon, kind: str, before: set[str]) -> bool:
    try:
        state = d.state()
    except Exception:  # noqa: BLE001 - a store mid-replace is read again next poll
        return False
    return any(a.effect == kind and a.outcome is None and a.key not in before
               for r in state.remediations for a in r.attempts)


def test_kill_9_at_random_points_strands_nothing_and_acts_once(
        rig: tuple[LabDaemon, SimulatorServer], capsys: pytest.CaptureFixture[str]) -> None:
    d, sim = rig
    r = rng("crash")
    d.lab.scontrol("update", f"nodename={FOREIGN}", "state=drain", f"reason={FOREIGN_REASON}")
    schedule = list(IN_FLIGHT) + [r.choice(("time", "time", *IN_FLIGHT))
                                  for _ in range(MAX_ROUNDS)]
    head = schedule[:6]
    r.shuffle(head)
    schedule[:6] = head
    fig = Figures()
    foreign_seen: list[str] = []
    missed: dict[str, int] = {}
    hit: dict[str, int] = {}
    deadline = time.monotonic() + KILL_PHASE
    for point in schedule[:MAX_ROUNDS]:
        if time.monotonic() > deadline and set(IN_FLIGHT) <= set(hit):
            break
        if point == "time" and (todo := [p for p in IN_FLIGHT if p not in hit and p in missed]):
            point = todo[0]  # a point not reached yet goes before a timed kill
        out = d.out_of_service()
        foreign_seen.append(out.get(FOREIGN, "<in service>"))
        state = d.state()
        for node in WORK:  # keep remediations coming
            if not state.open_for(node) and node not in out:
                d.publish(node)
        before = {a.key for rem in state.remediations for a in rem.attempts
                  if a.outcome is None}
        proc = d.start()
        if point == "time":
            time.sleep(r.uniform(0.5, 4.0))
        elif not wait_until(lambda p=point, b=before: _in_flight(d, p, b), timeout=IN_FLIGHT_WAIT):
            missed[point] = missed.get(point, 0) + 1  # killed anyway
        else:
            hit[point] = hit.get(point, 0) + 1
        d.kill_group(proc)
        fig.kills += 1
        state = d.state()
        fig.steps = sum(len(rem.attempts) for rem in state.remediations)
        if fig.steps >= STEPS and set(IN_FLIGHT) <= set(hit):
            break
    # The last daemon runs without kills: everything must finish.
    heartbeat = d.state_dir / "heartbeat"
    beat = heartbeat.stat().st_mtime_ns if heartbeat.exists() else 0
    proc = d.start()
    # At least one whole cycle first (and the SIGTERM handler in place before the stop).
    d.wait(lambda: heartbeat.exists() and heartbeat.stat().st_mtime_ns != beat,
           "a cycle of the last daemon", timeout=60)

    def settled() -> bool:
        state = d.state()
        out = d.out_of_service()
        return not any(not rem.phase.terminal for rem in state.remediations) and not any(
            reason.startswith("heal:") and not handed_to_person(state, node)
            for node, reason in out.items())

    wait_until(settled, timeout=SETTLE, interval=0.5)
    assert d.stop(proc) == 0, d.logs()
    state = d.state()
    executed = sim.stats()["executed"]
    out = d.out_of_service()
    foreign_seen.append(out.get(FOREIGN, "<in service>"))
    fig.steps = sum(len(rem.attempts) for rem in state.remediations)
    fig.remediations = len(state.remediations)
    fig.duplicates = sum(n - 1 for n in executed.values() if n > 1)
    fig.notes.append(f"provider actions={len(executed)}")
    fig.notes.append(f"kills inside an in-flight step={hit}")
    if missed:
        fig.notes.append(f"in-flight points not reached (killed at {IN_FLIGHT_WAIT} s)={missed}")
    tracebacks = d.logs(tail=10**7).count("Traceback")
    fig.notes.append(f"tracebacks in daemon logs={tracebacks}")
    with capsys.disabled():
        print("\n" + fig.line("crash suite"))

    # SPEC I5 / house style 5: the store is valid and nothing was set aside.
    assert not list(d.state_dir.glob("state.json.corrupt-*")), "the store was set aside"
    assert_act_once(executed)  # SPEC S6
    changed = sorted({x for x in foreign_seen if x != FOREIGN_REASON})
    if changed:
        raise ForeignTouched(f"{FOREIGN}'s reason {FOREIGN_REASON!r} became {changed}")
    # issue 22 item 11: the suite promises a kill inside every in-flight point
    assert set(IN_FLIGHT) <= set(hit), f"in-flight points never killed inside: " \
        f"{sorted(set(IN_FLIGHT) - set(hit))} (hit {hit}, missed {missed})"
    assert fig.remediations > 0
    if LONG:  # the long profile promises its step target, not only its time budget
        assert fig.steps >= STEPS, f"{fig.steps} steps of {STEPS} in {KILL_PHASE} s of kills"
    assert_all_terminal(state)  # SPEC L1: no stranded step
    assert_no_orphan_drain(state, out.items())
