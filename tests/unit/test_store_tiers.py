"""The store in two tiers (issue 26): the hot document holds open work and the days
E1-E3 and the hand-to-person rule need; what ended before is in the append-only audit
archive, where every reader of history still finds it. And the daemon's store index
kept from cycle to cycle while the document did not change (issue 20). Fast: no Slurm
(the memory cluster and the provider simulator on 127.0.0.1)."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_heal.api import views
from slurm_heal.cli import cli
from slurm_heal.config import policy_from_dict
from slurm_heal.controller import Controller, controller_settings
from slurm_heal.errors import ConfigError, NotFound, StoreCorrupt, StoreError
from slurm_heal.extra import KEY, our_section
from slurm_heal.location import Location
from slurm_heal.models import Attempt, Command, Phase, Plan, Remediation, State, ValidationRun
from slurm_heal.providers.http import HttpProvider
from slurm_heal.providers.simulator import SimulatorServer
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store, archived
from slurm_heal.types import Action, Severity
from tests.policycore import Decide

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
NODES = [("gpu01", "a"), ("gpu02", "a")]


def ended(rid: str, node: str, days_ago: float, host: str | None = None) -> Remediation:
    end = T0 - timedelta(days=days_ago)
    start = end - timedelta(hours=1)
    return Remediation(
        id=rid, node=node, host=host or node, fault="gpu.xid.119",
        severity=Severity.CRITICAL, action=Action.REBOOT, phase=Phase.DONE, created=start,
        updated=end, phase_times={"proposed": start, "done": end},
        attempts=(Attempt(key=f"{rid}:act:0", effect="act", action=Action.REBOOT,
                          started=start, finished=end, outcome="ok"),))


def tiered(tmp_path: Path) -> Store:
    """gpu01's reboot 40 days ago (archived by the retention), gpu01's and gpu02's of
    3 days ago (hot); a heartbeat, as a store a controller runs on."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "heartbeat").write_text(datetime.now(timezone.utc).isoformat() + "\n")
    store = Store(tmp_path)
    store.apply(Plan(updates=(ended("r-old", "gpu01", 40), ended("r-new", "gpu01", 3),
                              ended("r-two", "gpu02", 3))), T0)
    store.prune(T0, keep=timedelta(days=14), archive=True)
    assert [r.id for r in store.load().remediations] == ["r-new", "r-two"]
    return store


# ------------------------------------------------------------------ the hot tier
def test_the_daemon_keeps_ended_work_in_the_hot_store_for_days_not_ninety() -> None:
    """Issue 26: [controller] hot_retention, 14 days by default, is what the daemon's
    retention keeps in state.json; a bad value names the key."""
    assert controller_settings({}).hot_retention == timedelta(days=14)
    assert controller_settings({"hot_retention": "21d"}).hot_retention == timedelta(days=21)
    with pytest.raises(ConfigError, match="hot_retention"):
        controller_settings({"hot_retention": "0s"})


def test_a_daemon_cycle_moves_what_ended_before_the_hot_window_to_the_archive(
        tmp_path: Path) -> None:
    """Issue 26, P4: with the daemon's 14 days, what ended 20 days ago leaves state.json
    for audit.jsonl; what ended 3 days ago (E1/E2 count it) stays hot."""
    cluster = MemorySlurm(NODES, clock=lambda: T0)
    for n, _ in NODES:
        cluster.set_extra(n, KEY, our_section([], T0))
    store = Store(tmp_path)
    store.apply(Plan(updates=(ended("r-20d", "gpu01", 20), ended("r-3d", "gpu02", 3))), T0)
    retention = timedelta(days=14)  # what `slurm-heal daemon` passes by default
    assert controller_settings({}).hot_retention == timedelta(days=14)
    with SimulatorServer(port=0, duration=0.0) as sim:
        provider = HttpProvider(sim.url, connect_timeout=2, read_timeout=5, attempts=1)
        try:
            Controller(slurm=cluster, provider=provider, store=store,
                       policy=policy_from_dict({}), clock=lambda: T0,
                       hot_retention=retention).cycle()
        finally:
            provider.close()
    assert [r.id for r in store.load().remediations] == ["r-3d"]
    assert [r.id for r in archived(store.archive_file)] == ["r-20d"]


