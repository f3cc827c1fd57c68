"""`slurm-heal demo`, the README's first command: a simulated cluster goes through the
whole life cycle, with no Slurm on the machine (SPEC L1-L5, P2, P4)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_demo_runs_fault_to_resume_and_exits_zero() -> None:
    proc = subprocess.run([sys.executable, "-m", "slurm_heal.cli", "demo"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    # the story, in order: fault, proposal, approval rule, cordon, wait, act, return, done
    marks = ["FAULT", "[proposed] reboot", "rule=P2:approvals[0]", "[cordoned]", "[waiting]",
             "executing reboot", "[acting]", "[returning]", "booted", "[done]"]
    positions = [out.find(m) for m in marks]
    assert all(p >= 0 for p in positions), dict(zip(marks, positions, strict=True))
    assert positions == sorted(positions)
    assert "gpu02 was repaired and is back in service" in out
    # the action ran exactly once through the provider (SPEC S6)
    assert "executed per idempotency key: {'r-" in out and "': 1}" in out


@pytest.mark.slurm
def test_demo_on_the_lab_runs_the_same_story_on_real_slurm() -> None:
    """`slurm-heal demo --lab`: its own lab beside the suite's (ports and dir of its own)."""
    proc = subprocess.run([sys.executable, "-m", "slurm_heal.cli", "demo", "--lab"],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "real slurmctld" in out and "[waiting]" in out and "[done]" in out
    assert "gpu02 was repaired and is back in service" in out
