"""SPEC S7, I4: an incident shows in `status`, `explain NODE` and `slurm-heal incidents`
(every one with --json), and `slurm-heal incident close` queues a person's close that
the engine consumes. The store is a real one written by decide()'s plan; Slurm is the
in-process MemorySlurm (a real SlurmClient)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from slurm_heal.cli import cli
from slurm_heal.config import policy_from_dict
from slurm_heal.models import Phase
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.topology import parse_topology
from slurm_heal.types import Alert, ClusterView, Evidence, Severity
from tests.policycore import decide

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
TOPO = parse_topology("SwitchName=leaf1 Nodes=gpu[01-04]\n")


@pytest.fixture
def slurm() -> MemorySlurm:
    return MemorySlurm([(f"gpu0{i}", "a") for i in range(1, 5)], clock=lambda: T0)


@pytest.fixture
def store(tmp_path: Path, slurm: MemorySlurm) -> Store:
    """A store with one open incident on leaf1 (gpu01-03, IB down), as the daemon wrote it."""
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "heartbeat").write_text(datetime.now(timezone.utc).isoformat() + "\n")
    st = Store(tmp_path / "state")
    alerts = {n: [Alert(node=n, fault="ib.link_down", severity=Severity.CRITICAL,
                        summary="mlx5_0 port 1 Down", first_seen=T0, last_seen=T0,
                        evidence=(Evidence(source="sysfs", text=f"{n} state: 1: DOWN"),))]
              for n in ("gpu01", "gpu02", "gpu03")}
    view = ClusterView(nodes=slurm.nodes(), topology=TOPO)
    policy = policy_from_dict({"approvals": {"default": "auto"}})
    st.apply(decide(view, st.load(), T0, policy, alerts), T0)
    return st


def run(store: Store, args: list[str], slurm: MemorySlurm) -> Result:
    env = {"SLURM_HEAL_STATE_DIR": str(store.dir), "SUDO_USER": "alice"}
    return CliRunner().invoke(cli, args, env=env, obj={"slurm": slurm})


def test_incidents_lists_the_open_incident_with_every_nodes_evidence(
        store: Store, slurm: MemorySlurm) -> None:
    got = run(store, ["incidents", "--json"], slurm)
    assert got.exit_code == 0, got.output
    [inc] = json.loads(got.output)["incidents"]
    assert (inc["component"], inc["state"], inc["hosts"]) == ("switch:leaf1", "open",
                                                              "gpu[01-03]")
    assert [a["evidence"][0]["text"] for a in inc["alerts"]] == [
        "gpu01 state: 1: DOWN", "gpu02 state: 1: DOWN", "gpu03 state: 1: DOWN"]
    assert len(inc["held"]) == 3
    text = run(store, ["incidents"], slurm).output
    assert "INCIDENT i-" in text and "on switch leaf1" in text
    assert f"slurm-heal incident close {inc['id']}" in text


def test_an_unreadable_incident_in_the_store_is_reported_never_dropped_without_a_word(
        store: Store, slurm: MemorySlurm) -> None:
    """Issue 34 item 6 (SPEC O6, S7): a damaged entry (a newer build's, a hand edit) is
    skipped by the engine as before, and `slurm-heal incidents` says which and why."""
    path = store.dir / "state.json"
    doc = json.loads(path.read_text())
    damaged = dict(doc["data"]["incidents"][0], id="i-damaged", opened="not a time")
    doc["data"]["incidents"].append(damaged)
    path.write_text(json.dumps(doc))
    got = run(store, ["incidents", "--json"], slurm)
    assert got.exit_code == 0, got.output
    out = json.loads(got.stdout)
    assert len(out["incidents"]) == 1  # the good one is still shown
    [why] = out["unreadable"]
    assert why.startswith("entry 1 (i-damaged): opened: ") and "more)" not in why
    text = run(store, ["incidents"], slurm)
    assert "UNREADABLE incident in the store, skipped: entry 1 (i-damaged)" in text.output
    assert "INCIDENT i-" in text.output


def test_status_and_explain_show_the_incident(store: Store, slurm: MemorySlurm) -> None:
    status = run(store, ["status"], slurm)
    assert "Incidents: 1 open" in status.output
    assert "INCIDENT i-" in status.output and "3 remediation(s) held" in status.output
    assert json.loads(run(store, ["status", "--json"], slurm).output)["incidents"][0][
        "component"] == "switch:leaf1"
    explain = run(store, ["explain", "gpu02"], slurm)
    assert explain.exit_code == 0, explain.output
    assert "Incidents:" in explain.output and "on switch leaf1" in explain.output
    assert "[S7]" in explain.output  # the held step in the last decisions
    assert json.loads(run(store, ["explain", "gpu04", "--json"], slurm).output)[
        "incidents"] == []


def test_incident_close_queues_a_persons_close_that_the_engine_consumes(
        store: Store, slurm: MemorySlurm) -> None:
    got = run(store, ["incident", "close", "switch:leaf1", "--reason", "switch replaced",
                      "--json"], slurm)
    assert got.exit_code == 0, got.output
    queued = json.loads(got.output)["queued"]
    assert queued["kind"] == "close_incident" and queued["incident"].startswith("i-")
    policy = policy_from_dict({"approvals": {"default": "auto"}})
    alerts = {n: [Alert(node=n, fault="ib.link_down", severity=Severity.CRITICAL,
                        summary="", first_seen=T0, last_seen=T0)]
              for n in ("gpu01", "gpu02", "gpu03")}
    later = T0 + timedelta(minutes=10)
    plan = decide(ClusterView(nodes=slurm.nodes(), topology=TOPO), store.load(), later, policy,
                  alerts)
    store.apply(plan, later)
    # Ended (at T0 + 10m, long before the real clock's "last day"): listed with --all.
    [inc] = json.loads(run(store, ["incidents", "--all", "--json"], slurm).output)["incidents"]
    assert (inc["state"], inc["resolved_by"]) == ("resolved", "alice")
    assert "switch replaced" in inc["resolution"]
    started = [r for r in store.load().remediations if r.phase is Phase.CORDONED]
    assert len(started) == 1  # blast radius 1 under leaf1


def test_closing_what_is_not_open_is_not_found(store: Store, slurm: MemorySlurm) -> None:
    got = run(store, ["incident", "close", "switch:leaf9"], slurm)
    assert got.exit_code == 6
    assert "no open incident 'switch:leaf9'" in got.output and "switch:leaf1" in got.output
