"""SPEC D13, D5 (issue 39): the real LBNL NHC's drain, taken over and repaired when the
policy maps its check.

NHC 9c4a38c (the vendored source in ../shared/vendor, unpacked into the test's temporary
directory) runs a failing ``check_fs_mount`` with its own Slurm helper
(node-mark-offline); ``sinfo`` and ``scontrol`` are two small scripts that answer the
node's state and record the ``scontrol update`` NHC sends, so the reason is exactly the
one NHC writes. That reason drains the node in the controller rig (the real controller,
the in-memory Slurm, the provider simulator): slurm-heal's cordon takes the drain over,
NHC run again leaves slurm-heal's reason alone (node-mark-offline keeps a note that is
not NHC's), and the node is repaired, checked and resumed.
"""

from __future__ import annotations

import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from slurm_heal import reasons
from slurm_heal.models import Phase
from slurm_heal.sources import nhc as nhc_source
from tests.fakes import controller_rig
from tests.lab import vendor_tarball

pytestmark = pytest.mark.slow

NAME = "lbnl-nhc-9c4a38c"
MISSING = "/nonexistent-slurm-heal-test-mount"


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
    tree = root / NAME
    for helper in (tree / "helpers").iterdir():  # run by NHC as programs
        helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    return tree


def run_nhc(tree: Path, tmp_path: Path, node: str, state: str, note: str) -> str:
    """NHC with one failing check on ``node`` whose Slurm state and note are ``state``
    and ``note`` ("none": no note); the reason of the ``scontrol update`` it sent."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "sinfo").write_text(f"#!/bin/sh\necho '{state} {note}'\n")
    record = tmp_path / "scontrol.args"
    record.unlink(missing_ok=True)
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {record}\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    conf = tmp_path / "nhc.conf"
    conf.write_text(f"* || check_fs_mount {MISSING}\n")
    log = tmp_path / "nhc.log"
    log.write_text("")
    proc = subprocess.run(
        ["bash", str(tree / "nhc"), "-D", str(tree), "-c", str(conf), "-l", str(log),
         "-t", "30", f"INCDIR={tree / 'scripts'}", f"HELPERDIR={tree / 'helpers'}",
         "NHC_RM=slurm", "MARK_OFFLINE=1", "DETACHED_MODE=0", f"HOSTNAME={node}"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
             "SLURM_SINFO": str(bin_dir / "sinfo"),
             "SLURM_SCONTROL": str(bin_dir / "scontrol")},
        capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode != 0, log.read_text() + proc.stdout + proc.stderr
    assert record.exists(), log.read_text() + proc.stdout + proc.stderr
    args = record.read_text().splitlines()
    assert f"NodeName={node}" in args and "State=DRAIN" in args, args
    return next(a for a in args if a.startswith("Reason=")).removeprefix("Reason=")


def test_nhcs_real_drain_is_taken_over_repaired_and_nhc_leaves_our_reason_alone(
        nhc_tree: Path, tmp_path: Path) -> None:
    reason = run_nhc(nhc_tree, tmp_path, "gpu07", "idle", "none")
    assert reason.startswith("NHC: check_fs_mount:") and MISSING in reason, reason
    policy = {"approvals": {"default": "auto"}, "capacity": {"min_available_percent": 0},
              "safety": {"one_per_pool": False, "concurrency": 4},
              "sources": {"nhc": {"enabled": True, "map": {"check_fs_mount": "fs.readonly"}}}}
    with controller_rig(tmp_path / "rig", [("gpu07", "a"), ("gpu08", "a")], policy) as rig:
        rig.cluster.drain("gpu07", reason)  # what NHC's scontrol update does
        rig.cycle()
        [rem] = rig.rems("gpu07")
        assert (rem.fault, rem.detector) == ("fs.readonly", nhc_source.SOURCE)
        ours = rig.cluster.node("gpu07").reason
        assert reasons.owner(ours) == "ours", ours
        # NHC's next run, its check still failing: node-mark-offline keeps a note that is
        # not NHC's, so the drain stays slurm-heal's
        assert run_nhc(nhc_tree, tmp_path, "gpu07", "drain", ours) == ours
        for _ in range(20):
            rig.cycle()
            if rig.rems("gpu07")[0].phase.terminal:
                break
        [rem] = rig.rems("gpu07")
        assert rem.phase is Phase.DONE, [(s.phase, s.why) for s in rem.steps]
        assert not rig.cluster.node("gpu07").drained
        assert rig.rems("gpu08") == []
