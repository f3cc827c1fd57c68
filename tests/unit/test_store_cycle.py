"""The store under the real engine: decide() plans, the store applies them, the CLI's
commands reach the engine (ARCHITECTURE "the flow"; SPEC S6, P2, P4). No Slurm: the
cluster is the in-process MemorySlurm."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from click.testing import CliRunner

from slurm_heal.cli import cli
from slurm_heal.config import Approvals, Policy
from slurm_heal.extra import KEY, our_section
from slurm_heal.models import Effect, Phase
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.types import Alert, Severity
from tests.policycore import decide

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)


def cluster_with_dbe(now: list[datetime]) -> MemorySlurm:
    slurm = MemorySlurm([("gpu01", "a"), ("gpu02", "a"), ("gpu03", "b")], clock=lambda: now[0])
    alert = Alert(node="gpu01", fault="gpu.ecc.dbe", severity=Severity.CRITICAL,
                  summary="uncorrectable ECC error on GPU 2", first_seen=T0, last_seen=T0)
    slurm.set_extra("gpu01", KEY, our_section([alert], T0))
    return slurm


def cycle(store: Store, slurm: MemorySlurm, now: datetime) -> tuple[Effect, ...]:
    plan = decide(slurm.snapshot(), store.load(), now, Policy())
    _, mine = store.apply(plan, now)
    for e in mine:
        if e.remediation and e.key and e.kind != "poll":
            store.record_outcome(e.remediation, e.key, "ok", now)
    return mine


def test_an_approval_from_the_cli_reaches_the_engine_and_cordons_once(tmp_path: Path) -> None:
    now = [T0]
    slurm = cluster_with_dbe(now)
    store = Store(tmp_path)
    assert cycle(store, slurm, T0) == ()  # proposed; waits for a person (P2 default manual)
    (rem,) = store.load().remediations
    assert rem.phase is Phase.PROPOSED
    (tmp_path / "heartbeat").write_text(T0.isoformat())  # what the daemon's loop writes

    result = CliRunner().invoke(cli, ["approve", "gpu01", "--state-dir", str(tmp_path)],
                                env={"SUDO_USER": "alice"}, obj={"slurm": slurm})
    assert result.exit_code == 0, result.output

    t1 = T0 + timedelta(minutes=1)
    assert [e.kind for e in cycle(store, slurm, t1)] == ["cordon"]
    state = store.load()
    got = state.get(rem.id)
    assert got is not None and got.approved_by == "alice" and state.inbox == ()
    # The next cycles never cordon again: the intent is on record (S6).
    assert "cordon" not in [e.kind for e in cycle(store, slurm, t1 + timedelta(minutes=1))]


def test_two_replicas_on_the_same_view_make_one_remediation(tmp_path: Path) -> None:
    """SPEC S6: two controllers deciding on the same input, applying one after the other."""
    now = [T0]
    slurm = cluster_with_dbe(now)
    policy = Policy(approvals=Approvals(default="auto"))
    replica_a, replica_b = Store(tmp_path), Store(tmp_path)
    view, state = slurm.snapshot(), replica_a.load()
    plan_a = decide(view, state, T0, policy)
    plan_b = decide(view, state, T0, policy)
    _, mine_a = replica_a.apply(plan_a, T0)
    _, mine_b = replica_b.apply(plan_b, T0)
    assert "cordon" in [e.kind for e in plan_a.effects]
    assert [e.kind for e in mine_a] == [e.kind for e in plan_a.effects]
    assert [e for e in mine_b if e.remediation] == []  # nothing runs twice
    final = replica_a.load()
    assert len(final.remediations) == 1
    assert len({(d.rule, d.why) for d in final.remediations[0].steps}) == \
        len(final.remediations[0].steps)
