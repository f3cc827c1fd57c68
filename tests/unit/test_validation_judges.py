"""The validation judges (SPEC V2, V3): each tool's real output format, parsed from golden
files written from the tools' documented formats (tests/data/validation/README.md), held
against the step's criteria. Unreadable output is an error, never a pass; criteria are
checked when the policy is loaded."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_heal.errors import ConfigError
from slurm_heal.validation import judges
from slurm_heal.validation.suite import Step, StepResult, evaluate, validation_from
from tests.realdata import MISSING, REAL

DATA = Path(__file__).resolve().parents[1] / "data" / "validation"
IB_TREE = REAL / "sys-class-infiniband-h100"

H100_NCCL = {"min_busbw_gbps": 400}
IB_NDR = {"min_bw_gbps": 360}
FIO = {"min_read_mibps": 2000, "min_write_mibps": 1500, "min_read_iops": 1000}
MOUNTS = {"mounts": ["/scratch", "/home"], "rw": ["/scratch"], "ro": ["/apps"]}
DEFAULTS: dict[str, dict[str, Any]] = {
    "dcgm": {}, "amd": {}, "nccl": H100_NCCL, "ib": IB_NDR, "fio": FIO, "mounts": MOUNTS}


def step(kind: str, criteria: dict[str, Any] | None = None, name: str = "t") -> Step:
    return Step(name=name, kind=kind, command=[kind], criteria=DEFAULTS[kind]
                if criteria is None else criteria)


def judged(kind: str, golden: str, criteria: dict[str, Any] | None = None,
           rc: int = 0) -> StepResult:
    return evaluate(step(kind, criteria), rc, (DATA / golden).read_text())


# ------------------------------------------------------------------ dcgm

@pytest.mark.parametrize("golden", ["dcgm4-diag-r2-pass.json", "dcgm3-diag-r2-pass.json"])
def test_v3_dcgm_diag_json_of_dcgm3_and_dcgm4_with_every_test_passed_passes(
        golden: str) -> None:
    r = judged("dcgm", golden)
    assert r.outcome == "pass", r.reason
    assert r.measured["results"]["Fail"] == 0 and r.measured["results"]["Pass"] >= 4
    assert r.expected == {"fail_on": ["Fail"]}


def test_v2_dcgm4_memory_failure_is_a_clear_failure_naming_test_gpu_and_warning() -> None:
    r = judged("dcgm", "dcgm4-diag-r3-fail.json", rc=226)
    assert r.outcome == "fail"
    assert "memory Fail on GPU 1" in r.reason and "double bit ECC" in r.reason
    assert "targeted_stress" not in r.reason  # a Warn is not a failure by default
    [failure] = r.measured["failures"]
    assert (failure["test"], failure["entity"], failure["category"]) == (
        "memory", "GPU 1", "Hardware")
    assert failure["info"] == ["Allocated 79123 MB of memory"]


def test_v3_dcgm_warn_is_fail_also_fails_on_throttling_warnings() -> None:
    r = judged("dcgm", "dcgm4-diag-r3-fail.json", {"warn_is_fail": True})
    assert r.outcome == "fail"
    assert {f["test"] for f in r.measured["failures"]} == {"memory", "targeted_stress"}
    assert r.expected["fail_on"] == ["Fail", "Warn"]


def test_v2_dcgm3_pcie_failure_names_gpu_0_and_an_ignored_test_is_not_judged() -> None:
    r = judged("dcgm", "dcgm3-diag-r2-fail.json")
    assert r.outcome == "fail" and "PCIe Fail on GPU 0" in r.reason
    assert "link width 8x" in r.reason
    ignored = judged("dcgm", "dcgm3-diag-r2-fail.json", {"ignore_tests": ["PCIe"]})
    assert ignored.outcome == "pass", ignored.reason


def test_v2_a_required_dcgm_test_that_was_skipped_concludes_nothing() -> None:
    r = judged("dcgm", "dcgm4-diag-r2-pass.json", {"require_tests": ["memory", "diagnostic"]})
    assert r.outcome == "error" and "did not run: diagnostic" in r.reason
    assert judged("dcgm", "dcgm4-diag-r2-pass.json",
                  {"require_tests": ["memory"]}).outcome == "pass"


# ------------------------------------------------------------------ amd

def test_v3_amd_smi_ecc_counts_pass_under_the_limits_and_fail_on_uncorrectable() -> None:
    ok = judged("amd", "amd-smi-metric-ecc-pass.json")
    assert ok.outcome == "pass" and len(ok.measured["gpus"]) == 8
    assert ok.measured["gpus"]["2"]["correctable"] == 14
    bad = judged("amd", "amd-smi-metric-ecc-uncorrectable.json")
    assert bad.outcome == "fail" and bad.reason == "amd-smi: GPU 5 uncorrectable ECC 2 > 0"
    strict = judged("amd", "amd-smi-metric-ecc-pass.json", {"max_correctable": 10})
    assert strict.outcome == "fail" and "GPU 2 correctable ECC 14 > 10" in strict.reason


def test_v3_rvs_gst_result_lines_pass_and_a_gpu_below_its_target_fails() -> None:
    ok = judged("amd", "rvs-gst-mi300x-pass.txt")
    assert ok.outcome == "pass" and ok.measured == {"passed": 2, "failed": 0}
    bad = judged("amd", "rvs-gst-mi300x-fail.txt", rc=1)
    assert bad.outcome == "fail"
    assert bad.reason.startswith("rvs: gst GPU 50599: [action_1] gst 50599 Gflops 61207.440019 "
                                 "Couldnt meet target stress")
    # Only progress lines, no verdict yet (the run was cut): nothing concluded.
    cut = "\n".join((DATA / "rvs-gst-mi300x-pass.txt").read_text().splitlines()[:8])
    assert evaluate(step("amd"), 0, cut).outcome == "error"


# ------------------------------------------------------------------ nccl

def test_v3_all_reduce_perf_busbw_at_the_largest_size_against_the_expected_value() -> None:
    r = judged("nccl", "nccl-all-reduce-h100-pass.txt")
    assert r.outcome == "pass", r.reason
    assert r.measured["busbw_gbps"] == 480.0
    assert r.measured["largest_size_bytes"] == 8589934592
    assert r.measured["gpus"] == 8 and r.measured["model"] == "NVIDIA H100 80GB HBM3"
    assert r.measured["avg_busbw_gbps"] == pytest.approx(102.7832)
    assert r.expected == {"min_busbw_gbps": 400}


def test_v2_slow_all_reduce_is_a_clear_failure_with_measured_vs_expected() -> None:
    r = judged("nccl", "nccl-all-reduce-h100-slow.txt")
    assert r.outcome == "fail"
    assert r.reason == "all_reduce_perf: busbw 216 GB/s at 8589934592 B < 400 GB/s expected"


def test_v3_expected_busbw_by_gpu_model_picks_the_model_in_the_device_lines() -> None:
    by_model = {"expected_by_model": {"H200": 450.0, "H100": 500.0}}
    r = judged("nccl", "nccl-all-reduce-h100-pass.txt", by_model)
    assert r.outcome == "fail" and r.expected == {"model": "H100", "min_busbw_gbps": 500.0}
    unknown = judged("nccl", "nccl-all-reduce-h100-pass.txt",
                     {"expected_by_model": {"MI300X": 300.0}})
    assert unknown.outcome == "error" and "MI300X" in unknown.reason
    avg = judged("nccl", "nccl-all-reduce-h100-pass.txt", {"min_avg_busbw_gbps": 150})
    assert avg.outcome == "fail" and "avg busbw 102.783 GB/s < 150 GB/s" in avg.reason


def test_v2_wrong_results_fail_whatever_the_bandwidth_and_a_truncated_run_is_an_error() -> None:
    r = judged("nccl", "nccl-all-reduce-h100-wrong.txt", rc=1)
    assert r.outcome == "fail"
    assert r.reason == "all_reduce_perf: 6 wrong result(s), 3 out of bounds value(s)"
    cut = judged("nccl", "nccl-all-reduce-h100-truncated.txt", rc=137)
    assert cut.outcome == "error" and "Avg bus bandwidth" in cut.reason


# ------------------------------------------------------------------ ib

def test_v3_ib_write_bw_in_gbits_and_in_mb_per_second_against_min_bw() -> None:
    r = judged("ib", "ib-write-bw-gbits-pass.txt")
    assert r.outcome == "pass"
    assert (r.measured["bw_avg_gbps"], r.measured["size_bytes"]) == (391.97, 65536)
    mb = judged("ib", "ib-write-bw-mbytes-all-pass.txt")
    # 46700 MB/s of 2^20 bytes at the largest size (8 MiB) is 391.75 Gb/s.
    assert mb.outcome == "pass" and mb.measured["bw_avg_gbps"] == pytest.approx(391.754, 1e-3)
    assert mb.measured["size_bytes"] == 8388608 and mb.measured["unit"] == "MB/sec"
    slow = judged("ib", "ib-write-bw-gbits-slow.txt")
    assert slow.outcome == "fail"
    assert slow.reason == "ib_write_bw 176.34 Gb/s at 65536 B < 360 Gb/s expected"


def test_v3_ibstat_port_states_and_rates() -> None:
    ports = {"min_rate_gbps": 400, "min_active_ports": 2}
    ok = judged("ib", "ibstat-pass.txt", ports)
    assert ok.outcome == "pass" and ok.measured["active_ports"] == 2
    assert ok.measured["ports"]["mlx5_1/1"] == {"state": "ACTIVE", "rate_gbps": 400.0}
    down = judged("ib", "ibstat-port-down.txt", ports)
    assert down.outcome == "fail"
    assert "mlx5_1/1 is DOWN, not ACTIVE" in down.reason
    assert "1 port(s) ACTIVE < 2 expected" in down.reason
    # Bandwidth asked for but only port states in the output: nothing concluded.
    assert judged("ib", "ibstat-pass.txt").outcome == "error"


@pytest.mark.skipif(not IB_TREE.is_dir() and os.environ.get("CI") != "true",
                    reason=MISSING)
def test_v3_port_states_read_from_a_real_h100_sysfs_tree_with_grep() -> None:
    out = subprocess.run(["grep", "-r", "-H", ".", "--include=state", "--include=rate",
                          "--include=link_layer", str(IB_TREE)],
                         capture_output=True, text=True, check=True).stdout
    ok = evaluate(step("ib", {"min_rate_gbps": 400, "min_active_ports": 8}), 0, out)
    assert ok.outcome == "pass", ok.reason
    assert ok.measured["active_ports"] == 8  # the Ethernet bond is not judged
    assert "mlx5_bond_0/1" not in ok.measured["ports"]
    # An adapter the site lists that the machine no longer shows is a clear failure.
    missing = evaluate(step("ib", {"devices": ["mlx5_0", "mlx5_2"]}), 0, out)
    assert missing.outcome == "fail", missing.reason
    assert missing.reason == "no port of mlx5_2 in the listing"


# ------------------------------------------------------------------ fio

def test_v3_fio_json_bandwidth_and_iops_against_the_floors() -> None:
    r = judged("fio", "fio-scratch-pass.json")
    assert r.outcome == "pass"
    assert r.measured == {"read_mibps": 3200.0, "write_mibps": 2400.0, "read_iops": 3200.0,
                          "write_iops": 2400.0}
    slow = judged("fio", "fio-scratch-slow.json")
    assert slow.outcome == "fail"
    assert slow.reason == ("fio: read 400 MiB/s < 2000 MiB/s expected; write 200 MiB/s < "
                           "1500 MiB/s expected; read 400 IOPS < 1000 IOPS expected")


def test_v2_a_fio_job_error_is_a_clear_failure_even_after_fios_own_error_line() -> None:
    r = judged("fio", "fio-scratch-eio.txt", rc=1)
    assert r.outcome == "fail" and r.reason == "fio: job scratch-rw error 5"


# ------------------------------------------------------------------ mounts

def test_v3_findmnt_mount_points_mounted_and_rw_or_ro_as_configured() -> None:
    ok = judged("mounts", "findmnt-pass.json")
    assert ok.outcome == "pass", ok.reason
    assert ok.measured["mounts"]["/scratch"] == {"fstype": "xfs", "source": "/dev/md0",
                                                  "mode": "rw"}
    bad = judged("mounts", "findmnt-home-missing-scratch-ro.json")
    assert bad.outcome == "fail"
    assert "/home is not mounted" in bad.reason and "/scratch is not rw" in bad.reason


# ------------------------------------------------------------------ any judge

@pytest.mark.parametrize("kind", sorted(DEFAULTS))
def test_v2_empty_or_garbage_output_is_an_error_naming_what_is_missing(kind: str) -> None:
    for text in ("", "Segmentation fault\n", "{not json", "[]", '{"jobs": []}'):
        r = evaluate(step(kind), 0, text)
        assert r.outcome == "error", (kind, text, r)
        assert r.reason.startswith(f"{kind}: "), r.reason


def test_v2_a_tool_that_exits_non_zero_with_a_passing_output_concludes_nothing() -> None:
    r = judged("fio", "fio-scratch-pass.json", rc=3)
    assert r.outcome == "error" and r.reason.startswith("exit status 3")
    assert r.measured["read_mibps"] == 3200.0


GOLDEN = sorted(p.name for p in DATA.iterdir() if p.suffix in (".json", ".txt"))
KIND_OF = {"dcgm": "dcgm", "amd-smi": "amd", "rvs": "amd", "nccl": "nccl", "ib-write": "ib", "ibstat": "ib",
           "fio": "fio", "findmnt": "mounts"}


def _kind(name: str) -> str:
    return next(k for prefix, k in KIND_OF.items() if name.startswith(prefix))


def _parse(kind: str, text: str) -> str:
    """The judge itself (not `evaluate`, whose safety net turns any exception into an
    error): only `Unreadable` may come out of it."""
    try:
        return judges.JUDGES[kind](step(kind), text)[0]
    except judges.Unreadable:
        return "error"


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(sorted(DEFAULTS)), text=st.text(max_size=400))
def test_v2_no_judge_raises_on_arbitrary_text_it_is_an_error(kind: str, text: str) -> None:
    assert _parse(kind, text) == "error"


@settings(max_examples=150, deadline=None)
@given(golden=st.sampled_from(GOLDEN), cut=st.integers(min_value=0, max_value=20000),
       junk=st.text(max_size=60))
def test_v2_no_judge_raises_on_a_cut_or_spliced_real_output(golden: str, cut: int,
                                                            junk: str) -> None:
    text = (DATA / golden).read_text()
    cut = min(cut, len(text))
    spliced = text[:cut] + junk + text[cut:][: len(text) // 3]
    assert _parse(_kind(golden), spliced) in ("pass", "fail", "error")


def test_v2_dotted_non_numbers_in_a_table_are_unreadable_not_a_crash() -> None:
    table = "     8   2   float   sum   -1   1.2.3   .   4..5   0\n# Avg bus bandwidth : 1.2.3\n"
    assert _parse("nccl", table) == "error"
    ib = " #bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]\n 65536 5000 . 1.2.3 0.7\n"
    assert _parse("ib", ib) == "error"


def test_v2_nan_and_infinity_in_json_are_not_numbers() -> None:
    amd = '[{"gpu": 0, "ecc": {"total_uncorrectable_count": Infinity}}]'
    assert _parse("amd", amd) == "error"
    fio = ('{"jobs": [{"jobname": "j", "error": NaN, "read": {"bw": NaN, "iops": 5},'
           ' "write": {"bw": Infinity, "iops": 5}}]}')
    assert _parse("fio", fio) == "error"


def test_v2_json_nested_past_the_recursion_limit_is_unreadable_not_a_crash() -> None:
    assert _parse("fio", "[" * 100_000) == "error"
    assert _parse("dcgm", '{"a":' * 50_000) == "error"


def test_v2_dcgm_that_could_not_run_says_why() -> None:
    r = evaluate(step("dcgm"), 226, json.dumps(
        {"runtime_error": "Error: unable to establish a connection to the host engine"}))
    assert r.outcome == "error"
    assert r.reason == ("dcgm: dcgmi diag did not run: Error: unable to establish a "
                        "connection to the host engine (exit status 226)")


# ------------------------------------------------------------------ criteria at load time

@pytest.mark.parametrize(("kind", "criteria", "words"), [
    ("nccl", {"min_busbw": 300}, r"min_busbw: unknown criterion for a nccl step"),
    ("nccl", {"min_busbw_gbps": "fast"}, r"min_busbw_gbps: "),
    ("nccl", {}, r"a nccl step needs min_busbw_gbps"),
    ("ib", {"min_bw_gbps": -1}, r"min_bw_gbps: Input should be greater than 0"),
    ("dcgm", {"fail_on": ["Failed"]}, r"fail_on: 'Failed' is not a DCGM result"),
    ("dcgm", {"warn_is_fail": "yes"}, r"warn_is_fail: "),
    ("fio", {"min_read_mibps": 10, "min_write_mbps": 5}, r"min_write_mbps: unknown"),
    ("mounts", {}, r"mounts: is required"),
    ("command", {"min_bw_gbps": 1}, r"min_bw_gbps: unknown criterion for a command"),
])
def test_v3_a_bad_criterion_is_refused_when_the_policy_is_loaded_naming_the_key(
        kind: str, criteria: dict[str, Any], words: str) -> None:
    raw = {"suites": {"nvidia": [{"name": "x", "kind": kind, "command": ["tool"],
                                  "criteria": criteria}]}}
    with pytest.raises(ConfigError, match=r"validation\.suites\.nvidia\.0\.criteria: " + words):
        validation_from(raw, "policy.toml")


def _doc_toml() -> list[dict[str, Any]]:
    """Every ```toml block of docs/validation.md, parsed."""
    import re
    import sys
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    doc = (Path(__file__).resolve().parents[2] / "docs" / "validation.md").read_text()
    return [tomllib.loads(block) for block in re.findall(r"```toml\n(.*?)```", doc, re.S)]


def test_v3_the_documented_suites_and_ticket_sinks_load() -> None:
    from slurm_heal.validation.tickets import sinks_from
    blocks = _doc_toml()
    suites = [b["validation"]["suites"] for b in blocks if "suites" in b.get("validation", {})]
    assert suites, "docs/validation.md has no example suite"
    for raw in suites:
        loaded = validation_from({"suites": raw}, "docs/validation.md")
        assert {s.kind for s in loaded.suite_for("nvidia")} == {
            "dcgm", "nccl", "ib", "fio", "mounts"}
        assert [s.kind for s in loaded.suite_for("amd")] == ["amd", "amd"]
    sinks = [t for b in blocks for t in b.get("validation", {}).get("tickets", [])]
    assert {t["kind"] for t in sinks} == {"directory", "webhook", "github", "jira"}
    for item in sinks:
        item.pop("template", None)  # a path on the operator's machine
        sinks_from([item], "docs/validation.md")
