"""Injected faults at the controller (issue 8): effects that fail, time out or never
report, with the real controller cycle, engine, store and http provider against the
simulated cluster and the provider simulator over HTTP (tests/fakes.py).

SPEC L1, L5, P3, S6, O3; "one bad node never stops the cluster". Tests that show one of
issue 8's defects are strict xfails naming it (``raises=`` where the defect shows as a
particular exception, so another failure is not mistaken for it).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from slurm_heal.controller import Notifier
from slurm_heal.errors import NotFound
from slurm_heal.models import Effect, Phase
from slurm_heal.types import Severity
from tests.fakes import Rig, controller_rig, wall_now

pytestmark = [pytest.mark.reliability]

NODES = [("gpu01", "a"), ("gpu02", "a"), ("gpu03", "b"), ("gpu04", "b")]
POLICY = {"approvals": {"default": "manual", "rules": [
    {"fault": "gpu.xid.119", "action": "reboot", "mode": "auto"}]},
    "safety": {"breaker_threshold": 10, "concurrency": 4, "one_per_pool": False,
               "act_timeout": "30m"},
    "waiting": {"max_wait": "1h"},
    "capacity": {"min_available_percent": 0}}


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with controller_rig(tmp_path, NODES, POLICY, start=wall_now(), idle_wait=0.5) as r:
        yield r


def test_action_that_never_reports_fails_after_act_timeout_and_goes_to_a_person(
        rig: Rig) -> None:
    """SPEC L5: the provider accepts the reboot and never reports an end. After
    safety.act_timeout its outcome is unknown: failed, never retried, a person told, the
    node stays cordoned."""
    rig.sim.set_faults(never_finish=1)
    rig.idle_wait = 0  # the simulator is never idle again
    rig.alert("gpu01")
    rig.run(rig.main, 50, step=60)
    (rem,) = rig.rems("gpu01")
    assert rem.phase is Phase.FAILED and rem.data.handed_to_person, rem.steps
    assert any(s.rule == "L5" and "act_timeout" in s.why for s in rem.steps)
    assert list(rig.sim.stats()["executed"].values()) == [1]  # never retried
    assert rig.cluster.node("gpu01").drained  # stays cordoned for the person
    assert "gpu01" in rig.notes.read_text()


def test_cordon_failing_for_one_node_does_not_stop_the_others(rig: Rig) -> None:
    """SPEC L1: scontrol fails every drain of gpu02; three tries, then a person. gpu01 and
    gpu03 are remediated in the same cycles."""
    rig.cluster.inject_failure("gpu02", "drain", count=100)
    for node in ("gpu01", "gpu02", "gpu03"):
        rig.alert(node)
    rig.run(rig.main, 20)
    by_node = {r.node: r for r in rig.rems()}
    assert by_node["gpu01"].phase is Phase.DONE and by_node["gpu03"].phase is Phase.DONE
    bad = by_node["gpu02"]
    assert bad.phase is Phase.FAILED and bad.data.handed_to_person
    cordons = [a for a in bad.attempts if a.effect == "cordon"]
    assert len(cordons) == 3 and all(a.outcome == "failed" for a in cordons)
    assert len(rig.sim.stats()["executed"]) == 2


def test_act_answer_lost_then_provider_down_a_while_acts_once(rig: Rig) -> None:
    """SPEC S6: the reboot runs but its answer is lost; then the provider answers 503 for
    a while. The act stays in flight, is asked about by its key, and runs once."""
    rig.sim.set_faults(lose_response=1)
    rig.alert("gpu01")
    rig.run(rig.main, 2)
    rig.sim.set_faults(error_5xx=12)
    rig.run(rig.main, 20)
    (rem,) = rig.rems("gpu01")
    assert rem.phase is Phase.DONE, rem.steps
    assert list(rig.sim.stats()["executed"].values()) == [1]
    assert not rig.cluster.node("gpu01").drained


def test_eviction_that_keeps_failing_is_bounded_and_a_person_is_told(rig: Rig) -> None:
    """SPEC P3: the job on gpu01 cannot be requeued or cancelled (scontrol fails). The
    eviction must not repeat all day holding its S3/S4 slot: within a day the remediation
    stops trying (ends, handed to a person) and a person is told."""
    rig.cluster.submit_job("gpu01", timedelta(days=30))
    rig.cluster.inject_failure("gpu01", "requeue_jobs", count=10_000)
    rig.cluster.inject_failure("gpu01", "cancel_jobs", count=10_000)
    rig.alert("gpu01")
    rig.run(rig.main, 144, step=600)  # a day
    (rem,) = rig.rems("gpu01")
    evictions = [a for a in rem.attempts if a.effect in ("requeue_jobs", "cancel_jobs")]
    assert rem.phase.terminal, f"still {rem.phase.value} after {len(evictions)} evictions"
    assert len(evictions) < 100
    assert "gpu01" in (rig.notes.read_text() if rig.notes.exists() else "")
    assert not rig.sim.stats()["executed"]  # nothing acted on a node with a job


class FullDisk(Notifier):
    """The support channel's file on a full disk."""

    def __call__(self, effect: Effect, now: datetime) -> None:
        raise OSError(28, "No space left on device", str(self.path))


def test_notifier_on_a_full_disk_does_not_abort_the_cycle(tmp_path: Path) -> None:
    """O3: notifications never block or fail a cycle. gpu01's record-only alert is routed
    to support on a full disk; gpu02's reboot in the same cycles still runs."""
    with controller_rig(tmp_path, NODES, POLICY, start=wall_now(), idle_wait=0.5,
                        notifier=FullDisk(tmp_path / "notes")) as rig:
        rig.alert("gpu01", "disk.low_space", Severity.WARNING)
        rig.alert("gpu02")
        rig.run(rig.main, 20)
        (rem,) = rig.rems("gpu02")
        assert rem.phase is Phase.DONE, rem.steps
        assert all(a.outcome is not None for r in rig.rems() for a in r.attempts)


def test_node_gone_from_slurm_mid_cycle_does_not_abort_the_cycle(rig: Rig) -> None:
    """One bad node never stops the cluster: Slurm answers 'not found' for gpu01 while its
    cordon runs; that effect fails, gpu02's goes on."""
    rig.cluster.inject_failure("gpu01", "node", count=100,
                               error=NotFound("node gpu01 is not in this cluster"))
    rig.alert("gpu01")
    rig.alert("gpu02")
    rig.run(rig.main, 20)
    by_node = {r.node: r for r in rig.rems()}
    assert by_node["gpu02"].phase is Phase.DONE
    assert all(a.outcome is not None for a in by_node["gpu01"].attempts)
