"""What the 25.11 lab needs, named in one line for a skip (or a CI failure) (SPEC I6).

The vendored Slurm 25.11 source lives outside the project (../shared/vendor); a clone
without it skips the 25.11 passes with this reason, CI=true fails on it (tests/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tests.lab as lab


def test_no_build_and_no_tarball_is_named_as_the_missing_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(lab.SOURCE_BUILDS, "25.11",
                        (tmp_path / "prefix", "slurm-25.11.7-absent.tar.xz"))
    missing = lab.slurm_missing("25.11")
    assert any("source slurm-25.11.7-absent.tar.xz (not in ../shared/vendor)" in m
               for m in missing), missing


def test_a_tarball_without_a_build_asks_for_the_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "vendor").mkdir()
    (tmp_path / "vendor" / "slurm-x.tar.xz").write_bytes(b"")
    monkeypatch.setenv("LAB_VENDOR_DIR", str(tmp_path / "vendor"))
    monkeypatch.setitem(lab.SOURCE_BUILDS, "25.11", (tmp_path / "prefix", "slurm-x.tar.xz"))
    missing = lab.slurm_missing("25.11")
    assert any("`contrib/lab/lab install --slurm 25.11`" in m for m in missing), missing


def test_a_finished_build_needs_nothing_more(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "prefix").mkdir()
    (tmp_path / "prefix" / ".slurm-heal-built").write_text("{}\n")
    monkeypatch.setitem(lab.SOURCE_BUILDS, "25.11", (tmp_path / "prefix", "absent.tar.xz"))
    if not Path("/usr/sbin/munged").exists():
        pytest.skip("munge is not installed here")
    assert lab.slurm_missing("25.11") == []
