"""The store stays small (issue 13): written only when something changed, and the
daemon's retention keeps what E1-E3 and P4 need, archiving the rest to audit.jsonl.
Fast: no Slurm (the memory cluster and the provider simulator on 127.0.0.1)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_heal.config import policy_from_dict
from slurm_heal.controller import Controller, controller_settings
from slurm_heal.errors import ConfigError, StoreError
from slurm_heal.extra import KEY, our_section
from slurm_heal.models import Attempt, Phase, Plan, Remediation, State
from slurm_heal.providers.http import HttpProvider
from slurm_heal.providers.simulator import SimulatorServer
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import AUDIT_ARCHIVE, Store, archived
from slurm_heal.types import Action, Severity

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)


def done(rid: str, node: str, ended_days_ago: float, *, handed: bool = False,
         phase: Phase = Phase.DONE) -> Remediation:
    end = T0 - timedelta(days=ended_days_ago)
    start = end - timedelta(hours=1)
    return Remediation(
        id=rid, node=node, host=node, fault="gpu.xid.119", severity=Severity.CRITICAL,
        action=Action.REBOOT, phase=phase, created=start, updated=end,
        phase_times={"proposed": start, phase.value: end},
        attempts=(Attempt(key=f"{rid}:act:0", effect="act", action=Action.REBOOT,
                          started=start, finished=end, outcome="ok"),),
        data={"handed_to_person": True} if handed else {})  # type: ignore[arg-type]


def test_a_plan_that_changes_nothing_does_not_rewrite_the_store(tmp_path: Path) -> None:
    """Issue 13: the steady state of a healthy cluster writes nothing (no rewrite, no
    fsync); a plan that changes something still writes."""
    store = Store(tmp_path)
    store.apply(Plan(updates=(done("r-1", "gpu01", 1),)), T0)
    before = store.file.stat()
    state, effects = store.apply(Plan(), T0 + timedelta(minutes=1))
    after = store.file.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert effects == () and state == store.load()
    store.apply(Plan(updates=(done("r-2", "gpu02", 1),)), T0 + timedelta(minutes=2))
    assert store.file.stat().st_ino != before.st_ino
    assert [r.id for r in store.load().remediations] == ["r-1", "r-2"]


def test_retention_archives_what_it_drops_and_keeps_what_the_rules_need(
        tmp_path: Path) -> None:
    """P4: audit records stay for the audit retention, then move to audit.jsonl beside
    the store before they leave it; open work and a node's latest hand-to-person record
    (E1) stay however old."""
    store = Store(tmp_path)
    old = done("r-old", "gpu01", 120)
    recent = done("r-recent", "gpu02", 30)
    handed = done("r-handed", "gpu03", 200, handed=True, phase=Phase.FAILED)
    opened = done("r-open", "gpu04", 300, phase=Phase.WAITING)
    store.apply(Plan(updates=(old, recent, handed, opened)), T0 - timedelta(days=400))
    state = store.prune(T0, keep=timedelta(days=90), archive=True)
    assert {r.id for r in state.remediations} == {"r-recent", "r-handed", "r-open"}
    assert store.archive_file == tmp_path / AUDIT_ARCHIVE
    lines = store.archive_file.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["archived_at"] == T0.isoformat()
    assert archived(store.archive_file) == [old]
    # Nothing more to drop: nothing more archived, the store is not rewritten.
    ino = store.file.stat().st_ino
    store.prune(T0 + timedelta(hours=1), keep=timedelta(days=90), archive=True)
    assert len(store.archive_file.read_text().splitlines()) == 1
    assert store.file.stat().st_ino == ino


def test_retention_drops_nothing_when_the_archive_cannot_be_written(tmp_path: Path) -> None:
    """P4: a record is never dropped before it is archived."""
    store = Store(tmp_path)
    store.apply(Plan(updates=(done("r-old", "gpu01", 120),)), T0)
    store.archive_file.mkdir()  # a directory where the archive should be
    with pytest.raises(StoreError, match="audit archive"):
        store.prune(T0, keep=timedelta(days=90), archive=True)
    assert [r.id for r in store.load().remediations] == ["r-old"]


def test_a_torn_last_archive_line_is_skipped_and_the_last_copy_of_an_id_wins(
        tmp_path: Path) -> None:
    """A crash between the archive append and the store write archives a record again
    on the next run; a reader sees it once."""
    path = tmp_path / AUDIT_ARCHIVE
    first, second = done("r-1", "gpu01", 120), done("r-1", "gpu01", 119)
    path.write_text("".join(json.dumps({"archived_at": T0.isoformat(),
                                        "remediation": r.model_dump(mode="json")}) + "\n"
                            for r in (first, second)) + '{"archived_at": "2026-')
    assert archived(path) == [second]


def test_the_daemon_runs_retention_with_the_configured_audit_time(tmp_path: Path) -> None:
    """The daemon's cycle prunes (at most hourly) with [controller] audit_retention."""
    now = [T0]
    cluster = MemorySlurm([("gpu01", "a"), ("gpu02", "a")], clock=lambda: now[0])
    for n in ("gpu01", "gpu02"):
        cluster.set_extra(n, KEY, our_section([], T0))
    store = Store(tmp_path)
    store.apply(Plan(updates=(done("r-old", "gpu01", 40), done("r-new", "gpu02", 20))),
                T0 - timedelta(days=60))
    with SimulatorServer(port=0, duration=0.0) as sim:
        provider = HttpProvider(sim.url, connect_timeout=2, read_timeout=5, attempts=1)
        try:
            ctl = Controller(slurm=cluster, provider=provider, store=store,
                             policy=policy_from_dict({}), clock=lambda: now[0],
                             hot_retention=timedelta(days=30))
            ctl.cycle()
            assert [r.id for r in store.load().remediations] == ["r-new"]
            assert [r.id for r in archived(store.archive_file)] == ["r-old"]
            # Within the hour nothing is pruned again: r-new (20 days) would go under a
            # retention of 1 day (the rules' 14-day floor), but the next run is due later.
            now[0] = T0 + timedelta(minutes=30)
            ctl.hot_retention = timedelta(days=1)
            ctl.cycle()
            assert [r.id for r in store.load().remediations] == ["r-new"]
        finally:
            provider.close()


