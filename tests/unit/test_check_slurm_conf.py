"""The node check with a $SLURM_CONF that names no file (issue 25 item 5): it says so at
once, naming the path, instead of waiting for the Slurm commands' timeout and blaming
slurmctld. Through the real commands: the fast entry point slurmd runs, and the click one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_check_run import XID79, Node


@pytest.fixture
def node_env(tmp_path: Path) -> dict[str, str]:
    """A replayed node with a fault to publish, and Slurm commands on PATH that record
    being called (a real scontrol would wait 20 s for a controller)."""
    Node(tmp_path / "root").kmsg(XID79, append=True)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for cmd in ("scontrol", "sinfo", "squeue"):
        script = bindir / cmd
        script.write_text(f"#!/bin/sh\necho {cmd} >> {tmp_path / 'called'}\nexit 1\n")
        script.chmod(0o755)
    return {**os.environ, "SLURM_HEAL_ROOT": str(tmp_path / "root"), "PATH": str(bindir),
            "SLURM_CONF": str(tmp_path / "nonexistent" / "slurm.conf")}


@pytest.mark.parametrize("argv", [["-m", "slurm_heal.checks"],
                                  ["-m", "slurm_heal.cli", "check"]], ids=["fast", "click"])
def test_a_missing_slurm_conf_is_named_and_slurm_is_not_asked(
        argv: list[str], node_env: dict[str, str], tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, *argv, "--node", "gpu01"], capture_output=True,
                          text=True, timeout=60, env=node_env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"slurm.conf not found: {node_env['SLURM_CONF']} ($SLURM_CONF)" in proc.stderr
    assert "controller" not in proc.stderr
    assert not (tmp_path / "called").exists()  # no Slurm command was run


def test_under_json_it_is_the_one_error_object(node_env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "slurm_heal.checks", "--json", "--node",
                           "gpu01"], capture_output=True, text=True, timeout=60, env=node_env,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 3
    err = json.loads(proc.stdout)["error"]
    assert err["exit"] == 3 and "slurm.conf not found" in err["message"]
