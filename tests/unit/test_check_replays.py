"""`slurm-heal check --json` on replayed nodes (SPEC D2, D3, D6, D8, D9, I1).

Each test builds a node under ``SLURM_HEAL_ROOT`` (kernel log, mounts, the driver's GPU
list, the InfiniBand tree) and puts stub tools first on PATH that print the golden
files (``tests/data/nvidia``, ``tests/data/amd``), then runs the real check command
(``python -m slurm_heal.checks --json --dry-run``) and asserts exactly the faults found.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realdata import MISSING, REAL

DATA = Path(__file__).resolve().parent.parent / "data"
NV = DATA / "nvidia"
AMD = DATA / "amd"
IB = REAL / "sys-class-infiniband-h100"
BUSES = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
needs_ib = pytest.mark.skipif(
    not IB.is_dir() and os.environ.get("CI") != "true",
    reason=MISSING)


class Replay:
    """A replayed node: a root dir, a stub dir on PATH, a config file."""

    def __init__(self, base: Path) -> None:
        self.root = base / "root"
        self.bin = base / "bin"
        self.bin.mkdir()
        (self.root / "dev").mkdir(parents=True)
        (self.root / "proc/sys/kernel/random").mkdir(parents=True)
        (self.root / "proc/sys/kernel/random/boot_id").write_text("replay-boot\n")
        (self.root / "proc/uptime").write_text("5000.0 100.0\n")
        (self.root / "proc/mounts").write_text("/dev/sda1 / ext4 rw,relatime 0 0\n")
        (self.root / "dev/kmsg").write_text(
            "6,1,1000,-;nvidia-nvswitch0: open (major=510)\n"
            "6,2,2000,-;EXT4-fs (nvme1n1): mounted filesystem with ordered data mode.\n")
        self.config: dict[str, dict[str, Any]] = {
            "services": {"enabled": False}, "network": {"enabled": False},
            "disk": {"paths": ["/"], "min_free_percent": 0.001},
            "infiniband": {"expected_rate": 400, "ports": 8},
        }

    def nvidia_node(self, gpus: int = 8) -> None:
        for bus in BUSES[:gpus]:
            d = self.root / f"proc/driver/nvidia/gpus/0000:{bus}:00.0"
            d.mkdir(parents=True)
            (d / "information").write_text(f"Model: NVIDIA H100 80GB HBM3\nDevice Minor: "
                                           f"{BUSES.index(bus)}\n")
        self.config["gpus"] = {"expected": 8}
        self.config["nvidia"] = {"dcgm": "off"}
        self.smi(xml="smi-q-x-healthy-8.xml", nvlink="nvlink-s-healthy-8.txt")

    def ib(self, edit: dict[str, str] | None = None) -> None:
        dst = self.root / "sys/class/infiniband"
        shutil.copytree(IB, dst)
        for p in dst.rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        for rel, text in (edit or {}).items():
            (dst / rel).write_text(text)

    def stub(self, name: str, script: str) -> None:
        path = self.bin / name
        path.write_text("#!/bin/sh\n" + script)
        path.chmod(0o755)

    def smi(self, xml: str = "", nvlink: str = "", stderr: str = "", rc: int = 0,
            hang: bool = False) -> None:
        """nvidia-smi printing golden files (copied to current-*, so a test can swap
        what the next run sees)."""
        if xml:
            shutil.copy(NV / xml, self.bin / "current.xml")
        if nvlink:
            shutil.copy(NV / nvlink, self.bin / "current-nvlink.txt")
        body = "sleep 30\n" if hang else ""
        self.stub("nvidia-smi", body + f"""case "$1" in
  -q) cat "{self.bin}/current.xml"; {f'echo "{stderr}" >&2' if stderr else ':'}; exit {rc};;
  nvlink) cat "{self.bin}/current-nvlink.txt";;
  --query-gpu=*) cat "{NV}/query-gpu-healthy-8.csv";;
  --query-remapped-rows=*) cat "{NV}/query-remapped-rows-healthy-8.csv";;
  *) echo "stub nvidia-smi: unexpected $*" >&2; exit 2;;
