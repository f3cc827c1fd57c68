"""The shell glue stays thin and never hangs (SPEC I1): HealthCheckProgram wrapper,
Prolog, Epilog and the NHC plugin, run against a stand-in slurm-heal program."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GLUE = REPO / "slurm_heal" / "glue"
HEALTHCHECK = GLUE / "slurm-heal-healthcheck"
PROLOG = GLUE / "slurm-heal-prolog"
EPILOG = GLUE / "slurm-heal-epilog"
NHC = GLUE / "slurm_heal.nhc"


def fake(tmp_path: Path, body: str) -> Path:
    """A stand-in slurm-heal that records its arguments and does ``body``."""
    prog = tmp_path / "slurm-heal"
    prog.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\n{body}\n')
    prog.chmod(0o755)
    return prog


def run(script: Path, prog: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, SLURM_HEAL_BIN=str(prog), **env)
    return subprocess.run([str(script)], env=full, capture_output=True, text=True, timeout=60)


def test_healthcheck_runs_the_check_in_healthcheck_mode_and_passes_its_status(
        tmp_path: Path) -> None:
    prog = fake(tmp_path, "exit 1")
    assert run(HEALTHCHECK, prog).returncode == 1
    assert (tmp_path / "args").read_text().split() == ["check", "--mode", "healthcheck"]


def test_healthcheck_never_hangs_past_its_deadline(tmp_path: Path) -> None:
    prog = fake(tmp_path, "sleep 120")
    assert run(HEALTHCHECK, prog, SLURM_HEAL_DEADLINE="1").returncode == 124


@pytest.mark.parametrize("status, expected", [(0, 0), (1, 1), (3, 0), (10, 0), (11, 0)])
def test_prolog_fails_only_when_the_node_is_unusable(tmp_path: Path, status: int,
                                                     expected: int) -> None:
    prog = fake(tmp_path, f"exit {status}")
    assert run(PROLOG, prog).returncode == expected
    assert (tmp_path / "args").read_text().split() == ["check", "--mode", "prolog"]


def test_prolog_lets_the_job_run_when_the_check_hangs(tmp_path: Path) -> None:
    prog = fake(tmp_path, "sleep 120")
    assert run(PROLOG, prog, SLURM_HEAL_DEADLINE="1").returncode == 0


@pytest.mark.parametrize("status", [0, 1, 3])
def test_epilog_always_succeeds(tmp_path: Path, status: int) -> None:
    prog = fake(tmp_path, f"exit {status}")
    assert run(EPILOG, prog).returncode == 0
    assert (tmp_path / "args").read_text().split() == ["check", "--mode", "epilog"]


def _nhc(tmp_path: Path, prog: Path, **env: str) -> str:
    script = ('die() { echo "DIE $*"; }; log() { echo "LOG $*"; }; '
              f'source {NHC}; check_slurm_heal; echo "RC $?"')
    bash = shutil.which("bash")
    assert bash is not None
    out = subprocess.run([bash, "-c", script],
                         env=dict(os.environ, SLURM_HEAL_BIN=str(prog), **env),
                         capture_output=True, text=True, timeout=60)
    return out.stdout


def findings_json(*found: tuple[str, str, str]) -> str:
    """What `slurm-heal check --json` prints (render_json: a list, indent 2)."""
    return json.dumps([{"fault": f, "severity": sev, "summary": text, "evidence": [
        {"source": "kernel_log", "text": "x", "data": {"severity": "critical"}}],
        "detector": "kernel_log", "node": "gpu01"} for f, sev, text in found], indent=2)


def json_fake(tmp_path: Path, output: str, status: int, dry_output: str = "",
              dry_status: int = 0) -> Path:
    """A stand-in `slurm-heal check --json` (and its --dry-run, for after exit 3)."""
    (tmp_path / "out.json").write_text(output + "\n")
    (tmp_path / "dry.json").write_text(dry_output + "\n")
    return fake(tmp_path, f'case "$*" in *--dry-run*) cat {tmp_path}/dry.json; exit {dry_status};;'
                          f' esac; cat {tmp_path}/out.json; exit {status}')


def test_nhc_plugin_fails_the_node_for_a_critical_finding(tmp_path: Path) -> None:
    prog = json_fake(tmp_path, findings_json(
        ("gpu.xid.13", "warning", "app error"),
        ("gpu.xid.79", "critical", "GPU 3 reported Xid 79")), 1)
    out = _nhc(tmp_path, prog)
    assert "DIE 1 slurm-heal: gpu.xid.79: GPU 3 reported Xid 79" in out
    assert "RC 1" in out
    assert (tmp_path / "args").read_text().split() == ["check", "--mode", "healthcheck",
                                                       "--json"]


def test_nhc_plugin_only_logs_warnings(tmp_path: Path) -> None:
    prog = json_fake(tmp_path, findings_json(("gpu.xid.13", "warning", "app error")), 1)
    out = _nhc(tmp_path, prog)
    assert "DIE" not in out and "LOG slurm-heal check: exit 1" in out and "RC 0" in out


def test_nhc_plugin_fails_closed_on_a_critical_finding_whose_publishing_failed(
        tmp_path: Path) -> None:
    """SPEC I7, issue 36 item 2: exit 3 (publishing to Slurm failed) used to pass the
    node; the findings are read with a dry run and a critical one fails it."""
    err = '{"error": {"message": "publishing to Slurm failed: x", "kind": "SlurmError", "exit": 3}}'
    prog = json_fake(tmp_path, err, 3, findings_json(("gpu.xid.79", "critical", "off the bus")), 1)
    out = _nhc(tmp_path, prog)
    assert "DIE 1 slurm-heal: gpu.xid.79: off the bus" in out and "RC 1" in out
    healthy = json_fake(tmp_path, err, 3, "[]", 0)
    out = _nhc(tmp_path, healthy)
    assert "DIE" not in out and "RC 0" in out and "publishing to Slurm failed" in out


@pytest.mark.parametrize("body, words", [
    ("echo 'Traceback (most recent call last):' >&2; exit 1", "crashed (exit 1): Traceback"),
    ("echo 'bad config' >&2; exit 2", "could not run (exit 2): bad config"),
    ("sleep 30", "did not finish within 1s"),
])
def test_nhc_plugin_fails_closed_when_the_check_crashes_or_hangs(
        tmp_path: Path, body: str, words: str) -> None:
    out = _nhc(tmp_path, fake(tmp_path, body), SLURM_HEAL_TIMEOUT="1")
    assert f"DIE 1 slurm-heal check {words}" in out and "RC 1" in out


def test_nhc_plugin_fails_closed_without_a_program(tmp_path: Path) -> None:
    """Not installed: the package's plugin names no program (NHC resets PATH, so
    `slurm-heal` on PATH is not looked for)."""
    out = _nhc(tmp_path, tmp_path / "missing")
    assert "DIE 1 slurm-heal: " in out and "not there or not executable" in out
    bash = shutil.which("bash")
    assert bash is not None
    env = {k: v for k, v in os.environ.items() if k != "SLURM_HEAL_BIN"}
    bare = subprocess.run([bash, "-c", 'die() { echo "DIE $*"; }; log() { :; }; '
                           f'source {NHC}; check_slurm_heal; echo "RC $?"'], env=env,
                          capture_output=True, text=True, timeout=60).stdout
    assert "DIE 1 slurm-heal: the NHC plugin names no slurm-heal program" in bare


def test_nhc_plugin_stays_under_nhc_s_own_timeout(tmp_path: Path) -> None:
    """NHC's watchdog (TIMEOUT, 30 s by default) kills everything past it: the check gets
    5 s less, whatever SLURM_HEAL_TIMEOUT asks."""
    out = _nhc(tmp_path, fake(tmp_path, "sleep 30"), SLURM_HEAL_TIMEOUT="40", TIMEOUT="7")
    assert "did not finish within 2s" in out


def test_healthcheck_wrapper_runs_the_real_check_on_a_replayed_node(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    (root / "dev/kmsg").write_text(
        "2,1,1,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n")
    exe = shutil.which("slurm-heal", path=str(REPO / ".venv" / "bin")) or shutil.which("slurm-heal")
    if exe is None:
        pytest.skip("slurm-heal is not installed (run `make setup`)")
    # extra arguments reach the check: --dry-run, as there is no Slurm in a unit test
    out = subprocess.run([str(HEALTHCHECK), "--dry-run", "--node", "gpu01"],
                         env=dict(os.environ, SLURM_HEAL_BIN=exe, SLURM_HEAL_ROOT=str(root)),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "CRITICAL gpu.xid.79" in out.stdout
