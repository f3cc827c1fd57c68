"""Issue 43 on the real lab: what `slurm-heal check` costs slurmctld, counted by slurmctld
itself (`sdiag -r`, then sdiag's "Remote Procedure Call statistics by message type").
Counts are behaviour (what the check sends), not timing (SPEC O1, D1, D7, I1, I2).

* N healthy runs with nothing changed: no REQUEST_UPDATE_NODE, at most one node read a
  run (there are none: nothing to ask);
* the run that finds a new Xid 79: one read, the Extra write and the drain, at once,
  then the write that says the drain holds (SPEC S8, ``drained``);
* the heartbeat (1 s here) when due: one read and one write;

the read being the node's own record (REQUEST_NODE_INFO_SINGLE, `sinfo -n`), never the
whole node table `scontrol show node NAME` has slurmctld pack (REQUEST_NODE_INFO), once
the first run of the boot has read the node's InstanceId.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.lab import NODE_READS, NODE_WRITES, Lab

pytestmark = pytest.mark.slurm

XID79 = ("2,501,130223456,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU "
         "has fallen off the bus.\n")
NOISE = "6,500,100,-;IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready\n"
RUNS = 5


def replay(root: Path) -> Path:
    (root / "dev").mkdir(parents=True)
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/mounts").write_text("/dev/sda1 / ext4 rw 0 0\n")
    (root / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
    (root / "dev/kmsg").write_text(NOISE)
    return root


def check(lab: Lab, root: Path, node: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(lab.env, SLURM_HEAL_ROOT=str(root), PATH=lab.path_prefix + "/usr/bin:/bin")
    return subprocess.run([sys.executable, "-m", "slurm_heal.checks", "--node", node, *extra],
                          env=env, capture_output=True, text=True, timeout=120)


def of(counts: dict[str, int], kinds: tuple[str, ...]) -> int:
    return sum(counts.get(k, 0) for k in kinds)


def test_healthy_runs_send_slurmctld_no_update_and_at_most_one_node_read_each(
        lab_clean: Lab, tmp_path: Path) -> None:
    lab = lab_clean
    node = lab.nodes[0]
    root = replay(tmp_path / "node")
    first = check(lab, root, node)
    assert first.returncode == 0, first.stdout + first.stderr
    lab.reset_rpc_counts()
    for _ in range(RUNS):
        res = check(lab, root, node)
        assert res.returncode == 0 and "healthy" in res.stdout, res.stdout + res.stderr
    counts = lab.rpc_counts()
    assert of(counts, NODE_WRITES) == 0, counts
    assert of(counts, NODE_READS) <= RUNS, counts
    assert '"slurm_heal"' in lab.show(node).get("Extra", "")  # the first run's stays


def test_a_new_fault_is_one_read_the_extra_write_and_the_drain_in_one_run(
        lab_clean: Lab, tmp_path: Path) -> None:
    lab = lab_clean
    node = lab.nodes[1]
    root = replay(tmp_path / "node")
    assert check(lab, root, node).returncode == 0
    with (root / "dev/kmsg").open("a") as fh:
        fh.write(XID79)
    lab.reset_rpc_counts()
    res = check(lab, root, node)
    counts = lab.rpc_counts()
    assert res.returncode == 1 and "gpu.xid.79" in res.stdout, res.stdout + res.stderr
    # Extra, then the drain, then Extra's word that the drain holds (S8: `drained`)
    assert of(counts, NODE_WRITES) == 3, counts
    assert of(counts, NODE_READS) <= 1, counts
    # the node's own record (sinfo -n), not the whole node table (scontrol show node)
    assert counts.get("REQUEST_NODE_INFO", 0) == 0, counts
    assert "DRAIN" in lab.state(node)
    assert "heal: gpu.xid.79 by=check" in lab.scontrol("show", "node", "-o", node).stdout


def test_the_heartbeat_when_due_is_one_read_and_one_write(lab_clean: Lab,
                                                         tmp_path: Path) -> None:
    lab = lab_clean
    node = lab.nodes[2]
    root = replay(tmp_path / "node")
    conf = tmp_path / "check.toml"
    conf.write_text('[check]\nheartbeat = "1s"\n')
    assert check(lab, root, node, "--check-config", str(conf)).returncode == 0
    before = lab.show(node).get("Extra", "")
    time.sleep(1.2)
    lab.reset_rpc_counts()
    assert check(lab, root, node, "--check-config", str(conf)).returncode == 0
    counts = lab.rpc_counts()
    assert of(counts, NODE_WRITES) == 1, counts
    assert of(counts, NODE_READS) == 1, counts
    assert counts.get("REQUEST_NODE_INFO", 0) == 0, counts  # the node's own record
    after = lab.show(node).get("Extra", "")
    assert '"heartbeat_s":1' in after and after != before  # a later checked_at
