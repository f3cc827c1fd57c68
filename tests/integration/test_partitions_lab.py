"""Our maintenance jobs on a node outside the default partition (SPEC E6, V4, V1; issue 32
item 4), on a real Slurm lab of two partitions: ``gpu`` (gpu01-03, the default) and
``infer`` (gpu04 alone), as sites have them. Before, sbatch asked for the default
partition and refused the job ("Requested node configuration is not available"): the
reset climbed to a reboot, the gate failed twice and a healthy node was handed to a
person, a validation was interrupted. Now each job is submitted to the node's own
partitions; Slurm's own records say where it ran.

`slurm-heal daemon` as a process, the real node check, the real jobs in real MAINT
reservations (set-up shared with test_reset_gate_lab.py: tests/integration/repairlab.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_heal.models import Phase
from slurm_heal.types import Action
from tests.integration.repairlab import GATE_PREFIX, RESET_PREFIX, Reset, gate_toml, installed
from tests.lab import Lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

NODE = "gpu04"  # only in partition infer
XID119 = ("NVRM: Xid (PCI:0000:3b:00): 119, pid=1234, name=python3, Timeout after 6s of "
          "waiting for RPC response from GPU1 GSP!")


@pytest.fixture(scope="module")
def infer_lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[Lab]:
    """A lab of its own (the session's has one partition): gpu01-03 in ``gpu`` (default),
    gpu04 only in ``infer``."""
    lab = Lab(tmp_path_factory.mktemp("infer-lab"), nodes=4,
              slurm=str(request.config.getoption("--slurm")),
              partitions=["gpu=gpu[01-03]", "infer=gpu04"])
    try:
        lab.start()
    except Exception:
        lab.stop()
        raise
    try:
        yield lab
    finally:
        lab.stop()


@pytest.fixture
def both(infer_lab: Lab, tmp_path: Path) -> Iterator[Reset]:
    infer_lab.reset()
    with installed(infer_lab, lambda sim: Reset(infer_lab, tmp_path, sim,
                                                gate=gate_toml())) as r:
        # Every job of ours starts the job's Python: it notes where Slurm ran it (the
        # job's own environment; Slurm forgets a job MinJobAge after its end).
        python = r.bin / "python-node"
        python.write_text(python.read_text().replace(
            "exec ", f'echo "$SLURM_JOB_ID $SLURM_JOB_PARTITION $SLURMD_NODENAME" >> '
            f'{tmp_path / "ran"}\nexec ', 1))
        yield r


def _ran(r: Reset, job: int | str) -> str:
    """Where job ``job`` ran: "PARTITION NODE"."""
    lines = (r.tmp / "ran").read_text().splitlines() if (r.tmp / "ran").exists() else []
    return next((ln.partition(" ")[2] for ln in lines if ln.split()[0] == str(job)), "")


def test_reset_and_gate_run_on_a_node_outside_the_default_partition(both: Reset) -> None:
    """SPEC E6, V4: an Xid 119 on gpu04 (partition infer only): the reset job and the
    gate's job each run there, in partition infer, and the node is resumed; no reboot,
    nothing handed to a person, no reservation left."""
    lab = both.lab
    assert "Partitions=infer " in lab.scontrol("show", "node", NODE).stdout
    both.tool(rc=0, say="GPU 00000000:3B:00.0 was successfully reset.\n")
    both.gate_tool(rc=0)
    both.gpus(NODE, "0000:1b:00.0", "0000:3b:00.0")
    both.kernel_says(NODE, XID119)
    assert both.check(NODE).returncode == 1 and "DRAIN" in lab.state(NODE)
    both.start_daemon()
    rem = both.wait_phase(NODE, Phase.DONE, timeout=180)
    lab.wait_for(lambda: lab.state(NODE) == {"IDLE"}, timeout=60, what=f"{NODE} IDLE")
    assert rem.action is Action.RESET_GPU and not rem.data.handed_to_person
    act = next(a for a in rem.attempts if a.effect == "act")
    assert act.outcome == "ok" and "successfully reset" in act.detail, act
    assert both.executed() == {}  # no reboot
    (run,) = both.gate_runs(NODE)
    assert run.phase == "passed" and run.job_id is not None, run
    job = json.loads((both.results / "reset" / act.key.replace(":", "-") / "run.json")
                     .read_text())["job"]
    assert _ran(both, job) == f"infer {NODE}" and _ran(both, run.job_id) == f"infer {NODE}"
    res = both.reservations()
    assert RESET_PREFIX not in res and GATE_PREFIX not in res, res


def test_validation_runs_on_a_node_outside_the_default_partition(both: Reset) -> None:
    """SPEC V1, V2: `slurm-heal validate gpu04`: the suite's job runs in partition infer,
    passes, and the node is back in service; no reservation left."""
    lab = both.lab
    both.gate_tool(rc=0)
    both.config.write_text(both.config.read_text() + """
[[validation.suites.nvidia]]
name = "diag"
command = ["dcgmi", "diag", "-r", "{level}"]
timeout = "2m"
""")
    both.start_daemon()
    both.wait(lambda: (both.state_dir / "heartbeat").exists(), "a heartbeat")
    proc = subprocess.run([sys.executable, "-m", "slurm_heal.cli", "validate", NODE, "--by",
                           "alice", "--reason", "after repair", "--state-dir",
                           str(both.state_dir)], env=both.env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    def ended() -> object:
        runs = [v for v in both.store.load().validations if v.node == NODE
                and v.origin == "request"]
        return runs[-1] if runs and runs[-1].terminal else None
    both.wait(ended, f"{NODE}'s validation ended", timeout=120)
    (run,) = [v for v in both.store.load().validations if v.node == NODE]
    assert run.phase == "passed", (run.phase, run.steps, run.attempts)
    assert run.job_id is not None
    assert _ran(both, run.job_id) == f"infer {NODE}"
    assert lab.state(NODE) == {"IDLE"}
    assert "slurm-heal-validate-" not in both.reservations()