esac
""")

    def run(self, program: tuple[str, ...] = (sys.executable, "-m", "slurm_heal.checks")
            ) -> tuple[int, list[dict[str, Any]], str]:
        """The check on this node; ``program``: how it is started (default: this
        interpreter's package; an installed ``slurm-heal check`` for an install's test)."""
        lines = []
        for section, values in self.config.items():
            lines.append(f"[{section}]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
        conf = self.root / "etc/slurm-heal/check.toml"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text("\n".join(lines) + "\n")
        env = dict(os.environ, SLURM_HEAL_ROOT=str(self.root),
                   PATH=f"{self.bin}:/usr/bin:/bin")
        res = subprocess.run([*program, "--json", "--dry-run", "--node", "gpu07"], env=env,
                             capture_output=True, text=True, timeout=60, check=False)
        assert res.returncode in (0, 1, 10), res.stderr
        return res.returncode, json.loads(res.stdout), res.stderr


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Replay]:
    yield Replay(tmp_path)


def ids(findings: list[dict[str, Any]]) -> list[str]:
    return sorted(f["fault"] for f in findings)


def test_a_healthy_8_gpu_nvidia_node_reports_nothing(node: Replay) -> None:
    node.nvidia_node()
    if IB.is_dir():
        node.ib()
    code, found, err = node.run()
    assert (code, found) == (0, []), err


@pytest.mark.parametrize("xml,expected", [
    ("smi-q-x-dbe.xml", ["gpu.ecc.dbe"]),
    ("smi-q-x-remap-pending.xml", ["gpu.row_remap.pending"]),
    ("smi-q-x-remap-failure.xml", ["gpu.row_remap.failure"]),
])
def test_one_nvidia_fault_per_replay(node: Replay, xml: str, expected: list[str]) -> None:
    node.nvidia_node()
    node.smi(xml=xml)
    code, found, _ = node.run()
    assert (code, ids(found)) == (1, expected)
    ev = found[0]["evidence"][0]
    assert ev["source"] == "nvidia-smi (xml)" and ev["data"]["serial"].startswith("1654922")


def test_pcie_replays_growing_between_runs(node: Replay) -> None:
    node.nvidia_node()
    assert node.run()[1] == []
    node.smi(xml="smi-q-x-replays-grown.xml")
    _, found, _ = node.run()
    assert ids(found) == ["gpu.pcie.replay_rate"]
    assert found[0]["evidence"][0]["data"]["previous"] == 12


def test_sustained_thermal_slowdown(node: Replay) -> None:
    node.nvidia_node()
    node.config["nvidia"]["thermal_for"] = 0.05
    node.smi(xml="smi-q-x-thermal.xml")
    assert node.run()[1] == []  # first seen: not yet sustained
    time.sleep(0.1)
    assert ids(node.run()[1]) == ["gpu.thermal"]


def test_an_nvlink_down(node: Replay) -> None:
    node.nvidia_node()
    node.smi(nvlink="nvlink-s-link-down.txt")
    _, found, _ = node.run()
    assert ids(found) == ["gpu.nvlink.down"]
    assert found[0]["evidence"][0]["data"]["link"] == 7


def test_a_lost_gpu_is_off_the_bus(node: Replay) -> None:
    node.nvidia_node()
    xml = (NV / "smi-q-x-healthy-8.xml").read_text()
    start = xml.index('\t<gpu id="00000000:3A:00.0">')
    end = xml.index("\t</gpu>\n", start) + len("\t</gpu>\n")
    (node.bin / "seven.xml").write_text(xml[:start] + xml[end:])
    node.smi(stderr="Unable to determine the device handle for gpu 0000:3A:00.0: GPU is lost.  "
             "Reboot the system to recover this GPU", rc=15)
    shutil.copy(node.bin / "seven.xml", node.bin / "current.xml")
    _, found, _ = node.run()
    assert ids(found) == ["gpu.off_bus"]
    assert found[0]["evidence"][0]["data"]["pci"] == "0000:3a:00.0"


def test_fewer_gpus_than_configured(node: Replay) -> None:
    node.nvidia_node(gpus=7)  # the driver lists 7; nvidia-smi answers for 8 (stub)
    _, found, _ = node.run()
    assert ids(found) == ["gpu.missing"]
    assert found[0]["detector"] == "gpus"


def test_dcgm_health_incidents(node: Replay) -> None:
    node.nvidia_node()
    node.config["nvidia"]["dcgm"] = "on"
    node.stub("dcgmi", f'cat "{NV}/dcgmi-health-faults.json"\n')
    _, found, _ = node.run()
    assert ids(found) == ["gpu.ecc.dbe", "gpu.health", "gpu.nvlink.down",
                          "gpu.pcie.replay_rate"]


def test_a_hung_nvidia_smi_is_killed_reported_and_keeps_what_was_found(node: Replay) -> None:
    node.nvidia_node()
    node.smi(xml="smi-q-x-dbe.xml")
    assert ids(node.run()[1]) == ["gpu.ecc.dbe"]
    node.config["nvidia"]["tool_timeout"] = 0.5
    node.smi(hang=True)
    t = time.monotonic()
    code, found, _ = node.run()
    assert time.monotonic() - t < 20  # killed at its timeout, never a hung check
    assert (code, ids(found)) == (1, ["gpu.ecc.dbe", "gpu.tool.hung"])
    hung = next(f for f in found if f["fault"] == "gpu.tool.hung")
    assert hung["evidence"][0]["data"]["argv"][0] == "nvidia-smi"


def test_csv_mode_on_a_healthy_node(node: Replay) -> None:
    node.nvidia_node()
    node.config["nvidia"]["smi_format"] = "csv"
    assert node.run()[:2] == (0, [])


def test_an_amd_node(node: Replay) -> None:
    node.config["amd"] = {"expected": 8, "thermal_for": 0.05}
    (node.root / "sys/module/amdgpu").mkdir(parents=True)
    node.stub("amd-smi", f"""case "$1" in
  list) cat "{AMD}/amd-smi-list-8.json";;
  metric) cat "{AMD}/amd-smi-metric-faults.json";;
