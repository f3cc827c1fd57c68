"""Helpers for the tests that install slurm-heal the way a site does (issue 38): a copy of
this checkout, fresh virtual environments, pip.

pip needs the package index for the dependencies (and for the build backend the build
isolation fetches); pip's own cache (outside the clone) makes a second run quick. Where
the index cannot be reached (a clone on a machine without network) these tests skip and
say so; with ``CI=true`` that is a failure instead, as a missing Slurm is.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.lab import run

REPO = Path(__file__).resolve().parents[1]

# What pip says when it cannot reach the index or the index has no such release.
_NO_INDEX = ("NewConnectionError", "Failed to establish a new connection",
             "Temporary failure in name resolution", "Could not find a version that "
             "satisfies", "No matching distribution found", "ProxyError",
             "Network is unreachable")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pip(python: Path, *args: str, timeout: float = 600,
        env: dict[str, str] | None = None) -> str:
    """``python -m pip ARGS`` (``env``: its whole environment, default this process's);
    skipped (with pip's words) where the package index cannot be reached, outside CI; any
    other failure fails the test."""
    res = run([str(python), "-m", "pip", "--disable-pip-version-check", *args],
              timeout=timeout, check=False, env=env)
    if res.returncode != 0:
        said = (res.stderr or res.stdout).strip()
        if not in_ci() and any(s in said for s in _NO_INDEX):
            pytest.skip("pip could not reach the package index (these tests install "
                        f"slurm-heal and its dependencies from it): {said[-300:]}")
        pytest.fail(f"pip {' '.join(args)} failed (exit {res.returncode}): {said[-2000:]}")
    return res.stdout


def venv(path: Path) -> Path:
    """A fresh virtual environment (the interpreter running the tests); its python."""
    run([sys.executable, "-m", "venv", str(path)], timeout=120)
    return path / "bin" / "python"


def checkout_copy(dst: Path) -> Path:
    """This checkout without its venv, caches and build leftovers: pip builds in the
    source tree, and several test passes run side by side."""
    shutil.copytree(REPO, dst, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".lab*", "build", "dist", "*.egg-info", ".*_cache", ".hypothesis",
        "__pycache__"), symlinks=True)
    return dst


def distributions(python: Path) -> dict[str, str]:
    """The installed distributions of a venv: canonical name -> version."""
    import json

    out = run([str(python), "-m", "pip", "--disable-pip-version-check", "list",
               "--format", "json"], timeout=120).stdout
    return {d["name"].lower().replace("_", "-"): d["version"] for d in json.loads(out)}
