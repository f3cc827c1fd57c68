"""`install-node` run from an installed package, not a checkout (SPEC I1; issue 36 item
4): it installs what the running slurm-heal was installed from, refuses clearly when that
is gone, and leaves no half-made venv behind. Before, it pip-installed
``slurm-heal==0.1.0`` from the package index, where no such release exists: exit 10 and
a half-made venv left behind.

The installed package is made the README way: a venv and ``pip install`` of a copy of
this checkout (the copy: pip builds in the source tree, and it is removed below).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lab import run

if sys.version_info >= (3, 11):
    import tomllib
else:  # the 3.10 the package declares: tomli, as slurm_heal reads TOML there
    import tomli as tomllib

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("pkg")
    checkout = base / "checkout"
    shutil.copytree(REPO, checkout, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".lab*", "build", "*.egg-info", ".*_cache", ".hypothesis",
        "__pycache__"))
    venv = base / "venv"
    run([sys.executable, "-m", "venv", str(venv)], timeout=120)
    run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
         str(checkout)], timeout=600)
    return venv / "bin" / "slurm-heal", checkout


def install_node(program: Path, prefix: Path, *extra: str,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    conf = prefix.parent / "slurm.conf"
    conf.write_text("ClusterName=pkg\n")
    return subprocess.run([str(program), "install-node", "--prefix", str(prefix),
                           "--slurm-conf", str(conf), *extra], capture_output=True,
                          text=True, timeout=600, check=False,
                          env=None if env is None else {**os.environ, **env})


def pyyaml_extension(prefix: Path) -> list[Path]:
    """PyYAML's compiled LibYAML extension in the venv at ``prefix`` (none: pure Python)."""
    found = list(prefix.glob("lib/python3*/site-packages/yaml/__init__.py"))
    assert found, f"no PyYAML in {prefix}"
    return list(found[0].parent.glob("_yaml*.so"))


def test_install_node_from_a_package_installs_what_it_was_installed_from(
        installed: tuple[Path, Path], tmp_path: Path) -> None:
    program, checkout = installed
    prefix = tmp_path / "opt"
    done = install_node(program, prefix)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"installed slurm-heal ({checkout}) into {prefix}" in done.stdout
    assert (prefix / "bin" / "slurm-heal").exists()
    # issue 38: the node set as the README's node line installs it, PyYAML pure Python
    assert pyyaml_extension(prefix) == [], done.stdout
    assert "PyYAML's wheel" not in done.stdout
    glue = (prefix / "libexec" / "slurm-heal-healthcheck").read_text()
    assert f'SLURM_HEAL_BIN="{prefix}/bin/slurm-heal"' in glue


def test_a_failed_install_leaves_no_half_made_venv(
        installed: tuple[Path, Path], tmp_path: Path) -> None:
    program, _ = installed
    prefix = tmp_path / "opt"
    done = install_node(program, prefix, "--source", str(tmp_path / "no-such.whl"))
    assert done.returncode != 0
    assert f"the half-made {prefix} was removed" in done.stderr, done.stderr
    assert not prefix.exists()


def test_install_node_refuses_clearly_when_its_source_is_gone(
        installed: tuple[Path, Path], tmp_path: Path) -> None:
    program, checkout = installed
    gone = checkout.with_name("moved-away")
    checkout.rename(gone)  # what the package was installed from is not there any more
    try:
        prefix = tmp_path / "opt"
        done = install_node(program, prefix)
    finally:
        gone.rename(checkout)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not from a source checkout" in done.stderr and "--source" in done.stderr
    assert not prefix.exists()


def test_install_node_from_a_mirror_of_wheels_installs_pyyaml_s_wheel_and_says_so(
        installed: tuple[Path, Path], tmp_path: Path) -> None:
    """Issue 38: where PyYAML cannot be built from its source (a site's mirror of wheels
    only, no PyYAML sdist nor Cython), install-node installs its wheel instead and says
    so, rather than failing the node's install."""
    program, checkout = installed
    wheels = tmp_path / "wheels"
    # the mirror holds what pyproject.toml says the build and the node set need (with
    # their markers: tomli before 3.11), and PyYAML's wheel (ClusterShell's dependency)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary", ":all:",
         "-d", str(wheels), *project["build-system"]["requires"],
         *project["project"]["dependencies"], "PyYAML"], timeout=300)
    prefix = tmp_path / "opt"
    done = install_node(program, prefix, env={"PIP_NO_INDEX": "1",
                                              "PIP_FIND_LINKS": str(wheels)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "trying again with PyYAML's wheel" in done.stdout, done.stdout
    assert f"installed slurm-heal ({checkout}) into {prefix}" in done.stdout
    assert pyyaml_extension(prefix), "the wheel's extension"
    check = subprocess.run([str(prefix / "bin" / "slurm-heal"), "check", "--help"],
                           capture_output=True, text=True, timeout=60, check=False)
    assert check.returncode == 0, check.stderr
