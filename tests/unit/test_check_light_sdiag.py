"""sdiag's RPC counts as the lab tests and the benchmark read them (issue 43), on real
output of the 22.05 lab (tests/data/real/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lab import LabError, parse_sdiag_rpcs

REAL = Path(__file__).resolve().parent.parent / "data" / "real" / "slurm"


def test_sdiag_counts_each_rpc_type_of_the_commands_that_ran() -> None:
    text = (REAL / "lab-sdiag-22.05.txt").read_text()
    assert parse_sdiag_rpcs(text) == {
        "REQUEST_PARTITION_INFO": 2, "REQUEST_NODE_INFO": 1, "REQUEST_STATS_INFO": 1,
        "REQUEST_UPDATE_NODE": 1, "REQUEST_NODE_INFO_SINGLE": 1}


def test_an_sdiag_without_its_rpc_section_is_an_error_not_zero_rpcs() -> None:
    with pytest.raises(LabError, match="Remote Procedure Call statistics"):
        parse_sdiag_rpcs("sdiag: error: Unable to contact slurm controller\n")
