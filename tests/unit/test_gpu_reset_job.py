"""SPEC E6 on the node: the reset job's judgement of the tool's words, which GPUs are
reset together (NVSwitch/NVLink), the bounded tool (a stub that hangs is killed), and the
node check's rule that a latched Xid from before the reset is no current evidence.

Stub tools on PATH, a replay root (SLURM_HEAL_ROOT) and real files; no Slurm.
"""

from __future__ import annotations

import json
import os
import stat
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_heal import gpureset_job
from slurm_heal.checks import reset
from slurm_heal.checks.config import load_config
from slurm_heal.cli import cli
from tests.realdata import MISSING, REAL

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
# What the stub prints and exits with is chosen per test through files beside it.
STUB = """#!/bin/sh
dir=$(dirname "$0")
echo "$*" >> "$dir/calls"
if [ "$1" = "nvlink" ]; then cat "$dir/nvlink" 2>/dev/null; exit 0; fi
if [ -f "$dir/sleep" ]; then sleep "$(cat "$dir/sleep")"; fi
cat "$dir/say" 2>/dev/null
exit "$(cat "$dir/rc" 2>/dev/null || echo 0)"
"""


@pytest.mark.parametrize(("rc", "out", "ok", "words"), [
    (0, "GPU 00000000:3B:00.0 was successfully reset.\nAll done.", True, "successfully reset"),
    (255, "Unable to reset GPU 00000000:3B:00.0 because it's being used by some other "
     "process\nIn use by another client", False, "refused the reset (exit 255)"),
    (3, "The following GPUs could not be reset:\n  GPU 00000000:3B:00.0: Not Supported",
     False, "refused"),
    (1, "something broke", False, "failed (exit 1): something broke"),
    (0, "GPU 0: In use by another client", False, "In use by another client"),
])
def test_the_tools_exit_and_words_decide_the_step(rc: int, out: str, ok: bool,
                                                    words: str) -> None:
    """SPEC E6: exit 0 without a refusal is a reset; a refusal or a non-zero exit is a
    failed step carrying the tool's own words."""
    v = gpureset_job.judge("nvidia-smi", rc, out)
    assert v.ok is ok and words in v.detail, v.detail


def test_a_missing_or_timed_out_tool_is_a_failed_step() -> None:
    assert not gpureset_job.judge("nvidia-smi", None, "").ok
    v = gpureset_job.judge("nvidia-smi", -9, "", timed_out=True, timeout_s=2)
    assert not v.ok and "did not finish within 2s" in v.detail


def test_the_named_gpus_alone_unless_nvlink_or_nvswitch_ties_them(tmp_path: Path) -> None:
    """docs/policy.md "Which GPUs are reset together"."""
    assert gpureset_job.reset_argv("nvidia", [1, 3], False) == ["nvidia-smi", "-r", "-i", "1,3"]
    assert gpureset_job.reset_argv("nvidia", [1, 3], True) == ["nvidia-smi", "-r"]
    assert gpureset_job.reset_argv("amd", [2], False) == ["amd-smi", "reset", "--gpureset",
                                                          "-g", "2"]
    assert gpureset_job.nvlink_active("GPU 0: H100\n\t Link 0: 26.562 GB/s\n")
    assert not gpureset_job.nvlink_active("GPU 0: H100\n\t Link 0: <inactive>\n")
    assert not gpureset_job.nvswitch_system(str(tmp_path))
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/nvidia-nvswitch0").write_text("")
    assert gpureset_job.nvswitch_system(str(tmp_path))


