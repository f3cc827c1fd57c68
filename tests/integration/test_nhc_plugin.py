"""The NHC plugin under the real LBNL NHC fails closed (SPEC I1, I7; issue 36 item 2).

NHC 9c4a38c is unpacked from the vendored source (``../shared/vendor``, as the lab and
`benchmarks/nhc.py` find it) into this test session's temporary directory, outside the
clone, and runs in place. The plugin is the one `slurm-heal install-node` writes, with
the program, SLURM_CONF and the Slurm command directory written in: NHC resets PATH
(``/sbin:/usr/sbin:/bin:/usr/bin``) and slurmd gives it no SLURM_CONF, so before, NHC
could not find ``slurm-heal`` and said "completed successfully". The check reads a replay
root (SLURM_HEAL_ROOT); the slurm.conf names no controller, so publishing fails (exit 3)
as it does when slurmctld does not answer: a critical Xid must fail the node anyway.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_heal.cli import cli
from slurm_heal.demo import XID_LINE, ReplayNode
from tests.lab import vendor_tarball

pytestmark = pytest.mark.slow

NAME = "lbnl-nhc-9c4a38c"
CHECK_TOML = '[services]\nenabled = false\n[mounts]\nrw = ["/"]\n'


@pytest.fixture(scope="module")
def nhc_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tarball = vendor_tarball(f"{NAME}.tar.xz")
    if tarball is None:
        pytest.skip(f"the NHC source {NAME}.tar.xz is not in ../shared/vendor beside the "
                    "clone nor in $LAB_VENDOR_DIR: make it with `git clone "
                    f"https://github.com/mej/nhc && git -C nhc archive --prefix={NAME}/ "
                    f"9c4a38c | xz > DIR/{NAME}.tar.xz` and set LAB_VENDOR_DIR=DIR")
    root = tmp_path_factory.mktemp("nhc")
    with tarfile.open(tarball) as tar:
        tar.extractall(root, filter="data")
    return root / NAME


@pytest.fixture
def installed(tmp_path: Path) -> Path:
    """`install-node --no-venv` into a prefix: the NHC plugin with its paths written in."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=nhc\n")  # no controller: publishing fails, exit 3
    prefix = tmp_path / "opt"
    result = CliRunner().invoke(cli, ["install-node", "--prefix", str(prefix), "--no-venv",
                                      "--slurm-conf", str(conf)])
    assert result.exit_code == 0, result.output
    return prefix / "share" / "slurm-heal" / "nhc" / "slurm_heal.nhc"


def nhc(tree: Path, plugin: Path, tmp_path: Path, root: Path) -> tuple[int, str]:
    """NHC run in place with only our plugin's check, as slurmd would run it: a bare
    environment (no SLURM_CONF, no slurm-heal on PATH), the replay root aside."""
    scripts = tmp_path / "scripts"
    scripts.mkdir(exist_ok=True)
    for f in (tree / "scripts").glob("*.nhc"):
        (scripts / f.name).write_text(f.read_text())
    (scripts / "slurm_heal.nhc").write_text(plugin.read_text())
    conf = tmp_path / "nhc.conf"
    conf.write_text("* || check_slurm_heal\n")
    log = tmp_path / "nhc.log"
    log.write_text("")
    proc = subprocess.run(
        ["bash", str(tree / "nhc"), "-D", str(tree), "-c", str(conf), "-l", str(log),
         "-t", "30", f"INCDIR={scripts}", f"HELPERDIR={tree / 'helpers'}",
         f"RESULTFILE={tmp_path / 'nhc.result'}", "MARK_OFFLINE=0"],
        env={"PATH": "/usr/bin:/bin", "SLURM_HEAL_ROOT": str(root),
             "SLURMD_NODENAME": "gpu01", "HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, log.read_text() + proc.stdout + proc.stderr


def replay(tmp_path: Path, xid: bool) -> Path:
    node = ReplayNode(tmp_path / "root", "gpu01")
    (node.root / "etc" / "slurm-heal").mkdir(parents=True)
    (node.root / "etc" / "slurm-heal" / "check.toml").write_text(CHECK_TOML)
    if xid:
        node.kernel_says(XID_LINE)
    return node.root


def test_nhc_fails_a_node_with_a_critical_xid_even_when_publishing_failed(
        nhc_tree: Path, installed: Path, tmp_path: Path) -> None:
    rc, out = nhc(nhc_tree, installed, tmp_path, replay(tmp_path, xid=True))
    assert rc != 0, out
    assert "Health check failed:  slurm-heal: gpu.xid.119" in out, out


def test_nhc_passes_a_healthy_node_whose_publishing_failed(
        nhc_tree: Path, installed: Path, tmp_path: Path) -> None:
    rc, out = nhc(nhc_tree, installed, tmp_path, replay(tmp_path, xid=False))
    assert rc == 0, out
    assert "publishing to Slurm failed" in out and "Health check failed" not in out


def test_nhc_fails_the_node_when_slurm_heal_is_not_there(
        nhc_tree: Path, installed: Path, tmp_path: Path) -> None:
    """Fail closed: the program written in is gone (uninstalled, a broken upgrade)."""
    text = installed.read_text()
    start = text.index('SLURM_HEAL_NHC_BIN="') + len('SLURM_HEAL_NHC_BIN="')
    broken = tmp_path / "broken.nhc"
    broken.write_text(text[:start] + "/nonexistent/slurm-heal" + text[text.index('"', start):])
    rc, out = nhc(nhc_tree, broken, tmp_path, replay(tmp_path, xid=False))
    assert rc != 0, out
    assert "/nonexistent/slurm-heal is not there or not executable" in out, out


def test_the_installed_plugin_names_a_program_that_runs(installed: Path) -> None:
    text = installed.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("SLURM_HEAL_NHC_BIN="))
    program = line.split("=", 1)[1].strip('"')
    assert os.access(program, os.X_OK), line
