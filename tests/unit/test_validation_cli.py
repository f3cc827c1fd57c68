"""`slurm-heal validate NODE` and `status` (SPEC V1, V2, I4): the operator's word goes
into the inbox like every CLI write, the validation flow (not the engine) takes it, and
status shows each validation on one line."""

from __future__ import annotations

from datetime import datetime, timezone

from slurm_heal.config import policy_from_dict
from slurm_heal.models import Phase, State, Step, ValidationRun
from slurm_heal.readmodel import overview
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.types import ClusterView
from slurm_heal.validation.service import Validator
from tests.policycore import decide
from tests.unit.test_admin_cli import T0, run, slurm, store  # noqa: F401  (fixtures)


def test_validate_queues_the_request_with_its_level_and_reason(store: Store,  # noqa: F811
                                                              slurm: MemorySlurm) -> None:  # noqa: F811
    result = run(store, ["validate", "gpu02", "--level", "3", "--reason", "after DIMM swap"],
                 slurm=slurm)
    assert result.exit_code == 0, result.output
    (cmd,) = store.load().inbox
    assert (cmd.kind, cmd.node, cmd.level, cmd.reason, cmd.by) == \
        ("validate", "gpu02", 3, "after DIMM swap", "alice")


def test_validate_of_an_unknown_node_exits_6_and_queues_nothing(store: Store,  # noqa: F811
                                                               slurm: MemorySlurm) -> None:  # noqa: F811
    result = run(store, ["validate", "gpu99"], slurm=slurm)
    assert result.exit_code == 6 and "gpu99" in result.output
    assert store.load().inbox == ()


def test_validate_level_out_of_range_is_a_usage_error(store: Store,  # noqa: F811
                                                      slurm: MemorySlurm) -> None:  # noqa: F811
    assert run(store, ["validate", "gpu01", "--level", "9"], slurm=slurm).exit_code == 2


def test_the_engine_leaves_validate_commands_to_the_flow_which_takes_them_once(
        store: Store, slurm: MemorySlurm) -> None:  # noqa: F811
    assert run(store, ["validate", "gpu01"], slurm=slurm).exit_code == 0
    state = store.load()
    plan = decide(ClusterView(nodes=slurm.nodes()), state, T0, policy_from_dict({}))
    assert plan.consumed == ()  # not the engine's
    v = Validator(store=store, slurm=slurm, state_dir=store.dir)
    v.intake(T0)
    v.intake(T0)
    state = store.load()
    assert state.inbox == ()
    (vrun,) = state.validations
    assert (vrun.node, vrun.origin, vrun.requested_by, vrun.phase) == \
        ("gpu01", "request", "alice", "requested")


def test_status_shows_each_validation_on_one_line() -> None:
    now = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)
    vrun = ValidationRun(id="v-1", node="gpu03", phase="failed", created=now, updated=now,
                         job_id=17, outcome="fail", ticket="/t/v-1.json",
                         phase_times={"failed": now},
                         steps=(Step(at=now, phase="failed", rule="V2",
                                     why="clear failure: gpu-diag fail"),))
    ov = overview.gather(State(validations=(vrun,)), [], now, heartbeat=None)
    lines = [ln for ln in overview.render(ov) if "gpu03" in ln]
    assert lines == ["  gpu03 failed job 17 fail ticket /t/v-1.json since 2026-11-30 "
                     "12:00:00Z [v-1]: clear failure: gpu-diag fail"]
    assert ov.model_dump(mode="json")["validations"][0]["ticket"] == "/t/v-1.json"


def test_the_ticket_carries_identity_fault_history_results_and_logs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SPEC V2: a clear failure's ticket: the machine's identity (GPU serials from the node
    check, instance id), the fault history and escalation path from the store, the
    suite's results and a tar of its logs, written by the directory sink."""
    import json
    import tarfile

    from slurm_heal import extra
    from slurm_heal.models import Remediation
    from slurm_heal.types import Action
    from slurm_heal.validation import flow
    from slurm_heal.validation.suite import validation_from

    slurm_ = MemorySlurm([("gpu01", "a")], clock=lambda: T0)
    slurm_.set_extra("gpu01", extra.KEY, extra.our_section(
        [], T0, extra.machine_identity(["1654922001234", "1654922001235"])))
    logs = tmp_path / "results" / "v-1"
    logs.mkdir(parents=True)
    (logs / "gpu-diag.log").write_text("dcgmi diag: FAIL\n")
    (logs / "results.json").write_text(json.dumps({
        "node": "gpu01", "vendor": "nvidia", "outcome": "fail", "started": "a",
        "finished": "b", "steps": [{"name": "gpu-diag", "kind": "command", "outcome": "fail",
                                    "reason": "exit status 1", "log": "gpu-diag.log"}]}))
    history = tuple(Remediation(id=f"r-{i}", node="gpu01", fault="gpu.xid.79", action=a,
                                phase=Phase.DONE, created=T0, updated=T0)
                    for i, a in enumerate((Action.REBOOT, Action.REBUILD)))
    state = State(remediations=history)
    st = Store(tmp_path / "state")
    vrun = ValidationRun(id="v-1", node="gpu01", phase="ticketing", created=T0, updated=T0,
                         results_dir=str(logs), summary="gpu-diag fail: exit status 1")
    cfg = validation_from({"tickets": [{"kind": "directory", "path": str(tmp_path / "t")}]})
    v = Validator(store=st, slurm=slurm_, state_dir=tmp_path)
    outcome, detail, ref = v.execute(flow.VEffect(kind="ticket", key="v-1:ticketing:ticket",
                                                  node="gpu01"), vrun, cfg, T0, state)
    assert outcome == "ok", detail
    assert ref == str(tmp_path / "t" / "v-1.json")
    ticket = json.loads((tmp_path / "t" / "v-1.json").read_text())
    assert ticket["identity"]["gpu_serials"] == "1654922001234,1654922001235"
    assert ticket["identity"]["machine"].startswith("gpus-")
    assert [f["action"] for f in ticket["faults"]] == ["reboot", "rebuild"]
    assert ticket["escalation"] == ["reboot", "rebuild"]
    assert ticket["results"]["steps"][0]["reason"] == "exit status 1"
    with tarfile.open(tmp_path / "t" / "v-1.logs.tar.gz") as tar:
        assert "v-1/gpu-diag.log" in tar.getnames()