class Node:
    """A node for the job: stub tools on PATH, a replay root with the check's state."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp = tmp
        self.bin = tmp / "bin"
        self.bin.mkdir()
        for tool in ("nvidia-smi", "amd-smi"):
            (self.bin / tool).write_text(STUB)
            (self.bin / tool).chmod(stat.S_IRWXU)
        self.root = tmp / "root"
        (self.root / "proc").mkdir(parents=True)
        self.check_toml = tmp / "check.toml"
        self.check_toml.write_text(f'[check]\nstate_dir = "{tmp / "state"}"\n')
        monkeypatch.setenv("PATH", f"{self.bin}:{os.environ['PATH']}")
        monkeypatch.setenv("SLURM_HEAL_ROOT", str(self.root))

    def tool(self, rc: int = 0, say: str = "", sleep: float | None = None,
             nvlink: str = "") -> None:
        (self.bin / "rc").write_text(f"{rc}\n")
        (self.bin / "say").write_text(say)
        (self.bin / "nvlink").write_text(nvlink)
        if sleep is not None:
            (self.bin / "sleep").write_text(f"{sleep}\n")

    def state(self) -> str:
        """The node check's state dir as the node reads it (under the replay root)."""
        return load_config(str(self.check_toml)).state_path()

    def calls(self) -> list[str]:
        p = self.bin / "calls"
        return p.read_text().splitlines() if p.exists() else []

    def run(self, gpus: list[int], timeout_s: float = 10, vendor: str = "nvidia") -> tuple[
            int, dict[str, object]]:
        spec = self.tmp / "spec.json"
        spec.write_text(json.dumps({"node": "gpu01", "vendor": vendor, "gpus": gpus,
                                    "timeout_s": timeout_s,
                                    "check_config": str(self.check_toml)}))
        out = self.tmp / "out"
        rc = gpureset_job.main(["--spec", str(spec), "--out", str(out)])
        return rc, json.loads((out / gpureset_job.RESULT).read_text())


