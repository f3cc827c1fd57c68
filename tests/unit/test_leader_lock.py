"""One active controller per state directory (SPEC S3-S6 across replicas)."""

from __future__ import annotations

from pathlib import Path

from slurm_heal.controller import LeaderLock


def test_second_replica_is_standby_until_the_leader_goes(tmp_path: Path) -> None:
    a, b = LeaderLock(tmp_path), LeaderLock(tmp_path)
    assert a.try_acquire()
    assert not b.try_acquire()  # standby
    assert a.try_acquire()  # the leader keeps it
    a.release()  # the leader stops (a crash releases it the same way: the fd closes)
    assert b.try_acquire()
    assert not a.try_acquire()
    b.release()
