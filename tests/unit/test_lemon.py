"""SPEC E7: the lemon ledger per machine and the hold on a lemon's automatic work.

Pure: the E7 hold is decide() on a ClusterView and a State; the ledger is `observe` on
nodes and remediations, and `LedgerFile` on a temporary state directory.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from slurm_heal import extra as extra_mod
from slurm_heal import ledger as ledger_mod
from slurm_heal.errors import ConfigError, StoreError
from slurm_heal.ledger import Ledger, LedgerFile, observe, worst_first
from slurm_heal.models import Phase, State
from slurm_heal.store import Store, archived
from slurm_heal.types import Action, NodeInfo
from tests.unit.test_policy_engine import T0, alert, node, phases, pol, rem, run

DAY = timedelta(days=1)
SERIALS = ["1654922001234", "1654922001235"]
MACHINE = extra_mod.machine_identity(SERIALS)
assert MACHINE is not None
HOST = MACHINE["host"]


def lemon_history(host: str, n: int, last: Any = T0 - DAY, node_name: str = "gpu01",
                  step: timedelta = DAY) -> tuple[Any, ...]:
    """``n`` remediations that acted on ``host``, each a different fault (so E1's ladder
    never climbs), the last at ``last``, one a ``step`` apart."""
    return tuple(rem(node_name, Phase.DONE, Action.REBOOT, fault=f"gpu.xid.{40 + i}",
                     at=last - step * (n - 1 - i), host=host) for i in range(n))


# ------------------------------------------------------------------ E7 in the engine
def test_sixth_automatic_remediation_of_a_lemon_is_held_and_a_person_told() -> None:
    """SPEC E7: 5 remediations acted on the machine within 7 days: the next automatic one
    is held with rule E7 (no cordon), and one notification carries the ledger."""
    state = State(remediations=lemon_history("gpu01", 5))
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]}, state=state)
    assert phases(plan, "gpu01") == [("proposed", "P1"), ("approved", "P2:default"),
                                     ("blocked", "E7")]
    assert [e.kind for e in plan.effects] == ["notify"]
    (note,) = plan.effects
    assert note.rule == "E7" and "gpu01 is a lemon: 5 remediations" in note.why
    assert "removal recommendation" in note.why
    assert "reboot done x5" in note.why and "gpu.xid.40 x1" in note.why  # the ledger
    # the hold lifts when the oldest of the five leaves the window
    assert plan.next_wake == T0 - DAY * 5 + timedelta(days=7)


def test_the_hold_is_recorded_once_and_notifies_once() -> None:
    """SPEC E7: a held lemon gets one blocked record and one notification, not one per cycle."""
    from tests.unit.test_policy_engine import apply

    state = State(remediations=lemon_history("gpu01", 5))
    nodes = [node("gpu01"), node("gpu02")]
    al = {"gpu01": [alert("gpu01")]}
    p1 = run(nodes, al, state=state)
    p2 = run(nodes, al, state=apply(state, p1), now=T0 + timedelta(minutes=1))
    assert phases(p2, "gpu01") == [] and p2.effects == ()


def test_four_remediations_in_the_window_are_no_lemon() -> None:
    """SPEC E7: under the count the remediation goes on to its cordon."""
    state = State(remediations=lemon_history("gpu01", 4))
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]}, state=state)
    assert phases(plan, "gpu01")[-1] == ("cordoned", "L1")


def test_remediations_older_than_the_window_do_not_count() -> None:
    """SPEC E7: only acts within escalation.lemon.window count."""
    state = State(remediations=lemon_history("gpu01", 5, last=T0 - 3 * DAY, step=2 * DAY))
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]}, state=state)
    assert phases(plan, "gpu01")[-1] == ("cordoned", "L1")


def test_the_count_follows_the_machine_not_the_node_name() -> None:
    """SPEC E7: five remediations under another name on the same machine make it a lemon."""
    state = State(remediations=lemon_history("m-1", 5, node_name="old07"))
    plan = run([node("gpu01", host="m-1"), node("gpu02")], {"gpu01": [alert("gpu01")]},
               state=state)
    assert ("blocked", "E7") in phases(plan, "gpu01")


def test_a_person_approving_the_work_wins_over_e7() -> None:
    """SPEC E7 stops automatic remediation only: with approval by a person it goes on."""
    from slurm_heal.models import Command
    from tests.unit.test_policy_engine import apply

    manual = pol(approvals={"default": "manual"})
    state = State(remediations=lemon_history("gpu01", 5))
    nodes = [node("gpu01"), node("gpu02")]
    al = {"gpu01": [alert("gpu01")]}
    p1 = run(nodes, al, state=state, policy=manual)
    assert phases(p1, "gpu01")[-1][0] == "proposed"
    rid = p1.updates[0].id
    s1 = apply(state, p1).model_copy(update={"inbox": (Command(
        id="c1", at=T0, kind="approve", by="alice", remediation=rid),)})
    p2 = run(nodes, al, state=s1, policy=manual, now=T0 + timedelta(minutes=1))
    assert ("cordoned", "L1") in phases(p2, "gpu01")
    assert ("blocked", "E7") not in phases(p2, "gpu01")


def test_lemon_off_lets_the_work_through() -> None:
    """escalation.lemon.enabled = false: no E7 hold."""
    state = State(remediations=lemon_history("gpu01", 5))
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]}, state=state,
               policy=pol(escalation={"lemon": {"enabled": False}}))
    assert phases(plan, "gpu01")[-1] == ("cordoned", "L1")


def test_recommend_only_and_the_pause_speak_before_e7() -> None:
    """O2 first: in recommend-only mode a lemon's remediation is held by the mode (what
    would run), not by E7."""
    state = State(remediations=lemon_history("gpu01", 5))
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]}, state=state,
               policy=pol(mode="recommend_only"))
    assert phases(plan, "gpu01")[-1] == ("blocked", "recommend_only")


def test_lemon_policy_is_validated_with_the_key_named() -> None:
    """escalation.lemon: a bad value names the dotted key (the policy check)."""
    with pytest.raises(ConfigError, match=r"escalation\.lemon\.remediations"):
        pol(escalation={"lemon": {"remediations": 0}})
    with pytest.raises(ConfigError, match=r"escalation\.lemon\.window"):
        pol(escalation={"lemon": {"window": "often"}})
    p = pol(escalation={"lemon": {"remediations": 3, "window": "2d"}})
    assert p.escalation.lemon.remediations == 3 and p.escalation.lemon.window == 2 * DAY


# ------------------------------------------------------------------ the ledger
def gpu_node(name: str, serials: list[str] | None = None, instance: str = "",
             alerts: list[Any] | None = None, host: str | None = None) -> NodeInfo:
    """A node whose check published the machine identity (extra.our_section)."""
    machine = extra_mod.machine_identity(serials if serials is not None else SERIALS,
                                         instance)
    extra: dict[str, Any] = {"slurm_heal": extra_mod.our_section(alerts or [], T0, machine)}
    if host:
        extra[extra_mod.HOST_KEY] = {"host": host, "previous": HOST}
    return NodeInfo(name=name, states=frozenset({"IDLE"}), partitions=("a",), extra=extra,
                    instance_id=instance)


def bare(name: str) -> NodeInfo:
    """A node whose check has published nothing yet (a re-imaged node's first minutes)."""
    return NodeInfo(name=name, states=frozenset({"IDLE"}), partitions=("a",), extra={})


def test_a_machines_ledger_survives_a_rename() -> None:
    """SPEC E7: the GPU serials identify the machine: renamed gpu01 -> gpu91 it keeps its
    remediations and faults and gains the new name."""
    r1 = rem("gpu01", Phase.DONE, Action.REBOOT, at=T0, host=HOST)
    out = observe(Ledger(), [gpu_node("gpu01", alerts=[alert("gpu01")])], [r1],
                  T0 + timedelta(minutes=5)).ledger
    later = T0 + 2 * DAY
    r2 = rem("gpu91", Phase.FAILED, Action.REBUILD, at=later, host=HOST)
    out = observe(out, [gpu_node("gpu91")], [r1, r2], later + timedelta(minutes=5)).ledger
    (m,) = out.machines.values()
    assert m.id == HOST and m.kind == "gpu_serials" and m.gpu_serials == tuple(SERIALS)
    assert [n.name for n in m.names] == ["gpu01", "gpu91"]
    assert m.remediations == {"reboot": {"done": 1}, "rebuild": {"failed": 1}}
    # the alert seen at T0 and r1 are one instance; r2 was for its return two days on
    assert m.faults["gpu.xid.48"].count == 2
    assert m.acted_total == 2 and m.days_in_service() == 2.0


def test_a_machines_ledger_survives_a_rebuild() -> None:
    """SPEC E7: a re-imaged node has only its name until its check publishes again; the
    ledger keeps it on the machine it was on, and the serials confirm it afterwards."""
    r1 = rem("gpu01", Phase.DONE, Action.REBUILD, at=T0, host=HOST)
    out = observe(Ledger(), [gpu_node("gpu01")], [], T0 - timedelta(hours=1)).ledger
    # the re-image: Extra is empty until the node check runs again
    t1 = T0 + timedelta(hours=2)
    out = observe(out, [bare("gpu01")], [r1], t1).ledger
    t2 = T0 + timedelta(hours=4)
    out = observe(out, [gpu_node("gpu01", alerts=[alert("gpu01", since=t2)])], [r1], t2).ledger
    assert list(out.machines) == [HOST]  # no second machine called gpu01
    m = out.machines[HOST]
    assert m.remediations == {"rebuild": {"done": 1}}
    # the fault the rebuild was for, and its return after the re-image
    assert m.faults["gpu.xid.48"].count == 2
    assert m.days_in_service(t2) == 0.2  # first seen an hour before the rebuild, 5 h ago


def test_a_migrate_leaves_the_ledger_on_the_old_machine() -> None:
    """SPEC E7: a migrate moves the job slot to new hardware: the old machine keeps its
    ledger (and says the node moved off), the node is on a new machine from zero."""
    old = [rem("gpu01", Phase.DONE, Action.REBOOT, fault=f"gpu.xid.{i}", at=T0 + i * DAY,
               host=HOST) for i in range(3)]
    mig = rem("gpu01", Phase.DONE, Action.MIGRATE, at=T0 + 3 * DAY, host=HOST)
    out = observe(Ledger(), [gpu_node("gpu01")], old, T0 + 3 * DAY - timedelta(hours=1)).ledger
    t = T0 + 3 * DAY + timedelta(hours=1)
    out = observe(out, [gpu_node("gpu01", serials=["9990001"], host="hv-new-17")],
                  [*old, mig], t).ledger
    was, new = out.machines[HOST], out.machines["hv-new-17"]
    assert was.remediations == {"reboot": {"done": 3}, "migrate": {"done": 1}}
    assert was.moved_off.startswith("gpu01 at ")
    assert new.kind == "provider" and new.remediations == {} and new.name == "gpu01"
    assert out.names["gpu01"] == "hv-new-17"
    ranked = worst_first(out, t, 7 * DAY)
    assert [m.id for m in ranked] == [HOST, "hv-new-17"]


def test_placeholder_serials_are_no_identity() -> None:
    """SPEC D11/E7: zeros as serials: the instance id identifies the machine, else the
    node name; two such nodes are never one machine."""
    zeros = ["0000000000000"]
    out = observe(Ledger(), [gpu_node("gpu01", serials=zeros, instance="i-0abc"),
                             gpu_node("gpu02", serials=zeros)], [], T0).ledger
    assert sorted(out.machines) == ["gpu02", "instance-i-0abc"]
    assert out.machines["instance-i-0abc"].kind == "instance_id"
    assert out.machines["gpu02"].kind == "node_name"


def test_each_remediation_and_each_alert_is_counted_once() -> None:
    """E7: the same ended remediation and the same alert seen over many cycles count once."""
    r1 = rem("gpu01", Phase.DONE, Action.REBOOT, at=T0, host=HOST)
    n = gpu_node("gpu01", alerts=[alert("gpu01")])
    out = Ledger()
    for i in range(5):
        out = observe(out, [n], [r1], T0 + timedelta(hours=i + 1)).ledger
    m = out.machines[HOST]
    assert m.remediations == {"reboot": {"done": 1}} and m.faults["gpu.xid.48"].count == 1


def test_a_quiet_cycle_changes_nothing_between_sweeps() -> None:
    """E7: between the hourly sweeps a cycle with nothing new leaves the ledger (and its
    file) alone; a node the cycle decided about is still looked at."""
    out = observe(Ledger(), [gpu_node("gpu01")], [], T0).ledger
    quiet = observe(out, [gpu_node("gpu01"), gpu_node("gpu02", serials=["77"])], [],
                    T0 + timedelta(minutes=1), touched=[])
    assert not quiet.changed and quiet.ledger is out
    busy = observe(out, [gpu_node("gpu02", serials=["77"])], [], T0 + timedelta(minutes=1),
                   touched=["gpu02"])
    assert busy.changed and len(busy.ledger.machines) == 2


def test_names_are_bounded() -> None:
    """E7 bounded: a machine keeps its newest MAX_NAMES names."""
    out = Ledger()
    for i in range(ledger_mod.MAX_NAMES + 4):
        out = observe(out, [gpu_node(f"n{i:02d}")], [], T0 + i * timedelta(hours=2)).ledger
    names = [n.name for n in out.machines[HOST].names]
    assert len(names) == ledger_mod.MAX_NAMES and names[-1] == f"n{ledger_mod.MAX_NAMES + 3}"


# ------------------------------------------------------------------ the file
def test_a_store_without_a_ledger_builds_one_from_its_history(tmp_path: Path) -> None:
    """E7 / old stores: a state directory an older slurm-heal wrote (a store, no
    machines.json) still loads, and the ledger starts from the store's remediations."""
    store = Store(tmp_path / "state.json")
    with store.transaction() as txn:
        txn.state = State(remediations=lemon_history(HOST, 3))
    state = store.load()
    assert not (tmp_path / ledger_mod.LEDGER_FILE).exists()
    f = LedgerFile(tmp_path)
    assert f.load() == Ledger()
    out = f.update([gpu_node("gpu01")], state.remediations, T0)
    assert out.machines[HOST].remediations == {"reboot": {"done": 3}}
    again = LedgerFile(tmp_path).load()  # read back from the file
    assert again == out


def test_a_first_ledger_counts_what_retention_moved_to_the_audit_archive(
        tmp_path: Path) -> None:
    """E7 / old stores: remediations an older slurm-heal's retention archived count in the
    first ledger, beside the store's own; later folds do not read the archive again."""
    store = Store(tmp_path / "state.json")
    old = rem("gpu01", Phase.DONE, Action.REBOOT, at=T0, host=HOST)
    new = rem("gpu01", Phase.FAILED, Action.REBUILD, at=T0 + 20 * DAY, host=HOST)
    with store.transaction() as txn:
        txn.state = State(remediations=(old, new))
    store.prune(T0 + 21 * DAY, keep=timedelta(days=14), archive=True)
    assert [r.id for r in store.load().remediations] == [new.id]
    out = LedgerFile(tmp_path).update([gpu_node("gpu01")], store.load().remediations,
                                      T0 + 21 * DAY)
    assert out.machines[HOST].remediations == {"reboot": {"done": 1},
                                               "rebuild": {"failed": 1}}


def test_a_ledger_from_a_newer_version_is_refused_not_replaced(tmp_path: Path) -> None:
    """A newer ledger is a StoreError naming the file; nothing is overwritten."""
    path = tmp_path / ledger_mod.LEDGER_FILE
    path.write_text(json.dumps({"v": 99, "machines": {}}))
    with pytest.raises(StoreError, match="version 99"):
        LedgerFile(tmp_path).update([gpu_node("gpu01")], [], T0)
    assert json.loads(path.read_text())["v"] == 99
    path.write_text("{not json")
    with pytest.raises(StoreError, match="not JSON"):
        LedgerFile(tmp_path).load()


def test_forgotten_machines_go_to_the_audit_archive(tmp_path: Path) -> None:
    """E7 bounded: a machine not seen for FORGET_AFTER leaves the ledger for the audit
    archive, whose remediation reader still reads its remediations."""
    store = Store(tmp_path / "state.json")
    with store.transaction() as txn:
        txn.state = State(remediations=(rem("gpu01", at=T0, host=HOST),))
    store.prune(T0 + 30 * DAY, keep=timedelta(days=14), archive=True)
    f = LedgerFile(tmp_path)
    f.update([gpu_node("gpu01")], [rem("gpu01", at=T0, host=HOST)], T0)
    later = T0 + ledger_mod.FORGET_AFTER + DAY
    out = f.update([bare("gpu02")], [], later)
    assert HOST not in out.machines and "gpu02" in out.machines
    (gone,) = ledger_mod.archived_machines(tmp_path / "audit.jsonl")
    assert gone.id == HOST and gone.remediations == {"reboot": {"done": 1}}
    assert [r.id for r in archived(tmp_path / "audit.jsonl")] == [
        rem("gpu01", at=T0, host=HOST).id]


# ------------------------------------------------------------------ the CLI
def test_machines_lists_the_worst_first_with_json_and_text(tmp_path: Path) -> None:
    """SPEC E7 / I4: `slurm-heal machines [--json]` lists every machine worst first, a
    lemon marked; `machines NODE` shows the ledger of the machine under the node."""
    from click.testing import CliRunner

    from slurm_heal.cli import cli

    now = datetime.now(timezone.utc)
    store = Store(tmp_path / "state.json")
    with store.transaction() as txn:
        txn.state = State(remediations=(
            *lemon_history(HOST, 5, last=now - timedelta(hours=2), step=timedelta(hours=3)),
            rem("gpu02", Phase.DONE, Action.REBOOT, at=now - 2 * DAY, host="gpu02")))
    LedgerFile(tmp_path).update([gpu_node("gpu01"), bare("gpu02"), bare("gpu03")],
                                store.load().remediations, now)
    run_ = CliRunner().invoke(cli, ["machines", "--state-dir", str(tmp_path), "--json"])
    assert run_.exit_code == 0, run_.output
    got = json.loads(run_.stdout)
    assert [m["id"] for m in got["machines"]] == [HOST, "gpu02", "gpu03"]
    assert got["lemons"] == 1 and got["machines"][0]["lemon"] is True
    assert got["machines"][0]["acted_in_window"] == 5
    assert got["machines"][1]["remediations"] == {"reboot": {"done": 1}}
    assert got["lemon"] == {"enabled": True, "remediations": 5, "window": "7d"}
    text = CliRunner().invoke(cli, ["machines", "--state-dir", str(tmp_path), "--limit", "1"])
    assert text.exit_code == 0, text.output
    assert "3 machine(s), 1 lemon(s)" in text.stdout and HOST in text.stdout
    assert "gpu03" not in text.stdout
    one = CliRunner().invoke(cli, ["machines", "gpu01", "--state-dir", str(tmp_path)])
    assert one.exit_code == 0, one.output
    assert f"Machine {HOST} (gpu_serials)  LEMON" in one.stdout
    assert "reboot: done 5" in one.stdout and SERIALS[0] in one.stdout
    missing = CliRunner().invoke(cli, ["machines", "nosuch", "--state-dir", str(tmp_path),
                                       "--json"])
    assert missing.exit_code == 6 and "no machine 'nosuch'" in missing.stdout


# ------------------------------------------------------------------ the API
def test_the_api_lists_machines_worst_first_and_the_node_shows_its_machine(
        tmp_path: Path) -> None:
    """SPEC E7 / O5: GET /api/v1/machines (worst first, ?limit), /api/v1/machines/{id or
    node} (404 for neither) and /api/v1/nodes/{node} carrying the machine's ledger."""
    from werkzeug.test import Client

    from slurm_heal.api.app import ApiApp
    from slurm_heal.api.settings import ApiSettings
    from slurm_heal.location import Location
    from slurm_heal.slurm.memory import MemorySlurm
    from tests.apiserve import make_tokens

    now = datetime.now(timezone.utc)
    state_dir = tmp_path / "state"
    store = Store(state_dir)
    with store.transaction() as txn:
        txn.state = State(remediations=lemon_history(HOST, 5, last=now - timedelta(hours=1),
                                                     step=timedelta(hours=2)))
    slurm = MemorySlurm([("gpu01", "a"), ("gpu02", "a")], clock=lambda: now)
    slurm.set_extra("gpu01", extra_mod.KEY, extra_mod.our_section([], now, MACHINE))
    LedgerFile(state_dir).update(slurm.nodes(), store.load().remediations, now)
    tokens = make_tokens(tmp_path / "tokens.toml")
    app = ApiApp(ApiSettings(tokens=tmp_path / "tokens.toml", bind="127.0.0.1:0"),
                 Location(state_dir=state_dir, source="test"), slurm=lambda: slurm)
    client = Client(app)
    auth = {"Authorization": f"Bearer {tokens['victor']}"}
    got = client.get("/api/v1/machines", headers=auth)
    assert got.status_code == 200, got.text
    body = got.json
    assert [m["id"] for m in body["machines"]] == [HOST, "gpu02"]
    assert body["machines"][0]["lemon"] is True and body["lemons"] == 1
    assert [m["id"] for m in client.get("/api/v1/machines?limit=1", headers=auth)
            .json["machines"]] == [HOST]
    assert client.get("/api/v1/machines?limit=zero", headers=auth).status_code == 422
    one = client.get("/api/v1/machines/gpu01", headers=auth)
    assert one.status_code == 200 and one.json["machine"]["id"] == HOST
    assert client.get("/api/v1/machines/nosuch", headers=auth).status_code == 404
    assert client.get("/api/v1/machines").status_code == 401
    node_view = client.get("/api/v1/nodes/gpu01", headers=auth).json
    assert node_view["machine"]["id"] == HOST
    assert node_view["machine"]["remediations"] == {"reboot": {"done": 5}}


# ------------------------------------------------------------------ the metric
def test_the_lemons_metric_names_each_machine_past_the_limit() -> None:
    """SPEC E7 / O4: slurm_heal_lemons{machine} is set, after a cycle, for the machines
    E7 holds (counted as the engine counts), and for no other."""
    from slurm_heal.controller import CycleFacts
    from slurm_heal.metrics import Metrics
    from slurm_heal.models import Plan
    from slurm_heal.types import ClusterView

    state = State(remediations=(*lemon_history(HOST, 5),
                                *lemon_history("gpu02", 4, node_name="gpu02")))
    metrics = Metrics(policy=pol())
    metrics.observe(CycleFacts(at=T0, view=ClusterView(nodes=(), jobs=()), before=state,
                               after=state, plan=Plan(), executed=(), duration_s=0.1))
    reg = metrics.registry
    assert reg.get_sample_value("slurm_heal_lemons", {"machine": HOST}) == 5
    assert reg.get_sample_value("slurm_heal_lemons", {"machine": "gpu02"}) is None
    off = Metrics(policy=pol(escalation={"lemon": {"enabled": False}}))
    off.observe(CycleFacts(at=T0, view=ClusterView(nodes=(), jobs=()), before=state,
                           after=state, plan=Plan(), executed=(), duration_s=0.1))
    assert off.registry.get_sample_value("slurm_heal_lemons", {"machine": HOST}) is None


# ------------------------------------------------------------------ the ticket
def test_the_hardware_ticket_carries_the_machines_ledger(tmp_path: Path) -> None:
    """SPEC E7 / V2: a clear failure's ticket names the machine's ledger (names,
    remediations by action and outcome, faults), in its JSON and in its text."""
    from slurm_heal.models import ValidationRun
    from slurm_heal.slurm.memory import MemorySlurm
    from slurm_heal.validation import flow
    from slurm_heal.validation.service import Validator
    from slurm_heal.validation.suite import validation_from
    from slurm_heal.validation.tickets import GithubSink, Ticket

    slurm = MemorySlurm([("gpu01", "a")], clock=lambda: T0)
    slurm.set_extra("gpu01", extra_mod.KEY, extra_mod.our_section([], T0, MACHINE))
    logs = tmp_path / "results" / "v-1"
    logs.mkdir(parents=True)
    (logs / "gpu-diag.log").write_text("dcgmi diag: FAIL\n")
    (logs / "results.json").write_text(json.dumps({
        "node": "gpu01", "vendor": "nvidia", "outcome": "fail", "started": "a",
        "finished": "b", "steps": [{"name": "gpu-diag", "kind": "command", "outcome": "fail",
                                    "reason": "exit status 1", "log": "gpu-diag.log"}]}))
    state = State(remediations=lemon_history(HOST, 5))
    LedgerFile(tmp_path).update(slurm.nodes(), state.remediations, T0)
    vrun = ValidationRun(id="v-1", node="gpu01", host=HOST, phase="ticketing", created=T0,
                         updated=T0, results_dir=str(logs), summary="gpu-diag fail")
    cfg = validation_from({"tickets": [{"kind": "directory", "path": str(tmp_path / "t")}]})
    v = Validator(store=Store(tmp_path / "state"), slurm=slurm, state_dir=tmp_path)
    outcome, detail, _ref = v.execute(flow.VEffect(kind="ticket", key="v-1:ticketing:ticket",
                                                   node="gpu01"), vrun, cfg, T0, state)
    assert outcome == "ok", detail
    doc = json.loads((tmp_path / "t" / "v-1.json").read_text())
    assert doc["ledger"]["id"] == HOST and doc["ledger"]["remediations"] == {
        "reboot": {"done": 5}}
    assert "5 remediation(s) acted within 7d" in doc["ledger_summary"]
    ticket = Ticket.model_validate({k: v for k, v in doc.items() if k != "logs"})
    _title, body = GithubSink(repo="acme/hw", api_url="http://127.0.0.1:1").texts(
        ticket, logs, "")
    assert "### Machine ledger (SPEC E7)" in body and "reboot done 5" in body


def test_policy_check_and_show_know_escalation_lemon(tmp_path: Path) -> None:
    """E7: `policy show` prints escalation.lemon; `policy check` names a bad value's key."""
    from click.testing import CliRunner

    from slurm_heal.cli import cli

    good = tmp_path / "good.toml"
    good.write_text('[escalation.lemon]\nremediations = 3\nwindow = "3d"\n')
    shown = CliRunner().invoke(cli, ["policy", "show", str(good)])
    assert shown.exit_code == 0, shown.output
    assert "escalation.lemon.remediations = 3" in shown.stdout
    assert 'escalation.lemon.window = "3d"' in shown.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text("[escalation.lemon]\nremediations = 0\n")
    checked = CliRunner().invoke(cli, ["policy", "check", "--no-slurm", str(bad)])
    assert checked.exit_code == 2
    assert "escalation.lemon.remediations" in checked.output


def test_an_hourly_sweep_that_finds_nothing_new_leaves_the_file_alone(tmp_path: Path) -> None:
    """E7: a healthy cluster's ledger file is written when something changed (a new
    machine, a name, a fault, a remediation, a day of service), not every sweep."""
    f = LedgerFile(tmp_path)
    f.update([gpu_node("gpu01")], [], T0)
    path = tmp_path / ledger_mod.LEDGER_FILE
    before = path.stat().st_mtime_ns, path.read_bytes()
    out = f.update([gpu_node("gpu01")], [], T0 + timedelta(hours=2), touched=[])
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before
    assert out.swept_at == T0 + timedelta(hours=2)  # remembered, not written
    f.update([gpu_node("gpu01")], [], T0 + timedelta(days=1, hours=1), touched=[])
    assert LedgerFile(tmp_path).load().machines[HOST].last_seen == T0 + timedelta(days=1,
                                                                                  hours=1)


def test_a_migrated_off_machine_back_under_another_node_keeps_its_ledger() -> None:
    """SPEC E7: the old hardware a migrate left, repaired and back as gpu09, is the same
    machine: its ledger goes on under the new name (and it no longer says moved off)."""
    mig = rem("gpu01", Phase.DONE, Action.MIGRATE, at=T0, host=HOST)
    out = observe(Ledger(), [gpu_node("gpu01")], [], T0 - timedelta(hours=1)).ledger
    out = observe(out, [gpu_node("gpu01", serials=["9990001"], host="hv-new-17")], [mig],
                  T0 + timedelta(hours=1)).ledger
    assert out.machines[HOST].moved_off.startswith("gpu01 at ")
    daily = observe(out, [gpu_node("gpu01", serials=["9990001"], host="hv-new-17")], [],
                    T0 + timedelta(days=1, hours=2)).ledger
    assert daily.machines[HOST].moved_off  # a day on, nothing changed for it
    back = observe(daily, [gpu_node("gpu09")], [], T0 + timedelta(days=3)).ledger
    m = back.machines[HOST]
    assert [n.name for n in m.names] == ["gpu01", "gpu09"] and m.moved_off == ""
    assert m.remediations == {"migrate": {"done": 1}} and back.names["gpu09"] == HOST


def test_the_lemon_notice_reaches_a_person_with_the_ledger() -> None:
    """SPEC E7 / O3: the E7 notify effect becomes a "person" notification whose text
    carries the removal recommendation and the machine's ledger."""
    from slurm_heal.notify.events import cycle_events

    state = State(remediations=lemon_history("gpu01", 5))
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]}, state=state)
    events = cycle_events(state, state, plan, plan.effects, {}, T0)
    (ev,) = [e for e in events if e.kind == "person"]
    assert ev.title == "gpu01 needs a person (E7)"
    assert "removal recommendation" in ev.text and "reboot done x5" in ev.text
