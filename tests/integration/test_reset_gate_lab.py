"""The GPU reset (SPEC E6) and the post-repair gate (SPEC V4) together on the real Slurm
lab, as issue 28 asks: `slurm-heal daemon` as a process, an Xid 119 read by the real node
check, the reset and the gate each a real Slurm job in a real MAINT reservation on the
drained node (stub `nvidia-smi` and `dcgmi` on the jobs' PATH), and the provider
simulator whose reboot really reboots the lab node when the reset is refused. Each step
is asserted from the store's record and from Slurm's own history of the jobs
(slurmctld's log: which job got which node, and when it ended). Set-up shared with
test_gpu_reset_lab.py and test_gate_lab.py: tests/integration/repairlab.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_heal import extra
from slurm_heal.models import Phase, Remediation
from slurm_heal.types import Action
from tests.integration.repairlab import (
    GATE_PREFIX,
    RESET_PREFIX,
    Reset,
    gate_toml,
    installed,
)
from tests.lab import Lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

XID119 = ("NVRM: Xid (PCI:0000:3b:00): 119, pid=1234, name=python3, Timeout after 6s of "
          "waiting for RPC response from GPU1 GSP!")


@pytest.fixture
def both(lab_clean: Lab, tmp_path: Path) -> Iterator[Reset]:
    with installed(lab_clean, lambda sim: Reset(lab_clean, tmp_path, sim,
                                                gate=gate_toml())) as r:
        yield r


def _xid119(r: Reset, node: str) -> None:
    r.gpus(node, "0000:1b:00.0", "0000:3b:00.0")  # 3b is GPU 1
    r.kernel_says(node, XID119)
    assert r.check(node).returncode == 1  # the node check drains it (critical)
    assert "DRAIN" in r.lab.state(node)


_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\dT[\d:.]+)\] ")


def _job_history(lab: Lab, job: int | str) -> tuple[str, str, str]:
    """Slurm's own record of a job (the lab keeps no accounting): when a slurmd launched
    it and on which node (its log: "Launching batch job N" on 22.05, "Launching batch
    JobId=N" later; slurmctld's own start line depends on the scheduler and the version:
    26.05's backfill logs none at info), and when slurmctld saw it end. Times are the logs'
    own stamps, written on this one host's clock."""
    launched = re.compile(rf"Launching batch (?:job {job}|JobId={job}|StepId={job}\.batch)\b")
    starts = []
    for log in sorted((lab.dir / "log").glob("slurmd-*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if launched.search(line) and (m := _STAMP.match(line)):
                starts.append((m[1], log.stem.removeprefix("slurmd-")))
    ends = [m[1] for line in (lab.dir / "log" / "slurmctld.log").read_text(
        errors="replace").splitlines()
        if f"_job_complete: JobId={job} done" in line and (m := _STAMP.match(line))]
    assert len(starts) == 1 and len(ends) == 1, (job, starts, ends)
    return starts[0][0], ends[0], starts[0][1]


def _reset_job(r: Reset, rem: Remediation) -> str:
    act = next(a for a in rem.attempts if a.effect == "act")
    run = r.results / "reset" / act.key.replace(":", "-") / "run.json"
    return str(json.loads(run.read_text())["job"])


def test_xid119_with_reset_and_gate_drains_resets_checks_gates_and_resumes(
        lab: Lab, both: Reset) -> None:
    """SPEC E6, V4, P3, L5: drain -> the reset job (nvidia-smi -r -i 1) -> the node check
    after it, no longer counting the Xid -> the gate's job (dcgmi diag) -> resumed; no
    provider call, no reservation left."""
    node = "gpu02"
    both.tool(rc=0, say="GPU 00000000:3B:00.0 was successfully reset.\n")
    both.gate_tool(rc=0)
    _xid119(both, node)
    both.start_daemon()
    rem = both.wait_phase(node, Phase.DONE, timeout=180)
    lab.wait_for(lambda: lab.state(node) == {"IDLE"}, timeout=60, what=f"{node} IDLE")
    assert rem.action is Action.RESET_GPU and rem.fault == "gpu.xid.119"
    assert both.executed() == {}  # no provider action: no reboot
    assert "-r -i 1" in both.calls(), both.calls()

    # the record, in order: drained, the reset, the node check, the gate, resumed
    times = [rem.phase_times[p] for p in ("approved", "cordoned", "acting", "returning",
                                          "done")]
    assert times == sorted(times), rem.phase_times
    act = next(a for a in rem.attempts if a.effect == "act")
    gate = [a for a in rem.attempts if a.effect == "gate"]
    assert act.outcome == "ok" and "successfully reset" in act.detail, act
    assert [a.outcome for a in gate] == ["ok"] and gate[0].started > act.started
    data = extra.read_check_data(node, both.slurm.node(node).extra, rem.updated)
    assert data.checked_at is not None and act.started < data.checked_at < gate[0].started
    assert not [a for a in data.alerts if a.fault == "gpu.xid.119"]
    (run,) = both.gate_runs(node)
    assert run.phase == "passed" and run.remediation == rem.id and run.job_id is not None
    assert "dcgmi (stub) diag -r 1" in (Path(run.results_dir) / "diag.log").read_text()
    v4 = next(s for s in rem.steps if s.rule == "V4")
    assert v4.at >= rem.phase_times["returning"]
    assert "the post-repair gate passed" in rem.steps[-1].why

    # Slurm's history: the reset's job ran on the node and ended before the gate's began
    r_start, r_end, r_nodes = _job_history(lab, _reset_job(both, rem))
    g_start, g_end, g_nodes = _job_history(lab, run.job_id)
    assert r_nodes == g_nodes == node
    assert r_start < r_end < g_start < g_end
    res = both.reservations()
    assert RESET_PREFIX not in res and GATE_PREFIX not in res, res


def test_a_refused_reset_climbs_to_reboot_then_the_gate_then_resume(lab: Lab, both: Reset
                                                                   ) -> None:
    """SPEC E6, E1, V4: nvidia-smi refuses ("In use by another client"): the reset fails
    with its words, no gate for it; the reboot follows at once (one provider call), the
    node is checked at its boot, the gate runs on it and passes, the node is resumed."""
    node = "gpu03"
    both.tool(rc=255, say="Unable to reset GPU 00000000:3B:00.0 because it's being used "
              "by some other process (In use by another client)\n")
    both.gate_tool(rc=0)
    _xid119(both, node)
    both.start_daemon()

    def reboot_done() -> object:
        rems = both.rems(node)
        return len(rems) >= 2 and rems[-1].phase is Phase.DONE
    both.wait(reboot_done, f"{node}: the reboot after the refused reset", timeout=240)
    lab.wait_for(lambda: lab.state(node) == {"IDLE"}, timeout=60, what=f"{node} IDLE")
    first, second = both.rems(node)[-2:]
    assert first.action is Action.RESET_GPU and first.phase is Phase.FAILED
    assert "In use by another client" in first.steps[-1].why, first.steps[-1]
    assert not [a for a in first.attempts if a.effect == "gate"]  # a failed act: no gate
    assert second.action is Action.REBOOT and second.escalated_from is Action.RESET_GPU
    assert second.action_rule == "E1"
    assert list(both.executed().values()) == [1]  # the reboot, once
    (run,) = both.gate_runs(node)
    assert run.remediation == second.id and run.phase == "passed" and run.job_id, run
    act = next(a for a in second.attempts if a.effect == "act")
    gate = next(a for a in second.attempts if a.effect == "gate")
    assert act.started < gate.started and gate.outcome == "ok"
    assert second.phase_times["returning"] <= run.created
    assert "the post-repair gate passed" in second.steps[-1].why
    r_start, r_end, r_nodes = _job_history(lab, _reset_job(both, first))
    g_start, g_end, g_nodes = _job_history(lab, run.job_id)
    assert r_nodes == g_nodes == node and r_start < r_end < g_start < g_end
    res = both.reservations()
    assert RESET_PREFIX not in res and GATE_PREFIX not in res, res


def test_a_gate_failure_after_a_good_reset_fails_it_and_keeps_the_node_out(
        lab: Lab, both: Reset) -> None:
    """SPEC V4, L5, E6, E1: the reset succeeds and the node passes its check, but the
    gate's suite fails: the reset_gpu remediation fails with the gate's evidence; the node
    stays drained under our marker (the gate says it is unfit, though the Xid before the
    reset no longer counts), no second reset and no provider call: E1's next step waits
    for the fault to come back, or a person."""
    node = "gpu04"
    both.tool(rc=0, say="GPU 00000000:3B:00.0 was successfully reset.\n")
    both.gate_tool(rc=1)
    _xid119(both, node)
    both.start_daemon()
    rem = both.wait_phase(node, Phase.FAILED, timeout=180)
    assert rem.action is Action.RESET_GPU and rem.data.gate_failed
    assert not rem.data.handed_to_person
    failed = next(s for s in rem.steps if s.phase == "failed")
    assert failed.rule == "V4" and "diag fail: exit status 1" in failed.why, failed
    (run,) = both.gate_runs(node)
    assert run.remediation == rem.id and run.phase == "failed" and run.results_dir in failed.why
    r_start, r_end, _ = _job_history(lab, _reset_job(both, rem))
    g_start, g_end, _ = _job_history(lab, run.job_id or "")
    assert r_start < r_end < g_start < g_end
    lab.wait_for(lambda: any(d.get("rule") == "V4" and d.get("phase") == "blocked"
                             for d in both.store.load().data.get("decisions", [])),
                 timeout=30, what="the V4 'stays cordoned' record")
    assert "DRAIN" in lab.state(node)
    assert f"rem={rem.id}" in lab.scontrol("show", "node", node).stdout
    assert [r.id for r in both.rems(node)] == [rem.id]
    assert both.calls().count("-r -i 1") == 1 and both.executed() == {}
    res = both.reservations()
    assert RESET_PREFIX not in res and GATE_PREFIX not in res, res
