"""SPEC O1, liveness that does not lie: the controller's heartbeat says when a cycle
last succeeded and what failed since; a node check whose detector fails says so
centrally (a record-only ``check.detector_error`` alert with the error as evidence) and
refreshes ``checked_at`` on its heartbeat (issue 43: at most every ``[check] heartbeat``
while nothing changes; a run in between costs Slurm nothing).

The real `run_forever` loop and `Controller` over the in-process `MemorySlurm`; the node
check on a replay root (as tests/unit/test_check_run.py)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_heal import catalog, extra, heartbeat
from slurm_heal.checks import config, fastcli, runner
from slurm_heal.controller import Controller, run_forever
from slurm_heal.errors import SlurmUnreachable
from slurm_heal.location import Location
from slurm_heal.providers import make_provider
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.types import ClusterView

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
NOISE = "6,500,100,-;IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready\n"


class BlindSlurm(MemorySlurm):
    """A cluster whose slurmctld does not answer while ``down`` is set."""

    down = False

    def snapshot(self) -> ClusterView:
        if self.down:
            raise SlurmUnreachable("slurmctld does not answer (test)")
        return super().snapshot()


def _controller(tmp_path: Path, slurm: MemorySlurm) -> Controller:
    from slurm_heal.config import load_policy

    cfg = tmp_path / "heal.toml"
    cfg.write_text('[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\n')
    policy = load_policy(cfg)
    return Controller(slurm=slurm, provider=make_provider(policy.provider.table),
                      store=Store(tmp_path / "state"), policy=policy, clock=lambda: T0)


def test_heartbeat_of_a_blind_daemon_keeps_its_last_success_and_says_what_failed(
        tmp_path: Path) -> None:
    """SPEC O1: a cycle that could not read Slurm is not a success."""
    slurm = BlindSlurm([("gpu01", "a")], clock=lambda: T0)
    ctl = _controller(tmp_path, slurm)
    beat_file = tmp_path / "state" / "heartbeat"
    run_forever(ctl, 0.001, beat_file, max_cycles=1)
    first = heartbeat.read(beat_file)
    assert first is not None and first.last_success == T0 and not first.failing
    assert ctl.last_failure is None

    slurm.down = True
    run_forever(ctl, 0.001, beat_file, max_cycles=2)
    blind = heartbeat.read(beat_file)
    assert blind is not None
    assert blind.at == T0 and blind.last_success == T0  # alive, but nothing new succeeded
    assert blind.failures_since_success == 2 and blind.failing
    assert "Slurm unavailable" in blind.last_error and "does not answer" in blind.last_error
    assert isinstance(ctl.last_failure, SlurmUnreachable)  # `daemon --once` raises it: exit 3
    # The CLI's store location still sees a live controller (writes are not refused).
    assert Location(tmp_path / "state", "test").last_heartbeat() == T0

    slurm.down = False
    run_forever(ctl, 0.001, beat_file, max_cycles=1)
    back = heartbeat.read(beat_file)
    assert back is not None and not back.failing and back.last_error  # the error is kept
    assert ctl.last_failure is None


def test_a_heartbeat_written_by_an_older_build_reads_as_a_success(tmp_path: Path) -> None:
    beat = tmp_path / "heartbeat"
    beat.write_text(T0.isoformat() + "\n")
    read = heartbeat.read(beat)
    assert read is not None and read.at == T0 and read.last_success == T0


# --------------------------------------------------------------------------- node check


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "root"
    monkeypatch.setenv("SLURM_HEAL_ROOT", str(root))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    (root / "dev").mkdir(parents=True)
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
    (root / "dev/kmsg").write_text(NOISE)
    (root / "proc/mounts").write_text("/dev/sda1 / ext4 rw,relatime 0 0\n")
    return root


def _ours(slurm: MemorySlurm) -> dict[str, object]:
    value = (slurm.node("gpu01").extra or {}).get(extra.KEY)
    assert isinstance(value, dict)
    return value


def test_a_detector_that_cannot_read_the_kernel_log_is_published_as_a_record_only_alert(
        root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SPEC O1, D7, D8: never "healthy" beside the error; the error is the evidence."""
    slurm = MemorySlurm([("gpu01", "gpu")], clock=lambda: T0)
    (root / "dev/kmsg").unlink()
    result = runner.run_check(config.CheckConfig(), node_name="gpu01", client=slurm, now=T0)
    assert result.exit_code == runner.EXIT_DETECTOR_FAILED
    (alert,) = [a for a in result.alerts if a.fault == runner.DETECTOR_ERROR]
    assert alert.severity.value == "warning" and alert.detector == "kernel_log"
    (ev,) = alert.evidence
    assert ev.data == {"detector": "kernel_log", "status": "error"} and ev.text
    published = _ours(slurm)["alerts"]
    assert isinstance(published, list)
    assert [a["fault"] for a in published] == [runner.DETECTOR_ERROR]
    assert published[0]["evidence"][0]["text"] == ev.text  # unchanged (D7)
    assert not slurm.node("gpu01").drained  # record only: the node stays in service
    fault = catalog.load().get(runner.DETECTOR_ERROR)
    assert fault.record_only and fault.action.value == "none"
    fastcli.render_text(result, out := __import__("io").StringIO())
    assert "healthy" not in out.getvalue() and runner.DETECTOR_ERROR in out.getvalue()

    # The detector works again: the alert goes away by itself.
    (root / "dev/kmsg").write_text(NOISE)
    later = runner.run_check(config.CheckConfig(), node_name="gpu01", client=slurm,
                             now=T0 + timedelta(minutes=5))
    assert later.exit_code == runner.EXIT_HEALTHY and _ours(slurm)["alerts"] == []


def test_the_health_check_refreshes_checked_at_on_its_heartbeat_and_prolog_epilog_stay_quiet(
        root: Path) -> None:
    """SPEC O1: a check gone quiet shows as a stale checked_at; cheap prolog/epilog. Issue
    43: the refresh is the heartbeat (30 min), not every run: a healthy run in between
    calls Slurm not at all."""
    slurm = MemorySlurm([("gpu01", "gpu")], clock=lambda: T0)
    calls: list[int] = []

    def factory() -> MemorySlurm:
        calls.append(1)
        return slurm

    def run(mode: str, at: datetime) -> None:
        runner.run_check(config.CheckConfig(), node_name="gpu01", mode=mode,
                         client_factory=factory, now=at)

    run("healthcheck", T0)
    assert _ours(slurm)["checked_at"] == T0.isoformat()
    assert _ours(slurm)["heartbeat_s"] == 1800  # the controller's staleness follows it
    run("epilog", T0 + timedelta(minutes=1))
    run("prolog", T0 + timedelta(minutes=2))
    run("healthcheck", T0 + timedelta(minutes=5))
    run("healthcheck", T0 + timedelta(minutes=29))
    assert calls == [1]
    later = T0 + timedelta(minutes=30)
    run("healthcheck", later)
    assert calls == [1, 1]
    assert json.loads(json.dumps(_ours(slurm)))["checked_at"] == later.isoformat()
