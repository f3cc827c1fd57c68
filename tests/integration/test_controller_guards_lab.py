"""The controller's last looks at a node before it touches it, on the real Slurm lab
(cli backend, slurmctld 22.05 on 127.0.0.1): house style 2 and issue 8 (defects 2
and 11). The plans are given (a fixed `decide`), so each test is about what the
controller does with what Slurm says at the moment it acts.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from slurm_heal import reasons
from slurm_heal.config import Policy
from slurm_heal.controller import Controller, Executed
from slurm_heal.models import Attempt, Effect, Phase, Plan, Remediation, State
from slurm_heal.providers.http import HttpProvider
from slurm_heal.providers.simulator import SimulatorServer
from slurm_heal.slurm.cli import CliSlurm
from slurm_heal.store import Store
from slurm_heal.types import Action
from tests.lab import Lab

pytestmark = [pytest.mark.slurm]

LONG_AGO = datetime(2020, 1, 1, tzinfo=timezone.utc)  # before any lab boot


@pytest.fixture
def sim() -> Iterator[SimulatorServer]:
    with SimulatorServer(port=0, duration=0.0) as server:
        yield server


def controller(lab: Lab, tmp_path: Path, sim: SimulatorServer, plan: Plan) -> Controller:
    def decide(*_a: Any) -> Plan:
        return plan

    return Controller(slurm=CliSlurm(slurm_conf=str(lab.conf)),
                      provider=HttpProvider(sim.url, attempts=1), store=Store(tmp_path),
                      policy=Policy(), decide=decide)


def acted_long_ago(node: str) -> Remediation:
    """A remediation whose reboot ran before the node's current boot."""
    return Remediation(id="r-000000000001", node=node, fault="gpu.xid.48",
                       action=Action.REBOOT, phase=Phase.DONE, created=LONG_AGO,
                       updated=LONG_AGO, attempts=(Attempt(
                           key="r-000000000001:act:0", effect="act", action=Action.REBOOT,
                           started=LONG_AGO, outcome="ok", finished=LONG_AGO),))


def test_a_persons_reboot_like_drain_is_never_resumed(lab_clean: Lab, tmp_path: Path,
                                                      sim: SimulatorServer) -> None:
    """House style 2 / SPEC L5 (issue 8, defect 2): bob drains the node after our reboot
    with a reason that starts with "Reboot"; a resume planned for our marker leaves it."""
    node = lab_clean.nodes[0]
    bob = "Reboot pending: BIOS update (bob)"
    lab_clean.scontrol("update", f"nodename={node}", "state=drain", f"reason={bob}")
    with Store(tmp_path).transaction() as txn:
        txn.state = State(remediations=(acted_long_ago(node),))
    marker = reasons.format_marker("gpu.xid.48", "r-000000000001", "controller", "for reboot")
    plan = Plan(effects=(Effect(kind="resume", node=node, remediation="r-000000000001",
                                reason=marker),))
    report = controller(lab_clean, tmp_path, sim, plan).cycle()
    assert [e.outcome for e in report.executed] == ["failed"]
    info = CliSlurm(slurm_conf=str(lab_clean.conf)).node(node)
    assert info.drained and info.reason == bob


def _act_while_acting(lab: Lab, tmp_path: Path, sim: SimulatorServer, node: str,
                      rid: str) -> Executed:
    """Our remediation ``rid`` of ``node`` stored as acting, and a plan with its act: the
    one effect the controller's cycle ran."""
    rem = acted_long_ago(node).model_copy(update={"id": rid, "attempts": (),
                                                  "phase": Phase.ACTING})
    with Store(tmp_path).transaction() as txn:
        txn.state = State(remediations=(rem,))
    plan = Plan(effects=(Effect(kind="act", node=node, remediation=rid,
                                action=Action.REBOOT, key=f"{rid}:act:0"),))
    (ex,) = controller(lab, tmp_path, sim, plan).cycle().executed
    return ex


def test_an_act_on_a_node_someone_drained_since_the_snapshot_is_not_sent(
        lab_clean: Lab, tmp_path: Path, sim: SimulatorServer) -> None:
    """House style 2 (issue 8, defect 11): the controller's last look before the act
    finds a person's drain: the provider is never called; the reason stays."""
    node = lab_clean.nodes[1]
    reason = "NHC: check_hw_ib: No IB port is ACTIVE"
    lab_clean.scontrol("update", f"nodename={node}", "state=drain", f"reason={reason}")
    ex = _act_while_acting(lab_clean, tmp_path, sim, node, "r-000000000002")
    assert ex.outcome == "failed" and ex.detail.startswith("not sent: ")
    assert sim.stats()["executed"] == {}
    info = CliSlurm(slurm_conf=str(lab_clean.conf)).node(node)
    assert info.drained and info.reason == reason


def test_an_act_on_a_node_a_person_resumed_since_the_snapshot_is_not_sent(
        lab_clean: Lab, tmp_path: Path, sim: SimulatorServer) -> None:
    """SPEC S8 (issue 22, item 1): we cordoned the node, a person resumed it; the
    controller's last look before the reboot finds it in service: nothing is sent to the
    provider, the outcome says so (the engine hands the remediation to the person) and
    the node stays in service."""
    node = lab_clean.nodes[2]
    marker = reasons.format_marker("gpu.xid.79", "r-000000000003", "controller", "for reboot")
    lab_clean.scontrol("update", f"nodename={node}", "state=drain", f"reason={marker}")
    lab_clean.scontrol("update", f"nodename={node}", "state=resume")
    ex = _act_while_acting(lab_clean, tmp_path, sim, node, "r-000000000003")
    assert ex.outcome == "failed" and ex.detail.startswith("not sent: ")
    assert "resumed" in ex.detail
    assert sim.stats()["executed"] == {}
    (stored,) = Store(tmp_path).load().remediations
    (attempt,) = stored.attempts
    assert attempt.outcome == "failed" and attempt.detail.startswith("not sent: ")
    assert not CliSlurm(slurm_conf=str(lab_clean.conf)).node(node).drained
