"""The validation runner and suite model (SPEC V1–V3): real commands, real files."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from slurm_heal.errors import ConfigError
from slurm_heal.validation import runner
from slurm_heal.validation.suite import Step, StepResult, SuiteResult, validation_from, verdict
from slurm_heal.validation.tickets import Ticket, sinks_from


def _spec(tmp_path: Path, steps: list[dict[str, object]]) -> Path:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"node": "n1", "peer": "n2", "vendor": "nvidia",
                                "steps": steps, "values": {"scratch": str(tmp_path)}}))
    return spec


def test_v3_a_suite_of_commands_passes_when_every_step_exits_zero_and_keeps_each_output(
        tmp_path: Path) -> None:
    spec = _spec(tmp_path, [
        {"name": "hello", "command": ["sh", "-c", "echo hello from {node} to {peer}"]},
        {"name": "scratch", "command": ["test", "-d", "{scratch}"]},
    ])
    out = tmp_path / "out"
    assert runner.main(["--spec", str(spec), "--out", str(out)]) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["outcome"] == "pass"
    assert [s["outcome"] for s in result["steps"]] == ["pass", "pass"]
    assert (out / "hello.log").read_text() == "hello from n1 to n2\n"
    assert result["finished"]


def test_v2_a_failing_step_is_a_clear_failure_and_a_missing_tool_or_timeout_concludes_nothing(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    failing = _spec(tmp_path, [{"name": "bad", "command": ["sh", "-c", "exit 3"]}])
    assert runner.main(["--spec", str(failing), "--out", str(out)]) == 1
    step = json.loads((out / "results.json").read_text())["steps"][0]
    assert (step["outcome"], step["reason"]) == ("fail", "exit status 3")

    missing = _spec(tmp_path, [{"name": "gone", "command": ["no-such-tool-xyz"]}])
    assert runner.main(["--spec", str(missing), "--out", str(out)]) == 2
    step = json.loads((out / "results.json").read_text())["steps"][0]
    assert step["outcome"] == "error" and "not found" in step["reason"]

    slow = _spec(tmp_path, [{"name": "slow", "command": ["sleep", "30"], "timeout": "1s"}])
    assert runner.main(["--spec", str(slow), "--out", str(out)]) == 2
    step = json.loads((out / "results.json").read_text())["steps"][0]
    assert step["timed_out"] and step["outcome"] == "error"


def test_v2_an_empty_suite_is_never_a_pass() -> None:
    assert verdict([]) == "error"
    ok = StepResult(name="a", kind="command", outcome="pass")
    bad = StepResult(name="b", kind="command", outcome="fail")
    err = StepResult(name="c", kind="command", outcome="error")
    assert verdict([ok]) == "pass"
    assert verdict([ok, err]) == "error"
    assert verdict([err, bad]) == "fail"


def test_v3_bad_suite_config_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"validation\.suites\.nvidia\.0\.command"):
        validation_from({"suites": {"nvidia": [{"name": "x", "command": []}]}})
    with pytest.raises(ConfigError, match="placeholders"):
        validation_from({"suites": {"nvidia": [{"name": "x", "command": ["ib_write_bw",
                                                                          "{peeer}"]}]}})
    with pytest.raises(ConfigError, match="twice"):
        validation_from({"suites": {"nvidia": [{"name": "x", "command": ["a"]},
                                               {"name": "x", "command": ["b"]}]}})
    with pytest.raises(ConfigError, match="bare number"):
        validation_from({"suites": {"nvidia": [{"name": "x", "command": ["a"],
                                                "timeout": 30}]}})
    suites = validation_from({"suites": {"default": [{"name": "x", "command": ["a"]}]}})
    assert [s.name for s in suites.suite_for("amd")] == ["x"]
    assert isinstance(suites.suite_for("amd")[0], Step)


def test_v2_directory_sink_writes_the_ticket_and_a_tar_of_the_logs(tmp_path: Path) -> None:
    spec = _spec(tmp_path, [{"name": "bad", "command": ["sh", "-c", "echo broken; exit 1"]}])
    out = tmp_path / "out"
    runner.main(["--spec", str(spec), "--out", str(out)])
    result = SuiteResult.model_validate_json((out / "results.json").read_text())
    [sink] = sinks_from([{"kind": "directory", "path": str(tmp_path / "tickets")}])
    ticket = Ticket(id="val-n1-1", node="n1", identity={"host": "h7"}, summary="bad failed",
                    results=result, created="2026-11-30T00:00:00+00:00")
    where = Path(sink.file(ticket, out))
    doc = json.loads(where.read_text())
    assert doc["node"] == "n1" and doc["results"]["outcome"] == "fail"
    with tarfile.open(tmp_path / "tickets" / doc["logs"]) as tar:
        member = tar.extractfile("val-n1-1/bad.log")
        assert member is not None and member.read() == b"broken\n"
    with pytest.raises(ConfigError, match=r"unknown ticket sink kind 'pager'"):
        sinks_from([{"kind": "pager"}])


def test_v3_a_placeholder_without_a_value_is_an_error_for_its_step_never_a_crash(
        tmp_path: Path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"node": "n1", "vendor": "nvidia", "steps": [
        {"name": "bw", "command": ["sh", "-c", "echo to {peer}"], "peer": True},
        {"name": "scratch", "command": ["test", "-d", "{scratch}"]}]}))
    out = tmp_path / "out"
    assert runner.main(["--spec", str(spec), "--out", str(out)]) == 2
    steps = json.loads((out / "results.json").read_text())["steps"]
    assert [(s["name"], s["outcome"]) for s in steps] == [("bw", "error"), ("scratch", "error")]
    assert steps[0]["reason"] == "placeholder {peer} has no value for this run"
    assert "{scratch}" in (out / "scratch.log").read_text()


def test_v3_gpus_are_counted_on_the_machine_when_the_config_does_not_say(
        tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    assert runner.count_gpus(dev, {}) == "0"
    assert runner.count_gpus(dev, {"SLURM_GPUS_ON_NODE": "4"}) == "4"
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (dev / name).touch()
    assert runner.count_gpus(dev, {}) == "2"
    amd = tmp_path / "amd"
    (amd / "dri").mkdir(parents=True)
    (amd / "kfd").touch()
    for name in ("renderD128", "renderD129", "renderD130", "card0"):
        (amd / "dri" / name).touch()
    assert runner.count_gpus(amd, {}) == "3"
