"""The JSON state store (SPEC I5, S6; house style 5). Fast: no Slurm."""

from __future__ import annotations

import json
import multiprocessing
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_heal.errors import NotFound, StoreCorrupt, StoreError, StoreLocked
from slurm_heal.models import (
    SCHEMA_VERSION,
    Breaker,
    Command,
    Decision,
    Effect,
    Phase,
    Plan,
    Remediation,
    State,
    idempotency_key,
    mark,
    remediation_id,
)
from slurm_heal.store import Store, decisions, state_dir_from_config
from slurm_heal.types import Action

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
REPO = Path(__file__).resolve().parents[2]


def rem(node: str = "gpu01", fault: str = "gpu.xid.79", *, since: datetime = T0,
        phase: Phase = Phase.PROPOSED, updated: datetime = T0, **kw: object) -> Remediation:
    rid = remediation_id(node, fault, kw.get("detector"), kw.get("request_id"), since)  # type: ignore[arg-type]
    return Remediation(id=rid, node=node, fault=fault, action=Action.REBOOT, phase=phase,
                       created=since, updated=updated, **kw)  # type: ignore[arg-type]


def act_effect(r: Remediation, step: str = "act") -> Effect:
    return Effect(kind="act", node=r.node, remediation=r.id, action=r.action,
                  key=idempotency_key(r.id, step))


# ------------------------------------------------------------------ basics


def test_missing_store_reads_as_empty_state(tmp_path: Path) -> None:
    """A fresh cluster has no store yet: that is an empty state, not an error (I5)."""
    assert Store(tmp_path / "nowhere").load() == State()
    assert not (tmp_path / "nowhere").exists()  # reading creates nothing


def test_transaction_saves_what_was_assigned_and_a_new_store_reads_it(tmp_path: Path) -> None:
    store = Store(tmp_path)
    r = rem()
    with store.transaction() as txn:
        txn.state = txn.state.model_copy(update={"remediations": (r,)})
    assert Store(tmp_path).load().remediations == (r,)
    doc = json.loads((tmp_path / "state.json").read_text())
    assert doc["schema_version"] == SCHEMA_VERSION


def test_store_accepts_the_document_path_as_well_as_the_directory(tmp_path: Path) -> None:
    store = Store(tmp_path / "custom.json")
    with store.transaction() as txn:
        txn.state = State(paused=True)
    assert (tmp_path / "custom.json").exists()
    assert (tmp_path / "custom.json.lock").exists()
    assert Store(tmp_path / "custom.json").load().paused


def test_exception_inside_a_transaction_writes_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path)
    with store.transaction() as txn:
        txn.state = State(paused=True)
    with pytest.raises(RuntimeError), store.transaction() as txn:
        txn.state = State(paused=False)
        raise RuntimeError("engine crashed mid-cycle")
    assert store.load().paused


# ------------------------------------------------------------------ atomic writes


def test_a_state_that_cannot_be_serialized_leaves_the_old_file_intact(tmp_path: Path) -> None:
    """SPEC I5: a failed write never half-writes; no temp file is left behind."""
    store = Store(tmp_path)
    with store.transaction() as txn:
        txn.state = State(remediations=(rem(),))
    before = (tmp_path / "state.json").read_bytes()
    with pytest.raises(StoreError, match="cannot serialize"), store.transaction() as txn:
        txn.state = State(data={"oops": object()})
    assert (tmp_path / "state.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "state.json.lock"]


WRITER = textwrap.dedent("""
    import sys
    from datetime import datetime, timezone
    from slurm_heal.models import Remediation, State
    from slurm_heal.store import Store
    from slurm_heal.types import Action
    t = datetime(2026, 1, 5, tzinfo=timezone.utc)
    store = Store(sys.argv[1])
    n = 0
    print("ready", flush=True)
    while True:
        n += 1
        rems = tuple(Remediation(id=f"r-{n}-{i}", node=f"gpu{i:04d}", fault="gpu.xid.79",
                                 action=Action.REBOOT, created=t, updated=t, data={"pad": "x" * 200})
                     for i in range(300))
        with store.transaction() as txn:
            txn.state = State(remediations=rems, data={"generation": n})
""")


def test_a_writer_killed_at_any_moment_leaves_a_complete_document(tmp_path: Path) -> None:
    """SPEC I5: temp file + fsync + rename — a crash leaves the old or the new document."""
    store = Store(tmp_path)
    with store.transaction() as txn:
        txn.state = State(data={"generation": 0})
    generations = set()
    for delay in (0.05, 0.13, 0.21, 0.34, 0.55):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)],
                                stdout=subprocess.PIPE, cwd=REPO)
        assert proc.stdout is not None
        proc.stdout.readline()  # imports done: now it writes in a loop
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        state = store.load()  # never a torn document
        gen = state.data["generation"]
        generations.add(gen)
        # the whole of one generation, never a mix of two or a part of one
        expected = sorted(f"r-{gen}-{i}" for i in range(300)) if gen else []
        assert sorted(r.id for r in state.remediations) == expected
    # issue 22 item 11: the kills landed while the writer was writing (else this test
    # proved nothing about a kill mid-write)
    assert max(generations) > 0, generations
    # The next write cleans up a temp file the killed writer may have left.
    with store.transaction() as txn:
        txn.state = State()
    assert not list(tmp_path.glob(".state.json.*.tmp"))


