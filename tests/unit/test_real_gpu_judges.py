"""The dcgm and amd judges: real ``dcgmi diag -j`` output (tests/data/real/dcgm, origins in
tests/data/real/SOURCES.md): DCGM 3.1.0 on eight GPUs (the sample DCGM's own tests call
"real output") and DCGM 3.3.1 on a T400 where every test was skipped; amd-smi's
ROCm 6.4 wrapper (SPEC V2, V3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurm_heal.validation.suite import Step, StepResult, evaluate

REAL = Path(__file__).resolve().parent.parent / "data" / "real" / "dcgm"


def judged(name: str, criteria: dict[str, Any] | None = None) -> StepResult:
    step = Step(name="gpu", kind="dcgm", command=["dcgmi", "diag", "-r", "2", "-j"],
                criteria=criteria or {})
    return evaluate(step, 0, (REAL / name).read_text())


def test_v3_dcgm_3_1_output_with_a_warning_line_and_null_tests_is_read() -> None:
    """SPEC V3 on real DCGM 3.1.0 output: a warning line before the JSON, ``null``
    between the tests, upper-case ``PASS``, ``gpu_ids`` as a list string or a number:
    ten tests, 17 results, all passed."""
    r = judged("dcgm-3.1.0-diag-j-8gpu-nvvs-tests.txt")
    assert r.outcome == "pass", r.reason
    assert r.reason == "17 result(s) passed"
    assert r.measured["results"] == {"Pass": 17, "Fail": 0, "Warn": 0, "Skip": 0}
    assert len(r.measured["tests"]) == 10 and r.measured["tests"]["software"] == "Pass"
    need = judged("dcgm-3.1.0-diag-j-8gpu-nvvs-tests.txt", {"require_tests": ["memory"]})
    assert need.outcome == "error" and "memory" in need.reason


def test_v3_a_diag_where_every_test_was_skipped_is_no_pass() -> None:
    """SPEC V2, V3 on real DCGM 3.3.1 output (NVIDIA/DCGM#139, a T400): every result is
    Skip. Before: "pass, 0 result(s) passed", a validated machine that was never
    tested. Now an error saying nothing was tested."""
    r = judged("dcgm-3.3.1-diag-r3-j-t400-all-skip-issue-139.json")
    assert r.outcome == "error"
    assert "every result was skipped (5)" in r.reason and "nothing was tested" in r.reason


def test_v3_amd_smi_of_rocm_6_4_wraps_its_gpus_in_gpu_data() -> None:
    """SPEC V3: amd-smi from ROCm 6.4 prints ``{"gpu_data": [...]}`` where older ones
    print the list (the amd detector reads both). The judge read only the list, so a
    6.4 node's ECC step was an error. Input **written** here (no real 6.4 capture was
    found): the written 6.x file of tests/data/validation, wrapped."""
    import json

    plain = (REAL.parent.parent / "validation" / "amd-smi-metric-ecc-uncorrectable.json"
             ).read_text()
    wrapped = json.dumps({"gpu_data": json.loads(plain)})
    step = Step(name="gpu", kind="amd", command=["amd-smi", "metric", "--ecc", "--json"],
                criteria={})
    old, new = evaluate(step, 0, plain), evaluate(step, 0, wrapped)
    assert new.outcome == old.outcome == "fail"
    assert new.reason == old.reason and new.measured == old.measured


def test_v3_a_dcgm_4_diag_with_a_failed_test_fails_with_dcgms_words() -> None:
    """SPEC V2, V3 on real DCGM 4.2.3 output (``dcgmi diag -r 1 -j`` on a GB10, driver
    580.82.09, dcgmi exit 226; issue 35): the 4.x shape ("DCGM Diagnostic", entity
    results, warnings with error ids), the ``software`` test Fail on GPU 0 for
    persistence mode: a failure naming the test, the GPU and DCGM's own words; the
    entity list's ``<<<NOT_SUPPORTED>>>`` serial is no machine identity (SPEC D11)."""
    from slurm_heal import extra

    step = Step(name="gpu", kind="dcgm", command=["dcgmi", "diag", "-r", "1", "-j"],
                criteria={})
    text = (REAL / "dcgm-4.2.3-diag-r1-j-gb10-software-fail.json").read_text()
    r = evaluate(step, 226, text)
    assert r.outcome == "fail", r.reason
    assert r.measured["tests"] == {"software": "Fail"}
    (failure,) = r.measured["failures"]
    assert failure["entity"] == "GPU 0" and "Persistence mode" in failure["warnings"][0]
    assert extra.is_placeholder_serial("<<<NOT_SUPPORTED>>>")
