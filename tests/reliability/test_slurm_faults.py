"""Slurm faults (issue 8): the daemon rides out a slurmctld outage in the middle of a
remediation, and `scontrol` failing for one node does not stop the others.

`slurm-heal daemon` as a process against the Slurm lab, the provider simulator over
HTTP (its action "reboots" the node at once and publishes a clean health check).
SPEC L1, L5, S6, O1; "one bad node never stops the cluster".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_heal.models import Phase
from slurm_heal.providers.simulator import SimulatorServer
from slurm_heal.slurm.cli import CliSlurm
from tests.lab import Lab
from tests.reliability.harness import scaled
from tests.reliability.labrig import InstantBoot, LabDaemon, scontrol_wrapper

pytestmark = [pytest.mark.slurm, pytest.mark.reliability]

# Seconds slurmctld stays down: longer than the cli backend's 20 s call timeout, so every
# version shows the outage (22.05's commands fail at once; 25.11's scontrol retries and
# would ride out a shorter one within a single blocked call).
OUTAGE = scaled(25, 60)


@pytest.fixture
def gate() -> threading.Event:
    """Holds the provider's action until set (an action that takes a while)."""
    return threading.Event()


@pytest.fixture
def sim(lab_clean: Lab, gate: threading.Event) -> Iterator[SimulatorServer]:
    hook = InstantBoot(CliSlurm(slurm_conf=str(lab_clean.conf)), gate=gate)
    with SimulatorServer(port=0, on_action=hook, duration=0.2) as server:
        try:
            yield server
        finally:
            gate.set()


@pytest.mark.parametrize("phase", [Phase.WAITING, Phase.ACTING])
def test_slurmctld_stopped_and_restarted_mid_remediation_is_ridden_out(
        lab: Lab, sim: SimulatorServer, gate: threading.Event, tmp_path: Path,
        phase: Phase) -> None:
    """slurmctld stops while gpu01 waits for its job (WAITING) or while its reboot runs
    (ACTING). The daemon keeps cycling (each cycle skipped, logged), and when slurmctld
    is back the remediation finishes: one reboot, gpu01 resumed, the daemon never died."""
    d = LabDaemon(lab, tmp_path, sim, interval=0.5)
    try:
        if phase is Phase.WAITING:
            gate.set()
            job = lab.run(["sbatch", "--parsable", "-w", "gpu01", "-t", "5", "--wrap",
                           f"sleep {OUTAGE}"]).stdout.strip().split(";")[0]
            lab.wait_for(lambda: job in lab.run(["squeue", "-h", "-o", "%i", "-w", "gpu01"]
                                                ).stdout, timeout=30, what="job running")
        d.publish("gpu01")
        proc = d.start()
        d.wait(lambda: any(r.phase is phase for r in d.rems("gpu01")), f"gpu01 {phase.value}")
        heartbeat = d.state_dir / "heartbeat"
        lab.stop_ctld()
        try:
            time.sleep(OUTAGE)  # the job (WAITING) ends about now; slurmd reports it when slurmctld is back
            assert proc.poll() is None, "the daemon died while slurmctld was down\n" + d.logs()
            stale = heartbeat.read_text() if heartbeat.exists() else ""
            assert not sim.stats()["executed"] or phase is Phase.ACTING
        finally:
            lab.start_ctld()
        gate.set()
        d.wait(lambda: d.rems("gpu01")[-1].phase is Phase.DONE, "gpu01 done", timeout=120)
        d.wait(lambda: "gpu01" not in d.out_of_service(), "gpu01 resumed", timeout=60)
        assert proc.poll() is None, d.logs()
        assert list(sim.stats()["executed"].values()) == [1]  # SPEC S6: one reboot
        logs = d.logs(tail=10**7)
        assert "cycle skipped, Slurm unavailable" in logs  # said, not hidden (O1)
        assert "Traceback" not in logs
        d.wait(lambda: heartbeat.read_text() != stale, "the heartbeat moves on again")
        assert d.stop(proc) == 0
    finally:
        d.close()


def test_scontrol_failing_for_one_node_does_not_stop_the_others(
        lab: Lab, sim: SimulatorServer, gate: threading.Event, tmp_path: Path) -> None:
    """Every `scontrol` call that names gpu02 fails. gpu02's cordon is tried three times
    (SPEC L1), then its remediation fails and goes to a person; gpu01 and gpu03 are
    remediated meanwhile, and the daemon keeps running."""
    gate.set()
    wrapper = scontrol_wrapper(tmp_path / "bin", fail_node="gpu02")
    d = LabDaemon(lab, tmp_path, sim, path_prefix=wrapper, interval=0.5)
    try:
        for node in ("gpu01", "gpu02", "gpu03"):
            d.publish(node)
        proc = d.start()

        def finished() -> bool:
            rems = d.rems()
            return len(rems) >= 3 and all(r.phase.terminal for r in rems)
        d.wait(finished, "all three remediations finished", timeout=120)
        d.wait(lambda: not ({"gpu01", "gpu03"} & set(d.out_of_service())), "gpu01 and gpu03 "
               "resumed", timeout=60)
        assert proc.poll() is None, d.logs()
        by_node = {r.node: r for r in d.rems()}
        assert by_node["gpu01"].phase is Phase.DONE and by_node["gpu03"].phase is Phase.DONE
        bad = by_node["gpu02"]
        assert bad.phase is Phase.FAILED and bad.data.handed_to_person, bad.steps
        cordons = [a for a in bad.attempts if a.effect == "cordon"]
        assert len(cordons) == 3 and all(a.outcome == "failed" for a in cordons)
        assert "injected failure for gpu02" in cordons[-1].detail
        assert not any(a.effect == "act" for a in bad.attempts)  # nothing ran on gpu02
        executed = sim.stats()["executed"]
        assert sorted(k.split(":")[0] for k in executed) == sorted(
            (by_node["gpu01"].id, by_node["gpu03"].id)) and set(executed.values()) == {1}
        notes = (d.state_dir / "notifications.jsonl").read_text()
        assert "gpu02" in notes  # a person is told
        assert "Traceback" not in d.logs(tail=10**7)
        assert d.stop(proc) == 0
    finally:
        d.close()