# ------------------------------------------------------------------ lock


def _hold_lock(path: str, ready: multiprocessing.synchronize.Event, seconds: float) -> None:
    with Store(path).transaction():
        ready.set()
        time.sleep(seconds)


def test_a_second_writer_gives_up_after_the_lock_timeout(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(str(tmp_path), ready, 3.0))
    holder.start()
    try:
        assert ready.wait(10)
        with pytest.raises(StoreLocked, match=r"another process holds the store lock.*pid"), \
                Store(tmp_path, lock_timeout=0.2).transaction():
            pass
    finally:
        holder.kill()
        holder.join()


def _apply_same_remediation(path: str, start: multiprocessing.synchronize.Barrier,
                            results: multiprocessing.queues.Queue[int], since_shift: int) -> None:
    # Each replica decides on the same alert; one of them saw it a second later, so its
    # deterministic id differs: the dedup key must still make it one record (S6, Q3).
    r = rem(since=T0 + timedelta(seconds=since_shift))
    plan = Plan(updates=(r,), effects=(Effect(kind="cordon", node=r.node, remediation=r.id,
                                              key=idempotency_key(r.id, "cordon")),))
    start.wait()
    _, effects = Store(path).apply(plan, T0)
    results.put(len(effects))


@pytest.mark.parametrize("shifts", [(0, 0), (0, 1)], ids=["same-id", "same-dedup-key"])
def test_two_replicas_racing_to_create_the_same_remediation_make_one(
        tmp_path: Path, shifts: tuple[int, int]) -> None:
    """SPEC S6: two controller replicas on one node create exactly one remediation, and
    exactly one of them is told to cordon."""
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(2)
    results: multiprocessing.queues.Queue[int] = ctx.Queue()
    procs = [ctx.Process(target=_apply_same_remediation, args=(str(tmp_path), start, results, s))
             for s in shifts]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    state = Store(tmp_path).load()
    assert len(state.remediations) == 1
    assert len(state.remediations[0].attempts) == 1
    assert sorted(results.get(timeout=5) for _ in procs) == [0, 1]


# ------------------------------------------------------------------ corrupt / versions


