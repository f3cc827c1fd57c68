"""The provider simulator's `--lab-dir` (issue 36 item 8): it reboots a lab's nodes with
the lab script that made the lab (named by the lab's RebootProgram), so an installed
slurm-heal, which has no contrib/lab/lab beside it, works too (from a wheel the first
reboot failed: "cannot run …/site-packages/contrib/lab/lab"); a directory that is no lab
is refused at start with a clear error (before: accepted without a word); and without
`--lab-dir` the simulator says at start that its actions touch nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_heal.errors import ConfigError
from slurm_heal.providers import make_provider
from slurm_heal.providers.simulator import LabHook, SimOperation
from slurm_heal.types import Action

SIMULATOR = [sys.executable, "-c", "from slurm_heal.entry import main; main()",
             "provider-simulator"]


def a_lab(tmp_path: Path) -> tuple[Path, Path]:
    """A lab directory as `lab up` leaves it (lab.json, etc/slurm.conf naming its script
    in RebootProgram), made by a lab script elsewhere than this checkout."""
    script = tmp_path / "elsewhere" / "lab"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/lab-calls\n')
    script.chmod(0o755)
    lab = tmp_path / "lab"
    (lab / "etc").mkdir(parents=True)
    (lab / "lab.json").write_text(json.dumps({"nodes": 2, "conf": str(lab / "etc/slurm.conf")}))
    (lab / "etc" / "slurm.conf").write_text(
        f'ClusterName=lab\nRebootProgram="{script} --dir {lab} reboot-program"\n')
    return lab, script


def test_a_lab_s_node_is_rebooted_with_the_script_that_made_the_lab(tmp_path: Path) -> None:
    lab, script = a_lab(tmp_path)
    hook = LabHook(lab)
    assert hook.lab_command == script
    note = hook("gpu01", Action.REBOOT, SimOperation(id="1", key="k", node="gpu01",
                                                     action=Action.REBOOT))
    assert "reboot of gpu01: rebooted" in note
    assert (tmp_path / "lab-calls").read_text().split() == ["--dir", str(lab), "reboot",
                                                            "gpu01"]


def test_a_directory_that_is_no_lab_is_refused_at_start(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ConfigError, match="is not a Slurm lab directory"):
        LabHook(plain)
    with pytest.raises(ConfigError, match=r"provider\.lab_dir: .* is not a Slurm lab"):
        make_provider({"type": "simulator", "lab_dir": str(plain)}, slurm=None,
                      state_dir=tmp_path / "state")
    proc = subprocess.run([*SIMULATOR, "--port", "0", "--lab-dir", str(plain)],
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"--lab-dir: {plain} is not a Slurm lab directory (no lab.json there)" \
        in proc.stderr


def test_without_a_lab_dir_the_simulator_says_its_actions_touch_nothing(
        tmp_path: Path) -> None:
    proc = subprocess.Popen([*SIMULATOR, "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the listening line stays first on stdout
        assert first.startswith("slurm-heal simulator listening on http://127.0.0.1:")
    finally:
        proc.terminate()
        _, said = proc.communicate(timeout=30)
    assert "no --lab-dir: every action succeeds and touches nothing" in said
