"""The GPU reset (SPEC E6) end to end on the real Slurm lab: `slurm-heal daemon` as a
process, an Xid 119 read by `slurm-heal check` from the node's replayed kernel log, the
reset as a real Slurm job in a real MAINT reservation on the drained node, a stub
`nvidia-smi` on the job's PATH that succeeds, refuses or hangs, and the provider
simulator whose reboot really reboots the lab node (the ladder's next step).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_heal import extra
from slurm_heal.models import Phase
from slurm_heal.slurm.cli import CliSlurm
from slurm_heal.types import Action
from tests.integration.repairlab import NVIDIA_SMI, RESET_PREFIX, Reset, clear, installed
from tests.lab import Lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

XID119 = ("NVRM: Xid (PCI:0000:3b:00): 119, pid=1234, name=python3, Timeout after 6s of "
          "waiting for RPC response from GPU1 GSP!")
PREFIX = RESET_PREFIX


@pytest.fixture
def reset(lab_clean: Lab, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Reset]:
    with installed(lab_clean, lambda sim: Reset(lab_clean, tmp_path, sim,
                                                **getattr(request, "param", {}))) as r:
        yield r


def _check_files(tmp: Path) -> Path:
    """A node check config that keeps the reset job's check to the test's own files
    (never the host's /var/lib/slurm-heal or its kernel log)."""
    check = tmp / "check.toml"
    check.write_text(f'[check]\nstate_dir = "{tmp / "node"}"\n[services]\nenabled = false\n'
                     '[mounts]\nrw = ["/"]\n[kernel_log]\nsource = "file"\n'
                     f'path = "{tmp / "kern.log"}"\n')
    (tmp / "kern.log").write_text("")
    return check


def _xid119(reset: Reset, node: str) -> None:
    reset.gpus(node, "0000:1b:00.0", "0000:3b:00.0")  # 3b is GPU 1
    reset.kernel_says(node, XID119)
    assert reset.check(node).returncode == 1  # the node check drains it (critical)
    assert "DRAIN" in reset.lab.state(node)


def test_xid119_with_gpu_reset_drains_resets_checks_and_resumes(lab: Lab, reset: Reset
                                                                 ) -> None:
    """SPEC E6, P3, L5: drain -> reset job in a MAINT reservation (nvidia-smi -r -i 1, the
    GPU the Xid names) -> the node check after it no longer counts the Xid -> resumed;
    no reboot, the reservation gone."""
    node = "gpu02"
    reset.tool(rc=0, say="GPU 00000000:3B:00.0 was successfully reset.\n")
    _xid119(reset, node)
    reset.start_daemon()
    rem = reset.wait_phase(node, Phase.DONE, timeout=120)
    lab.wait_for(lambda: lab.state(node) == {"IDLE"}, timeout=60, what=f"{node} IDLE")
    assert rem.action is Action.RESET_GPU and rem.fault == "gpu.xid.119"
    assert "-r -i 1" in reset.calls(), reset.calls()
    assert reset.executed() == {}  # no provider action: no reboot
    act = [a for a in rem.attempts if a.effect == "act"][0]
    assert act.outcome == "ok" and "successfully reset" in act.detail, act
    assert PREFIX not in reset.reservations()
    for phase in ("approved", "cordoned", "acting", "returning", "done"):
        assert phase in rem.phase_times, phase
    # the node check ran after the reset and no longer sees the Xid (E6), in Extra,
    # although the Xid is still in this boot's kernel log (a reset is no reboot)
    assert "Xid" in (reset.root(node) / "dev/kmsg").read_text()
    assert (reset.root(node) / "var/lib/slurm-heal/node/gpu-reset.json").exists()
    data = extra.read_check_data(node, reset.slurm.node(node).extra, rem.updated)
    assert data.checked_at is not None and data.checked_at > act.started
    assert not [a for a in data.alerts if a.fault == "gpu.xid.119"]


def test_a_refused_reset_climbs_to_reboot_at_once(lab: Lab, reset: Reset) -> None:
    """SPEC E6/E1: nvidia-smi refuses ("In use by another client"): the reset fails with
    its words, the reservation is removed, and the next recommendation is the reboot."""
    node = "gpu03"
    reset.tool(rc=255, say="Unable to reset GPU 00000000:3B:00.0 because it's being used "
               "by some other process (In use by another client)\n")
    _xid119(reset, node)
    reset.start_daemon()

    def reboot_done() -> object:
        rems = reset.rems(node)
        return len(rems) >= 2 and rems[-1].phase is Phase.DONE
    reset.wait(reboot_done, f"{node}: the reboot after the refused reset", timeout=180)
    first, second = reset.rems(node)[-2:]
    assert first.action is Action.RESET_GPU and first.phase is Phase.FAILED
    assert "In use by another client" in first.steps[-1].why, first.steps[-1]
    assert not first.data.handed_to_person
    assert second.action is Action.REBOOT and second.escalated_from is Action.RESET_GPU
    assert second.action_rule == "E1"
    assert list(reset.executed().values()) == [1]  # the reboot, once
    assert PREFIX not in reset.reservations()
    lab.wait_for(lambda: lab.state(node) == {"IDLE"}, timeout=60, what=f"{node} IDLE")


@pytest.mark.parametrize("reset", [{"timeout": "12s"}], indirect=True)
def test_a_hung_reset_is_killed_at_its_bound_and_the_reboot_follows(lab: Lab, reset: Reset
                                                                    ) -> None:
    """SPEC E6: the tool hangs past gpu_reset_timeout (12s): killed inside the job, the
    step fails saying so, the node is drained again and the reboot follows. While the job
    runs (our drain lifted, the MAINT reservation holding the node), the node check that
    runs there does not take it for a person's resume (S8): nothing is acknowledged."""
    node = "gpu04"
    reset.tool(rc=0, sleep=60)
    _xid119(reset, node)
    reset.start_daemon()
    reset.wait(lambda: "MAINTENANCE" in lab.state(node) and reset.calls(),
               f"{node}: the reset job running in its reservation", timeout=60)
    reset.check(node)  # HealthCheckProgram, during the job
    state = json.loads((reset.root(node) / "var/lib/slurm-heal/node/state.json").read_text())
    assert not state.get("acknowledged"), state.get("acknowledged")

    def failed() -> object:
        rems = reset.rems(node)
        return rems and rems[0].phase is Phase.FAILED
    reset.wait(failed, f"{node}: the hung reset failed", timeout=120)
    first = reset.rems(node)[0]
    assert "did not finish within 12s" in first.steps[-1].why, first.steps[-1]
    assert PREFIX not in reset.reservations()
    reset.wait(lambda: any(r.action is Action.REBOOT for r in reset.rems(node)),
               f"{node}: the reboot recommended", timeout=60)


def test_a_reset_job_that_never_ends_is_cancelled_at_its_limit(
        lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC E6, house style 6: a reset job still there past its Slurm time limit (plus a
    minute) is cancelled and the step fails saying so; the node is drained again under
    its marker and the reservation removed. `GpuReset` itself against the lab, its clock
    moved on (the tool's own bound is 10 minutes here, so the job really hangs)."""
    from datetime import datetime, timedelta, timezone

    from slurm_heal import reasons
    from slurm_heal.config import policy_from_dict
    from slurm_heal.gpureset import GpuReset

    clear(lab)
    node = "gpu01"
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "nvidia-smi").write_text(NVIDIA_SMI)
    (bin_ / "nvidia-smi").chmod(0o755)
    (bin_ / "sleep").write_text("300\n")
    monkeypatch.setenv("PATH", f"{bin_}:{lab.env['PATH']}")
    monkeypatch.setenv("SLURM_CONF", str(lab.conf))
    marker = reasons.format_marker("gpu.xid.119", remediation="r-test", by="controller")
    lab.scontrol("update", f"nodename={node}", "state=drain", f"reason={marker}")
    policy = policy_from_dict({"escalation": {
        "gpu_reset": True, "gpu_reset_timeout": "10m",
        "gpu_reset_check_config": str(_check_files(tmp_path))},
        "validation": {"results_dir": str(tmp_path / "results")}})
    now = [datetime.now(timezone.utc)]
    slurm = CliSlurm(slurm_conf=str(lab.conf))
    ops = GpuReset(slurm=slurm, policy=lambda: policy, state_dir=tmp_path,
                   slurm_conf=str(lab.conf), clock=lambda: now[0])
    try:
        op = ops.submit(node, Action.RESET_GPU, "r-test:act:0")
        assert op.status == "running" and f"reservation {PREFIX}{node}" in op.detail
        lab.wait_for(lambda: (bin_ / "calls").exists(), timeout=60, what="the job's reset")
        still = ops.status("r-test:act:0")
        assert still is not None and still.status == "running", still
        now[0] += timedelta(minutes=20)
        over = ops.status("r-test:act:0")
        assert over is not None and over.status == "failed", over
        op = over
        assert "did not end within" in op.detail and "cancelled" in op.detail
        assert slurm.node(node).drained and slurm.node(node).reason == marker
        assert PREFIX not in lab.scontrol("show", "reservation", "-o").stdout
        # asked again (a restarted controller): the same answer, nothing sent twice
        again = ops.status("r-test:act:0")
        assert again is not None and again.status == "failed" and again.detail == op.detail
    finally:
        clear(lab)
        lab.scontrol("update", f"nodename={node}", "state=resume", check=False)


def test_a_reset_sent_again_after_a_stop_between_lift_and_sbatch_runs_once(
        lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC S6/L1: the controller stopped after it had lifted the drain (the reservation
    holding the node) and before sbatch: the act sent again under the same key submits
    the job, with the marker the first try kept, and settles the node as before."""
    import json as json_
    from datetime import datetime, timezone

    from slurm_heal import reasons
    from slurm_heal.config import policy_from_dict
    from slurm_heal.gpureset import GpuReset
    from slurm_heal.validation.slurmjobs import SlurmJobs

    clear(lab)
    node, key = "gpu02", "r-again:act:0"
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "nvidia-smi").write_text(NVIDIA_SMI)
    (bin_ / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}:{lab.env['PATH']}")
    monkeypatch.setenv("SLURM_CONF", str(lab.conf))
    marker = reasons.format_marker("gpu.xid.119", remediation="r-again", by="controller")
    check = _check_files(tmp_path)
    policy = policy_from_dict({"escalation": {"gpu_reset": True,
                                              "gpu_reset_check_config": str(check)},
                               "validation": {"results_dir": str(tmp_path / "results")}})
    slurm = CliSlurm(slurm_conf=str(lab.conf))
    ops = GpuReset(slurm=slurm, policy=lambda: policy, state_dir=tmp_path,
                   slurm_conf=str(lab.conf))
    # what the first try left: the reservation, the lift, its run record, no job yet
    SlurmJobs(slurm_conf=str(lab.conf)).reserve(PREFIX + node, [node])
    d = ops.dir(key)
    d.mkdir(parents=True)
    (d / "run.json").write_text(json_.dumps({
        "node": node, "reason": marker, "reservation": PREFIX + node,
        "job_name": PREFIX + node, "submitted": datetime.now(timezone.utc).isoformat(),
        "limit_s": 300, "gpus": [], "job": ""}))
    try:
        assert ops.status(key) is None  # never got to sbatch: send it again
        op = ops.submit(node, Action.RESET_GPU, key)
        assert op.status == "running", op

        def settled() -> object:
            got = ops.status(key)
            return got if got is not None and got.finished else None
        done = lab.wait_for(settled, timeout=90, what="the reset job settled")
        assert done.status == "succeeded", done
        assert (bin_ / "calls").read_text().splitlines().count("-r") == 1
        assert slurm.node(node).drained and slurm.node(node).reason == marker
        assert PREFIX not in lab.scontrol("show", "reservation", "-o").stdout
        assert (tmp_path / "node" / "gpu-reset.json").exists()  # the check's, not the host's
    finally:
        clear(lab)
        lab.scontrol("update", f"nodename={node}", "state=resume", check=False)
