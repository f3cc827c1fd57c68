"""A whole suite through the runner (SPEC V1–V3), the tools being small stand-ins on PATH
that print a golden file of the real tool's format and exit with the tool's status: the
runner fills the placeholders, keeps each output, and the judges conclude pass or a
clear failure with the reasons a ticket carries."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from slurm_heal.validation import runner

DATA = Path(__file__).resolve().parents[1] / "data" / "validation"

SUITE = [
    {"name": "gpu", "kind": "dcgm", "command": ["dcgmi", "diag", "-r", "{level}", "-j"],
     "timeout": "2h"},
    {"name": "nccl", "kind": "nccl", "timeout": "20m",
     "command": ["all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "{gpus}"],
     "criteria": {"expected_by_model": {"H100": 400.0, "H200": 430.0}}},
    {"name": "ib", "kind": "ib", "peer": True, "timeout": "5m",
     "command": ["ib_write_bw", "--report_gbits", "-d", "mlx5_0", "{peer}"],
     "criteria": {"min_bw_gbps": 360}},
    {"name": "scratch", "kind": "fio", "timeout": "10m",
     "command": ["fio", "--output-format=json", "--directory={scratch}", "scratch.fio"],
     "criteria": {"min_read_mibps": 2000, "min_write_mibps": 1500}},
]


def _tools(bin_dir: Path, outputs: dict[str, tuple[str, int]]) -> None:
    """One script per tool: records its argv, prints the golden file, exits with rc."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool, (golden, rc) in outputs.items():
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\necho "$*" > "{bin_dir}/{tool}.argv"\n'
                          f'cat "{DATA / golden}"\nexit {rc}\n')
        script.chmod(script.stat().st_mode | stat.S_IEXEC)


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
         outputs: dict[str, tuple[str, int]]) -> tuple[int, dict[str, Any], Path]:
    bin_dir = tmp_path / "bin"
    _tools(bin_dir, outputs)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"node": "gpu-017", "peer": "gpu-018", "vendor": "nvidia",
                                "steps": SUITE, "values": {"level": "3", "gpus": "8",
                                                           "scratch": str(tmp_path)}}))
    out = tmp_path / "out"
    rc = runner.main(["--spec", str(spec), "--out", str(out)])
    return rc, json.loads((out / "results.json").read_text()), out


def test_v1_v3_a_healthy_h100_node_passes_the_nvidia_suite_end_to_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rc, result, out = _run(tmp_path, monkeypatch, {
        "dcgmi": ("dcgm4-diag-r2-pass.json", 0),
        "all_reduce_perf": ("nccl-all-reduce-h100-pass.txt", 0),
        "ib_write_bw": ("ib-write-bw-gbits-pass.txt", 0),
        "fio": ("fio-scratch-pass.json", 0),
    })
    assert rc == 0 and result["outcome"] == "pass"
    steps = {s["name"]: s for s in result["steps"]}
    assert {n: s["outcome"] for n, s in steps.items()} == {
        "gpu": "pass", "nccl": "pass", "ib": "pass", "scratch": "pass"}
    assert steps["nccl"]["expected"] == {"model": "H100", "min_busbw_gbps": 400.0}
    assert steps["ib"]["measured"]["bw_avg_gbps"] == 391.97
    # The placeholders were filled in and every output is kept for the ticket.
    assert (tmp_path / "bin" / "dcgmi.argv").read_text().split() == ["diag", "-r", "3", "-j"]
    assert (tmp_path / "bin" / "ib_write_bw.argv").read_text().split()[-1] == "gpu-018"
    assert (out / "nccl.log").read_text() == (DATA / "nccl-all-reduce-h100-pass.txt").read_text()


def test_v2_a_node_with_a_bad_gpu_and_slow_scratch_is_a_clear_failure_with_reasons(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rc, result, out = _run(tmp_path, monkeypatch, {
        "dcgmi": ("dcgm4-diag-r3-fail.json", 226),
        "all_reduce_perf": ("nccl-all-reduce-h100-slow.txt", 0),
        "ib_write_bw": ("ib-write-bw-gbits-pass.txt", 0),
        "fio": ("fio-scratch-eio.txt", 1),
    })
    assert rc == 1 and result["outcome"] == "fail"
    steps = {s["name"]: s for s in result["steps"]}
    assert {n: s["outcome"] for n, s in steps.items()} == {
        "gpu": "fail", "nccl": "fail", "ib": "pass", "scratch": "fail"}
    assert "memory Fail on GPU 1" in steps["gpu"]["reason"]
    assert steps["gpu"]["rc"] == 226 and steps["gpu"]["log"] == "gpu.log"
    assert "< 400 GB/s expected" in steps["nccl"]["reason"]
    assert steps["scratch"]["reason"] == "fio: job scratch-rw error 5"
    assert (out / "scratch.log").read_text().startswith("fio: io_u error")


def test_v2_a_suite_whose_tool_prints_nothing_readable_is_an_error_not_a_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rc, result, _ = _run(tmp_path, monkeypatch, {
        "dcgmi": ("dcgm4-diag-r2-pass.json", 0),
        "all_reduce_perf": ("nccl-all-reduce-h100-truncated.txt", 137),
        "ib_write_bw": ("ib-write-bw-gbits-pass.txt", 0),
        "fio": ("fio-scratch-pass.json", 0),
    })
    assert rc == 2 and result["outcome"] == "error"
    nccl = result["steps"][1]
    assert nccl["outcome"] == "error" and "Avg bus bandwidth" in nccl["reason"]
