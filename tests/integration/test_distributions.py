"""The sdist and the wheel are complete (issue 38; SPEC O5 for the console's words): the
wheel, built from the sdist as a distribution packager builds it, carries the rule words
(docs/rules.md), the Grafana dashboard, the systemd units, the example policies and the
slurm.conf lines, says its licence (Apache-2.0, an SPDX expression, with the LICENSE
file), its Pythons and classifiers; the sdist has the tests with their golden files, the
docs and contrib; and an installed console, with no docs/ beside it, says a rule in words.

Before: docs/rules.md was only in a wheel built from the checkout (an sdist had no docs,
so its wheel pointed at nothing), contrib was in neither, and there was no licence file.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.installs import REPO, checkout_copy, pip, venv
from tests.lab import run

if sys.version_info >= (3, 11):
    import tomllib
else:  # the 3.10 the package declares: tomli, as slurm_heal reads TOML there
    import tomli as tomllib

pytestmark = pytest.mark.slow

# What a wheel carries besides code: its path in the wheel -> the source file.
CARRIED = {
    "slurm_heal/data/rules.md": "docs/rules.md",
    "slurm_heal/data/grafana/slurm-heal.json": "contrib/grafana/slurm-heal.json",
    "slurm_heal/data/systemd/slurm-heal.service": "contrib/systemd/slurm-heal.service",
    "slurm_heal/data/systemd/slurm-heal-agent.service":
        "contrib/systemd/slurm-heal-agent.service",
    "slurm_heal/data/slurm/slurm-heal.conf": "contrib/slurm/slurm-heal.conf",
    "slurm_heal/data/prometheus/slurm-heal.rules.yml": "contrib/prometheus/slurm-heal.rules.yml",
    "slurm_heal/data/prometheus/slurm-heal.rules.test.yml":
        "contrib/prometheus/slurm-heal.rules.test.yml",
    **{f"slurm_heal/data/policies/{p.name}": f"contrib/policies/{p.name}"
       for p in (REPO / "contrib" / "policies").glob("*.toml")},
}


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel) from `python -m build` on a copy of this checkout: the sdist first,
    then the wheel from the unpacked sdist (build's default)."""
    base = tmp_path_factory.mktemp("dists")
    checkout = checkout_copy(base / "checkout")
    tools = venv(base / "tools")
    pip(tools, "install", "--quiet", "build>=1.0")
    out = base / "dist"
    res = run([str(tools), "-m", "build", "--outdir", str(out), str(checkout)],
              timeout=600, check=False)
    if res.returncode != 0:  # the build's isolated env fetches setuptools: no index, skip
        pip(tools, "download", "--quiet", "--no-deps", "-d", str(base / "probe"),
            "setuptools>=77")
        pytest.fail(f"python -m build failed: {(res.stderr or res.stdout)[-2000:]}")
    (sdist,), (wheel,) = out.glob("*.tar.gz"), out.glob("*.whl")
    return sdist, wheel


def test_the_wheel_carries_the_rule_words_dashboard_units_policies_and_slurm_lines(
        dists: tuple[Path, Path]) -> None:
    with zipfile.ZipFile(dists[1]) as whl:
        names = set(whl.namelist())
        for inside, source in CARRIED.items():
            assert inside in names, inside
            assert whl.read(inside) == (REPO / source).read_bytes(), inside
    assert len(CARRIED) >= 9  # three example policies at least


def test_the_wheel_says_its_licence_pythons_and_classifiers(dists: tuple[Path, Path]) -> None:
    with zipfile.ZipFile(dists[1]) as whl:
        info = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
        meta = whl.read(info).decode()
        licence = whl.read(info.replace("METADATA", "licenses/LICENSE"))
    assert licence == (REPO / "LICENSE").read_bytes()
    assert b"Apache License" in licence and b"Version 2.0, January 2004" in licence
    assert re.search(r"^License-Expression: Apache-2\.0$", meta, re.M)
    assert re.search(r"^License-File: LICENSE$", meta, re.M)
    assert not re.search(r"^License: ", meta, re.M)  # the deprecated table form
    classifiers = re.findall(r"^Classifier: (.+)$", meta, re.M)
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "requires-python"]
    assert re.search(rf"^Requires-Python: {re.escape(requires)}$", meta, re.M)
    oldest = requires.removeprefix(">=")
    assert f"Programming Language :: Python :: {oldest}" in classifiers
    assert "Programming Language :: Python :: 3 :: Only" in classifiers
    assert "Operating System :: POSIX :: Linux" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]  # PEP 639: refused
    assert "Provides-Extra: controller" in meta
    urls = dict(u.split(", ", 1) for u in re.findall(r"^Project-URL: (.+)$", meta, re.M))
    assert set(urls) >= {"Homepage", "Documentation", "Issues", "Source"}
    assert all(u.startswith("https://") for u in urls.values())


def test_the_sdist_has_the_tests_docs_contrib_and_licence(dists: tuple[Path, Path]) -> None:
    with tarfile.open(dists[0]) as sdist:
        top = sdist.getnames()[0].split("/")[0]
        names = {n.removeprefix(top + "/") for n in sdist.getnames()}
        links = [m.name for m in sdist.getmembers() if m.issym() or m.islnk()]
    assert not links  # a link would point outside an unpacked sdist's files
    for tree in ("tests", "docs", "contrib", "benchmarks"):
        want = {str(p.relative_to(REPO)) for p in (REPO / tree).rglob("*")
                if p.is_file() and "__pycache__" not in p.parts
                and not p.name.endswith(".pyc")}
        assert want and want <= names, sorted(want - names)[:10]
    assert {"LICENSE", "README.md", "Makefile", "pyproject.toml"} <= names


def test_an_installed_console_says_a_rule_in_words(dists: tuple[Path, Path],
                                                   tmp_path: Path) -> None:
    """The wheel's files alone (installed with --target, no docs/ near them), run by
    this interpreter, which has the controller's dependencies: the remediation page says
    P1 in words."""
    target = tmp_path / "site"
    pip(Path(sys.executable), "install", "--quiet", "--no-deps", "--no-index", "--target",
        str(target), str(dists[1]))
    probe = (
        "import slurm_heal\n"
        "print(slurm_heal.__file__)\n"
        "from pathlib import Path\n"
        "from datetime import timedelta\n"
        "from slurm_heal.models import Phase, State, Step, Work\n"
        "from tests.unit.test_console_overview import NOW, _console, _rem\n"
        "from slurm_heal.slurm.memory import MemorySlurm\n"
        "held = _rem('r-held', 'gpu01', Phase.APPROVED, approval_rule='P2:default',\n"
        "            data=Work(blocked='P1'), steps=(Step(at=NOW, phase='blocked',\n"
        "            rule='P1', why='waits for a confirmed alert'),))\n"
        "slurm = MemorySlurm([('gpu01', 'gpu')], clock=lambda: NOW)\n"
        "client = _console(Path('.'), slurm, State(remediations=(held,)))\n"
        "print(client.get('/remediations/r-held').text)\n")
    res = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, check=False,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{target}:{REPO}",
                              "SLURM_HEAL_DEFAULT_ROOT": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-2000:]
    where, _, page = res.stdout.partition("\n")
    assert where.startswith(str(target)), where  # the installed copy, far from docs/
    assert "A remediation runs only after a health-check failure is confirmed" in page, \
        page[-3000:]
