"""The lab's reboot is a reboot for the node check too: the node's replay root
(DIR/root/NODE, what SLURM_HEAL_ROOT points the check at) gets a new kernel boot id and a
fresh kernel log, so a remediated lab node no longer "sees" the Xid of its old boot
(SPEC L5, D1: cursors and latched faults belong to a boot)."""

from __future__ import annotations

import shutil

import pytest

from tests.lab import Lab

pytestmark = pytest.mark.slurm


def test_a_lab_reboot_gives_the_nodes_replay_root_a_new_boot(lab_clean: Lab) -> None:
    lab = lab_clean
    node = lab.nodes[0]
    root = lab.dir / "root" / node
    (root / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (root / "dev").mkdir(exist_ok=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("old-boot\n")
    xid = "3,2,2000,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
    (root / "dev/kmsg").write_text("6,1,1000,-;Linux version\n" + xid)
    before = lab.show(node)["BootTime"]
    lab.reboot(node, delay=0)
    lab.wait_for(lambda: lab.show(node)["BootTime"] != before, timeout=30, what="new BootTime")
    new_id = (root / "proc/sys/kernel/random/boot_id").read_text().strip()
    assert new_id and new_id != "old-boot"
    assert "Xid" not in (root / "dev/kmsg").read_text()
    shutil.rmtree(lab.dir / "root")  # the session lab's later reboots need no replay root


def test_a_lab_reboot_runs_the_nodes_boot_script_after_the_new_boot_id(lab_clean: Lab) -> None:
    """`lab reboot` runs DIR/root/NODE/etc/lab-boot (executable) once the new boot id is
    written and before slurmd starts again, as a machine runs its boot scripts (the
    deployed-together suite starts a real-/dev/kmsg node's log anew there)."""
    lab = lab_clean
    node = lab.nodes[1]
    root = lab.dir / "root" / node
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("old-boot\n")
    hook = root / "etc/lab-boot"
    hook.write_text('#!/bin/sh\ncat "$LAB_NODE_ROOT/proc/sys/kernel/random/boot_id" '
                    '> "$LAB_NODE_ROOT/etc/booted"\n')
    hook.chmod(0o755)
    lab.reboot(node, delay=0)
    try:
        booted = (root / "etc/booted").read_text().strip()
        assert booted and booted != "old-boot"
        assert booted == (root / "proc/sys/kernel/random/boot_id").read_text().strip()
    finally:
        shutil.rmtree(lab.dir / "root")
