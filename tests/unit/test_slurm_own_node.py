"""The node check's one read of its own record (issue 43): `sinfo -N -h -n NAME -O ...`
(slurmctld's REQUEST_NODE_INFO_SINGLE, where `scontrol show node NAME` has it pack the
whole node table), read from real output of the 22.05 lab (tests/data/real/SOURCES.md)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_heal import reasons
from slurm_heal.errors import SlurmError
from slurm_heal.slurm import text

REAL = Path(__file__).resolve().parent.parent / "data" / "real" / "slurm"
SEP = "\x1fSH0123456789abcdef"  # the separator the capture ran with


def read(name: str) -> str:
    return (REAL / name).read_text()


def test_a_drained_node_with_extra_reads_with_its_reason_and_extra_whole() -> None:
    node = text.one_node(read("lab-sinfo-N-O-drained-22.05.txt"), SEP, "gpu02")
    assert node is not None and node.name == "gpu02"
    assert node.drained and not node.down and node.states == {"IDLE", "DRAIN"}
    assert node.reason == "heal: gpu.xid.79 by=check GPU has fallen off the bus"
    assert reasons.owner(node.reason) == "ours" and node.reason_user == "root"
    assert node.reason_time == datetime.fromtimestamp(1796159400, timezone.utc)
    assert node.extra == {"slurm_heal": {"v": 1, "alerts": [
        {"summary": "GPU has fallen off the bus"}]}, "site": "rack 4"}
    assert node.partitions == ("gpu",) and node.instance_id == ""


def test_an_idle_node_has_no_reason_and_no_extra() -> None:
    node = text.one_node(read("lab-sinfo-N-O-idle-22.05.txt"), SEP, "gpu01")
    assert node is not None and node.states == {"IDLE"}
    assert node.reason == "" and node.reason_user == "" and node.extra_raw == ""


def test_no_line_is_no_node_and_another_nodes_line_is_an_error() -> None:
    assert text.one_node("", SEP, "gpu01") is None
    with pytest.raises(SlurmError, match="printed another node"):
        text.one_node(read("lab-sinfo-N-O-idle-22.05.txt"), SEP, "gpu09")
