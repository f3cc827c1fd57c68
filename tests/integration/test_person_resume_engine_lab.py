"""A person's resume of a node the node check drained, seen by the real controller and
engine before the check runs again (SPEC S8, issue 22 item 1), on the real Slurm lab
(cli backend, slurmctld 22.05 on 127.0.0.1): the remediation ends with the person, the
node is not drained again, nothing is sent to the provider, nothing new opens.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_heal import extra, reasons
from slurm_heal.config import policy_from_dict
from slurm_heal.controller import Controller
from slurm_heal.models import Phase
from slurm_heal.providers.http import HttpProvider
from slurm_heal.providers.simulator import SimulatorServer
from slurm_heal.slurm.cli import CliSlurm
from slurm_heal.store import Store
from slurm_heal.types import Alert, Evidence, Severity
from tests.lab import Lab

pytestmark = [pytest.mark.slurm]

XID = "gpu.xid.79"


@pytest.fixture
def sim() -> Iterator[SimulatorServer]:
    with SimulatorServer(port=0, duration=0.0) as server:
        yield server


def test_a_check_drained_node_a_person_resumed_is_not_drained_again_by_the_controller(
        lab_clean: Lab, tmp_path: Path, sim: SimulatorServer) -> None:
    node = lab_clean.nodes[0]
    slurm = CliSlurm(slurm_conf=str(lab_clean.conf))
    now = datetime.now(timezone.utc)
    alert = Alert(node=node, fault=XID, severity=Severity.CRITICAL, summary="off the bus",
                  detector="kernel_log", first_seen=now, last_seen=now,
                  evidence=(Evidence(source="kernel_log", text="NVRM: Xid 79",
                                     at=now.isoformat()),))
    # what the node check does on a latched Xid: publish it, drain with its own marker
    slurm.set_extra(node, extra.KEY, extra.our_section([alert], now))
    lab_clean.scontrol("update", f"nodename={node}", "state=drain",
                       "reason=" + reasons.format_marker(XID, by="check", text="Xid 79"))
    ctl = Controller(slurm=slurm, provider=HttpProvider(sim.url, attempts=1),
                     store=Store(tmp_path),
                     policy=policy_from_dict({"approvals": {"default": "manual"}}))
    ctl.cycle()
    (rem,) = Store(tmp_path).load().remediations
    assert rem.node == node and rem.phase is Phase.PROPOSED
    # a person resumes it; the check has not run since (the Xid is still in alerts)
    lab_clean.scontrol("update", f"nodename={node}", "state=resume")
    ctl.cycle()
    (rem,) = Store(tmp_path).load().remediations
    assert rem.phase is Phase.CANCELLED and rem.steps[-1].rule == "S8"
    assert "resumed by a person" in rem.steps[-1].why
    ctl.cycle()  # and the next cycle: nothing new from the same alert
    assert len(Store(tmp_path).load().remediations) == 1
    info = slurm.node(node)
    assert not info.drained, info.reason
    assert sim.stats()["executed"] == {}
