"""The post-repair gate (SPEC V4) through the real controller cycle without Slurm: the
real engine, store, http provider and provider simulator against the in-process
simulated cluster, on a clock the test moves. The gate's job itself needs Slurm: that
part is tests/integration/test_gate_lab.py."""

from __future__ import annotations

from pathlib import Path

from slurm_heal.models import Phase
from tests.fakes import controller_rig

NODES = [("gpu01", "a"), ("gpu02", "a")]
POLICY = {
    "approvals": {"default": "auto"},
    "safety": {"one_per_pool": False},
    "capacity": {"min_available_percent": 0},
    "gate": {"enabled": True, "suites": {"nvidia": [
        {"name": "diag", "command": ["dcgmi", "diag", "-r", "1"], "timeout": "5m"}]}},
}


def test_a_controller_without_the_validation_flow_never_resumes_a_gated_node(
        tmp_path: Path) -> None:
    """SPEC V4, O6: the gate cannot run (no validation flow beside this controller): each
    try fails with the reason, the gate is tried once more, then a person; the node stays
    cordoned, never resumed without its gate."""
    with controller_rig(tmp_path, NODES, POLICY) as rig:
        rig.alert("gpu01", "gpu.xid.119")
        rig.run(rig.controller(), 30)
        (rem,) = rig.rems("gpu01")
        gates = [a for a in rem.attempts if a.effect == "gate"]
        assert [a.outcome for a in gates] == ["failed", "failed"]
        assert all("runs no validation flow" in a.detail for a in gates)
        assert rem.phase is Phase.FAILED and rem.data.handed_to_person
        assert rig.cluster.node("gpu01").drained
        assert rig.cluster.history("gpu01") == ["reboot"]  # the action ran once
