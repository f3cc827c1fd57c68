"""SPEC S7 on the real Slurm lab: an InfiniBand leaf switch (or an NVLink block) fails.

A lab of its own with ``TopologyPlugin=topology/tree`` and a topology.conf of two leaf
switches (leaf1: gpu[01-04], leaf2: gpu[05-06]) under a spine; on Slurm 23.11+ also one
with ``topology/block`` and two blocks of four (nvl1: gpu[01-04], nvl2: gpu[05-08]). Each node of leaf1 is a
replayed node (SLURM_HEAL_ROOT) whose /sys/class/infiniband is the real capture of an H100
node (../shared/fixtures/real, tests/realdata.py); on three of them every port is taken
down. The real node check publishes ib.link_down into their Extra (and drains them with its
own marker); the controller, on the cli backend, reads the switches from `scontrol show
topology` and opens one incident on leaf1: nothing is cordoned, nothing is rebooted, one
notice goes to a person. A malformed topology.conf never stops a cycle.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_heal.config import policy_from_dict
from slurm_heal.controller import Controller
from slurm_heal.incidentstore import INCIDENTS_KEY, load
from slurm_heal.models import DISRUPTIVE_PHASES, Effect, Phase, mark
from slurm_heal.providers.http import HttpProvider
from slurm_heal.providers.simulator import LabHook, SimulatorServer
from slurm_heal.slurm.cli import CliSlurm
from slurm_heal.store import Store
from slurm_heal.types import Action
from tests.lab import Lab
from tests.realdata import MISSING, REAL

pytestmark = pytest.mark.slurm

IB = REAL / "sys-class-infiniband-h100"
TOPOLOGY = ("# leaf1 and leaf2 under one spine (written for this test)\n"
            "SwitchName=leaf1 Nodes=gpu[01-04]\nSwitchName=leaf2 Nodes=gpu[05-06]\n"
            "SwitchName=spine Switches=leaf[1-2]\n")
POLICY = {"approvals": {"default": "auto"},  # nothing waits for a person but the incident
          "safety": {"concurrency": 10, "one_per_pool": False},
          "capacity": {"min_available_percent": 0}}


# topology.conf of NVLink-style blocks (topology/block, Slurm 23.11+; written for this test)
BLOCKS = ("BlockName=nvl1 Nodes=gpu[01-04]\nBlockName=nvl2 Nodes=gpu[05-08]\n"
          "BlockSizes=4\n")
LABS = {"tree": (6, TOPOLOGY, "switch:leaf1"), "block": (8, BLOCKS, "block:nvl1")}


@pytest.fixture(scope="module", params=sorted(LABS))
def topo_lab(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, str]]:
    """A lab of its own with topology/tree (switches) or topology/block (blocks)."""
    kind = str(request.param)
    version = str(request.config.getoption("--slurm"))
    if kind == "block" and version == "22.05":
        pytest.skip("topology/block is Slurm 23.11+: run with --slurm 25.11 or 26.05")
    nodes, text, component = LABS[kind]
    directory = tmp_path_factory.mktemp(f"{kind}-lab")
    (directory / "etc").mkdir()
    (directory / "etc" / "topology.conf").write_text(text)
    lab = Lab(directory, nodes=nodes, slurm=version,
              conf_lines=[f"TopologyPlugin=topology/{kind}"])
    try:
        lab.start()
        yield lab, component
    finally:
        lab.stop()


def replayed_node(base: Path, down: bool) -> Path:
    """A node root: the real IB tree (every port down when ``down``), quiet kernel log."""
    root = base / "root"
    (root / "dev").mkdir(parents=True)
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("replay-boot\n")
    (root / "proc/uptime").write_text("5000.0 100.0\n")
    (root / "proc/mounts").write_text("/dev/sda1 / ext4 rw,relatime 0 0\n")
    (root / "dev/kmsg").write_text("6,1,1000,-;EXT4-fs (nvme1n1): mounted filesystem.\n")
    dst = root / "sys/class/infiniband"
    shutil.copytree(IB, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    if down:  # the leaf switch is gone: every port of the node loses its link
        for state in dst.glob("*/ports/*/state"):
            if (state.parent / "link_layer").read_text().strip() == "InfiniBand":
                state.write_text("1: DOWN\n")
                (state.parent / "phys_state").write_text("3: Disabled\n")
    conf = root / "etc/slurm-heal/check.toml"
    conf.parent.mkdir(parents=True)
    conf.write_text('[services]\nenabled = false\n[network]\nenabled = false\n'
                    '[disk]\npaths = ["/"]\nmin_free_percent = 0.001\n'
                    '[infiniband]\nexpected_rate = 400\nports = 8\n')
    return root


def node_check(lab: Lab, root: Path, node: str) -> subprocess.CompletedProcess[str]:
    env = dict(lab.env, SLURM_HEAL_ROOT=str(root), PATH=lab.path_prefix + "/usr/bin:/bin")
    return subprocess.run([sys.executable, "-m", "slurm_heal.checks", "--node", node],
                          env=env, capture_output=True, text=True, timeout=120)


class Notices:
    def __init__(self) -> None:
        self.sent: list[Effect] = []

    def __call__(self, effect: Effect, now: datetime) -> None:
        self.sent.append(effect)


@pytest.mark.skipif(not IB.is_dir() and os.environ.get("CI") != "true", reason=MISSING)
def test_ib_ports_down_on_three_of_four_nodes_under_one_switch_is_one_incident(
        topo_lab: tuple[Lab, str], tmp_path: Path) -> None:
    lab, component = topo_lab
    slurm = CliSlurm(slurm_conf=str(lab.conf))
    assert component.split(":")[1] in slurm.show_topology()
    for i, node in enumerate(lab.nodes[:4]):
        root = replayed_node(tmp_path / node, down=i < 3)
        out = node_check(lab, root, node)
        assert out.returncode == (1 if i < 3 else 0), out.stdout + out.stderr
    faults = {n: [a["fault"] for a in (slurm.node(n).extra or {})["slurm_heal"]["alerts"]]
              for n in lab.nodes[:4]}
    assert faults == {"gpu01": ["ib.link_down"], "gpu02": ["ib.link_down"],
                      "gpu03": ["ib.link_down"], "gpu04": []}

    notices = Notices()
    clock = [datetime.now(timezone.utc)]
    with SimulatorServer(port=0, duration=0.0) as sim:
        ctl = Controller(slurm=slurm, provider=HttpProvider(sim.url, attempts=1),
                         store=Store(tmp_path / "state"), policy=policy_from_dict(POLICY),
                         clock=lambda: clock[0], notifier=notices)
        first = ctl.cycle()
        clock[0] += timedelta(hours=1)  # long past the settle wait: still held
        second = ctl.cycle()
        operations = sim.operations()
    state = Store(tmp_path / "state").load()
    if component.startswith("block:"):
        # Issue 37 (SPEC S7 as amended): an NVLink block does not take IB links down:
        # no incident on it, and no settle wait (no domain that can cause it is known);
        # the nodes' own remediations go on, one at a time under the block.
        assert not load(state.data.get(INCIDENTS_KEY))
        assert not any(r.data.blocked == mark("S7", "settle") for r in state.remediations)
        cordons = [e.effect.node for e in (*first.executed, *second.executed)
                   if e.effect.kind == "cordon"]
        assert cordons and set(cordons) <= {"gpu01", "gpu02", "gpu03"}
        return
    [inc] = load(state.data.get(INCIDENTS_KEY)).values()
    assert (inc.component, inc.nodes, inc.size, inc.source, inc.domain) == (
        component, ("gpu01", "gpu02", "gpu03"), 4, "scontrol show topology", "leaf")
    assert all(a.evidence for a in inc.alerts)  # each node's evidence, as the check wrote it
    executed = [e.effect.kind for e in (*first.executed, *second.executed)]
    assert executed == ["notify"], executed  # one notice; no cordon, no reboot
    assert len(notices.sent) == 1 and inc.id in notices.sent[0].why
    assert not any(a.effect == "act" for r in state.remediations for a in r.attempts)
    assert {r.node for r in state.remediations} == {"gpu01", "gpu02", "gpu03"}
    assert all(r.data.blocked == mark("S7", inc.id) for r in state.remediations)
    assert operations == []  # the provider was never asked to do anything
    for node in lab.nodes[:3]:  # drained by the node check's own marker only
        assert slurm.node(node).reason.startswith("heal: ib.link_down by=check")
    assert "DRAIN" not in slurm.node("gpu04").states


    # A person closes it from the command line (by the component): the held remediations
    # go on by their own rules, one at a time under the switch (topology.blast_radius).
    close = subprocess.run(
        [str(Path(sys.executable).parent / "slurm-heal"), "incident", "close", component,
         "--reason",
         "switch fine, node faults", "--state-dir", str(tmp_path / "state"), "--force",
         "--by", "alice"], env=dict(lab.env), capture_output=True, text=True, timeout=60)
    assert close.returncode == 0, close.stdout + close.stderr
    with SimulatorServer(port=0, duration=0.0) as sim:
        ctl.provider = HttpProvider(sim.url, attempts=1)
        clock[0] += timedelta(minutes=1)
        third = ctl.cycle()
    state = Store(tmp_path / "state").load()
    [closed] = load(state.data.get(INCIDENTS_KEY)).values()
    assert (closed.state, closed.resolved_by) == ("resolved", "alice")
    cordoned = [e.effect.node for e in third.executed if e.effect.kind == "cordon"]
    assert len(cordoned) == 1 and cordoned[0] in lab.nodes[:3]
    rem = next(r for r in state.remediations if r.node == cordoned[0])
    assert f"rem={rem.id}" in slurm.node(cordoned[0]).reason  # the controller's marker now


def test_a_malformed_topology_file_leaves_the_daemon_working(topo_lab: tuple[Lab, str],
                                                              tmp_path: Path) -> None:
    tree_lab = topo_lab[0]
    bad = tmp_path / "topology.conf"
    bad.write_text("SwitchName=leaf1 Nodes=gpu[01-04]\nSwitchName=leaf2 Nodes gpu05\n")
    slurm = CliSlurm(slurm_conf=str(tree_lab.conf))
    policy = policy_from_dict({**POLICY, "topology": {"source": "file", "file": str(bad)}})
    with SimulatorServer(port=0, duration=0.0) as sim:
        ctl = Controller(slurm=slurm, provider=HttpProvider(sim.url, attempts=1),
                         store=Store(tmp_path / "state"), policy=policy)
        ctl.cycle()
        ctl.cycle()
    decisions = json.dumps(Store(tmp_path / "state").load().data.get("decisions") or [])
    assert decisions.count("line 2: 'Nodes' is not key=value") == 1  # recorded once
    topo = ctl.topology.read(policy.topology, datetime.now(timezone.utc))
    assert topo is not None and not topo and "line 2" in topo.problem


XID119 = ("NVRM: Xid (PCI:0000:3b:00): 119, pid=1234, name=python3, Timeout after 6s of "
          "waiting for RPC response from GPU1 GSP!")


@pytest.mark.skipif(not IB.is_dir() and os.environ.get("CI") != "true", reason=MISSING)
def test_two_unrelated_faults_under_one_switch_are_two_remediations_one_at_a_time(
        topo_lab: tuple[Lab, str], tmp_path: Path) -> None:
    """SPEC S7 (issue 27's second scenario): an Xid 119 on gpu01 and every IB port down
    on gpu02, both under one switch (block): unrelated faults, so no incident; two
    remediations, each its own reboot (the provider simulator really reboots the lab
    node), never both disruptive at once under the component (topology.blast_radius 1):
    the second is held by S7 naming the first, and starts once the first is done."""
    lab, component = topo_lab
    lab.reset()  # the other tests of this lab leave drained nodes and Extra behind
    slurm = CliSlurm(slurm_conf=str(lab.conf))
    xid_root = replayed_node(tmp_path / "gpu01", down=False)
    with (xid_root / "dev/kmsg").open("a") as fh:
        fh.write(f"3,2,2000,-;{XID119}\n")
    roots = {"gpu01": xid_root, "gpu02": replayed_node(tmp_path / "gpu02", down=True)}
    for node, root in roots.items():
        out = node_check(lab, root, node)
        assert out.returncode == 1, out.stdout + out.stderr
    faults = {n: [a["fault"] for a in (slurm.node(n).extra or {})["slurm_heal"]["alerts"]]
              for n in roots}
    assert faults == {"gpu01": ["gpu.xid.119"], "gpu02": ["ib.link_down"]}
    boots = {n: lab.show(n).get("BootTime", "") for n in roots}

    policy = policy_from_dict({**POLICY, "incidents": {"settle": "1s"}})
    hook = LabHook(lab.dir, slurm=slurm)
    held: dict[str, set[str]] = {}  # node -> the S7 marks it was held under
    disruptive: list[set[str]] = []  # per cycle: the nodes in a disruptive phase
    rechecked: set[str] = set()
    with SimulatorServer(port=0, on_action=hook, duration=0.5) as sim:
        ctl = Controller(slurm=slurm, provider=HttpProvider(sim.url, attempts=1),
                         store=Store(tmp_path / "state"), policy=policy)

        def cycle() -> object:
            ctl.cycle()
            state = Store(tmp_path / "state").load()
            disruptive.append({r.node for r in state.remediations
                               if r.phase in DISRUPTIVE_PHASES})
            for r in state.remediations:
                if r.data.blocked is not None and r.data.blocked.rule == "S7" \
                        and r.data.blocked.subject:
                    held.setdefault(r.node, set()).add(str(r.data.blocked))
            for node in roots:  # HealthCheckProgram at boot, on a healthy machine
                boot = lab.show(node).get("BootTime", "")
                if node not in rechecked and boot not in ("", "None", boots[node]):
                    rechecked.add(node)
                    node_check(lab, replayed_node(tmp_path / node / "after", False), node)
            return len(state.remediations) == 2 and all(
                r.phase is Phase.DONE for r in state.remediations)
        lab.wait_for(cycle, timeout=240, interval=1.0, what="both remediations done")
        operations = sim.operations()
    state = Store(tmp_path / "state").load()
    assert not load(state.data.get(INCIDENTS_KEY)), "unrelated faults opened an incident"
    rems = sorted(state.remediations, key=lambda r: r.phase_times["cordoned"])
    assert [r.node for r in rems] in (["gpu01", "gpu02"], ["gpu02", "gpu01"])
    assert {r.fault for r in rems} == {"gpu.xid.119", "ib.link_down"}
    assert all(r.action is Action.REBOOT for r in rems), [r.action for r in rems]
    assert len(operations) == 2  # two reboots, one per node
    assert max(len(d & set(roots)) for d in disruptive) == 1, disruptive
    first, second = rems
    assert second.phase_times["cordoned"] >= first.phase_times["done"]
    blast = {m for m in held.get(second.node, set()) if m != "S7:settle"}
    assert blast and all(m.startswith(("S7:switch:", "S7:block:")) for m in blast), held
    assert any("topology.blast_radius" in s.why and first.id in s.why
               for s in second.steps), second.steps
    for node in roots:
        assert "DRAIN" not in slurm.node(node).states


NV = Path(__file__).resolve().parents[1] / "data" / "nvidia"
NVL = "6a130f54-faaa-4b8f-847f-be44ab70f917/32766"  # the domain the XML files name


def fabric_node(base: Path, failed: bool) -> Path:
    """A replayed node whose `nvidia-smi` prints 8 GPUs registered with one NVLink domain
    (`failed`: every registration failed, Insufficient Resources), IB healthy."""
    root = replayed_node(base, down=False)
    bin_dir = base / "bin"
    bin_dir.mkdir()
    xml = NV / ("smi-q-x-fabric-failed.xml" if failed else "smi-q-x-fabric-ok.xml")
    stub = bin_dir / "nvidia-smi"
    stub.write_text(f'#!/bin/sh\ncase "$1" in\n  -q) /bin/cat "{xml}";;\n'
                    f'  nvlink) /bin/cat "{NV / "nvlink-s-healthy-8.txt"}";;\nesac\n')
    stub.chmod(0o755)
    return root


@pytest.mark.skipif(not IB.is_dir() and os.environ.get("CI") != "true", reason=MISSING)
def test_an_nvlink_domain_losing_its_fabric_is_one_incident_on_it_and_no_reboot(
        topo_lab: tuple[Lab, str], tmp_path: Path) -> None:
    """SPEC S7 as amended, D12 (issue 37): the real node check reads each GPU's fabric
    state (nvidia-smi -q -x) and publishes gpu.fabric.failed and the node's NVLink domain
    (ClusterUUID/CliqueId). Three of the four nodes lose their fabric: one incident on
    the NVLink domain — Slurm's topology/block block where there is one, else the domain
    the node check published (never the tree's leaf switch, which cannot cause it) —
    one notice, no cordon, no reboot."""
    lab, component = topo_lab
    lab.reset()
    slurm = CliSlurm(slurm_conf=str(lab.conf))
    for i, node in enumerate(lab.nodes[:4]):
        root = fabric_node(tmp_path / node, failed=i < 3)
        env = dict(lab.env, SLURM_HEAL_ROOT=str(root),
                   PATH=f"{tmp_path / node / 'bin'}:{lab.path_prefix}/usr/bin:/bin")
        out = subprocess.run([sys.executable, "-m", "slurm_heal.checks", "--node", node],
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == (1 if i < 3 else 0), out.stdout + out.stderr
        ours = (slurm.node(node).extra or {})["slurm_heal"]
        assert ours["domains"]["nvlink"] == NVL
    faults = {n: sorted({a["fault"] for a in (slurm.node(n).extra or {})["slurm_heal"]["alerts"]})
              for n in lab.nodes[:4]}
    assert faults == {"gpu01": ["gpu.fabric.failed"], "gpu02": ["gpu.fabric.failed"],
                      "gpu03": ["gpu.fabric.failed"], "gpu04": []}

    notices = Notices()
    clock = [datetime.now(timezone.utc)]
    with SimulatorServer(port=0, duration=0.0) as sim:
        ctl = Controller(slurm=slurm, provider=HttpProvider(sim.url, attempts=1),
                         store=Store(tmp_path / "state"), policy=policy_from_dict(POLICY),
                         clock=lambda: clock[0], notifier=notices)
        first = ctl.cycle()
        clock[0] += timedelta(hours=1)
        second = ctl.cycle()
        operations = sim.operations()
    state = Store(tmp_path / "state").load()
    [inc] = load(state.data.get(INCIDENTS_KEY)).values()
    where = component if component.startswith("block:") else f"nvlink:{NVL}"
    assert (inc.component, inc.domain, inc.nodes) == (
        where, "nvlink", ("gpu01", "gpu02", "gpu03")), inc
    assert "an NVLink domain can cause nvlink" in inc.why
    executed = [e.effect.kind for e in (*first.executed, *second.executed)]
    assert executed == ["notify"], executed
    assert len(notices.sent) == 1 and "gpu04" in notices.sent[0].why  # the domain's nodes
    assert operations == []
    assert all(r.data.blocked == mark("S7", inc.id) for r in state.remediations)
