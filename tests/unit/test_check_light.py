"""Issue 43, light on slurmctld: a healthy node's check costs the controller nothing
between heartbeats, a changed finding one write at once (SPEC O1, D7, S8, L5).

The real node check on a replay root (as tests/unit/test_check_run.py) against the
in-process `MemorySlurm`, with every call the check makes to the Slurm port counted: a
count is behaviour (what slurmctld would be sent), not timing.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from slurm_heal import extra
from slurm_heal.checks import config, runner
from slurm_heal.errors import ConfigError
from slurm_heal.models import State
from slurm_heal.readmodel import overview
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.types import Alert, Evidence, NodeInfo, Severity

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
NOISE = "6,500,100,-;IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready\n"
XID79 = ("2,501,130223456,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU "
         "has fallen off the bus.\n")
XID13 = "4,502,130223999,-;NVRM: Xid (PCI:0000:18:00): 13, Graphics Exception: ESR 0x404600\n"
XID13_AGAIN = ("4,503,130229999,-;NVRM: Xid (PCI:0000:18:00): 13, Graphics Exception: ESR "
               "0x404600\n")


class CountedSlurm(MemorySlurm):
    """The in-memory cluster, counting what the node check asks of it (reads, writes)."""

    def __init__(self) -> None:
        super().__init__([("gpu01", "gpu"), ("gpu02", "gpu")], clock=lambda: T0)
        self.calls: Counter[str] = Counter()

    def node(self, name: str) -> NodeInfo:
        self.calls["node"] += 1
        return super().node(name)

    def set_extra(self, node: str, key: str, value: Any | None,
                  current: str | None = None) -> None:
        self.calls["set_extra"] += 1
        super().set_extra(node, key, value, current=current)

    def drain(self, node: str, reason: str) -> None:
        self.calls["drain"] += 1
        super().drain(node, reason)

    def resume(self, node: str) -> None:
        self.calls["resume"] += 1
        super().resume(node)

    def take(self) -> dict[str, int]:
        """The calls since the last take (zeros left out)."""
        out = {k: v for k, v in self.calls.items() if v}
        self.calls.clear()
        return out


class Node:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "dev").mkdir(parents=True)
        (root / "proc/sys/kernel/random").mkdir(parents=True)
        (root / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
        (root / "dev/kmsg").write_text(NOISE)
        (root / "proc/mounts").write_text("/dev/sda1 / ext4 rw,relatime 0 0\n")

    def log(self, line: str) -> None:
        with (self.root / "dev/kmsg").open("a") as fh:
            fh.write(line)


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Node:
    monkeypatch.setenv("SLURM_HEAL_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no systemctl: services unsupported
    return Node(tmp_path / "root")


@pytest.fixture
def slurm() -> CountedSlurm:
    return CountedSlurm()


def check(slurm: CountedSlurm, at: datetime, mode: str = "healthcheck",
          only: frozenset[str] | None = None, publish: bool = False,
          cfg: config.CheckConfig | None = None) -> runner.CheckResult:
    return runner.run_check(cfg or config.CheckConfig(), node_name="gpu01", mode=mode,
                            client=slurm, now=at, only=only, publish=publish)


def ours(slurm: MemorySlurm) -> dict[str, Any]:
    value = (MemorySlurm.node(slurm, "gpu01").extra or {}).get(extra.KEY)
    assert isinstance(value, dict)
    return value


def test_a_healthy_node_whose_findings_did_not_change_writes_nothing_between_heartbeats(
        node: Node, slurm: CountedSlurm) -> None:
    """Issue 43, SPEC O1: the first run publishes (one read, one write); the healthy runs
    after it, every 5 minutes up to the heartbeat, call Slurm not at all."""
    check(slurm, T0)
    assert slurm.take() == {"node": 1, "set_extra": 1}
    for minutes in (5, 10, 15, 20, 25, 29):
        result = check(slurm, T0 + timedelta(minutes=minutes))
        assert result.exit_code == runner.EXIT_HEALTHY
        assert slurm.take() == {}, f"a healthy run at +{minutes} min called Slurm"
    assert ours(slurm)["checked_at"] == T0.isoformat()


def test_the_heartbeat_when_due_is_one_read_and_one_write(node: Node,
                                                         slurm: CountedSlurm) -> None:
    """SPEC O1: at [check] heartbeat (30 min by default) since the last write, one run
    rewrites checked_at (one read for the merge, one write); then quiet again."""
    check(slurm, T0)
    slurm.take()
    check(slurm, T0 + timedelta(minutes=25))
    assert slurm.take() == {}
    beat = T0 + timedelta(minutes=31)
    check(slurm, beat)
    assert slurm.take() == {"node": 1, "set_extra": 1}
    assert ours(slurm)["checked_at"] == beat.isoformat()
    assert ours(slurm)["heartbeat_s"] == 1800
    check(slurm, beat + timedelta(minutes=5))
    assert slurm.take() == {}


def test_a_shorter_configured_heartbeat_is_kept_and_published(node: Node,
                                                              slurm: CountedSlurm) -> None:
    cfg = config.parse_config({"check": {"heartbeat": "10m"}})
    assert cfg.heartbeat == 600.0
    check(slurm, T0, cfg=cfg)
    slurm.take()
    check(slurm, T0 + timedelta(minutes=5), cfg=cfg)
    assert slurm.take() == {}
    check(slurm, T0 + timedelta(minutes=10), cfg=cfg)
    assert slurm.take() == {"node": 1, "set_extra": 1}
    assert ours(slurm)["heartbeat_s"] == 600


def test_a_heartbeat_longer_than_a_day_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"check\.heartbeat.*at most 24h"):
        config.parse_config({"check": {"heartbeat": "2d"}})


def test_a_new_fault_is_one_write_and_one_drain_at_once(node: Node,
                                                        slurm: CountedSlurm) -> None:
    """Issue 43 (the fault path is not slower), SPEC D1, D7: a changed finding publishes
    and drains in the same run, with one read of the node shared by both."""
    check(slurm, T0)
    slurm.take()
    node.log(XID79)
    check(slurm, T0 + timedelta(minutes=5))
    assert slurm.take() == {"node": 1, "set_extra": 2, "drain": 1}  # the 2nd: "drained" (S8)
    (alert,) = ours(slurm)["alerts"]
    assert alert["fault"] == "gpu.xid.79"
    assert alert["evidence"][0]["text"] == XID79.strip()  # D7: the record as logged
    assert MemorySlurm.node(slurm, "gpu01").reason.startswith("heal: gpu.xid.79 by=check")


def test_a_standing_warning_is_written_once_and_a_new_event_of_it_at_once(
        node: Node, slurm: CountedSlurm) -> None:
    """A record-only Xid 13 is published once; the runs after it that find nothing new
    write nothing; a second Xid 13 line is new evidence: written in that run (D7)."""
    check(slurm, T0)
    node.log(XID13)
    check(slurm, T0 + timedelta(minutes=1))
    assert slurm.take() == {"node": 2, "set_extra": 2}  # the first run, then the Xid
    for minutes in (5, 10):
        check(slurm, T0 + timedelta(minutes=minutes))
        assert slurm.take() == {}
    node.log(XID13_AGAIN)
    check(slurm, T0 + timedelta(minutes=15))
    assert slurm.take() == {"node": 1, "set_extra": 1}
    (alert,) = ours(slurm)["alerts"]
    assert len(alert["evidence"]) == 2


def test_a_standing_condition_is_not_rewritten_for_its_read_time(
        node: Node, slurm: CountedSlurm) -> None:
    """A read-only root (a condition; its evidence carries the time it was read, which
    changes every run) drains once; the runs after it read the node once each (is it
    still drained? SPEC S8) and write nothing."""
    (node.root / "proc/mounts").write_text("/dev/sda1 / ext4 ro,relatime 0 0\n")
    check(slurm, T0)
    assert slurm.take() == {"node": 1, "set_extra": 2, "drain": 1}  # the 2nd: "drained" (S8)
    for minutes in (5, 10):
        check(slurm, T0 + timedelta(minutes=minutes))
        assert slurm.take() == {"node": 1}


def test_a_fault_that_clears_is_one_write_and_the_resume_of_our_drain(
        node: Node, slurm: CountedSlurm) -> None:
    (node.root / "proc/mounts").write_text("/dev/sda1 / ext4 ro,relatime 0 0\n")
    check(slurm, T0)
    slurm.take()
    (node.root / "proc/mounts").write_text("/dev/sda1 / ext4 rw,relatime 0 0\n")
    check(slurm, T0 + timedelta(minutes=5))
    assert slurm.take() == {"node": 1, "set_extra": 1, "resume": 1}
    assert ours(slurm)["alerts"] == [] and not MemorySlurm.node(slurm, "gpu01").drained


def test_the_agents_kernel_log_wake_ups_call_slurm_only_for_a_new_finding(
        node: Node, slurm: CountedSlurm) -> None:
    """Issue 43: a kernel-log wake-up of the agent with nothing new costs Slurm nothing,
    even once the heartbeat is due (the agent's next full check keeps it)."""
    check(slurm, T0, mode="agent")
    slurm.take()
    kernel = frozenset({"kernel_log"})
    check(slurm, T0 + timedelta(hours=1), mode="agent", only=kernel)
    assert slurm.take() == {}
    node.log(XID79)
    check(slurm, T0 + timedelta(hours=1, seconds=1), mode="agent", only=kernel)
    assert slurm.take() == {"node": 1, "set_extra": 2, "drain": 1}  # the 2nd: "drained" (S8)


def test_a_machine_renamed_with_its_state_kept_publishes_under_its_new_name(
        node: Node, slurm: CountedSlurm) -> None:
    """The state published for gpu01; the same disk comes up as gpu02 (same boot, nothing
    found anew): gpu02 has had nothing published, so this run writes its key (SPEC E7:
    the ledger follows the machine by what it publishes)."""
    check(slurm, T0)
    slurm.take()
    runner.run_check(config.CheckConfig(), node_name="gpu02", client=slurm,
                     now=T0 + timedelta(minutes=5))
    assert slurm.take() == {"node": 1, "set_extra": 1}
    value = (MemorySlurm.node(slurm, "gpu02").extra or {}).get(extra.KEY)
    assert isinstance(value, dict) and value["checked_at"] == (T0 + timedelta(minutes=5)
                                                               ).isoformat()


def test_publish_writes_now_whatever_changed(node: Node, slurm: CountedSlurm) -> None:
    """SPEC L5: our GPU reset job runs the check with --publish: a checked_at after the
    reset at once, so the controller's wait for a check ends."""
    check(slurm, T0)
    slurm.take()
    after = T0 + timedelta(minutes=3)
    check(slurm, after, publish=True)
    assert slurm.take() == {"node": 1, "set_extra": 1}
    assert ours(slurm)["checked_at"] == after.isoformat()


def test_a_persons_resume_is_still_acknowledged_with_one_read_per_run(
        node: Node, slurm: CountedSlurm) -> None:
    """SPEC S8 still holds with the light publish: the check drains for an Xid 79, a
    person resumes the node, the next run acknowledges what was published (one read, one
    write) and never drains again for it; the runs after that write nothing."""
    node.log(XID79)
    check(slurm, T0)
    slurm.take()
    MemorySlurm.resume(slurm, "gpu01")  # the person
    result = check(slurm, T0 + timedelta(minutes=5))
    assert [a.fault for a in result.acknowledged] == ["gpu.xid.79"]
    assert slurm.take() == {"node": 1, "set_extra": 1}
    assert [a["fault"] for a in ours(slurm)["acknowledged"]] == ["gpu.xid.79"]
    assert ours(slurm)["alerts"] == []
    check(slurm, T0 + timedelta(minutes=10))
    assert slurm.take() == {}
    assert not MemorySlurm.node(slurm, "gpu01").drained


def _alert(detector: str, at: str, text: str, source: str = "kmsg") -> Alert:
    return Alert(node="gpu01", fault="x", severity=Severity.WARNING, summary=f"read {at}",
                 first_seen=T0, last_seen=T0, detector=detector,
                 evidence=(Evidence(source=source, text=text, at=at),))


def test_what_extra_says_ignores_a_conditions_read_time_but_not_a_new_event() -> None:
    """The digest the write decision compares (pure): a condition read again (new time,
    new counter text) says the same; another source, or a new kernel event, does not."""
    base = runner.said([_alert("disk", "t1", "4.1 GB free", "statvfs:/")], [], [])
    assert runner.said([_alert("disk", "t2", "4.0 GB free", "statvfs:/")], [], []) == base
    assert runner.said([_alert("disk", "t2", "4.0 GB free", "statvfs:/scratch")], [],
                       []) != base
    event = runner.said([_alert("kernel_log", "t1", "Xid 13")], [], [])
    assert runner.said([_alert("kernel_log", "t2", "Xid 13")], [], []) != event
    assert runner.said([], [_alert("disk", "t1", "x", "statvfs:/")], []) != \
        runner.said([_alert("disk", "t1", "x", "statvfs:/")], [], [])  # S8: acknowledged


def test_a_node_whose_check_died_is_shown_stale_within_heartbeat_plus_20_minutes(
        node: Node, slurm: CountedSlurm) -> None:
    """SPEC O1: the check publishes once and dies. Up to its heartbeat (30 min) plus the
    controller's slack (20 min) the node is not stale; past that `status` says so."""
    check(slurm, T0)
    bound = overview.stale_after(MemorySlurm.node(slurm, "gpu01"))
    assert bound == timedelta(minutes=50)
    for minutes, stale in ((30, False), (49, False), (51, True)):
        at = T0 + timedelta(minutes=minutes)
        line = overview.classify(MemorySlurm.node(slurm, "gpu01"), State(), at, mine=[])
        assert line.check_stale is stale, minutes
    ov = overview.gather(State(), [MemorySlurm.node(slurm, "gpu01")],
                         T0 + timedelta(minutes=51), heartbeat=None)
    assert "  node check stale or never published: gpu01" in overview.render(ov)


def test_a_check_that_publishes_no_heartbeat_keeps_the_old_bound_and_a_forged_one_is_capped(
) -> None:
    def line(section: dict[str, Any]) -> timedelta:
        import json

        raw = json.dumps({extra.KEY: section})
        n = NodeInfo(name="gpu01", states=frozenset({"IDLE"}), extra_raw=raw,
                     extra=json.loads(raw))
        return overview.stale_after(n)

    assert line({"v": 1, "alerts": []}) == timedelta(minutes=20)
    assert line({"v": 1, "heartbeat_s": "1800"}) == timedelta(minutes=20)
    assert line({"v": 1, "heartbeat_s": 10 ** 9}) == timedelta(days=1, minutes=20)


def test_the_agents_periodic_run_on_a_node_it_drained_reads_no_reservation(
        node: Node, slurm: CountedSlurm, tmp_path: Path) -> None:
    """Issue 43 (with issue 32 item 12's read ahead): while the agent's drain stands, its
    periodic full check reads the node alone; the reservations (SPEC E6, V1, V4: is it our
    maintenance job's?) are asked only once the node is seen in service again."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    asked = tmp_path / "scontrol.calls"
    scontrol = bindir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$*" >> {asked}\necho "No reservations in the '
                        'system"\n')
    scontrol.chmod(0o755)
    node.log(XID79)
    check(slurm, T0, mode="agent")
    assert MemorySlurm.node(slurm, "gpu01").drained
    slurm.take()
    for i in range(1, 4):  # full checks while the fault stands and the node is drained
        check(slurm, T0 + timedelta(seconds=60 * i), mode="agent")
    assert slurm.take() == {"node": 3}
    assert not asked.exists()
    MemorySlurm.resume(slurm, "gpu01")  # a person
    result = check(slurm, T0 + timedelta(minutes=5), mode="agent")
    assert [a.fault for a in result.acknowledged] == ["gpu.xid.79"]
    assert asked.read_text().splitlines() == ["-o show reservation"]


def test_our_gate_lifting_the_controllers_cordon_is_ours_after_the_check_released_its_own(
        node: Node, slurm: CountedSlurm, tmp_path: Path) -> None:
    """Issue 32 item 2 (SPEC E6, V4), as CI's deployed-together run found it: the check
    drained for its fault, the controller's cordon replaced that drain, the fault went
    (a GPU reset drops the reset GPUs' Xid; here a mount back to rw) and the check let go
    of its part. Our gate then lifted the cordon for its job in its reservation, and a
    new fault came: the check asks the reservations (22.05 shows no MAINT flag yet) and
    publishes without draining; the job's result decides."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    scontrol = bindir / "scontrol"
    scontrol.write_text('#!/bin/sh\necho "ReservationName=slurm-heal-gate-gpu01 '
                        'StartTime=now Nodes=gpu01 NodeCnt=1 Flags=MAINT,IGNORE_JOBS '
                        'Users=root State=ACTIVE"\n')
    scontrol.chmod(0o755)
    mounts = node.root / "proc/mounts"
    mounts.write_text("/dev/sda1 / ext4 ro,relatime 0 0\n")
    check(slurm, T0)
    assert "by=check" in MemorySlurm.node(slurm, "gpu01").reason
    MemorySlurm.drain(slurm, "gpu01", "heal: fs.readonly rem=r-1 by=controller for reboot")
    mounts.write_text("/dev/sda1 / ext4 rw,relatime 0 0\n")
    released = check(slurm, T0 + timedelta(minutes=5))
    assert MemorySlurm.node(slurm, "gpu01").drained  # the controller's cordon stays
    assert any("was not set by the node check" in n for n in released.notes)
    MemorySlurm.resume(slurm, "gpu01")  # our gate lifts the cordon in its reservation
    mounts.write_text("/dev/sda1 / ext4 ro,relatime 0 0\n")
    result = check(slurm, T0 + timedelta(minutes=6))
    assert not MemorySlurm.node(slurm, "gpu01").drained
    assert any("slurm-heal-gate-gpu01" in n for n in result.notes)
