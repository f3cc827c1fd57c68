"""The node package (issue 38): `contrib/deb/build-deb` makes a .deb of the node set in
/opt/slurm-heal with the slurmd glue and the NHC plugin; `apt-get install ./slurm-heal_*.deb`
installs it on this machine, the installed program checks a replayed node and the
installed glue runs it, and `apt-get remove` takes every file away again.

Building needs dpkg-deb, a python3 that makes venvs and the package index (as the other
install tests; --wheelhouse builds without it); installing needs root and apt-get. Where
one is missing the tests skip and say which."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.installs import _NO_INDEX, REPO, in_ci
from tests.unit.test_check_replays import Replay

pytestmark = pytest.mark.slow

PREFIX = Path("/opt/slurm-heal")
PYTHON = Path("/usr/bin/python3")
# the node set's Python packages: nothing of the controller's, no pip in the package
NODE_PACKAGES = {"slurm_heal", "click", "ClusterShell", "yaml", "_yaml"}


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for tool in ("dpkg-deb", "dpkg"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (a Debian or Ubuntu machine builds the .deb)")
    if not PYTHON.exists():
        pytest.skip(f"no {PYTHON}: the package is built with the distribution's Python")
    out = tmp_path_factory.mktemp("deb")
    res = subprocess.run([str(REPO / "contrib/deb/build-deb"), "--out", str(out)],
                         capture_output=True, text=True, timeout=900, check=False)
    if res.returncode != 0:
        said = res.stderr + res.stdout
        if not in_ci() and any(s in said for s in _NO_INDEX):
            pytest.skip(f"pip could not reach the package index: {said[-300:]}")
        if "cannot make a venv" in said:
            pytest.skip(said.strip())
        pytest.fail(f"contrib/deb/build-deb failed (exit {res.returncode}): {said[-3000:]}")
    built = Path(res.stdout.strip().splitlines()[-1])
    assert built.parent == out and built.name.startswith("slurm-heal_"), res.stdout
    return built


def _field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


def test_the_package_holds_the_node_set_and_its_glue(deb: Path, tmp_path: Path) -> None:
    assert _field(deb, "Package") == "slurm-heal"
    assert _field(deb, "Architecture") == subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()
    pyver = subprocess.run([str(PYTHON), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert f"python{pyver}" in _field(deb, "Depends").split(", ")
    root = tmp_path / "x"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, timeout=60)
    opt = root / "opt/slurm-heal"
    site = opt / f"lib/python{pyver}/site-packages"
    packages = {p.name for p in site.iterdir() if p.is_dir() and not p.name.endswith(
        ("dist-info", "__pycache__"))}
    assert packages == NODE_PACKAGES
    assert not list(site.glob("pip*")) and not list(opt.rglob("__pycache__"))
    for hook in ("healthcheck", "prolog", "epilog"):
        glue = opt / "libexec" / f"slurm-heal-{hook}"
        assert os.access(glue, os.X_OK) and "/etc/default/slurm-heal" in glue.read_text()
    nhc = (opt / "share/slurm-heal/nhc/slurm_heal.nhc").read_text()
    assert 'SLURM_HEAL_NHC_BIN="/opt/slurm-heal/bin/slurm-heal"' in nhc
    assert os.readlink(root / "usr/bin/slurm-heal") == "/opt/slurm-heal/bin/slurm-heal"
    assert os.readlink(opt / "bin/python3") == f"/usr/bin/python{pyver}"
    assert (opt / "bin/slurm-heal").read_text().startswith("#!/opt/slurm-heal/bin/python\n")
    assert (root / "lib/systemd/system/slurm-heal-agent.service").is_file()
    # no path of the machine that built it (pip's staging directory) anywhere
    found = subprocess.run(["grep", "-rlI", "slurm-heal-deb.", str(root)], capture_output=True,
                           text=True, timeout=60, check=False).stdout
    assert not found, found
    # the shared objects lost their debug sections (PyYAML's wheel: 2.7 MB of them)
    for so in site.rglob("*.so"):
        sections = subprocess.run(["objdump", "-h", str(so)], capture_output=True, text=True,
                                  timeout=60, check=False).stdout
        assert ".debug_info" not in sections, so
    deps = sum(f.stat().st_size for name in NODE_PACKAGES - {"slurm_heal"}
               for f in (site / name).rglob("*") if f.is_file())
    assert deps < 5_000_000, f"the node set's dependencies take {deps} bytes"


def _apt(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(["apt-get", "-y", "-o", "DPkg::Lock::Timeout=300", *args],
                          capture_output=True, text=True, timeout=900, env=env, check=False)


def test_apt_get_installs_it_the_check_runs_and_apt_get_removes_it(
        deb: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("installing a .deb needs root (apt-get install ./slurm-heal_*.deb)")
    if shutil.which("apt-get") is None:
        pytest.skip("apt-get is not installed")
    status = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", "slurm-heal"],
                            capture_output=True, text=True, check=False)
    if "installed" in status.stdout.split() or (PREFIX / "bin/slurm-heal").exists():
        pytest.skip(f"slurm-heal is already installed in {PREFIX} on this machine: the test "
                    "installs and removes its own")
    local = tmp_path / deb.name  # apt-get reads it as the unprivileged _apt user
    shutil.copy(deb, local)
    local.chmod(0o644)
    tmp_path.chmod(0o755)
    done = _apt("install", str(local))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    try:
        program = Path("/usr/bin/slurm-heal")
        assert program.resolve() == PREFIX / "bin/slurm-heal"
        assert list((PREFIX / "lib").rglob("__pycache__"))  # postinst compiled it
        (tmp_path / "node").mkdir()
        node = Replay(tmp_path / "node")
        node.nvidia_node()
        assert node.run((str(program), "check"))[:2] == (0, [])
        node.smi(xml="smi-q-x-dbe.xml")
        code, found, err = node.run((str(program), "check"))
        assert (code, [f["fault"] for f in found]) == (1, ["gpu.ecc.dbe"]), err
        # the glue, as slurmd runs it: a bare environment
        healthy = tmp_path / "healthy"
        (healthy / "dev").mkdir(parents=True)
        (healthy / "dev/kmsg").write_text("6,1,1,-;Linux version 6.1.0\n")
        glue = subprocess.run([str(PREFIX / "libexec/slurm-heal-healthcheck"), "--dry-run",
                               "--node", "gpu01"], env={"SLURM_HEAL_ROOT": str(healthy)},
                              capture_output=True, text=True, timeout=120, check=False)
        assert glue.returncode == 0 and "gpu01: healthy" in glue.stdout, \
            glue.stdout + glue.stderr
        controller = subprocess.run([str(program), "status"], capture_output=True, text=True,
                                    timeout=60, check=False, cwd=tmp_path,
                                    env={"PATH": "/usr/bin:/bin",
                                         "SLURM_HEAL_DEFAULT_ROOT": str(tmp_path)})
        assert controller.returncode == 2, controller.stdout + controller.stderr
        assert "pip install 'slurm-heal[controller]'" in controller.stderr
    finally:
        removed = _apt("remove", "slurm-heal")
    assert removed.returncode == 0, removed.stdout[-2000:] + removed.stderr[-2000:]
    assert not Path("/usr/bin/slurm-heal").exists() and not (PREFIX / "bin").exists()
    assert not (PREFIX / "lib").exists()  # prerm took the byte-code dpkg does not know
