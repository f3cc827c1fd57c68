"""The post-repair gate (SPEC V4) on the real Slurm lab: `slurm-heal daemon` as a
process, an Xid 119 found by the real node check, the reboot through the provider
simulator (the lab node's slurmd restarted with -b, checked again at boot), then the
gate's suite as a real Slurm job in a real MAINT reservation on the node, with a stub
`dcgmi` on the job's PATH that passes or fails as the test says. The same flow's pure
logic: tests/unit/test_post_repair_gate.py.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_heal.models import Phase, ValidationRun
from tests.integration.repairlab import GATE_PREFIX, Gated, installed
from tests.lab import Lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PREFIX = GATE_PREFIX
XID119 = ("NVRM: Xid (PCI:0000:3b:00): 119, pid=1, name=x, Timeout after 6s of waiting for "
          "RPC response from GPU0 GSP!")


@pytest.fixture
def gated(lab_clean: Lab, tmp_path: Path, backend: str,
          request: pytest.FixtureRequest) -> Iterator[Gated]:
    with installed(lab_clean, lambda sim: Gated(lab_clean, tmp_path, sim, backend,
                                                getattr(request, "param", ""))) as g:
        yield g


def _xid119(g: Gated, node: str) -> None:
    g.kernel_says(node, XID119)
    checked = g.check(node)
    assert checked.returncode == 1, checked.stdout + checked.stderr


def test_gate_passes_after_the_reboot_and_the_node_is_resumed(lab: Lab, gated: Gated) -> None:
    """SPEC V4, L5: Xid 119 -> drain -> reboot -> health check -> the gate as a Slurm job
    in a MAINT reservation on the node -> pass -> resumed, reservation gone."""
    node = "gpu02"
    gated.tool(rc=0)
    _xid119(gated, node)
    gated.start_daemon()
    rem = gated.wait_phase(node, Phase.DONE, timeout=180)
    lab.wait_for(lambda: lab.state(node) == {"IDLE"}, timeout=60, what=f"{node} IDLE")
    (run,) = gated.gate_runs(node)
    assert run.phase == "passed" and run.remediation == rem.id and run.job_id is not None
    assert run.reservation == f"{PREFIX}{node}" and PREFIX not in gated.reservations()
    # the job really ran the gate's step on the node, after the reboot and its check
    log = (Path(run.results_dir) / "diag.log").read_text()
    assert "dcgmi (stub) diag -r 1" in log
    gate_step = next(s for s in rem.steps if s.rule == "V4")
    assert gate_step.at >= rem.phase_times["returning"]
    assert "the post-repair gate passed" in rem.steps[-1].why
    assert [a.outcome for a in rem.attempts if a.effect == "gate"] == ["ok"]
    assert list(gated.executed().values()) == [1]  # one reboot


def test_gate_failure_fails_the_remediation_with_its_evidence_and_keeps_the_node_out(
        lab: Lab, gated: Gated) -> None:
    """SPEC V4, L5, E1: the gate's step fails clearly -> the remediation fails with the
    gate's evidence in its record and the notification; the node stays drained under our
    marker, the reservation is gone, no ticket."""
    node = "gpu03"
    gated.tool(rc=1)
    _xid119(gated, node)
    gated.start_daemon()
    rem = gated.wait_phase(node, Phase.FAILED, timeout=180)
    (run,) = gated.gate_runs(node)
    assert run.phase == "failed" and run.outcome == "fail" and run.ticket == ""
    assert "diag fail: exit status 1" in run.summary
    failed = rem.steps[-1] if rem.steps[-1].phase == "failed" else next(
        s for s in rem.steps if s.phase == "failed")
    assert failed.rule == "V4" and "diag fail: exit status 1" in failed.why
    assert run.results_dir in failed.why and not rem.data.handed_to_person  # E1 follows
    assert rem.data.gate_failed
    assert "DRAIN" in lab.state(node)
    reason = lab.scontrol("show", "node", node).stdout
    assert f"rem={rem.id}" in reason and "by=controller" in reason, reason
    assert PREFIX not in gated.reservations()
    notes = [json.loads(line) for line in
             (gated.state_dir / "notifications.jsonl").read_text().splitlines()]
    assert any(n["remediation"] == rem.id and "diag fail: exit status 1" in n["why"]
               for n in notes), notes
    # and it stays out: a few more cycles release nothing (the orphan sweep knows it)
    lab.wait_for(lambda: any(d.get("rule") == "V4" and d.get("phase") == "blocked"
                             for d in gated.store.load().data.get("decisions", [])),
                 timeout=30, what="the V4 'stays cordoned' record")
    assert "DRAIN" in lab.state(node)


def test_an_interrupted_gate_job_is_retried_once_and_the_retry_resumes_the_node(
        lab: Lab, gated: Gated) -> None:
    """SPEC V4: the gate's job dies without a verdict (its runner killed: the job ends
    FAILED with no final results) -> interrupted: the node is drained again under our
    cordon, the gate runs once more (a new run, a new job) and its pass resumes the node.
    (A person's `scancel` of it is their hand instead, SPEC S8: test_person_jobs_lab.py.)"""
    node = "gpu04"
    gated.tool(rc=0)
    (gated.bin / "sleep").write_text("120\n")
    _xid119(gated, node)
    gated.start_daemon()

    def running() -> ValidationRun | None:
        runs = gated.gate_runs(node)
        return runs[0] if runs and runs[0].phase == "running" else None
    first = lab.wait_for(running, timeout=150, what="the first gate job running")
    lab.wait_for(lambda: "RUNNING" in lab.run(["squeue", "-h", "-j", str(first.job_id), "-o",
                                                "%T"], check=False).stdout, timeout=60,
                 what="job running")
    assert "DRAIN" not in lab.state(node)  # lifted for the job; the reservation holds it
    # the job's tool sleeping (a RUNNING job may still be starting its runner: the sleep
    # taken away before the tool read it, the first run passed and there was no retry)
    lab.wait_for(lambda: (gated.bin / "sleeping").exists(), timeout=60,
                 what="the gate's tool sleeping")
    (gated.bin / "sleep").unlink()
    # the job's runner dies (its pid found by its own results directory, killed by id)
    pids = lab.run(["pgrep", "-f", f"slurm_heal.validation.runner --spec {first.results_dir}/"],
                   check=False).stdout.split()
    assert pids, "the gate job's runner"
    for pid in pids:
        os.kill(int(pid), signal.SIGKILL)
    rem = gated.wait_phase(node, Phase.DONE, timeout=150)
    lab.wait_for(lambda: lab.state(node) == {"IDLE"}, timeout=60, what=f"{node} IDLE")
    one, two = gated.gate_runs(node)
    assert one.phase == "interrupted" and one.job_state == "FAILED" and not one.by_person
    assert "drained again" in one.restored
    assert two.phase == "passed" and two.job_id not in (None, one.job_id)
    assert [a.key.rsplit(":", 1)[1] for a in rem.attempts if a.effect == "gate"] == ["0", "1"]
    assert any("concluded nothing" in s.why and "try 2 of 2" in s.why for s in rem.steps)
    assert PREFIX not in gated.reservations()


PEER_STEP = """
[[gate.suites.nvidia]]
name = "nccl-pair"
command = ["dcgmi", "pair", "{node}", "{peer}"]
timeout = "2m"
peer = true
"""


@pytest.mark.parametrize("gated", [PEER_STEP], indirect=True)
def test_gate_with_a_two_node_step_holds_one_healthy_idle_peer_only_for_the_job(
        lab: Lab, gated: Gated) -> None:
    """SPEC V4: a gate step across two machines gets a healthy idle peer of the same pool
    (not drained, not under remediation), in the reservation and the job only while the
    gate runs; both are in service after the pass."""
    node = "gpu01"
    lab.scontrol("update", "nodename=gpu02", "state=drain", "reason=bad DIMM")  # no peer
    gated.tool(rc=0)
    (gated.bin / "sleep").write_text("3\n")
    _xid119(gated, node)
    gated.start_daemon()

    def running() -> ValidationRun | None:
        runs = gated.gate_runs(node)
        return runs[0] if runs and runs[0].phase == "running" else None
    run = lab.wait_for(running, timeout=150, what="the gate job running")
    assert run.peer == "gpu03", run.peer
    res = gated.reservations()
    assert "Nodes=gpu[01,03]" in res or "Nodes=gpu01,gpu03" in res, res
    rem = gated.wait_phase(node, Phase.DONE, timeout=150)
    (done,) = gated.gate_runs(node)
    assert done.phase == "passed" and done.remediation == rem.id
    log = (Path(done.results_dir) / "nccl-pair.log").read_text()
    assert "dcgmi (stub) pair gpu01 gpu03" in log
    lab.wait_for(lambda: lab.state("gpu01") == lab.state("gpu03") == {"IDLE"}, timeout=60,
                 what="gpu01 and its peer in service")
    assert PREFIX not in gated.reservations()
    assert "DRAIN" in lab.state("gpu02")  # someone else's drain, untouched