@pytest.fixture
def n(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Node:
    return Node(tmp_path, monkeypatch)


def test_a_reset_resets_the_named_gpu_and_leaves_its_time_for_the_check(n: Node) -> None:
    """SPEC E6: nvidia-smi -r -i <the alert's GPU>; the reset's time and GPUs are left in
    the node check's state directory; the check runs after it."""
    n.tool(rc=0, say="GPU 00000000:3B:00.0 was successfully reset.\n")
    rc, result = n.run([2])
    assert rc == 0 and result["outcome"] == "ok", result
    assert "-r -i 2" in n.calls()
    marked = reset.read(n.state())
    assert marked is not None and marked[1] == frozenset({2})
    assert "check" in result


def test_gpus_linked_by_nvlink_are_reset_together(n: Node) -> None:
    n.tool(rc=0, nvlink="GPU 0: H100\n\t Link 0: 26.562 GB/s\n")
    rc, result = n.run([2])
    assert rc == 0 and "-r" in n.calls() and "-r -i 2" not in n.calls()
    assert "all GPUs are reset together" in str(result["detail"])
    marked = reset.read(n.state())
    assert marked is not None and marked[1] == frozenset()


def test_an_nvswitch_system_resets_all_gpus_with_the_fabric_manager_running(n: Node) -> None:
    """docs/policy.md: on an NVSwitch baseboard all GPUs and NVSwitches together; without
    nv-fabricmanager running, no reset at all (the step fails, the reboot follows)."""
    (n.root / "dev").mkdir()
    (n.root / "dev/nvidia-nvswitch0").write_text("")
    n.tool(rc=0)
    rc, result = n.run([2])
    assert rc == 1 and "Fabric Manager (nv-fabricmanager) is not running" in str(
        result["detail"])
    assert not any(c.startswith("-r") for c in n.calls())
    (n.root / "proc/4242").mkdir()
    (n.root / "proc/4242/comm").write_text("nv-fabricmanage\n")
    rc, result = n.run([2])
    assert rc == 0 and "-r" in n.calls() and "-r -i 2" not in n.calls()
    assert "NVSwitch system: all GPUs are reset together" in str(result["detail"])


def test_a_refused_reset_fails_with_its_words_and_leaves_no_mark(n: Node) -> None:
    """SPEC E6: "In use by another client" ends the step failed; the check's latched Xid
    stands (no reset happened)."""
    n.tool(rc=255, say="Unable to reset GPU 00000000:3B:00.0: In use by another client\n")
    rc, result = n.run([0])
    assert rc == 1 and result["outcome"] == "failed"
    assert "In use by another client" in str(result["detail"])
    assert reset.read(n.state()) is None and "check" not in result


def test_a_hung_reset_tool_is_killed_at_its_bound(n: Node) -> None:
    """House style 6 / SPEC E6: the tool that hangs is killed with its process group."""
    n.tool(rc=0, sleep=30)
    rc, result = n.run([0], timeout_s=1)
    assert rc == 1 and result["timed_out"] is True
    assert "did not finish within 1s" in str(result["detail"])


def _rec(fault: str, last: datetime, gpu: int | None) -> dict[str, object]:
    data = {"gpu_index": gpu} if gpu is not None else {}
    return {"fault": fault, "severity": "critical", "last_seen": last.isoformat(),
            "evidence": [{"source": "kernel_log", "text": "NVRM: Xid", "data": data}]}


def test_a_latched_xid_from_before_the_reset_is_no_current_evidence() -> None:
    """SPEC E6/D1: the reset GPU's Xid seen before the reset is dropped; one seen after
    it, another GPU's, and faults a reset does not fix stay."""
    latched = {
        "old": _rec("gpu.xid.119", T0 - timedelta(minutes=5), 2),
        "new": _rec("gpu.xid.119", T0 + timedelta(seconds=1), 2),
        "other": _rec("gpu.xid.119", T0 - timedelta(minutes=5), 5),
        "sxid": _rec("nvswitch.sxid.fatal", T0 - timedelta(minutes=5), None),
    }
    assert sorted(reset.after_reset(latched, T0, frozenset({2}))) == ["new", "other", "sxid"]
    assert sorted(reset.after_reset(latched, T0, frozenset())) == ["new", "sxid"]


def test_the_node_check_no_longer_sees_the_xid_after_the_reset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC E6/L5 through `slurm-heal check --dry-run` on a replayed kernel log: the Xid
    119 is found, the reset is marked, the next run no longer reports it; a new Xid after
    the reset is found again."""
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
    (root / "proc/mounts").write_text("/dev/vda1 / ext4 rw 0 0\n")
    kmsg = root / "dev/kmsg"
    xid = "3,2,2000,-;NVRM: Xid (PCI:0000:3b:00): 119, pid=1, name=python3, Timeout\n"
    kmsg.write_text("6,1,1000,-;Linux version 6.1.0\n" + xid)
    cfg = tmp_path / "check.toml"
    cfg.write_text('[services]\nenabled = false\n[mounts]\nrw = ["/"]\n')
    monkeypatch.setenv("SLURM_HEAL_ROOT", str(root))

    def faults() -> list[str]:
        res = CliRunner().invoke(cli, ["check", "--node", "gpu01", "--config", str(cfg),
                                       "--dry-run", "--json"])
        assert res.exit_code in (0, 1), res.output
        return sorted(f["fault"] for f in json.loads(res.output))

    assert "gpu.xid.119" in faults()
    reset.mark(str(cfg), datetime.now(timezone.utc), [])
    assert "gpu.xid.119" not in faults()
    with kmsg.open("a") as fh:  # the driver logs the Xid again, after the reset
        fh.write(xid.replace("3,2,2000", "3,3,3000"))
    assert "gpu.xid.119" in faults()


def test_the_real_xid_119_capture_is_dropped_after_a_reset_of_its_gpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC E6/D1 on a real capture (gpud's dmesg with an Xid 119 on PCI 0000:9b:00,
    tests/data/real/SOURCES.md), read as a kernel log file: found before the reset,
    gone after a reset of all GPUs; a reset of another GPU leaves it."""
    src = REAL / "dmesg-xid-119.log"
    if not src.exists():
        pytest.skip(MISSING)
    root = tmp_path / "root"
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
    (root / "proc/mounts").write_text("/dev/vda1 / ext4 rw 0 0\n")
    gpus = root / "proc/driver/nvidia/gpus"
    for i, bus in enumerate(("0000:1b:00.0", "0000:9b:00.0")):
        (gpus / bus).mkdir(parents=True)
        (gpus / bus / "information").write_text(f"Device Minor: {i * 4}\n")  # 9b: GPU 4
    cfg = tmp_path / "check.toml"
    cfg.write_text('[services]\nenabled = false\n[mounts]\nrw = ["/"]\n'
                   '[nvidia]\nenabled = false\n[kernel_log]\nsource = "file"\npath = "/var/log/kern.log"\n')
    (root / "var/log").mkdir(parents=True)
    (root / "var/log/kern.log").symlink_to(src)  # read in place, never copied
    monkeypatch.setenv("SLURM_HEAL_ROOT", str(root))

    def xid119() -> list[dict[str, object]]:
        res = CliRunner().invoke(cli, ["check", "--node", "gpu01", "--config", str(cfg),
                                       "--dry-run", "--json"])
        assert res.exit_code in (0, 1), res.output
        return [f for f in json.loads(res.stdout) if f["fault"] == "gpu.xid.119"]

    (found,) = xid119()
    assert found["evidence"][0]["data"]["gpu_index"] == 4  # type: ignore[index]
    reset.mark(str(cfg), datetime.now(timezone.utc), [0])
    assert xid119()  # GPU 0 was reset, not GPU 4
    reset.mark(str(cfg), datetime.now(timezone.utc), [4])
    assert not xid119()
