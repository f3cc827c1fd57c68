"""The lab itself behaves like the cluster the rest of the suite relies on."""

from __future__ import annotations

import pytest

from tests.lab import Lab

pytestmark = pytest.mark.slurm


def test_lab_nodes_are_idle_and_answer_on_loopback(lab: Lab) -> None:
    """The session lab is up: every node IDLE, slurmctld on its own port."""
    out = lab.run(["scontrol", "show", "config"]).stdout
    assert f"SlurmctldPort           = {lab.base_port}" in out
    assert all(lab.state(n) == {"IDLE"} for n in lab.nodes)


def test_lab_reboot_changes_boot_time_and_node_returns(lab: Lab) -> None:
    """`lab reboot NODE` (what the provider simulator calls) restarts slurmd with -b."""
    node = lab.nodes[-1]
    before = lab.show(node)["BootTime"]
    lab.reboot(node, delay=0.5)
    lab.wait_for(lambda: lab.show(node)["BootTime"] != before, timeout=30, what="new BootTime")
    lab.wait_for(lambda: lab.state(node) == {"IDLE"}, timeout=30, what=f"{node} IDLE")
