"""The validation flow's pure state machine (SPEC V1, V2): scenario by scenario, with the
real `flow.advance` and no Slurm. The same flow on the real lab: tests/integration/
test_validation_lab.py."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from slurm_heal.models import Attempt, State, ValidationRun
from slurm_heal.providers.base import Operation
from slurm_heal.store import Store
from slurm_heal.types import Action, JobInfo, NodeInfo
from slurm_heal.validation import flow
from slurm_heal.validation.service import Validator, read_results

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
KNOBS = flow.Knobs()
OUR_DRAIN = "heal: gpu.xid.79 by=check GPU fell off the bus"


def node(name: str = "gpu01", *states: str, reason: str = "",
         partitions: tuple[str, ...] = ("gpu",)) -> NodeInfo:
    return NodeInfo(name=name, states=frozenset(states or ("IDLE",)), reason=reason,
                    partitions=partitions)


def new_run(**kw: object) -> ValidationRun:
    base: dict[str, object] = {"id": "v-1", "node": "gpu01", "created": T0, "updated": T0}
    base.update(kw)
    return ValidationRun.model_validate(base)


def finish(adv: flow.Advance, outcome: str = "ok", operation: str | None = None,
           detail: str = "") -> ValidationRun:
    """Record an outcome on every effect the step handed out (what the service does)."""
    keys = {e.key for e in adv.effects}
    return adv.run.model_copy(update={"attempts": tuple(
        a.model_copy(update={"outcome": outcome, "finished": T0, "detail": detail,
                             "operation": operation}) if a.key in keys else a
        for a in adv.run.attempts)})


def to_running(n: NodeInfo | None = None, **facts: object) -> ValidationRun:
    n = n or node()
    adv = flow.advance(new_run(), flow.Facts(node=n, **facts), T0, KNOBS)  # type: ignore[arg-type]
    adv = flow.advance(finish(adv), flow.Facts(node=n), T0, KNOBS)
    adv = flow.advance(finish(adv, operation="42"), flow.Facts(node=n), T0, KNOBS)
    assert adv.run.phase == "running" and not adv.effects
    return adv.run


def kinds(adv: flow.Advance) -> list[str]:
    return [e.kind for e in adv.effects]


def done(state: str) -> JobInfo:
    return JobInfo(job_id=42, user="root", state=state, nodes=("gpu01",),
                   name="slurm-heal-validate-gpu01")


def passed() -> flow.Results:
    return flow.Results(final=True, outcome="pass", summary="all 1 step(s) passed")


# ------------------------------------------------------------------ starting


def test_request_on_idle_node_records_previous_state_and_reserves_it() -> None:
    """V1: the node as it was is recorded first; then a MAINT reservation named after it."""
    n = node("gpu01", "IDLE", partitions=("gpu", "all"))
    adv = flow.advance(new_run(), flow.Facts(node=n, reservations=("site-maint",)), T0, KNOBS)
    run = adv.run
    assert run.phase == "reserving" and kinds(adv) == ["reserve"]
    assert run.previous is not None and run.previous.reservations == ("site-maint",)
    assert run.previous.partitions == ("gpu", "all") and not run.previous.drained
    assert run.reservation == run.job_name == "slurm-heal-validate-gpu01"
    # the intent is in the run before anything runs (L1-style: persisted first)
    assert [a.key for a in run.attempts] == ["v-1:reserving:reserve"]
    assert all(a.outcome is None for a in run.attempts)
    assert run.steps[-1].rule == "V1" and "reserving" in run.phase_times
    assert run.level == 2


def test_our_drain_is_lifted_for_the_job_and_kept_as_the_previous_reason() -> None:
    adv = flow.advance(new_run(), flow.Facts(node=node("gpu01", "IDLE", "DRAIN",
                                                       reason=OUR_DRAIN)), T0, KNOBS)
    assert kinds(adv) == ["reserve", "lift"]
    assert adv.effects[1].reason == OUR_DRAIN
    assert adv.run.previous is not None and adv.run.previous.reason == OUR_DRAIN


def test_someone_elses_drain_is_never_taken_over() -> None:
    """House style 2: a person's drain is theirs; the validation is skipped, with why."""
    adv = flow.advance(new_run(), flow.Facts(node=node("gpu01", "IDLE", "DRAIN",
                                                       reason="bad DIMM, ticket 7")),
                       T0, KNOBS)
    assert adv.run.phase == "skipped" and not adv.effects
    assert "bad DIMM" in adv.run.steps[-1].why