esac
""")
    _, found, _ = node.run()
    assert ids(found) == ["gpu.ecc.dbe"]
    assert found[0]["detector"] == "amd" and found[0]["evidence"][0]["data"]["pci"] == \
        "0000:26:00.0"
    time.sleep(0.1)
    assert ids(node.run()[1]) == ["gpu.ecc.dbe", "gpu.thermal"]


def test_a_healthy_amd_node_and_no_nvidia(node: Replay) -> None:
    node.config["amd"] = {"expected": 8}
    node.stub("amd-smi", f"""case "$1" in
  list) cat "{AMD}/amd-smi-list-8.json";;
  metric) cat "{AMD}/amd-smi-metric-healthy-8.json";;
esac
""")
    assert node.run()[:2] == (0, [])


@needs_ib
def test_infiniband_up(node: Replay) -> None:
    node.ib()
    assert node.run()[:2] == (0, [])


@needs_ib
def test_infiniband_down(node: Replay) -> None:
    node.ib({"mlx5_5/ports/1/state": "1: DOWN\n", "mlx5_5/ports/1/phys_state": "2: Polling\n"})
    _, found, _ = node.run()
    assert ids(found) == ["ib.link_down"]
    assert found[0]["evidence"][0]["data"]["device"] == "mlx5_5"


@needs_ib
def test_infiniband_degraded(node: Replay) -> None:
    node.ib({"mlx5_7/ports/1/rate": "200 Gb/sec (2X NDR)\n"})
    _, found, _ = node.run()
    assert ids(found) == ["ib.link_degraded"]


def test_an_unreachable_endpoint(node: Replay) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    try:
        up, down = (f"127.0.0.1:{s.getsockname()[1]}" for s in (srv, closed))
        node.config["network"] = {"endpoints": [up, down], "unreachable_for": 0.05,
                                  "connect_timeout": 1.0}
        assert node.run()[1] == []  # first failure: not yet long enough
        time.sleep(0.1)
        _, found, _ = node.run()
    finally:
        srv.close()
        closed.close()
    assert ids(found) == ["host.unreachable"]
    assert found[0]["evidence"][0]["data"]["endpoint"] == down


def test_low_disk_space_is_reported(node: Replay) -> None:
    node.config["disk"] = {"paths": ["/"], "min_free_percent": 100.0}
    code, found, _ = node.run()
    assert (code, ids(found)) == (1, ["disk.low_space"])