def test_retention_never_drops_what_the_escalation_window_needs(tmp_path: Path) -> None:
    """E1/E3: an audit retention shorter than the rules' windows is not honoured below
    14 days: the daemon keeps what a rule can still count."""
    cluster = MemorySlurm([("gpu01", "a")], clock=lambda: T0)
    cluster.set_extra("gpu01", KEY, our_section([], T0))
    store = Store(tmp_path)
    store.apply(Plan(updates=(done("r-9d", "gpu01", 9),)), T0 - timedelta(days=10))
    with SimulatorServer(port=0, duration=0.0) as sim:
        provider = HttpProvider(sim.url, connect_timeout=2, read_timeout=5, attempts=1)
        try:
            Controller(slurm=cluster, provider=provider, store=store, policy=policy_from_dict({}),
                       clock=lambda: T0, hot_retention=timedelta(days=1)).cycle()
        finally:
            provider.close()
    assert [r.id for r in store.load().remediations] == ["r-9d"]


def test_audit_retention_must_be_a_positive_duration() -> None:
    with pytest.raises(ConfigError, match="audit_retention"):
        controller_settings({"audit_retention": "0s"})
    with pytest.raises(ConfigError, match="audit_retention"):
        controller_settings({"audit_retention": "ninety days"})
    assert controller_settings({}).audit_retention == timedelta(days=90)


def test_an_empty_state_stays_unwritten(tmp_path: Path) -> None:
    """A controller on a healthy cluster with no store yet creates none."""
    store = Store(tmp_path / "state")
    store.apply(Plan(), T0)
    assert not store.file.exists()
    assert store.load() == State()
