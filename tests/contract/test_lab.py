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


def test_the_lab_runs_the_slurm_version_asked_for_and_env_puts_it_first(lab: Lab) -> None:
    """SPEC I6: `--slurm` picks the lab's version; `lab env` exports that version's
    commands first on PATH, so the Slurm commands (and slurm-heal) talk to it."""
    assert lab.run(["sinfo", "--version"]).stdout.split()[1].startswith(lab.slurm + ".")
    config = lab.run(["scontrol", "show", "config"]).stdout
    assert f"SLURM_VERSION           = {lab.slurm}." in config
    env = lab.run([*lab.lab_cmd, "env"]).stdout.splitlines()
    assert f"export SLURM_CONF={lab.conf}" in env
    path = [ln for ln in env if ln.startswith("export PATH=")]
    if lab.path_prefix:
        assert path and path[0].startswith("export PATH=" + lab.path_prefix)
    else:
        assert path == []  # the system's commands (22.05) are already on PATH


def test_a_reboot_slurm_orders_after_a_reconfigure_brings_the_node_back(lab_clean: Lab) -> None:
    """SPEC I6, L5: `scontrol reconfigure` (what a site runs after adding slurm-heal's
    slurm.conf lines), then a reboot Slurm itself orders on a drained node (its
    RebootProgram, the drain kept): the node comes back with a new boot time, drained.
    Slurm 25.11's slurmd re-executes itself on a reconfigure, and RebootProgram inherits
    the variables it hands itself (SLURMD_RECONF, ..._LISTEN_FD, SLURMD_BOOT_TIME): the
    lab's simulated reboot started the new slurmd with them, it died at start, and the
    node stayed REBOOT_ISSUED for ResumeTimeout, so the slurm provider's reboot stayed
    'running'."""
    lab = lab_clean
    node = lab.nodes[-1]

    def shown() -> dict[str, str]:
        # slurmctld re-executes itself too (25.11): a moment without answers is no error.
        line = lab.scontrol("show", "node", "-o", node, check=False).stdout
        return dict(w.split("=", 1) for w in line.split() if "=" in w)

    started = lab.show(node)["SlurmdStartTime"]
    lab.scontrol("reconfigure")
    if lab.slurm != "22.05":  # 22.05's slurmd rereads its config in place
        lab.wait_for(lambda: shown().get("SlurmdStartTime", started) != started,
                     timeout=60, what=f"{node}'s slurmd re-executed by the reconfigure")
    lab.wait_for(lambda: shown().get("State") == "IDLE", timeout=60, what=f"{node} IDLE")
    before = lab.show(node)["BootTime"]
    lab.scontrol("update", f"nodename={node}", "state=drain", "reason=heal: lab reboot")
    lab.scontrol("reboot", node)
    seen: list[dict[str, str]] = []

    def back() -> bool:
        seen.append(shown())
        # 22.05 may keep REBOOT_ISSUED beside the new boot (a reboot issued right after
        # the previous one; see the slurm provider): the node is back all the same.
        return (seen[-1].get("BootTime", before) != before
                and seen[-1].get("State") in ("IDLE+DRAIN", "IDLE+DRAIN+REBOOT_ISSUED"))

    try:
        # Past ResumeTimeout (60 s) too: a slurmd that never starts never comes back.
        lab.wait_for(back, timeout=120, what=f"{node} back from the reboot, drained")
    except TimeoutError as exc:
        last = {k: seen[-1].get(k) for k in ("State", "BootTime", "SlurmdStartTime", "Reason")}
        raise AssertionError(f"{exc}; last seen {last}") from None
    lab.scontrol("update", f"nodename={node}", "state=resume")
