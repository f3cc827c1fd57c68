"""SPEC E7 through the controller's cycle: the real engine, store and http provider
against the in-process simulated cluster (MemorySlurm), the machine ledger kept by the
daemon's observer (`ledger.LedgerObserver`) beside the cycle. The node check's part
(publishing the GPU serials in Extra) is what `extra.our_section` writes.
"""

from __future__ import annotations

from pathlib import Path

from slurm_heal import extra
from slurm_heal.controller import Controller, Notifier
from slurm_heal.ledger import LedgerFile, LedgerObserver
from slurm_heal.models import Phase
from slurm_heal.providers.http import HttpProvider
from slurm_heal.types import Alert, Evidence, Severity
from tests.fakes import Rig, controller_rig
from tests.integration.test_controller_cycle import NODES, POLICY

SERIALS = ["1654922001234", "1654922001235"]
MACHINE = extra.machine_identity(SERIALS)
assert MACHINE is not None


def publish(rig: Rig, node: str, fault: str | None = "gpu.xid.119") -> None:
    """The node check on the machine with SERIALS: an alert (or none) and its identity."""
    now = rig.clock()
    alerts = [Alert(node=node, fault=fault, severity=Severity.CRITICAL, summary=f"{fault}",
                    first_seen=now, last_seen=now, detector="kernel_log",
                    evidence=(Evidence(source="kmsg", text=f"NVRM: Xid: {fault}"),))] \
        if fault else []
    rig.cluster.set_extra(node, extra.KEY, extra.our_section(alerts, now, MACHINE))


def controller(rig: Rig, state_dir: Path) -> Controller:
    provider = HttpProvider(rig.sim.url, connect_timeout=2, read_timeout=5, attempts=3,
                            backoff=0.01)
    rig.providers.append(provider)
    return Controller(slurm=rig.cluster, provider=provider, store=rig.store,
                      policy=rig.policy, clock=rig.clock, notifier=Notifier(rig.notes),
                      observers=[LedgerObserver(state_dir)])


def test_the_ledger_follows_the_machine_through_a_reboot_gap_and_a_rename(
        tmp_path: Path) -> None:
    """SPEC E7: a reboot on gpu01 (its check publishes no identity after the boot: the
    ledger keeps gpu01 on its machine), then the machine comes back as gpu03 (a rename:
    the same GPU serials) with the fault again: one machine, two remediations, two names."""
    with controller_rig(tmp_path, NODES, POLICY) as rig:
        state_dir = tmp_path / "state"
        ctl = controller(rig, state_dir)
        publish(rig, "gpu01")
        rig.run(ctl, 20)
        assert [r.phase for r in rig.rems("gpu01")] == [Phase.DONE]
        assert rig.rems("gpu01")[0].host == MACHINE["host"]
        led = LedgerFile(state_dir).load()
        assert list(led.machines) != ["gpu01"] and "gpu01" not in led.machines
        # the boot's check wrote no identity: the node is still on the same machine
        assert led.names["gpu01"] == MACHINE["host"]
        rig.cluster.set_extra("gpu01", extra.KEY, extra.our_section([], rig.clock()))
        rig.clock.advance(hours=2)  # past the cooldown; a new sweep of every node
        publish(rig, "gpu03")
        rig.run(ctl, 20)
        assert [r.phase for r in rig.rems("gpu03")] == [Phase.DONE]
        led = LedgerFile(state_dir).load()
        m = led.machines[MACHINE["host"]]
        assert m.remediations == {"reboot": {"done": 2}}
        assert [n.name for n in m.names] == ["gpu01", "gpu03"]
        assert m.faults["gpu.xid.119"].count == 2
        assert m.kind == "gpu_serials" and m.gpu_serials == tuple(SERIALS)
        # gpu01's name now carries no identity: another machine, not this one's again
        rig.clock.advance(hours=2)
        rig.run(ctl, 2)
        led = LedgerFile(state_dir).load()
        assert [n.name for n in led.machines[MACHINE["host"]].names] == ["gpu01", "gpu03"]
        assert led.names["gpu03"] == MACHINE["host"] and led.names["gpu01"] == "gpu01"