@pytest.mark.parametrize("content", [
    b"{\"schema_version\": 1, \"remediations\": [", b"\xff\xfe garbage", b"[1, 2, 3]",
    b"{\"remediations\": []}", b"{\"schema_version\": 1, \"remediations\": [{\"id\": 5}]}",
], ids=["truncated", "binary", "not-object", "no-version", "bad-record"])
def test_a_corrupt_store_is_set_aside_and_automatic_remediation_stops(
        tmp_path: Path, content: bytes) -> None:
    """House style 5: the corrupt file is kept for a person, StoreCorrupt names it, and the
    store fails closed: the breaker is open until someone resets it (S5)."""
    (tmp_path / "state.json").write_bytes(content)
    store = Store(tmp_path)
    with pytest.raises(StoreCorrupt, match=r"state\.json.*moved aside to .*corrupt-"):
        store.load()
    aside = list(tmp_path.glob("state.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == content
    after = store.load()
    assert after.breaker.open and "corrupt" in after.breaker.why
    assert after.data["store_recovered"]["moved_to"] == aside[0].name


def test_a_corrupt_store_found_inside_a_transaction_writes_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("not json")
    store = Store(tmp_path)
    with pytest.raises(StoreCorrupt), store.transaction() as txn:
        txn.state = State(paused=True)  # never reached
    assert not store.load().paused
    assert store.load().breaker.open


def test_a_newer_schema_is_refused_and_left_untouched(tmp_path: Path) -> None:
    """SPEC I5: an older slurm-heal never clobbers what a newer one wrote."""
    doc = {"schema_version": SCHEMA_VERSION + 1, "remediations": [], "future_field": 1}
    (tmp_path / "state.json").write_text(json.dumps(doc))
    store = Store(tmp_path)
    with pytest.raises(StoreError, match="newer than this slurm-heal") as err:
        store.load()
    assert not isinstance(err.value, StoreCorrupt)
    with pytest.raises(StoreError, match="newer"), store.transaction() as txn:
        txn.state = State()
    assert json.loads((tmp_path / "state.json").read_text()) == doc
    assert not list(tmp_path.glob("*.corrupt-*"))


# ------------------------------------------------------------------ apply


def test_apply_records_the_intent_before_the_caller_acts(tmp_path: Path) -> None:
    """ARCHITECTURE "record intent, act, record outcome"; SPEC L1 (persisted before it runs)."""
    store = Store(tmp_path)
    r = rem()
    eff = act_effect(r)
    state, effects = store.apply(Plan(updates=(r,), effects=(eff,)), T0)
    assert effects == (eff,)
    stored = Store(tmp_path).load().get(r.id)
    assert stored is not None and stored == state.get(r.id)
    (attempt,) = stored.attempts
    assert (attempt.key, attempt.effect, attempt.action, attempt.outcome) == \
        (eff.key, "act", Action.REBOOT, None)
    assert stored.in_flight == (attempt,)


def test_an_effect_already_recorded_is_never_returned_again(tmp_path: Path) -> None:
    """SPEC S6: a replay of the same plan (a second replica, a restart) executes nothing."""
    store = Store(tmp_path)
    r = rem()
    plan = Plan(updates=(r,), effects=(act_effect(r),))
    store.apply(plan, T0)
    state, effects = store.apply(plan, T0 + timedelta(seconds=30))
    assert effects == ()
    assert len(state.remediations) == 1 and len(state.remediations[0].attempts) == 1


def test_a_resend_of_an_unfinished_intent_is_handed_out_once_more(tmp_path: Path) -> None:
    """SPEC L1/S6 (issue 8, defect 1): an intent that never got an outcome may be sent
    again under the same key when the engine asks (``resend``); one that finished never."""
    store = Store(tmp_path)
    r = rem()
    cordon = Effect(kind="cordon", node=r.node, remediation=r.id, key=idempotency_key(r.id,
                                                                                      "cordon"))
    store.apply(Plan(updates=(r,), effects=(cordon,)), T0)
    again = cordon.model_copy(update={"resend": True})
    t1 = T0 + timedelta(minutes=10)
    state, effects = store.apply(Plan(effects=(again,)), t1)
    assert effects == (again,)
    (a,) = state.remediations[0].attempts
    assert (a.key, a.outcome, a.resent, a.started) == (cordon.key, None, 1, t1)
    store.record_outcome(r.id, cordon.key, "ok", t1)
    _, effects = store.apply(Plan(effects=(again,)), t1 + timedelta(minutes=10))
    assert effects == ()  # finished: never run twice


def test_a_stale_update_keeps_attempts_another_replica_recorded(tmp_path: Path) -> None:
    store = Store(tmp_path)
    r = rem()
    store.apply(Plan(updates=(r,), effects=(act_effect(r),)), T0)
    stale = r.model_copy(update={"phase": Phase.APPROVED, "updated": T0 + timedelta(minutes=1)})
    state, _ = store.apply(Plan(updates=(stale,)), T0 + timedelta(minutes=1))
    got = state.get(r.id)
    assert got is not None and got.phase is Phase.APPROVED and len(got.attempts) == 1


def test_a_terminal_remediation_is_not_reopened_by_a_stale_plan(tmp_path: Path) -> None:
    """A person's cancel wins over a replica that decided before it saw the cancel."""
    store = Store(tmp_path)
    r = rem()
    store.apply(Plan(updates=(r.model_copy(update={"phase": Phase.CANCELLED}),)), T0)
    stale = r.model_copy(update={"phase": Phase.CORDONED})
    state, effects = store.apply(
        Plan(updates=(stale,), effects=(act_effect(stale, "cordon"),)), T0)
    got = state.get(r.id)
    assert got is not None and got.phase is Phase.CANCELLED
    assert effects == () and got.attempts == ()  # the stale plan cordons nothing


def test_concurrent_writers_lose_no_update(tmp_path: Path) -> None:
    """SPEC I5: the lock serializes read-modify-writes: 3 processes x 15 commands = 45."""
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_add_commands, args=(str(tmp_path), f"p{n}", 15))
             for n in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(Store(tmp_path).load().inbox) == 45


def _add_commands(path: str, prefix: str, count: int) -> None:
    store = Store(path)
    for i in range(count):
        store.add_command(Command(id=f"{prefix}-{i}", at=T0, kind="reset_breaker", by=prefix))


def test_a_new_alert_after_the_old_remediation_ended_creates_a_new_one(tmp_path: Path) -> None:
    """The dedup key only guards OPEN remediations: a recurrence is a new record (E1 counts it)."""
    store = Store(tmp_path)
    first = rem(phase=Phase.DONE)
    store.apply(Plan(updates=(first,)), T0)
    again = rem(since=T0 + timedelta(days=1))
    state, _ = store.apply(Plan(updates=(again,)), T0 + timedelta(days=1))
    assert [r.id for r in state.remediations] == [first.id, again.id]


def test_poll_and_notify_effects_pass_through_without_new_attempts(tmp_path: Path) -> None:
    store = Store(tmp_path)
    r = rem()
    act = act_effect(r)
    store.apply(Plan(updates=(r,), effects=(act,)), T0)
    poll = Effect(kind="poll", node=r.node, remediation=r.id, key=act.key)
    notify = Effect(kind="notify", node="gpu02", why="disk.low_space: record only (D8)")
    state, effects = store.apply(Plan(effects=(poll, notify)), T0)
    assert effects == (poll, notify)
    got = state.get(r.id)
    assert got is not None and len(got.attempts) == 1


def test_effects_of_a_dropped_duplicate_are_not_executed(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.apply(Plan(updates=(rem(),)), T0)
    dup = rem(since=T0 + timedelta(seconds=5))
    state, effects = store.apply(Plan(updates=(dup,), effects=(act_effect(dup),)), T0)
    assert effects == () and state.get(dup.id) is None


def test_apply_drops_consumed_commands_and_sets_the_breaker(tmp_path: Path) -> None:
    store = Store(tmp_path)
    r = rem()
    store.apply(Plan(updates=(r,)), T0)
    c1 = Command(id="c1", at=T0, kind="approve", by="alice", remediation=r.id)
    c2 = Command(id="c2", at=T0, kind="reset_breaker", by="bob")
    store.add_command(c1)
    store.add_command(c2)
    breaker = Breaker(open=True, opened_at=T0, why="5 automatic remediations in 1h (S5)")
    state, _ = store.apply(Plan(consumed=("c1",), breaker=breaker), T0)
    assert [c.id for c in state.inbox] == ["c2"]
    assert state.breaker == breaker


def test_apply_sets_pause_and_engine_data_but_keeps_the_store_keys(tmp_path: Path) -> None:
    """House style 8 (kill switch): a consumed pause command pauses the store's state."""
    store = Store(tmp_path)
    rec = Decision(at=T0, node="gpu01", phase="alert", rule="D7", why="xid 79 seen")
    store.apply(Plan(records=(rec,)), T0)
    state, _ = store.apply(Plan(paused=True, data={"cycle": 7, "decisions": []}), T0)
    assert state.paused and state.data["cycle"] == 7
    assert decisions(state) == (rec,)
    assert not store.apply(Plan(paused=False), T0)[0].paused


def test_decision_records_are_kept_for_explain_without_repeats(tmp_path: Path) -> None:
    """House style 9: `explain NODE` shows the last decisions with rule ids and whys."""
    store = Store(tmp_path)
    blocked = Decision(at=T0, node="gpu01", phase="blocked", rule="S4", why="pool a busy")
    store.apply(Plan(records=(blocked,)), T0)
    store.apply(Plan(records=(blocked.model_copy(update={"at": T0 + timedelta(minutes=1)}),)), T0)
    other = Decision(at=T0, node="gpu02", phase="proposed", rule="P2", why="xid 79")
    state, _ = store.apply(Plan(records=(other,)), T0)
    assert decisions(state, "gpu01") == (blocked,)
    assert [d.node for d in decisions(state)] == ["gpu01", "gpu02"]


def test_the_same_plan_applied_twice_keeps_its_decisions_once(tmp_path: Path) -> None:
    """S6: a replica (or a retry) applying the same plan adds nothing to the record."""
    store = Store(tmp_path)
    recs = (Decision(at=T0, node="gpu01", phase="proposed", rule="P1", why="dbe seen"),
            Decision(at=T0, node="gpu01", phase="proposed", rule="P2:default", why="waits"))
    store.apply(Plan(records=recs), T0)
    state, _ = store.apply(Plan(records=recs), T0)
    assert decisions(state) == recs


# Property: however a plan stream repeats, each keyed effect is handed out at most once
# and open remediations never share a dedup key (S6).
_nodes = st.sampled_from(["gpu01", "gpu02"])
_faults = st.sampled_from(["gpu.xid.79", "fs.readonly"])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(_nodes, _faults, st.integers(0, 3), st.sampled_from(["cordon", "act"])),
                min_size=1, max_size=12))