# ------------------------------------------------------------------ readers of history
def test_history_of_a_node_shows_what_retention_archived(tmp_path: Path) -> None:
    """Issue 26, P4: `history NODE` (text and JSON) and `remediations --all` show the
    archived remediation beside the hot one, oldest first; `remediations` (open only)
    reads the hot store alone."""
    store = tiered(tmp_path)
    env = {"SLURM_HEAL_STATE_DIR": str(store.dir)}
    out = CliRunner().invoke(cli, ["history", "gpu01", "--json"], env=env)
    assert out.exit_code == 0, out.output
    assert [r["id"] for r in json.loads(out.output)["remediations"]] == ["r-old", "r-new"]
    text = CliRunner().invoke(cli, ["history", "gpu01"], env=env).output
    assert "r-old" in text and "r-new" in text
    every = CliRunner().invoke(cli, ["remediations", "--all", "--json"], env=env)
    assert [r["id"] for r in json.loads(every.output)["remediations"]] == \
        ["r-old", "r-new", "r-two"]
    one = CliRunner().invoke(cli, ["remediations", "--all", "--node", "gpu02", "--json"],
                             env=env)
    assert [r["id"] for r in json.loads(one.output)["remediations"]] == ["r-two"]


def test_explain_counts_an_archived_remediation_among_the_recent_ones(
        tmp_path: Path) -> None:
    """Issue 26, house style 9: `explain` (it works without Slurm) lists the node's last
    finished remediations, the archived one too."""
    store = tiered(tmp_path)
    out = CliRunner().invoke(cli, ["explain", "gpu01", "--json"],
                             env={"SLURM_HEAL_STATE_DIR": str(store.dir)},
                             obj={"slurm": MemorySlurm(NODES, clock=lambda: T0)})
    assert out.exit_code == 0, out.output
    assert "r-old" in out.output and "r-new" in out.output


def _src(store: Store) -> views.Sources:
    def no_slurm() -> Any:
        raise NotFound("no Slurm in this test")
    return views.Sources(Location(store.dir, "--state-dir"), no_slurm)


def test_the_api_finds_an_archived_remediation_and_the_machines_whole_history(
        tmp_path: Path) -> None:
    """Issue 26: the API's remediation page of an archived id answers (not 404), with
    the machine's earlier remediations from both tiers; a node's history has both; an id
    nowhere is NotFound naming both places."""
    store = tiered(tmp_path)
    src = _src(store)
    got = views.remediation(src, "r-old")
    assert got["remediation"]["id"] == "r-old"
    assert [r["id"] for r in got["machine_history"]] == ["r-new"]
    new = views.remediation(src, "r-new")
    assert [r["id"] for r in new["machine_history"]] == ["r-old"]
    assert [r["id"] for r in views.history(src, "gpu01")["remediations"]] == ["r-old", "r-new"]
    assert [r["id"] for r in views.remediations(src, True, None)["remediations"]] == \
        ["r-old", "r-new", "r-two"]
    assert views.remediations(src, False, None)["remediations"] == []
    with pytest.raises(NotFound, match="store or its audit archive"):
        views.remediation(src, "r-nowhere")


def test_archived_reads_only_the_records_that_match(tmp_path: Path) -> None:
    """Issue 26: a filter by node, machine or id returns exactly the matching records
    (a node whose name is part of another's is not matched by it), the last line of an
    id winning."""
    path = tmp_path / "audit.jsonl"
    lines = [ended("r-1", "gpu1", 30), ended("r-2", "gpu10", 30, host="m-7"),
             ended("r-1", "gpu1", 29)]
    path.write_text("".join(json.dumps({"archived_at": T0.isoformat(),
                                        "remediation": r.model_dump(mode="json")}) + "\n"
                            for r in lines))
    assert [(r.id, r.updated) for r in archived(path, node="gpu1")] == \
        [("r-1", T0 - timedelta(days=29))]
    assert [r.id for r in archived(path, host="m-7")] == ["r-2"]
    assert [r.id for r in archived(path, remediation="r-2", node="gpu10")] == ["r-2"]
    assert archived(path, remediation="r-2", node="gpu1") == []
    assert [r.id for r in archived(path)] == ["r-2", "r-1"]