def test_a_host_that_is_not_a_slurm_node_is_recorded_as_not_validated() -> None:
    adv = flow.advance(new_run(node="host-9"), flow.Facts(node=None), T0, KNOBS)
    assert adv.run.phase == "skipped" and "not a Slurm node" in adv.run.steps[-1].why


def test_no_suite_configured_concludes_nothing_and_skips() -> None:
    adv = flow.advance(new_run(), flow.Facts(node=node(), has_steps=False), T0, KNOBS)
    assert adv.run.phase == "skipped" and adv.run.steps[-1].rule == "V3"


def test_an_open_remediation_on_the_node_is_waited_for_and_recorded_once() -> None:
    facts = flow.Facts(node=node(), open_remediation="r-9")
    first = flow.advance(new_run(), facts, T0, KNOBS).run
    again = flow.advance(first, facts, T0 + timedelta(seconds=30), KNOBS).run
    assert first.phase == again.phase == "requested"
    assert len(again.steps) == 1 and "r-9" in again.steps[0].why


def test_a_machine_that_failed_before_gets_the_deeper_level_unless_a_person_chose() -> None:
    facts = flow.Facts(node=node(), failed_before=True)
    assert flow.advance(new_run(), facts, T0, KNOBS).run.level == 3
    assert flow.advance(new_run(level=1), facts, T0, KNOBS).run.level == 1


def test_a_multi_node_step_waits_for_a_peer_then_holds_both() -> None:
    waiting = flow.advance(new_run(), flow.Facts(node=node(), needs_peer=True), T0, KNOBS)
    assert waiting.run.phase == "requested" and "peer" in waiting.run.steps[-1].why
    adv = flow.advance(new_run(), flow.Facts(node=node(), needs_peer=True, peer="gpu02"),
                       T0, KNOBS)
    assert adv.run.peer == "gpu02" and "peer gpu02" in adv.run.steps[-1].why


# ------------------------------------------------------------------ restarts


def test_an_effect_without_outcome_is_sent_again_under_the_same_key() -> None:
    """S6: the controller stopped between intent and outcome: the same keys again,
    nothing new (the adapters find the reservation/job already there)."""
    adv = flow.advance(new_run(), flow.Facts(node=node()), T0, KNOBS)
    again = flow.advance(adv.run, flow.Facts(node=node()), T0 + timedelta(minutes=1), KNOBS)
    assert [e.key for e in again.effects] == [e.key for e in adv.effects]
    assert again.run == adv.run


def test_submit_records_the_job_id_it_got_back() -> None:
    run = to_running()
    assert run.job_id == 42 and run.phase_times["running"] == T0


def test_a_failed_reservation_restores_and_never_submits() -> None:
    adv = flow.advance(new_run(), flow.Facts(node=node()), T0, KNOBS)
    adv = flow.advance(finish(adv, "failed", detail="Requested nodes are busy"),
                       flow.Facts(node=node()), T0, KNOBS)
    assert adv.run.phase == "restoring" and "submit" not in kinds(adv)
    assert "busy" in adv.run.summary


# ------------------------------------------------------------------ following


def test_a_running_job_is_followed_without_effects() -> None:
    run = to_running()
    job = JobInfo(job_id=42, user="root", state="RUNNING", nodes=("gpu01",))
    adv = flow.advance(run, flow.Facts(node=node("gpu01", "ALLOCATED"), job=job), T0, KNOBS)
    assert adv.run.phase == "running" and not adv.effects and adv.run.job_state == "RUNNING"