def test_replayed_plans_never_execute_a_key_twice(tmp_path_factory: pytest.TempPathFactory,
                                                  steps: list[tuple[str, str, int, str]]) -> None:
    store = Store(tmp_path_factory.mktemp("s"))
    handed_out: list[str] = []
    for node, fault, shift, step in steps:
        r = rem(node, fault, since=T0 + timedelta(seconds=shift))
        _, effects = store.apply(Plan(updates=(r,), effects=(act_effect(r, step),)), T0)
        handed_out += [e.key for e in effects]
    assert len(handed_out) == len(set(handed_out))
    state = store.load()
    keys = [r.dedup_key for r in state.remediations if not r.phase.terminal]
    assert len(keys) == len(set(keys))


# ------------------------------------------------------------------ record_outcome


def test_record_outcome_finishes_the_attempt_with_its_detail(tmp_path: Path) -> None:
    store = Store(tmp_path)
    r = rem()
    eff = act_effect(r)
    store.apply(Plan(updates=(r,), effects=(eff,)), T0)
    t1 = T0 + timedelta(minutes=2)
    store.record_outcome(r.id, eff.key, "running", t1, operation="op-17")
    state = store.record_outcome(r.id, eff.key, "ok", T0 + timedelta(minutes=5),
                                 detail="rebooted in 93s")
    got = state.get(r.id)
    assert got is not None
    (a,) = got.attempts
    assert (a.outcome, a.operation, a.detail, a.finished) == \
        ("ok", "op-17", "rebooted in 93s", T0 + timedelta(minutes=5))
    assert got.in_flight == ()
    assert Store(tmp_path).load() == state


