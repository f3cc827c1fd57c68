"""Machine identity on the real Slurm lab (SPEC D11): two nodes whose GPUs print the same
placeholder serial (real ``nvidia-smi -q`` captures, tests/data/real/nvidia) each with
an Xid 48 publish their alerts, but never one shared ``host``: each says its node name is
its identity. Before, both published ``gpus-<hash of "0000000000000">``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from slurm_heal.slurm.cli import CliSlurm
from tests.lab import Lab

pytestmark = pytest.mark.slurm

REAL = Path(__file__).resolve().parent.parent / "data" / "real" / "nvidia"
XID48 = "3,601,130223456,-;NVRM: Xid (PCI:0000:00:09): 48, pid=1234, name=python3, " \
        "An uncorrectable double bit error (DBE) has been detected on GPU.\n"


def _node(base: Path, capture: str) -> tuple[Path, Path]:
    """A replayed GPU node: an Xid 48 in its kernel log, an nvidia-smi printing the real
    ``-q`` capture, the check configured for the text format."""
    root, bin_dir = base / "root", base / "bin"
    (root / "dev").mkdir(parents=True)
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text(f"boot-{base.name}\n")
    (root / "proc/mounts").write_text("/dev/sda1 / ext4 rw 0 0\n")
    (root / "dev/kmsg").write_text(XID48)
    (root / "etc/slurm-heal").mkdir(parents=True)
    (root / "etc/slurm-heal/check.toml").write_text(
        '[nvidia]\nsmi_format = "text"\ndcgm = "off"\nnvlink = false\nexpected = 1\n'
        '[services]\nenabled = false\n[network]\nenabled = false\n'
        '[infiniband]\nenabled = false\n')
    bin_dir.mkdir()
    stub = bin_dir / "nvidia-smi"
    stub.write_text(f"#!/bin/sh\ncat '{REAL / capture}'\n")
    stub.chmod(0o755)
    return root, bin_dir


def _ours(client: CliSlurm, node: str) -> dict[str, Any]:
    value = (client.node(node).extra or {}).get("slurm_heal")
    assert isinstance(value, dict), client.node(node).extra
    return value


def test_two_machines_printing_placeholder_serials_are_two_machines(
        lab: Lab, tmp_path: Path) -> None:
    client = CliSlurm(slurm_conf=str(lab.conf))
    sections = {}
    for node, capture in zip(lab.nodes[:2], ("smi-q-h100-590.48.01.txt",
                                             "smi-q-l40s-595.80.txt"), strict=True):
        root, bin_dir = _node(tmp_path / node, capture)
        env = dict(lab.env, SLURM_HEAL_ROOT=str(root),
                   PATH=f"{bin_dir}:{lab.path_prefix}/usr/bin:/bin")
        out = subprocess.run([sys.executable, "-m", "slurm_heal.checks", "--node", node],
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 1, out.stdout + out.stderr
        sections[node] = _ours(client, node)
    for section in sections.values():
        assert [a["fault"] for a in section["alerts"]] == ["gpu.xid.48"], section
        assert "host" not in section, section  # no identity made from a placeholder
        assert section["machine"]["identity"] == "node_name"
        assert section["machine"]["placeholder_serials"] == ["0000000000000"]