def test_pass_removes_the_reservation_and_returns_the_node_without_ticket() -> None:
    """V2: pass -> back to the pool, no ticket."""
    n = node("gpu01", "IDLE", "DRAIN", reason=OUR_DRAIN)
    run = to_running(n)
    adv = flow.advance(run, flow.Facts(node=node("gpu01", "IDLE"), job=done("COMPLETED"),
                                       results=passed()), T0, KNOBS)
    assert adv.run.phase == "returning" and kinds(adv) == ["unreserve"]
    end = flow.advance(finish(adv), flow.Facts(node=node()), T0, KNOBS).run
    assert end.phase == "passed" and end.outcome == "pass" and end.ticket == ""


def test_clear_failure_tickets_drains_naming_the_ticket_and_frees_the_reservation() -> None:
    """V2: a clear failure -> a hardware ticket; the machine stays out."""
    run = to_running()
    res = flow.Results(final=True, outcome="fail", summary="gpu-diag fail: exit status 1")
    adv = flow.advance(run, flow.Facts(node=node(), job=done("FAILED"), results=res), T0,
                       KNOBS)
    assert adv.run.phase == "ticketing" and kinds(adv) == ["ticket", "drain", "unreserve"]
    drain = adv.effects[1].reason
    assert drain.startswith("heal: validation rem=v-1 by=validation") and "ticket v-1" in drain
    end = flow.advance(finish(adv, operation="tickets/v-1.json"), flow.Facts(node=node()),
                       T0, KNOBS).run
    assert end.phase == "failed" and end.ticket == "tickets/v-1.json"


def test_an_inconclusive_suite_restores_and_never_tickets() -> None:
    """V2: an error (a tool missing, timed out) concludes nothing: restore, no ticket."""
    run = to_running()
    res = flow.Results(final=True, outcome="error", summary="gpu-diag error: not found")
    adv = flow.advance(run, flow.Facts(node=node(), job=done("FAILED"), results=res), T0,
                       KNOBS)
    assert adv.run.phase == "restoring" and "ticket" not in kinds(adv)


def test_cancelled_job_restores_the_previous_drain_exactly() -> None:
    """V2: interrupted -> the machine as before: our old reason set again."""
    run = to_running(node("gpu01", "IDLE", "DRAIN", reason=OUR_DRAIN))
    adv = flow.advance(run, flow.Facts(node=node("gpu01", "IDLE"), job=done("CANCELLED"),
                                       results=None), T0, KNOBS)
    assert adv.run.phase == "restoring" and kinds(adv) == ["unreserve", "drain"]
    assert adv.effects[1].reason == OUR_DRAIN
    end = flow.advance(finish(adv), flow.Facts(node=node()), T0, KNOBS).run
    assert end.phase == "interrupted" and "drained again" in end.restored
    assert end.job_state == "CANCELLED"


def test_timeout_and_node_fail_are_interruptions_even_with_a_final_pass() -> None:
    for state in ("TIMEOUT", "NODE_FAIL", "PREEMPTED"):
        adv = flow.advance(to_running(), flow.Facts(node=node(), job=done(state),
                                                    results=passed()), T0, KNOBS)
        assert adv.run.phase == "restoring", state


def test_job_gone_without_results_is_an_interruption() -> None:
    adv = flow.advance(to_running(), flow.Facts(node=node(), job=None, results=None), T0,
                       KNOBS)
    assert adv.run.phase == "restoring" and "gone" in adv.run.summary


def test_job_gone_after_a_final_result_is_judged() -> None:
    """The controller was away longer than MinJobAge: the results file still tells."""
    adv = flow.advance(to_running(), flow.Facts(node=node(), job=None, results=passed()),
                       T0, KNOBS)
    assert adv.run.phase == "returning"