def test_record_outcome_for_an_unknown_attempt_is_not_found(tmp_path: Path) -> None:
    store = Store(tmp_path)
    r = rem()
    store.apply(Plan(updates=(r,)), T0)
    with pytest.raises(NotFound, match="no attempt"):
        store.record_outcome(r.id, "nope", "ok", T0)
    with pytest.raises(NotFound, match="no remediation"):
        store.record_outcome("r-missing", "nope", "ok", T0)


# ------------------------------------------------------------------ commands


def test_approve_by_node_is_resolved_to_its_open_remediation(tmp_path: Path) -> None:
    store = Store(tmp_path)
    r = rem()
    store.apply(Plan(updates=(r, rem("gpu01", "fs.readonly", phase=Phase.DONE))), T0)
    cmd = store.add_command(Command(id="c1", at=T0, kind="approve", by="alice", node="gpu01"))
    assert cmd.remediation == r.id
    assert store.load().inbox == (cmd,)
    # The same command id twice (a retried CLI call) is one command.
    store.add_command(Command(id="c1", at=T0, kind="approve", by="alice", node="gpu01"))
    assert len(store.load().inbox) == 1


@pytest.mark.parametrize("target", ["gpu09", "r-doesnotexist"])
def test_approving_something_that_is_not_open_is_not_found(tmp_path: Path, target: str) -> None:
    store = Store(tmp_path)
    store.apply(Plan(updates=(rem(),)), T0)
    with pytest.raises(NotFound):
        store.add_command(Command(id="c", at=T0, kind="approve", by="a", node=target))
    assert store.load().inbox == ()


