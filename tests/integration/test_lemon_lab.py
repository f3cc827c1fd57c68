"""The machine ledger on the real Slurm lab (SPEC E7, D11): the real node check, with
nvidia-smi printing a real ``-q -x`` capture of an 8-GPU V100S machine (eight real
serials; tests/data/real/SOURCES.md), publishes the machine's identity in a lab node's
Extra; the ledger (`LedgerFile`, as the daemon's observer folds a cycle) reads it from
the real ``scontrol``/``sinfo`` output:

* the same hardware checked under a second node name (a rename) is one machine with two
  names;
* the node's Extra emptied (a re-image, before its check runs again) keeps the node on
  that machine; the check run again confirms it.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_heal import extra
from slurm_heal.ledger import LedgerFile
from slurm_heal.slurm.cli import CliSlurm
from tests.lab import Lab

pytestmark = pytest.mark.slurm

REAL = Path(__file__).resolve().parent.parent / "data" / "real" / "nvidia"
CAPTURE = REAL / "smi-q-x-tesla-v100s-x8-460.73.01.xml"


def _check(lab: Lab, base: Path, node: str) -> None:
    """The real node check on ``node``, nvidia-smi printing the V100S capture."""
    root, bin_dir = base / "root", base / "bin"
    if not root.exists():
        (root / "dev").mkdir(parents=True)
        (root / "proc/sys/kernel/random").mkdir(parents=True)
        (root / "proc/sys/kernel/random/boot_id").write_text(f"boot-{node}\n")
        (root / "proc/mounts").write_text("/dev/sda1 / ext4 rw 0 0\n")
        (root / "dev/kmsg").write_text("")
        (root / "etc/slurm-heal").mkdir(parents=True)
        (root / "etc/slurm-heal/check.toml").write_text(
            '[nvidia]\nsmi_format = "xml"\ndcgm = "off"\nnvlink = false\nexpected = 8\n'
            '[services]\nenabled = false\n[network]\nenabled = false\n'
            '[infiniband]\nenabled = false\n')
        bin_dir.mkdir()
        stub = bin_dir / "nvidia-smi"
        stub.write_text(f"#!/bin/sh\ncat '{CAPTURE}'\n")
        stub.chmod(0o755)
    env = dict(lab.env, SLURM_HEAL_ROOT=str(root),
               PATH=f"{bin_dir}:{lab.path_prefix}/usr/bin:/bin")
    out = subprocess.run([sys.executable, "-m", "slurm_heal.checks", "--node", node],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 1), out.stdout + out.stderr


def test_the_ledger_keeps_a_real_machine_across_a_rename_and_a_reimage(
        lab: Lab, tmp_path: Path) -> None:
    if not CAPTURE.exists():
        pytest.skip(f"the real capture {CAPTURE.name} is missing (tests/data/real/SOURCES.md)")
    client = CliSlurm(slurm_conf=str(lab.conf))
    first, second = lab.nodes[:2]
    try:
        now = datetime.now(timezone.utc)
        _check(lab, tmp_path / "hw", first)
        ours = (client.node(first).extra or {}).get(extra.KEY)
        assert isinstance(ours, dict) and str(ours.get("host", "")).startswith("gpus-"), ours
        host = ours["host"]
        assert len(ours["machine"]["gpu_serials"]) == 8
        ledger = LedgerFile(tmp_path / "state")
        ledger.update(client.nodes(), [], now)
        # a rename: the same hardware comes back as the second node
        client.set_extra(first, extra.KEY, None)
        _check(lab, tmp_path / "hw", second)
        led = ledger.update(client.nodes(), [], now + timedelta(hours=1))
        m = led.machines[host]
        assert [n.name for n in m.names] == [first, second]
        assert m.kind == "gpu_serials" and len(m.gpu_serials) == 8
        assert led.names[second] == host and led.names.get(first) != host
        # a re-image of the second node: its Extra is empty until the check runs again
        client.set_extra(second, extra.KEY, None)
        led = ledger.update(client.nodes(), [], now + timedelta(hours=2))
        assert led.names[second] == host  # still on the V100S machine, not on "gpu0N"
        assert [n.name for n in led.machines[host].names] == [first, second]
        _check(lab, tmp_path / "hw", second)
        led = ledger.update(client.nodes(), [], now + timedelta(days=1, hours=3))
        assert [n.name for n in led.machines[host].names] == [first, second]
        assert led.machines[host].days_in_service() == 1.1
    finally:
        for node in (first, second):
            client.set_extra(node, extra.KEY, None)