def test_node_down_under_the_job_cancels_it_first_and_leaves_slurms_down_alone() -> None:
    lost = node("gpu01", "DOWN", reason="Not responding")
    job = JobInfo(job_id=42, user="root", state="RUNNING", nodes=("gpu01",))
    adv = flow.advance(to_running(), flow.Facts(node=lost, job=job), T0, KNOBS)
    assert adv.run.phase == "restoring" and kinds(adv) == ["cancel", "unreserve"]
    assert "DOWN now" in adv.run.restored and "Not responding" in adv.run.restored


def test_a_finished_run_never_changes() -> None:
    run = new_run(phase="passed")
    adv = flow.advance(run, flow.Facts(node=None), T0, KNOBS)
    assert adv.run is run and not adv.effects


# ------------------------------------------------------------------ the service's pure parts


def test_results_that_cannot_be_read_conclude_nothing(tmp_path: Path) -> None:
    assert read_results(tmp_path) is None
    (tmp_path / "results.json").write_text("{not json")
    res = read_results(tmp_path)
    assert res is not None and res.outcome == "error" and res.final


def test_results_of_an_unfinished_runner_are_not_final(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps({
        "node": "gpu01", "vendor": "nvidia", "outcome": "error", "started": "x",
        "finished": "", "steps": []}))
    res = read_results(tmp_path)
    assert res is not None and not res.final


class _Policy:
    def __init__(self, validation: dict[str, object]) -> None:
        self.validation = validation
        self.source = "test"


def _vacate(tmp_path: Path, action: Action, previous: str,
            hosts: dict[str, str] | None = None) -> ValidationRun | None:
    store = Store(tmp_path / "state")
    v = Validator(store=store, slurm=None, state_dir=tmp_path)  # type: ignore[arg-type]
    op = Operation(id="op-1", key="r-1:act:0", node="gpu01", action=action,
                   status="succeeded", previous_host=previous)
    return v.vacated(remediation="r-1", node="gpu01", action=action, op=op, now=T0,
                     policy=_Policy({"hosts": hosts or {}}))


def test_migrate_validates_the_vacated_host_through_the_host_map(tmp_path: Path) -> None:
    """V1, L2: the host the provider reports, mapped to its Slurm node; the same
    vacated machine queued twice (a crash before the outcome was recorded) is one run."""
    run = _vacate(tmp_path, Action.MIGRATE, "host-a", {"host-a": "gpu07"})
    again = _vacate(tmp_path, Action.MIGRATE, "host-a", {"host-a": "gpu07"})
    assert run is not None and again is not None and run.id == again.id
    assert (run.node, run.host, run.origin, run.remediation) == ("gpu07", "host-a",
                                                                  "migrate", "r-1")
    assert len(Store(tmp_path / "state").load().validations) == 1


def test_migrate_without_a_vacated_host_is_recorded_as_not_validated(tmp_path: Path) -> None:
    run = _vacate(tmp_path, Action.MIGRATE, "")
    assert run is not None and run.phase == "skipped"
    assert "did not say which host" in run.steps[-1].why


def test_remove_validates_the_node_itself(tmp_path: Path) -> None:
    run = _vacate(tmp_path, Action.REMOVE, "")
    assert run is not None and (run.node, run.origin, run.phase) == ("gpu01", "remove",
                                                                      "requested")


def test_a_reboot_vacates_nothing(tmp_path: Path) -> None:
    assert _vacate(tmp_path, Action.REBOOT, "") is None


def test_validations_round_trip_through_the_store(tmp_path: Path) -> None:
    """I5: the run with its attempts survives a write and a read."""
    store = Store(tmp_path / "state")
    run = new_run(attempts=(Attempt(key="v-1:reserving:reserve", effect="reserve",
                                    started=T0),))
    with store.transaction() as txn:
        txn.state = State(validations=(run,))
    assert store.load().validations == (run,)


