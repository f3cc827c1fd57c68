"""A bug met in one cycle ends that cycle, not the daemon (one bad input never stops a
daemon; SPEC O1). Written for this project: the Slurm port's double below stands for a
parser bug that some node's data triggers (an exception nobody raised on purpose)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from slurm_heal.controller import run_forever
from slurm_heal.heartbeat import read as read_heartbeat
from slurm_heal.store import Store
from tests.reliability.test_store_faults import _controller


class _BuggyReads:
    """The in-memory Slurm, whose first ``bad`` snapshots raise a KeyError: what a
    reader with a bug does on a node record it did not expect."""

    def __init__(self, inner: Any, bad: int) -> None:
        self._inner = inner
        self.bad = bad

    def snapshot(self) -> Any:
        if self.bad > 0:
            self.bad -= 1
            raise KeyError("gres_used")
        return self._inner.snapshot()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_bug_in_a_cycle_is_logged_said_in_the_heartbeat_and_the_daemon_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Three cycles of which the first two meet the bug: the loop runs all three; the
    traceback is logged once (the repeat is one line); the heartbeat after them says the
    failure and then the success; the third cycle decides and acts (gpu03's critical
    fault drained). (Before: the KeyError ended run_forever, and systemd restarted the
    daemon into the same error.)"""
    ctl = _controller(tmp_path)
    cluster = ctl.slurm
    ctl.slurm = _BuggyReads(cluster, bad=2)  # type: ignore[assignment]
    beat = tmp_path / "heartbeat"
    with caplog.at_level(logging.INFO, logger="slurm_heal"):
        assert run_forever(ctl, 0.001, beat, max_cycles=2) == 2
    failed = [r for r in caplog.records if "cycle failed unexpectedly" in r.getMessage()]
    assert len(failed) == 2
    assert "KeyError: 'gres_used'" in failed[0].getMessage()
    assert failed[0].exc_info is not None and failed[1].exc_info is None
    assert "again" in failed[1].getMessage()
    hb = read_heartbeat(beat)
    assert hb is not None and hb.failing and hb.failures_since_success == 2
    assert "cycle failed unexpectedly: KeyError" in hb.last_error
    assert isinstance(ctl.last_failure, KeyError)
    assert not cluster.node("gpu03").drained  # nothing was decided on a failed read
    assert Store(tmp_path).load().remediations == ()

    assert run_forever(ctl, 0.001, beat, max_cycles=1) == 1  # the bug is not met now
    hb = read_heartbeat(beat)
    assert hb is not None and not hb.failing and hb.last_success is not None
    assert ctl.last_failure is None
    assert cluster.node("gpu03").drained
    assert any(r.node == "gpu03" for r in Store(tmp_path).load().remediations)
