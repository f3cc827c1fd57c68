"""The console's rule words come with the package (issue 36 item 11, SPEC O5): docs/rules.md
is package data (``slurm_heal/data/rules.md``, a link to it in the source tree), so a
built wheel, installed where no docs/ lies beside it, still says Q1 in words, not the id
alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_an_installed_package_says_the_rule_words_without_the_source_tree(tmp_path: Path) -> None:
    build = tmp_path / "lib"
    # what `pip install` / a wheel build copies: setuptools' build_py with package data
    subprocess.run([sys.executable, "-c", "import setuptools; setuptools.setup()", "-q",
                    "build_py", "--build-lib", str(build)], cwd=REPO, check=True,
                   capture_output=True, timeout=300)
    packaged = build / "slurm_heal" / "data" / "rules.md"
    assert packaged.is_file() and not packaged.is_symlink()
    assert packaged.read_bytes() == (REPO / "docs" / "rules.md").read_bytes()
    probe = ("import slurm_heal, sys; from slurm_heal.readmodel import rulewords; "
             "print(slurm_heal.__file__); print(rulewords.table().get('Q1', ''))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, check=True,
                         env={**os.environ, "PYTHONPATH": str(build)}).stdout.splitlines()
    assert out[0].startswith(str(build)), out  # the built copy, far from docs/
    assert out[1].startswith("Requests come from"), out
