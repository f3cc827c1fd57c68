"""The `slurm` provider's reboot, read from what Slurm 25.11.7 really printed around one
(SPEC L5, I6): golden captures of `scontrol --json show node gpu02` from the 25.11 lab
(tests/data/slurm/25.11/reboot-*.json, see tests/data/README.md) for a node drained with
our marker and rebooted with plain `scontrol reboot` (the drain kept): before, while the
reboot is issued, back (IDLE+DRAIN, a new boot time), and after slurmctld gave up on the
boot ("reboot timed out").

The provider talks through the real cli backend; `scontrol` and `sinfo` on PATH are
programs that print the capture of the moment (as the real commands printed it) and
record every write, so nothing of our own is patched."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from slurm_heal.providers.slurm import SlurmRebootProvider
from slurm_heal.slurm.cli import CliSlurm, parse_sinfo_json
from slurm_heal.types import Action

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "slurm" / "25.11"
NODE = "gpu02"
MARKER = "heal: cordon rem=r-cap gpu.xid.79"


class Slurm2511:
    """`sinfo`/`scontrol` programs that answer with one capture at a time."""

    def __init__(self, directory: Path) -> None:
        self.bin = directory / "bin"
        self.bin.mkdir(parents=True)
        self.current = directory / "node.json"
        self.writes = directory / "writes"
        (self.bin / "sinfo").write_text("#!/bin/sh\necho 'slurm 25.11.7'\n")
        (self.bin / "scontrol").write_text(
            "#!/bin/sh\n"
            'if [ "$1" = "--json" ]; then cat "' + str(self.current) + '"; exit 0; fi\n'
            'echo "$@" >> "' + str(self.writes) + '"\n')
        for name in ("sinfo", "scontrol"):
            (self.bin / name).chmod(0o755)

    def show(self, capture: str, **changes: Any) -> None:
        """Answer with the capture (``changes`` applied to its node, for a derived case)."""
        data = json.loads((CAPTURES / f"reboot-{capture}.json").read_text())
        data["nodes"][0].update(changes)
        self.current.write_text(json.dumps(data))

    def written(self) -> list[str]:
        return self.writes.read_text().splitlines() if self.writes.exists() else []


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Slurm2511:
    fake = Slurm2511(tmp_path / "slurm")
    monkeypatch.setenv("PATH", f"{fake.bin}:/usr/bin:/bin")
    return fake


def submitted_at(capture: str) -> datetime:
    """When the reboot was asked for: just after the capture's drain."""
    node = json.loads((CAPTURES / f"reboot-{capture}.json").read_text())["nodes"][0]
    return datetime.fromtimestamp(node["reason_changed_at"]["number"] + 1, tz=timezone.utc)


def provider(slurm: Slurm2511, tmp_path: Path, now: datetime) -> SlurmRebootProvider:
    assert shutil.which("scontrol") == str(slurm.bin / "scontrol")
    return SlurmRebootProvider(CliSlurm(), state_dir=tmp_path, timeout=1800,
                               clock=lambda: now)


def test_the_captures_are_25_11_s_reboot_states_of_a_node_drained_with_our_marker() -> None:
    """What the other tests stand on: each capture is the state it is named for."""
    def node(capture: str) -> Any:
        return parse_sinfo_json((CAPTURES / f"reboot-{capture}.json").read_text())[0]

    drained, issued, back = node("drained"), node("issued"), node("back")
    assert drained.states == {"IDLE", "DRAIN"} and drained.reason == MARKER
    assert issued.states == {"DOWN", "DRAIN", "REBOOT_ISSUED"}
    assert issued.reason == f"{MARKER} : reboot issued"
    assert back.states == {"IDLE", "DRAIN"} and back.reason == f"{MARKER} : reboot issued"
    assert back.boot_time and drained.boot_time and back.boot_time > drained.boot_time
    timed_out = node("timed-out")
    assert timed_out.states == {"DOWN", "DRAIN"}
    assert timed_out.reason == f"{MARKER} : reboot issued : reboot timed out"