# ------------------------------------------------------------------ one parse per change
def test_a_load_of_the_same_document_returns_the_same_state(tmp_path: Path) -> None:
    """Issue 20: read again unchanged, the store returns the very same State (its
    records the same objects); after this Store's own write it returns what it wrote."""
    store = tiered(tmp_path)
    first = store.load()
    assert store.load() is first
    state, _ = store.apply(Plan(updates=(ended("r-3", "gpu02", 1),)), T0)
    after = store.load()
    assert after.remediations is state.remediations
    assert after.remediations[:2] == first.remediations


def test_another_writer_is_never_missed_even_with_the_same_size_and_time(
        tmp_path: Path) -> None:
    """Issue 20, I5: the reuse is keyed by the document's bytes: a document another
    process replaced with one of the same size and modification time is read afresh."""
    store = tiered(tmp_path)
    before = store.load()
    stat = store.file.stat()
    text = store.file.read_text()
    assert '"r-two"' in text
    store.file.write_text(text.replace('"r-two"', '"r-2wo"'))
    os.utime(store.file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert store.file.stat().st_size == stat.st_size
    after = store.load()
    assert after is not before and [r.id for r in after.remediations] == ["r-new", "r-2wo"]


def test_the_daemon_reuses_its_store_index_while_the_store_does_not_change(
        tmp_path: Path) -> None:
    """Issue 20: cycle after cycle on an unchanged store the controller's decide() keeps
    the very same index of the store's records (no rebuild); a command another process
    put in the inbox is seen at once, and the cycle after it indexes afresh."""
    now = [T0]
    cluster = MemorySlurm(NODES, clock=lambda: now[0])
    for n, _ in NODES:
        cluster.set_extra(n, KEY, our_section([], T0))
    store = tiered(tmp_path)
    run = Decide()
    with SimulatorServer(port=0, duration=0.0) as sim:
        provider = HttpProvider(sim.url, connect_timeout=2, read_timeout=5, attempts=1)
        try:
            ctl = Controller(slurm=cluster, provider=provider, store=store,
                             policy=policy_from_dict({}), clock=lambda: now[0], decide=run)
            ctl.cycle()
            index = run.records
            assert index is not None and index.source is store.load().remediations
            for _ in range(3):
                now[0] += timedelta(seconds=30)
                ctl.cycle()
                assert run.records is index  # not rebuilt, not even re-checked record by record
            Store(tmp_path).add_command(Command(id="c-1", at=now[0], kind="pause", by="bob",
                                                reason="maintenance"))
            now[0] += timedelta(seconds=30)
            ctl.cycle()
            state = store.load()
            assert state.paused and state.inbox == ()  # the other writer's command was read
            assert run.records is not index
        finally:
            provider.close()


# ------------------------------------------------------------------ the parse
def test_the_fast_parse_reads_exactly_what_the_careful_one_reads(tmp_path: Path) -> None:
    """Issue 26: a document is validated straight from its bytes; the state is the one
    ``json.loads`` + validation gives, for main's store and for one with unknown fields."""
    main = Path(__file__).resolve().parents[2] / "tests" / "data" / "store" / "main-af95cff"
    raw = (main / "state.json").read_bytes()
    doc = json.loads(raw)
    doc["future_top"] = {"a": [1, {"b": None}]}
    doc["remediations"][0]["attempts"][0]["future_attempt"] = [[1], [2]]
    for text in (raw, json.dumps(doc, indent=1).encode()):
        (tmp_path / "state.json").write_bytes(text)
        got = Store(tmp_path).load()
        assert got == State.model_validate(json.loads(text))
        assert got.model_dump(mode="json") == State.model_validate(
            json.loads(text)).model_dump(mode="json")


def _deep(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize("where", ["data", "attempt", "command"])
def test_a_free_form_part_nested_past_the_limit_is_still_corrupt(tmp_path: Path,
                                                                 where: str) -> None:
    """House style 5 (docs/store.md: nested more than 64 levels deep is corrupt), under
    the fast parse too: 100 levels (which pydantic's parser alone would take) in the
    engine's data, in an attempt's or a command's unknown field."""
    store = tiered(tmp_path)
    store.add_command(Command(id="c-1", at=T0, kind="pause", by="bob"))
    doc = json.loads(store.file.read_text())
    if where == "data":
        doc["data"]["x"] = _deep(100)
    elif where == "attempt":
        doc["remediations"][0]["attempts"][0]["future"] = _deep(100)
    else:
        doc["inbox"][0]["future"] = _deep(100)
    store.file.write_text(json.dumps(doc))
    with pytest.raises(StoreCorrupt, match="nested too deeply"):
        Store(tmp_path).load()


@pytest.mark.parametrize("version", ['"1"', "1.0", "true"])
def test_a_schema_version_that_is_not_an_integer_is_corrupt(tmp_path: Path,
                                                            version: str) -> None:
    """SPEC I5: pydantic would read "1", 1.0 and true as 1; the store does not."""
    (tmp_path / "state.json").write_text(f'{{"schema_version": {version}, "paused": true}}')
    with pytest.raises(StoreCorrupt, match="schema_version is missing or invalid"):
        Store(tmp_path).load()


def test_a_repeated_schema_version_is_read_as_json_reads_it(tmp_path: Path) -> None:
    """SPEC I5: the last of two ``schema_version`` keys wins, as in ``json.loads``: a
    newer major there is refused and the file left as it is."""
    text = '{"schema_version": 1, "paused": true, "schema_version": 9}'
    (tmp_path / "state.json").write_text(text)
    with pytest.raises(StoreError, match="schema_version 9 is newer"):
        Store(tmp_path).load()
    assert (tmp_path / "state.json").read_text() == text


def test_a_finished_validation_leaving_the_hot_store_is_archived_too(tmp_path: Path) -> None:
    """Issue 26, SPEC V2/P4: a validation that ended before the hot window leaves
    state.json for the archive (a ``validation`` line, whole), as remediations do; the
    open one stays; archived() reads remediations only."""
    store = tiered(tmp_path)
    old = ValidationRun(id="v-old", node="gpu01", phase="passed", created=T0 - timedelta(days=30),
                        updated=T0 - timedelta(days=30), outcome="pass")
    running = ValidationRun(id="v-now", node="gpu02", phase="running",
                            created=T0 - timedelta(days=30), updated=T0 - timedelta(days=30))
    with store.transaction() as txn:
        txn.state = txn.state.model_copy(update={"validations": (old, running)})
    store.prune(T0, keep=timedelta(days=14), archive=True)
    assert [v.id for v in store.load().validations] == ["v-now"]
    lines = [json.loads(line) for line in store.archive_file.read_text().splitlines()]
    (kept,) = [d["validation"] for d in lines if "validation" in d]
    assert ValidationRun.model_validate(kept) == old
    assert [r.id for r in archived(store.archive_file)] == ["r-old"]


def test_a_failed_validations_ticket_carries_the_archived_history_of_the_machine(
        tmp_path: Path) -> None:
    """Issue 26, SPEC V2: the hardware ticket's fault history and escalation path are
    the machine's whole record: the remediation retention archived (gpu01's reboot 40
    days ago) comes before the hot one."""
    from slurm_heal.validation import flow
    from slurm_heal.validation.service import Validator
    from slurm_heal.validation.suite import validation_from

    store = tiered(tmp_path / "state")
    logs = tmp_path / "results" / "v-1"
    logs.mkdir(parents=True)
    (logs / "results.json").write_text(json.dumps({
        "node": "gpu01", "vendor": "nvidia", "outcome": "fail", "started": "a",
        "finished": "b", "steps": [{"name": "gpu-diag", "kind": "command", "outcome": "fail",
                                    "reason": "exit status 1"}]}))
    vrun = ValidationRun(id="v-1", node="gpu01", phase="ticketing", created=T0, updated=T0,
                         results_dir=str(logs), summary="gpu-diag fail: exit status 1")
    cfg = validation_from({"tickets": [{"kind": "directory", "path": str(tmp_path / "t")}]})
    v = Validator(store=store, slurm=MemorySlurm(NODES, clock=lambda: T0), state_dir=tmp_path)
    outcome, detail, _ = v.execute(flow.VEffect(kind="ticket", key="v-1:ticketing:ticket",
                                                node="gpu01"), vrun, cfg, T0, store.load())
    assert outcome == "ok", detail
    ticket = json.loads((tmp_path / "t" / "v-1.json").read_text())
    assert [f["remediation"] for f in ticket["faults"]] == ["r-old", "r-new"]
