"""A node install is the node set only (issue 38, SPEC I1): ``pip install slurm-heal``
brings what the check, the agent and install-node need (click, ClusterShell and its
PyYAML), not the controller's dependencies (pydantic, Apprise, Werkzeug, ... 43 MB on
every GPU node before); the check runs from it on a replayed node, the agent follows the
kernel log, and a controller command says which extra it needs instead of a traceback.

PyYAML is there only because ClusterShell requires it: the node's host lists go through
NodeSet, which never imports it (only ClusterShell's YAML group files would). So the
README's lighter node install, ``PYYAML_FORCE_LIBYAML=0 pip install --no-binary pyyaml``
(PyYAML built from its source as pure Python, without the 2.7 MB extension; the node set's
dependencies 3.0 MB instead of 5.7 MB, benchmarks/node_install.py), loses the node
nothing: it is installed and its check run here too.
"""

from __future__ import annotations

import json
import os
import shutil
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


@pytest.fixture(scope="module")
def node_install_pure_yaml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the README's lighter node install: PyYAML from its source without its
    LibYAML extension (``PYYAML_FORCE_LIBYAML=0``, PyYAML's setup.py switch); its bin/."""
    base = tmp_path_factory.mktemp("node-install-pure-yaml")
    checkout = checkout_copy(base / "checkout")
    python = venv(base / "venv")
    pip(python, "install", "--quiet", "--no-cache-dir", "--no-binary", "pyyaml",
        str(checkout), env=dict(os.environ, PYYAML_FORCE_LIBYAML="0"))
    return python.parent


def _gres_node(tmp_path: Path) -> Replay:
    """A replayed 8-GPU node whose GPU count comes from Slurm's gres.conf, in bracketed
    host lists (``NodeName=gpu[01-16] ... File=/dev/nvidia[0-7]``: ClusterShell's)."""
    node = Replay(tmp_path)
    node.nvidia_node()
    node.config["gpus"] = {"expected": 0}
    (node.root / "etc/slurm").mkdir(parents=True)
    (node.root / "etc/slurm/gres.conf").write_text(
        "NodeName=gpu[01-16] Name=gpu Type=h100 File=/dev/nvidia[0-7]\n"
        "NodeName=cpu[01-04] Name=mps Count=100\n")
    return node


def _imported(stderr: str) -> set[str]:
    """The modules ``python -X importtime`` says were imported."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2}


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


def test_the_checks_host_lists_go_through_clustershell_without_yaml(node_install: Path,
                                                                   tmp_path: Path) -> None:
    """The GPU count from gres.conf's bracketed host lists (ClusterShell's NodeSet) with a
    GPU gone: found, and PyYAML never imported (what makes the lighter install honest)."""
    node = _gres_node(tmp_path)
    shutil.rmtree(next((node.root / "proc/driver/nvidia/gpus").iterdir()))
    program = (str(node_install / "python"), "-X", "importtime",
               str(node_install / "slurm-heal"), "check")
    code, found, err = node.run(program)
    assert [(f["fault"], f["evidence"][0]["data"]) for f in found] == [
        ("gpu.missing", {"visible": 7, "expected": 8})], err
    imported = _imported(err)
    assert "ClusterShell.NodeSet" in imported, err[-2000:]
    assert not {m for m in imported if m.split(".")[0] in ("yaml", "_yaml")}, err[-2000:]


def test_the_lighter_node_install_has_pyyaml_without_its_extension_and_checks(
        node_install_pure_yaml: Path, tmp_path: Path) -> None:
    python = node_install_pure_yaml / "python"
    assert set(distributions(python)) - VENV_OWN == NODE_SET
    site = Path(run([str(python), "-c", "import yaml, os; print(os.path.dirname(yaml.__file__))"]
                    ).stdout.strip())
    assert not list(site.glob("*.so")), sorted(p.name for p in site.iterdir())
    assert run([str(python), "-c", "import yaml; print(yaml.__with_libyaml__)"]
               ).stdout.strip() == "False"
    node = _gres_node(tmp_path)
    program = (str(node_install_pure_yaml / "slurm-heal"), "check")
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