def test_a_25_11_reboot_runs_while_issued_and_succeeds_once_the_node_is_back_drained(
        slurm: Slurm2511, tmp_path: Path) -> None:
    """SPEC L5: the drain is kept through the boot; the operation finishes on the new
    boot time, with the node still drained by us (the controller resumes it)."""
    slurm.show("drained")
    p = provider(slurm, tmp_path, submitted_at("drained"))
    op = p.submit(NODE, Action.REBOOT, "r-cap:act:0")
    assert op.status == "running"
    assert slurm.written() == [f"reboot {NODE}"]  # drained with our marker already
    slurm.show("issued")
    assert p.status("r-cap:act:0").status == "running"  # type: ignore[union-attr]
    slurm.show("back")
    done = p.status("r-cap:act:0")
    assert done is not None and done.status == "succeeded", done
    assert "is back (boot time 2026-11-30T23:" in done.detail


def test_a_25_11_reboot_slurm_gave_up_on_fails_with_slurm_s_reason(
        slurm: Slurm2511, tmp_path: Path) -> None:
    slurm.show("drained")
    p = provider(slurm, tmp_path, submitted_at("drained"))
    p.submit(NODE, Action.REBOOT, "r-cap:act:1")
    slurm.show("timed-out")
    failed = p.status("r-cap:act:1")
    assert failed is not None and failed.status == "failed"
    assert failed.detail == f"Slurm: {MARKER} : reboot issued : reboot timed out"


def test_a_timed_out_reason_left_by_an_earlier_reboot_neither_fails_nor_rides_on_the_next(
        slurm: Slurm2511, tmp_path: Path) -> None:
    """Slurm appends " : reboot timed out" once and keeps it. The next reboot of that
    node is asked for with our marker as we wrote it (the node drained again with it),
    and while Slurm still shows the old text during the new boot (REBOOT_ISSUED), the
    new operation is running, not failed."""
    stale = f"{MARKER} : reboot issued : reboot timed out"
    slurm.show("drained", reason=stale)
    p = provider(slurm, tmp_path, submitted_at("drained"))
    p.submit(NODE, Action.REBOOT, "r-cap:act:2")
    assert slurm.written() == [f"update nodename={NODE} state=drain reason={MARKER}",
                               f"reboot {NODE}"]
    slurm.show("issued", reason=stale)
    assert p.status("r-cap:act:2").status == "running"  # type: ignore[union-attr]
    slurm.show("back", reason=stale)
    assert p.status("r-cap:act:2").status == "succeeded"  # type: ignore[union-attr]


def test_a_reboot_issued_flag_slurm_22_05_leaves_beside_the_new_boot_does_not_hold_the_reboot(
        slurm: Slurm2511, tmp_path: Path) -> None:
    """Seen on 22.05.8 in the lab: a reboot issued while the node's slurmd had just
    answered left the node IDLE+DRAIN+REBOOT_ISSUED after the new boot, for good (no
    "reboot timed out" follows). The boot happened; the operation succeeds, the node still
    drained by us. (The 25.11 'back' capture with 22.05's leftover flag added.)"""
    slurm.show("drained")
    p = provider(slurm, tmp_path, submitted_at("drained"))
    p.submit(NODE, Action.REBOOT, "r-cap:act:3")
    slurm.show("issued")
    assert p.status("r-cap:act:3").status == "running"  # type: ignore[union-attr]
    slurm.show("back", state=["IDLE", "DRAIN", "REBOOT_ISSUED"])
    done = p.status("r-cap:act:3")
    assert done is not None and done.status == "succeeded", done


def test_a_further_reboot_requested_after_the_boot_keeps_the_operation_running(
        slurm: Slurm2511, tmp_path: Path) -> None:
    """REBOOT_REQUESTED beside the new boot time: Slurm has another reboot to do."""
    slurm.show("drained")
    p = provider(slurm, tmp_path, submitted_at("drained"))
    p.submit(NODE, Action.REBOOT, "r-cap:act:4")
    slurm.show("back", state=["IDLE", "DRAIN", "REBOOT_REQUESTED"])
    assert p.status("r-cap:act:4").status == "running"  # type: ignore[union-attr]