def test_cancelling_a_finished_remediation_says_it_is_finished(tmp_path: Path) -> None:
    store = Store(tmp_path)
    done = rem(phase=Phase.DONE)
    store.apply(Plan(updates=(done,)), T0)
    with pytest.raises(NotFound, match="already done"):
        store.add_command(Command(id="c", at=T0, kind="cancel", by="a", remediation=done.id))


def test_a_node_with_two_open_remediations_must_be_named_by_id(tmp_path: Path) -> None:
    store = Store(tmp_path)
    a, b = rem(phase=Phase.CORDONED), rem(fault="fs.readonly", phase=Phase.WAITING)
    store.apply(Plan(updates=(a, b)), T0)
    with pytest.raises(NotFound, match="2 open remediations"):
        store.add_command(Command(id="c", at=T0, kind="cancel", by="x", node="gpu01"))
    store.add_command(Command(id="c", at=T0, kind="cancel", by="x", remediation=b.id))


def test_requests_need_no_open_remediation(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.add_command(Command(id="c", at=T0, kind="request", by="alice", node="gpu03",
                              action=Action.REMOVE, reason="PSU smells"))
    assert store.load().inbox[0].action is Action.REMOVE


# ------------------------------------------------------------------ prune


def test_prune_drops_only_what_no_rule_can_count(tmp_path: Path) -> None:
    """E1/E2 count 7 days and E3 looks back 10: a terminal record older than 14 days goes;
    an open one stays however old; stale inbox commands go."""
    store = Store(tmp_path)
    now = T0 + timedelta(days=30)
    old_done = rem("gpu01", phase=Phase.DONE, updated=now - timedelta(days=15))
    recent_failed = rem("gpu02", phase=Phase.FAILED, updated=now - timedelta(days=9))
    ancient_open = rem("gpu03", phase=Phase.WAITING, updated=now - timedelta(days=29))
    store.apply(Plan(updates=(old_done, recent_failed, ancient_open)), now)
    store.add_command(Command(id="old", at=now - timedelta(days=2), kind="reset_breaker", by="a"))
    store.add_command(Command(id="new", at=now - timedelta(hours=1), kind="reset_breaker", by="a"))
    state = store.prune(now)
    assert {r.node for r in state.remediations} == {"gpu02", "gpu03"}
    assert [c.id for c in state.inbox] == ["new"]
    assert Store(tmp_path).load() == state


def test_prune_keeps_the_record_that_handed_a_node_to_a_person(tmp_path: Path) -> None:
    """SPEC E1: "nothing automatic until a person acts" must outlive retention: a node's
    latest remediation that handed it to a person stays, however old; older ones go, and
    so does a hand-off that a later remediation (a person's request) superseded."""
    store = Store(tmp_path)
    now = T0 + timedelta(days=60)
    older = rem("gpu01", since=T0, phase=Phase.DONE, updated=now - timedelta(days=40))
    handed = rem("gpu01", since=T0 + timedelta(days=1), phase=Phase.FAILED,
                 updated=now - timedelta(days=30), data={"handed_to_person": True})
    superseded = rem("gpu02", since=T0, phase=Phase.FAILED,
                     updated=now - timedelta(days=40), data={"handed_to_person": True})
    after = rem("gpu02", since=T0 + timedelta(days=2), phase=Phase.DONE,
                updated=now - timedelta(days=20))
    store.apply(Plan(updates=(older, handed, superseded, after)), now)
    state = store.prune(now)
    assert [r.id for r in state.remediations] == [handed.id]


# ------------------------------------------------------------------ location


def test_state_dir_is_beside_state_save_location() -> None:
    text = "ClusterName = lab\nStateSaveLocation       = /var/spool/slurmctld\nSwitchType = x\n"
    assert state_dir_from_config(text) == Path("/var/spool/slurm-heal")
    assert state_dir_from_config("ClusterName = lab\n") is None


def test_default_state_dir_falls_back_when_scontrol_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from slurm_heal.store import default_state_dir
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no scontrol
    # the product's own default, not the suite's stand-in for it (tests/conftest.py)
    monkeypatch.delenv("SLURM_HEAL_DEFAULT_ROOT")
    assert default_state_dir() == Path("/var/lib/slurm-heal")
    assert "scontrol is not installed" in caplog.text


# ------------------------------------------------------------------ the typed working state
BEFORE_TYPED = REPO / "tests" / "data" / "store" / "state-before-typed-work.json"


def test_a_store_written_before_the_typed_working_state_loads_and_round_trips(
        tmp_path: Path) -> None:
    """SPEC I5 (issue 8, "Shape"): a document written by the build before `Work` existed
    (``data`` was a free dict; captured from a simulation with every flag in use) loads
    with every flag typed, and is written back with each ``data`` object unchanged."""
    raw = json.loads(BEFORE_TYPED.read_text())
    (tmp_path / "state.json").write_text(BEFORE_TYPED.read_text())
    store = Store(tmp_path)
    state = store.load()
    by_node = {r.node: r.data for r in state.remediations}
    assert by_node["gpu01"].signalled and by_node["gpu01"].evict_n == 1
    assert by_node["gpu01"].evict_at == datetime(2026, 1, 5, 0, 30, tzinfo=timezone.utc)
    assert by_node["gpu01"].act_done == datetime(2026, 1, 5, 0, 35, 30, tzinfo=timezone.utc)
    assert by_node["gpu03"].approval_pending == "P2:approvals[0]"
    assert by_node["gpu04"].handed_to_person and by_node["gpu05"].blocked == mark("D5")
    assert all(d.evidence_fault for d in by_node.values())
    with store.transaction() as txn:  # a write of the loaded state
        txn.state = txn.state.model_copy(update={"paused": True})
    written = json.loads((tmp_path / "state.json").read_text())
    assert [r["data"] for r in written["remediations"]] == \
        [r["data"] for r in raw["remediations"]]


def test_unknown_working_state_keys_are_kept(tmp_path: Path) -> None:
    """SPEC I5: a key a newer build keeps in a remediation's ``data`` survives a load and
    a write by this one; a flag of the wrong type is a clear store problem."""
    doc = json.loads(BEFORE_TYPED.read_text())
    doc["remediations"][0]["data"]["drain_deadline"] = {"at": "2026-01-06T00:00:00Z"}
    (tmp_path / "state.json").write_text(json.dumps(doc))
    store = Store(tmp_path)
    with store.transaction() as txn:
        txn.state = txn.state.model_copy(update={"paused": True})
    written = json.loads((tmp_path / "state.json").read_text())
    assert written["remediations"][0]["data"]["drain_deadline"] == {"at": "2026-01-06T00:00:00Z"}
    assert "evict_n" not in written["remediations"][1]["data"]  # flags at default: left out


def test_a_working_state_flag_of_the_wrong_type_is_named(tmp_path: Path) -> None:
    """SPEC I5 / house style 5: a flag of the wrong type is a store problem naming it,
    never a TypeError in a later cycle's decide()."""
    doc = json.loads(BEFORE_TYPED.read_text())
    doc["remediations"][0]["data"]["evict_n"] = "many"
    (tmp_path / "state.json").write_text(json.dumps(doc))
    with pytest.raises(StoreCorrupt, match=r"remediations\.0\.data\.evict_n"):
        Store(tmp_path).load()
