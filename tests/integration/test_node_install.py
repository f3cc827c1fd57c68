"""A node install is the node set only (issue 38, SPEC I1): ``pip install slurm-heal``
brings what the check, the agent and install-node need (click, ClusterShell and its
PyYAML), not the controller's dependencies (pydantic, Apprise, Werkzeug, ... 43 MB on
every GPU node before); the check runs from it on a replayed node, the agent follows the
kernel log, and a controller command says which extra it needs instead of a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.installs import checkout_copy, distributions, pip, venv
from tests.lab import run
from tests.unit.test_check_agent import NOISE, XID79, _readline
from tests.unit.test_check_replays import Replay

pytestmark = pytest.mark.slow

# The node set: the package and what it depends on, nothing of the controller's.
NODE_SET = {"slurm-heal", "click", "clustershell", "pyyaml"}
if sys.version_info < (3, 11):
    NODE_SET.add("tomli")
VENV_OWN = {"pip", "setuptools", "wheel"}


@pytest.fixture(scope="module")
def node_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with ``pip install CHECKOUT`` (no extra): its bin/."""
    base = tmp_path_factory.mktemp("node-install")
    checkout = checkout_copy(base / "checkout")
    python = venv(base / "venv")
    pip(python, "install", "--quiet", str(checkout))
    return python.parent


def test_a_node_install_brings_the_node_set_and_nothing_of_the_controller(
        node_install: Path) -> None:
    installed = set(distributions(node_install / "python")) - VENV_OWN
    assert installed == NODE_SET


def test_the_check_from_a_node_install_finds_a_fault_on_a_replayed_node(
        node_install: Path, tmp_path: Path) -> None:
    node = Replay(tmp_path)
    node.nvidia_node()
    program = (str(node_install / "slurm-heal"), "check")
    assert node.run(program)[:2] == (0, [])
    node.smi(xml="smi-q-x-dbe.xml")
    code, found, err = node.run(program)
    assert (code, [f["fault"] for f in found]) == (1, ["gpu.ecc.dbe"]), err


def test_the_agent_from_a_node_install_marks_a_new_xid(node_install: Path,
                                                      tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
    (root / "proc/mounts").write_text("/dev/sda1 / ext4 rw 0 0\n")
    (root / "dev/kmsg").write_bytes(NOISE)
    env = dict(os.environ, SLURM_HEAL_ROOT=str(root), PATH=f"{tmp_path / 'nobin'}:/usr/bin:/bin")
    proc = subprocess.Popen(
        [str(node_install / "slurm-heal"), "agent", "--dry-run", "--json", "--interval",
         "3600", "--node", "gpu01"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=env, start_new_session=True, cwd=tmp_path)
    try:
        assert _readline(proc, 30)["findings"] == []
        with (root / "dev/kmsg").open("ab") as fh:
            fh.write(XID79)
        assert [f["fault"] for f in _readline(proc, 15)["findings"]] == ["gpu.xid.79"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.parametrize("argv", [
    ["daemon", "--once"],        # imports pydantic with its module
    ["status"],                  # imports it when it runs
    ["approve", "gpu01"],
    ["serve", "--help"],
])
def test_a_controller_command_on_a_node_install_names_the_extra(
        node_install: Path, tmp_path: Path, argv: list[str]) -> None:
    res = run([str(node_install / "slurm-heal"), *argv], check=False, cwd=tmp_path,
              env={"PATH": "/usr/bin:/bin", "SLURM_HEAL_DEFAULT_ROOT": str(tmp_path)})
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.startswith(f"slurm-heal: error: `slurm-heal {argv[0]}` is a controller "
                                 "command and this is a node install"), res.stderr
    assert "pip install 'slurm-heal[controller]'" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_node_install_lists_the_controller_commands_with_their_extra(
        node_install: Path, tmp_path: Path) -> None:
    res = run([str(node_install / "slurm-heal"), "--help"], cwd=tmp_path)
    lines = {line.split()[0]: line for line in res.stdout.splitlines()
             if line.startswith("  ") and line.split()}
    assert "(needs slurm-heal[controller])" in lines["serve"]
    assert "needs" not in lines["check"] and "needs" not in lines["agent"]
    assert "needs" not in lines["install-node"]


def test_a_controller_command_says_the_extra_as_json_too(node_install: Path,
                                                         tmp_path: Path) -> None:
    res = run([str(node_install / "slurm-heal"), "status", "--json"], check=False,
              cwd=tmp_path, env={"PATH": "/usr/bin:/bin",
                                 "SLURM_HEAL_DEFAULT_ROOT": str(tmp_path)})
    error = json.loads(res.stdout)["error"]
    assert (res.returncode, error["kind"], error["exit"]) == (2, "ConfigError", 2)
    assert "slurm-heal[controller]" in error["message"]
