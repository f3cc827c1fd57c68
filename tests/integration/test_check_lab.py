"""`slurm-heal check` against the real Slurm lab (SPEC D1, D7, I1, I2; house style 2).

A replayed node (SLURM_HEAL_ROOT with a kmsg file holding an Xid 79 record) stands in
for a faulty GPU node: the check must write the alert into that node's Extra and drain
it with our reason; once the fault is gone (the node rebooted: new boot id, fresh kernel
log) it must clear both, and never touch a node someone else drained.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from slurm_heal.slurm.cli import CliSlurm
from tests.lab import Lab

pytestmark = pytest.mark.slurm

XID79 = "2,501,130223456,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n"
NOISE = "6,500,100,-;IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready\n"


class Replay:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "dev").mkdir(parents=True)
        (root / "proc/sys/kernel/random").mkdir(parents=True)
        (root / "proc/mounts").write_text("/dev/sda1 / ext4 rw 0 0\n")
        self.boot("boot-1", NOISE)

    def boot(self, boot_id: str, kmsg: str) -> None:
        (self.root / "proc/sys/kernel/random/boot_id").write_text(boot_id + "\n")
        (self.root / "dev/kmsg").write_text(kmsg)

    def inject(self, line: str) -> None:
        with (self.root / "dev/kmsg").open("a") as fh:
            fh.write(line)


@pytest.fixture
def replay(tmp_path: Path) -> Replay:
    return Replay(tmp_path / "node")


def check(lab: Lab, replay: Replay, node: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(lab.env, SLURM_HEAL_ROOT=str(replay.root), PATH=lab.path_prefix + "/usr/bin:/bin")
    return subprocess.run([sys.executable, "-m", "slurm_heal.checks", "--node", node, *extra],
                          env=env, capture_output=True, text=True, timeout=120)


def ours(client: CliSlurm, node: str) -> dict[str, Any] | None:
    value = (client.node(node).extra or {}).get("slurm_heal")
    return value if isinstance(value, dict) else None


def test_injected_xid_79_is_published_drained_and_cleared_after_reboot(
        lab: Lab, replay: Replay) -> None:
    node = lab.nodes[0]
    client = CliSlurm(slurm_conf=str(lab.conf))
    replay.inject(XID79)
    out = check(lab, replay, node)
    assert out.returncode == 1, out.stderr
    info = client.node(node)
    assert info.drained and info.reason.startswith("heal: gpu.xid.79 by=check")
    section = ours(client, node)
    assert section is not None
    (alert,) = section["alerts"]
    assert alert["fault"] == "gpu.xid.79"
    assert "GPU has fallen off the bus" in alert["evidence"][0]["text"]

    replay.boot("boot-2", NOISE)  # the node rebooted: the fault is gone
    out = check(lab, replay, node)
    assert out.returncode == 0, out.stdout + out.stderr
    info = client.node(node)
    assert not info.drained, info.reason
    section = ours(client, node)  # no alerts, and when the check ran (SPEC L5)
    assert section is not None and section["alerts"] == [] and section["checked_at"]


def test_a_node_drained_by_someone_else_is_never_resumed_or_relabelled(
        lab: Lab, replay: Replay) -> None:
    node = lab.nodes[1]
    client = CliSlurm(slurm_conf=str(lab.conf))
    lab.scontrol("update", f"nodename={node}", "state=drain", "reason=bad DIMM")
    lab.scontrol("update", f"nodename={node}", 'extra={"site":{"rack":"r12"}}')
    replay.inject(XID79)
    assert check(lab, replay, node).returncode == 1
    info = client.node(node)
    assert info.reason == "bad DIMM"
    assert ours(client, node) is not None
    replay.boot("boot-2", NOISE)
    assert check(lab, replay, node).returncode == 0
    info = client.node(node)
    assert info.drained and info.reason == "bad DIMM"
    assert info.extra is not None and info.extra["site"] == {"rack": "r12"}
    assert info.extra["slurm_heal"]["alerts"] == []


def test_dry_run_writes_nothing_to_the_lab(lab: Lab, replay: Replay) -> None:
    node = lab.nodes[2]
    replay.inject(XID79)
    out = check(lab, replay, node, "--dry-run", "--json")
    assert out.returncode == 1
    assert [f["fault"] for f in json.loads(out.stdout)] == ["gpu.xid.79"]
    assert lab.state(node) == {"IDLE"}
    assert lab.show(node).get("Extra", "") in ("", "(null)")


XID79_LATER = "2,502,230223456,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=4321, name=python3, GPU has fallen off the bus.\n"


def test_a_persons_resume_is_not_undone_by_the_next_check(lab_clean: Lab,
                                                          replay: Replay) -> None:
    """SPEC S8 (issue 22, item 1): drained by the check for a latched Xid 79, a person
    resumes the node: the next runs leave it in service (the Xid is acknowledged and
    published as such, not as an alert the controller acts on); a new Xid drains it."""
    node = lab_clean.nodes[3]
    client = CliSlurm(slurm_conf=str(lab_clean.conf))
    replay.inject(XID79)
    assert check(lab_clean, replay, node).returncode == 1
    assert client.node(node).drained
    lab_clean.scontrol("update", f"nodename={node}", "state=resume")
    assert not client.node(node).drained
    for _ in range(2):
        out = check(lab_clean, replay, node)
        assert out.returncode == 0, out.stdout + out.stderr
        info = client.node(node)
        assert not info.drained, info.reason
        section = ours(client, node)
        assert section is not None and section["alerts"] == []
        assert [a["fault"] for a in section["acknowledged"]] == ["gpu.xid.79"]
    assert "acknowledged gpu.xid.79" in out.stdout
    replay.inject(XID79_LATER)  # the same fault again, after the person's resume: new
    out = check(lab_clean, replay, node)
    assert out.returncode == 1, out.stdout + out.stderr
    info = client.node(node)
    assert info.drained and info.reason.startswith("heal: gpu.xid.79 by=check"), info.reason
    section = ours(client, node)
    assert section is not None and [a["fault"] for a in section["alerts"]] == ["gpu.xid.79"]
    assert "acknowledged" not in section


def test_a_node_back_from_a_reboot_with_its_fault_is_drained_again(
        lab_clean: Lab, replay: Replay) -> None:
    """SPEC S8 is a person's resume on the same boot: a node Slurm returned to service
    after a reboot that still shows the fault is drained again."""
    node = lab_clean.nodes[3]
    client = CliSlurm(slurm_conf=str(lab_clean.conf))
    replay.inject(XID79)
    assert check(lab_clean, replay, node).returncode == 1
    assert client.node(node).drained
    lab_clean.scontrol("update", f"nodename={node}", "state=resume")
    replay.boot("boot-2", NOISE + XID79)  # rebooted, and the GPU is off the bus again
    assert check(lab_clean, replay, node).returncode == 1
    assert client.node(node).drained