def test_pass_leaves_a_cordon_of_a_remediation_opened_meanwhile() -> None:
    """House style 2 / L3: an alert during the test opened a remediation that cordoned the
    node; the pass removes the reservation but does not undo that cordon."""
    cordon = "heal: gpu.xid.79 rem=r-7 by=controller cordoned for reboot"
    adv = flow.advance(to_running(), flow.Facts(
        node=node("gpu01", "IDLE", "DRAIN", reason=cordon), job=done("COMPLETED"),
        results=passed(), open_remediation="r-7"), T0, KNOBS)
    assert adv.run.phase == "returning" and kinds(adv) == ["unreserve"]


def test_retention_drops_old_finished_validations_and_keeps_open_ones(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    old = new_run(id="v-old", phase="passed", updated=T0 - timedelta(days=30))
    held = new_run(id="v-held", phase="running", updated=T0 - timedelta(days=30))
    recent = new_run(id="v-new", phase="failed", updated=T0)
    with store.transaction() as txn:
        txn.state = State(validations=(old, held, recent))
    kept = store.prune(T0, keep=timedelta(days=14)).validations
    assert [v.id for v in kept] == ["v-held", "v-new"]


def test_policy_check_names_a_bad_validation_key(tmp_path: Path) -> None:
    """A typo in [validation] is refused when the config is checked (exit 2), naming it."""
    import pytest

    from slurm_heal.configcheck import check_config
    from slurm_heal.errors import ConfigError

    conf = tmp_path / "heal.toml"
    conf.write_text('[provider]\ntype = "simulator"\n[validation]\njob_time_limt = "1h"\n')
    with pytest.raises(ConfigError) as err:
        check_config(conf, build_provider=False)
    assert "validation.job_time_limt" in str(err.value)


def test_peer_is_an_idle_healthy_node_of_the_same_pool(tmp_path: Path) -> None:
    """V1: not drained, not in another pool, running nothing, in no reservation, not under
    remediation or validation; a job that already ended does not make a node busy."""
    from slurm_heal.types import ClusterView

    nodes = (node("gpu01"), node("gpu02", "IDLE", "DRAIN", reason="bad DIMM"),
             node("gpu03", partitions=("cpu",)), node("gpu04", "MIXED"), node("gpu05"),
             node("gpu06"), node("gpu07"))
    jobs = (JobInfo(job_id=1, user="u", state="RUNNING", nodes=("gpu04",)),
            JobInfo(job_id=2, user="u", state="COMPLETED", nodes=("gpu07",)))
    state = State(validations=(new_run(id="v-9", node="gpu06", phase="running"),))
    v = Validator(store=None, slurm=None, state_dir=tmp_path)  # type: ignore[arg-type]
    view = ClusterView(nodes=nodes, jobs=jobs)
    assert v.peer(nodes[0], view, state, {"site": ("gpu05",)}, None) == "gpu07"  # type: ignore[arg-type]
    assert v.peer(nodes[0], view, state, {}, None) == "gpu05"  # type: ignore[arg-type]


def test_a_job_pending_past_the_limit_is_cancelled_and_the_machine_restored() -> None:
    run = to_running()
    job = JobInfo(job_id=42, user="root", state="PENDING", nodes=())
    soon = flow.advance(run, flow.Facts(node=node(), job=job), T0 + timedelta(hours=1), KNOBS)
    assert soon.run.phase == "running" and not soon.effects
    late = flow.advance(run, flow.Facts(node=node(), job=job), T0 + timedelta(hours=3), KNOBS)
    assert late.run.phase == "restoring" and kinds(late) == ["cancel", "unreserve"]
    assert "PENDING" in late.run.summary


def test_a_second_validation_of_a_node_waits_for_the_first() -> None:
    facts = flow.Facts(node=node(), open_validation="v-0")
    adv = flow.advance(new_run(), facts, T0, KNOBS)
    assert adv.run.phase == "requested" and not adv.effects
    assert "v-0" in adv.run.steps[-1].why
