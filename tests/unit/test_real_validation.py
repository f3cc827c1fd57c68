"""Validation judges on real output others published (tests/data/real/validation,
origins in tests/data/real/SOURCES.md): nccl-tests under mpirun / a Kubeflow MPIJob and
from before 2021, ib_write_bw through a logging harness, an all-RoCE ibstat, findmnt
without an OPTIONS column (SPEC V2, V3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurm_heal.validation.suite import Step, StepResult, evaluate

REAL = Path(__file__).resolve().parent.parent / "data" / "real" / "validation"


def judged(kind: str, name: str, criteria: dict[str, Any], rc: int = 0) -> StepResult:
    step = Step(name="t", kind=kind, command=[kind], criteria=criteria)
    return evaluate(step, rc, (REAL / name).read_text())


def test_v3_nccl_tests_with_mpirun_rank_tags_are_read() -> None:
    """SPEC V3 on a real Kubeflow MPIJob launcher log (EKS, EFA, NCCL 2.12.7): every
    line carries ``[1,0]<stdout>:``; the table under it is read as without the tags,
    NCCL INFO lines in between skipped."""
    r = judged("nccl", "nccl-mpirun-tagged-eks-efa.txt", {"min_busbw_gbps": 3.0})
    assert r.outcome == "pass", r.reason
    assert r.measured["avg_busbw_gbps"] == 1.15327
    assert r.measured["largest_size_bytes"] == 1073741824
    assert r.measured["busbw_gbps"] == 3.11  # the worse of out-of-place and in-place
    slow = judged("nccl", "nccl-mpirun-tagged-eks-efa.txt", {"min_busbw_gbps": 10})
    assert slow.outcome == "fail" and "3.11 GB/s" in slow.reason


def test_v3_an_old_nccl_tests_table_without_root_and_with_error_is_read() -> None:
    """SPEC V3 on a real nccl-tests run from before 2021 (4x Tesla K80): no root column,
    a float max-error (2e-07) where #wrong is now, which is a tolerance, not wrongs."""
    r = judged("nccl", "nccl-old-error-column-k80.txt", {"min_busbw_gbps": 2.5})
    assert r.outcome == "pass", r.reason
    assert r.measured["wrong"] == 0 and r.measured["gpus"] == 4
    assert r.measured["model"] == "Tesla K80"
    assert r.measured["largest_size_bytes"] == 2147483648
    assert r.measured["busbw_gbps"] == 2.56
    assert r.measured["avg_busbw_gbps"] == 2.54225


def test_v3_ib_write_bw_through_a_logging_harness_is_read() -> None:
    """SPEC V3: a real perftest capture (linux-rdma/perftest #273) with a logging
    harness's prefix on each line (added by hand) reads like the plain one."""
    plain = judged("ib", "ib-write-bw-perftest-273.txt", {"min_bw_gbps": 0.4})
    tagged = judged("ib", "ib-write-bw-perftest-273-harness-prefixed.txt",
                    {"min_bw_gbps": 0.4})
    assert plain.outcome == "pass", plain.reason
    assert tagged.outcome == "pass", tagged.reason
    assert tagged.measured == plain.measured
    assert tagged.measured["bw_avg_gbps"] == 0.48 and tagged.measured["size_bytes"] == 8


def test_v3_an_all_roce_ibstat_says_its_ports_are_all_ethernet() -> None:
    """SPEC V3 on a real H20 server's ibstat (two ConnectX-6 Lx ports, RoCE): not "no
    port states" but what was listed and why it is not judged."""
    r = judged("ib", "ibstat-all-roce-h20.txt", {"min_active_ports": 2})
    assert r.outcome == "error"
    assert "2 port(s) listed, all with link layer Ethernet (RoCE)" in r.reason
    assert "no port states" not in r.reason
    roce = judged("ib", "ibstat-all-roce-h20.txt",
                  {"min_active_ports": 2, "link_layers": ["Ethernet"]})
    assert roce.outcome == "fail" and "mlx5_0/1 is DOWN" in roce.reason


def test_v3_findmnt_without_options_cannot_tell_rw_and_says_so() -> None:
    """SPEC V3 on real ``findmnt --df -J`` output (util-linux 2.38.1): no OPTIONS
    column, so "/ is rw" cannot be told: an error naming the missing column, not a
    failed mount. Whether it is mounted is still judged; with OPTIONS it passes."""
    r = judged("mounts", "findmnt-df-json-util-linux-2.38.json", {"mounts": ["/"], "rw": ["/"]})
    assert r.outcome == "error"
    assert "no OPTIONS column" in r.reason and "not rw" not in r.reason
    present = judged("mounts", "findmnt-df-json-util-linux-2.38.json",
                     {"mounts": ["/", "/dev"]})
    assert present.outcome == "pass", present.reason
    missing = judged("mounts", "findmnt-df-json-util-linux-2.38.json", {"mounts": ["/scratch"]})
    assert missing.outcome == "fail" and "/scratch is not mounted" in missing.reason
    full = judged("mounts", "findmnt-options-json-util-linux-2.38.json", {"mounts": ["/"], "rw": ["/", "/dev"]})
    assert full.outcome == "pass", full.reason


def test_v3_an_nccl_log_with_two_runs_judges_and_reports_each() -> None:
    """SPEC V3 (issue 35 item 5) on the two real runs of one 8x A100-SXM4-80GB host
    (``-g 8`` in one process, then ``mpirun -np 8``), logged one after the other: both
    runs are judged and reported (before: the first run's avg 66.2058 only); the
    verdict holds the worst run."""
    r = judged("nccl", "nccl-two-runs-a100x8.txt", {"min_avg_busbw_gbps": 60})
    assert r.outcome == "pass", r.reason
    runs = r.measured["runs"]
    assert [x["avg_busbw_gbps"] for x in runs] == [66.2058, 72.7724]
    assert [x["busbw_gbps"] for x in runs] == [231.59, 232.81]
    assert r.measured["avg_busbw_gbps"] == 66.2058 and r.measured["gpus"] == 8
    assert "2 runs" in r.reason and "72.7724" in r.reason
    slow = judged("nccl", "nccl-two-runs-a100x8.txt", {"min_avg_busbw_gbps": 70})
    assert slow.outcome == "fail"
    assert "run 1: avg busbw 66.2058 GB/s" in slow.reason and "run 2" not in slow.reason


def test_v3_a_perftest_table_with_markdown_bold_values_is_read() -> None:
    """SPEC V3: the real perftest #273 table with its values wrapped in markdown ``**``
    (as a table posted in a markdown thread; the bold put in by hand) reads like the
    plain one (before: "no ib_write_bw result table" although the header is there)."""
    plain = judged("ib", "ib-write-bw-perftest-273.txt", {"min_bw_gbps": 0.4})
    bold = judged("ib", "ib-write-bw-perftest-273-markdown-bold.txt", {"min_bw_gbps": 0.4})
    assert bold.outcome == "pass", bold.reason
    assert bold.measured == plain.measured
