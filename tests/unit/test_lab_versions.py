"""What the 25.11 and 26.05 labs need, named in one line for a skip (or a CI failure)
(SPEC I6).

The vendored Slurm sources live outside the project (../shared/vendor); a clone without
them skips the 25.11 and 26.05 passes with this reason, CI=true fails on it
(tests/conftest.py). The reason says what is missing, where it comes from and the
command that adds it.
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
    assert any("source slurm-25.11.7-absent.tar.xz, looked for in shared/vendor" in m
               for m in missing), missing


@pytest.mark.parametrize(("version", "tag", "tarball"), [
    ("25.11", "slurm-25-11-7-1", "slurm-25.11.7.tar.xz"),
    ("26.05", "slurm-26-05-3-1", "slurm-26.05.3.tar.xz")])
def test_a_missing_source_says_where_it_comes_from_and_the_commands_that_add_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, tag: str,
        tarball: str) -> None:
    prefix = tmp_path / "prefix"
    monkeypatch.setitem(lab.SOURCE_BUILDS, version, (prefix, tarball))
    monkeypatch.setattr(lab, "vendor_tarball", lambda name: None)  # a clone without shared/
    reason = " ".join(lab.slurm_missing(version))
    assert f"SchedMD's tag {tag}" in reason
    assert f"git clone -b {tag} --depth 1 https://github.com/SchedMD/slurm" in reason
    assert f"| xz > DIR/{tarball}" in reason
    assert f"`LAB_VENDOR_DIR=DIR contrib/lab/lab install --slurm {version}`" in reason
    assert str(prefix) in reason


def test_the_matrix_runs_26_05_through_cli_and_rest_and_pyslurm_only_on_25_11() -> None:
    """pyslurm has no 26.05 release: no pyslurm pass there (`auto` picks cli, tested live)."""
    assert lab.VERSIONS == ("22.05", "25.11", "26.05")
    assert lab.BACKENDS["26.05"] == ("cli", "rest")
    assert "pyslurm" in lab.BACKENDS["25.11"]


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
