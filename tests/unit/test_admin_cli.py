"""The admin CLI (SPEC I4): what an operator sees and what lands in the store's inbox.

Slurm is the in-process `MemorySlurm` (a real `SlurmClient`), handed in through the click
context object; the store is a real one in a temp directory. No Slurm needed.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from slurm_heal.cli import cli
from slurm_heal.errors import SlurmUnreachable
from slurm_heal.extra import KEY, our_section
from slurm_heal.models import Breaker, Decision, Phase, Plan, Remediation, Step, remediation_id
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.types import Action, Alert, Evidence, Severity

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
ADMIN_COMMANDS = ["alerts", "remediations", "approve", "deny", "request", "cancel", "history",
                  "explain", "breaker"]


class Unreachable:
    """A SlurmClient whose controller never answers."""

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise SlurmUnreachable("slurmctld is not answering", command=["sinfo", "--json"],
                                   returncode=1)
        return fail


@pytest.fixture
def slurm() -> MemorySlurm:
    return MemorySlurm([("gpu01", "a"), ("gpu02", "a"), ("gpu03", "b")], clock=lambda: T0)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """A store a controller runs on: its directory with a heartbeat in it."""
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "heartbeat").write_text(datetime.now(timezone.utc).isoformat() + "\n")
    return Store(tmp_path / "state")


def run(store: Store, args: list[str], slurm: Any = None, by: str = "alice") -> Result:
    env = {"SLURM_HEAL_STATE_DIR": str(store.dir), "SUDO_USER": by}
    return CliRunner().invoke(cli, args, env=env, obj={"slurm": slurm} if slurm else None)


def rem(node: str = "gpu01", fault: str = "gpu.xid.79", phase: Phase = Phase.PROPOSED,
        **kw: Any) -> Remediation:
    steps = (Step(at=T0, phase="proposed", rule="catalog:gpu.xid.79",
                  why="GPU 3 fell off the bus (Xid 79)"),)
    if phase is not Phase.PROPOSED:
        steps += (Step(at=T0 + timedelta(minutes=5), phase="approved", rule="P2",
                       why="approved by a person", by="bob"),
                  Step(at=T0 + timedelta(minutes=6), phase=phase.value, rule="L1",
                       why=f"now {phase.value}"))
    return Remediation(id=remediation_id(node, fault, None, None, T0), node=node, fault=fault,
                       action=Action.MIGRATE, phase=phase, created=T0, updated=T0,
                       action_rule="catalog:gpu.xid.79", steps=steps, **kw)


def xid79_alert(node: str = "gpu01") -> Alert:
    return Alert(node=node, fault="gpu.xid.79", severity=Severity.CRITICAL,
                 summary="GPU 3 has fallen off the bus", first_seen=T0, last_seen=T0,
                 detector="kernel_log",
                 evidence=(Evidence(source="kmsg", text="NVRM: Xid (PCI:0000:3b:00): 79"),))


# ------------------------------------------------------------------ I4: --json everywhere


@pytest.mark.parametrize("name", ADMIN_COMMANDS)
def test_every_admin_command_offers_json(store: Store, name: str) -> None:
    """SPEC I4: every command has --json."""
    result = run(store, [name, "--help"])
    assert result.exit_code == 0 and "--json" in result.output


@pytest.mark.parametrize("sub", ["check", "show"])
def test_policy_subcommands_offer_json(store: Store, sub: str) -> None:
    assert "--json" in run(store, ["policy", sub, "--help"]).output


# ------------------------------------------------------------------ remediations / history


def test_remediations_lists_open_ones_and_all_with_the_flag(store: Store) -> None:
    open_one = rem(phase=Phase.WAITING)
    done = rem("gpu02", phase=Phase.DONE)
    store.apply(Plan(updates=(open_one, done)), T0)
    plain = run(store, ["remediations"])
    assert plain.exit_code == 0
    assert open_one.id in plain.output and "waiting" in plain.output
    assert done.id not in plain.output
    data = json.loads(run(store, ["remediations", "--all", "--json"]).output)
    assert {r["id"]: r["open"] for r in data["remediations"]} == {open_one.id: True,
                                                                   done.id: False}
    only = json.loads(run(store, ["remediations", "--all", "--node", "gpu02", "--json"]).output)
    assert [r["node"] for r in only["remediations"]] == ["gpu02"]


def test_remediations_warns_that_the_breaker_is_open(store: Store) -> None:
    store.apply(Plan(breaker=Breaker(open=True, opened_at=T0, why="6 automatic in 1h")), T0)
    assert "Breaker OPEN" in run(store, ["remediations"]).output


def test_history_shows_every_step_with_rule_why_and_who(store: Store) -> None:
    """SPEC P4: who requested, who approved, the rule, the time of every phase."""
    r = rem(phase=Phase.CORDONED)
    store.apply(Plan(updates=(r,)), T0)
    out = run(store, ["history", "gpu01"]).output
    assert "requested by slurm-heal" in out
    assert "[P2] approved by a person  by bob" in out
    assert "2026-01-05 00:06:00Z  cordoned" in out
    data = json.loads(run(store, ["history", "gpu01", "--json"]).output)
    assert [s["phase"] for s in data["remediations"][0]["steps"]] == \
        ["proposed", "approved", "cordoned"]


def test_history_of_a_node_without_records_says_so(store: Store, slurm: MemorySlurm) -> None:
    result = run(store, ["history", "gpu02"], slurm)
    assert result.exit_code == 0 and "No remediation recorded for gpu02" in result.output


def test_history_of_a_node_nobody_knows_exits_6_like_explain(store: Store,
                                                            slurm: MemorySlurm) -> None:
    """The same node name gives the same exit status in history and explain (exit 6)."""
    assert run(store, ["history", "gpu99"], slurm).exit_code == 6
    assert run(store, ["explain", "gpu99"], slurm).exit_code == 6
    # Slurm down proves nothing: the store alone answers, exit 0.
    assert run(store, ["history", "gpu99"], Unreachable()).exit_code == 0


# ------------------------------------------------------------------ approve / deny / cancel


def test_approve_by_node_queues_a_command_for_the_next_cycle(store: Store) -> None:
    """SPEC P2: a person's approval goes to the engine through the inbox, with who."""
    r = rem()
    store.apply(Plan(updates=(r,)), T0)
    result = run(store, ["approve", "gpu01"], by="carol")
    assert result.exit_code == 0, result.output
    assert "next cycle" in result.output
    (cmd,) = store.load().inbox
    assert (cmd.kind, cmd.remediation, cmd.node, cmd.by) == ("approve", r.id, "gpu01", "carol")


def test_deny_by_id_keeps_the_reason(store: Store) -> None:
    r = rem()
    store.apply(Plan(updates=(r,)), T0)
    out = run(store, ["deny", r.id, "--reason", "node is in a reservation", "--by", "dave",
                      "--json"]).output
    queued = json.loads(out)["queued"]
    assert (queued["kind"], queued["remediation"], queued["by"], queued["reason"]) == \
        ("deny", r.id, "dave", "node is in a reservation")


@pytest.mark.parametrize("command", ["approve", "deny", "cancel"])
def test_acting_on_a_node_without_an_open_remediation_exits_6(store: Store, command: str) -> None:
    store.apply(Plan(updates=(rem(phase=Phase.DONE),)), T0)
    result = run(store, [command, "gpu01"])
    assert result.exit_code == 6
    assert "open remediation" in result.output
    assert store.load().inbox == ()


def test_cancel_of_an_acting_remediation_is_queued(store: Store) -> None:
    store.apply(Plan(updates=(rem(phase=Phase.ACTING),)), T0)
    assert run(store, ["cancel", "gpu01", "--reason", "wrong node"]).exit_code == 0
    assert store.load().inbox[0].kind == "cancel"


# ------------------------------------------------------------------ request


def test_a_person_requests_a_reboot(store: Store, slurm: MemorySlurm) -> None:
    """SPEC Q1: the CLI is a request channel; the request goes through the same checks."""
    result = run(store, ["request", "gpu02", "reboot", "--reason", "NCCL hangs",
                         "--detector", "ibmon", "--id", "4711"], slurm=slurm)
    assert result.exit_code == 0, result.output
    (cmd,) = store.load().inbox
    assert (cmd.kind, cmd.node, cmd.action, cmd.detector, cmd.request_id, cmd.by) == \
        ("request", "gpu02", Action.REBOOT, "ibmon", "4711", "alice")


def test_a_person_may_request_removal(store: Store, slurm: MemorySlurm) -> None:
    """SPEC Q2: removal is only ever done by a person — and the CLI is a person."""
    result = run(store, ["request", "gpu03", "remove", "--reason", "burnt PSU"], slurm=slurm)
    assert result.exit_code == 0, result.output
    assert store.load().inbox[0].action is Action.REMOVE


def test_removal_naming_a_detector_is_refused(store: Store, slurm: MemorySlurm) -> None:
    """SPEC Q2: a detector may never ask for removal."""
    result = run(store, ["request", "gpu03", "remove", "--reason", "x", "--detector", "ibmon",
                         "--id", "1"], slurm=slurm)
    assert result.exit_code == 2 and "only ever done by a person" in result.output
    assert store.load().inbox == ()


@pytest.mark.parametrize("args,why", [
    (["--detector", "ib mon", "--id", "1"], "not a token"),
    (["--id", "1"], "--id needs --detector"),
])
def test_a_malformed_request_exits_2_and_queues_nothing(
        store: Store, slurm: MemorySlurm, args: list[str], why: str) -> None:
    result = run(store, ["request", "gpu01", "reboot", "--reason", "x", *args], slurm=slurm)
    assert result.exit_code == 2 and why in result.output
    assert store.load().inbox == ()


def test_a_request_for_a_node_slurm_does_not_know_exits_6(store: Store,
                                                           slurm: MemorySlurm) -> None:
    result = run(store, ["request", "gpu7", "reboot", "--reason", "typo"], slurm=slurm)
    assert result.exit_code == 6 and "gpu7" in result.output
    assert store.load().inbox == ()


def test_a_request_while_slurm_is_down_is_queued_with_a_warning(store: Store) -> None:
    result = run(store, ["request", "gpu01", "rebuild", "--reason", "x"], slurm=Unreachable())
    assert result.exit_code == 0
    assert "could not check gpu01" in result.output
    assert store.load().inbox[0].action is Action.REBUILD


# ------------------------------------------------------------------ alerts / explain


def test_alerts_come_from_the_nodes_extra_with_their_explanation(
        store: Store, slurm: MemorySlurm) -> None:
    """SPEC D7, I2: the alerts the node checks publish, passed on unchanged, explained."""
    slurm.set_extra("gpu01", KEY, our_section([xid79_alert()], T0))
    data = json.loads(run(store, ["alerts", "--json"], slurm=slurm).output)
    (alert,) = data["alerts"]
    assert (alert["node"], alert["fault"], alert["severity"]) == ("gpu01", "gpu.xid.79",
                                                                   "critical")
    assert alert["evidence"][0]["text"] == "NVRM: Xid (PCI:0000:3b:00): 79"
    assert alert["explanation"]
    # NVIDIA's own resolution advice travels next to ours (the Xid catalog's bucket).
    assert alert["nvidia"] == {"mnemonic": "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
                               "bucket": "RESTART_BM", "investigatory": "CONTACT_SUPPORT"}
    plain = run(store, ["alerts", "--node", "gpu02"], slurm=slurm).output
    assert "No active alerts on gpu02" in plain


def test_a_long_alert_summary_is_cut_with_an_ellipsis_to_the_terminals_width(
        store: Store, slurm: MemorySlurm, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC D7, I4 (issue 36 item 11): the alerts table ends a cut summary with "…" and
    fits $COLUMNS; a wider terminal shows more of it, the JSON all of it."""
    long = dataclasses.replace(xid79_alert(), summary="GPU 3 has fallen off the bus " * 8)
    slurm.set_extra("gpu01", KEY, our_section([long], T0))
    for columns in (100, 160):
        monkeypatch.setenv("COLUMNS", str(columns))
        lines = run(store, ["alerts"], slurm=slurm).output.splitlines()
        row = next(line for line in lines if line.startswith("gpu01"))
        assert row.endswith("…") and len(row) <= columns, (columns, row)
        assert row[:-1].rstrip().endswith(long.summary[:len(row[:-1].rstrip().split("Z  ")[-1])])
    wide = len(row)
    monkeypatch.setenv("COLUMNS", "100")
    narrow = next(line for line in run(store, ["alerts"], slurm=slurm).output.splitlines()
                  if line.startswith("gpu01"))
    assert len(narrow) < wide
    data = json.loads(run(store, ["alerts", "--json"], slurm=slurm).output)
    assert data["alerts"][0]["summary"] == long.summary


def test_status_counts_a_request_drain_as_alerting_as_alerts_lists_it(
        store: Store, slurm: MemorySlurm) -> None:
    """SPEC Q1, O6 (issue 36 item 11): a node drained by a detector's request with no
    alert in Extra is the alert `request` in `alerts`, so `status` counts it alerting
    (it said "0 alerting", the node healthy)."""
    slurm.drain("gpu02", "heal-request: reboot detector=ibmon id=4711 link flaps")
    listed = json.loads(run(store, ["alerts", "--json"], slurm=slurm).output)["alerts"]
    assert [(a["node"], a["fault"]) for a in listed] == [("gpu02", "request")]
    out = json.loads(run(store, ["status", "--json"], slurm=slurm).stdout)
    assert out["counts"]["alerting"] == 1 and out["counts"]["healthy"] == 2
    assert out["groups"]["alerting"] == "gpu02"
    detail = json.loads(run(store, ["status", "--json", "--node", "gpu02"], slurm=slurm).stdout)
    (line,) = detail["nodes"]
    assert line["category"] == "alerting" and line["alerts"] == ["request"]
    text = run(store, ["status"], slurm=slurm).stdout
    assert "1 alerting" in text and "alerting: gpu02" in text


def test_a_node_drained_by_someone_else_is_reported_not_ours(store: Store,
                                                               slurm: MemorySlurm) -> None:
    """SPEC D5: DOWN/DRAIN for a reason slurm-heal did not set is a slurm.node_drain alert;
    ours is not one, but what drained it is still shown (issue 11) under its own fault."""
    slurm.drain("gpu02", "bad fan - ticket 123")
    slurm.drain("gpu03", "heal: gpu.xid.79 rem=r-1 by=controller")
    data = json.loads(run(store, ["alerts", "--json"], slurm=slurm).output)
    assert [(a["node"], a["fault"]) for a in data["alerts"]] == [
        ("gpu02", "slurm.node_drain"), ("gpu03", "gpu.xid.79")]
    assert "bad fan - ticket 123" in data["alerts"][0]["summary"]
    assert "no node check reports a fault on it" in data["alerts"][1]["summary"]


def test_alerts_exit_3_when_slurm_does_not_answer(store: Store) -> None:
    result = run(store, ["alerts"], slurm=Unreachable())
    assert result.exit_code == 3 and "not answering" in result.output


def test_explain_puts_alert_meaning_remediation_and_decisions_together(
        store: Store, slurm: MemorySlurm) -> None:
    """House style 9: decisions explain themselves, rule id + why."""
    slurm.set_extra("gpu01", KEY, our_section([xid79_alert()], T0))
    r = rem(phase=Phase.WAITING)
    blocked = Decision(at=T0, node="gpu01", remediation=r.id, action=Action.MIGRATE,
                       phase="blocked", rule="S4", why="gpu02 is already in remediation in pool a")
    store.apply(Plan(updates=(r,), records=(blocked,)), T0)
    out = run(store, ["explain", "gpu01"], slurm=slurm).output
    assert "gpu.xid.79 (critical)" in out
    assert "what it means:" in out
    assert "NVIDIA's advice: RESTART_BM (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS)" in out
    assert r.id in out and "phase=waiting" in out
    assert "[S4] migrate: gpu02 is already in remediation in pool a" in out
    data = json.loads(run(store, ["explain", "gpu01", "--json"], slurm=slurm).output)
    assert data["slurm"]["reachable"] is True
    assert data["decisions"][0]["rule"] == "S4"


def test_explain_and_status_show_the_faults_a_persons_resume_acknowledged(
        store: Store, slurm: MemorySlurm) -> None:
    """SPEC S8 / I4: the node check moved the Xid to ``acknowledged`` after a person's
    resume: explain and status say so (no active alert), text and --json."""
    slurm.set_extra("gpu01", KEY, our_section([], T0, acknowledged=[xid79_alert()]))
    out = run(store, ["explain", "gpu01"], slurm=slurm).output
    assert "Alerts: none active" in out
    assert "Acknowledged by a person's resume (SPEC S8, never acted on): gpu.xid.79" in out
    data = json.loads(run(store, ["explain", "gpu01", "--json"], slurm=slurm).output)
    assert data["slurm"]["acknowledged"] == ["gpu.xid.79"] and data["alerts"] == []
    status = run(store, ["status", "--node", "gpu01"], slurm=slurm).output
    assert "acknowledged by a person's resume: gpu.xid.79" in status


def test_explain_without_slurm_still_explains_from_the_store(store: Store) -> None:
    store.apply(Plan(updates=(rem(phase=Phase.ACTING),)), T0)
    result = run(store, ["explain", "gpu01"], slurm=Unreachable())
    assert result.exit_code == 0
    assert "not reachable" in result.output and "phase=acting" in result.output
    data = json.loads(run(store, ["explain", "gpu01", "--json"], slurm=Unreachable()).output)
    assert data["slurm"]["reachable"] is False and data["open_remediations"]


def test_explain_of_a_node_nobody_knows_exits_6(store: Store, slurm: MemorySlurm) -> None:
    assert run(store, ["explain", "gpu99"], slurm=slurm).exit_code == 6


# ------------------------------------------------------------------ breaker


def test_breaker_reset_is_queued_only_when_it_is_open(store: Store) -> None:
    """SPEC S5: automatic remediation stops until a person resets the breaker."""
    closed = run(store, ["breaker", "reset"])
    assert closed.exit_code == 0 and "nothing to reset" in closed.output
    assert store.load().inbox == ()
    store.apply(Plan(breaker=Breaker(open=True, opened_at=T0, why="6 automatic in 1h")), T0)
    assert "Breaker OPEN" in run(store, ["breaker"]).output
    assert run(store, ["breaker", "reset", "--reason", "checked"], by="erin").exit_code == 0
    (cmd,) = store.load().inbox
    assert (cmd.kind, cmd.by, cmd.reason) == ("reset_breaker", "erin", "checked")
    assert json.loads(run(store, ["breaker", "show", "--json"]).output)["reset_pending"] is True


def test_a_corrupt_store_exits_5_and_the_breaker_shows_why(store: Store) -> None:
    """House style 5: the store is set aside, the operator is told, nothing runs on its own."""
    store.file.write_text("{ torn")
    result = run(store, ["remediations"])
    assert result.exit_code == 5 and "moved aside" in result.output
    assert "corrupt" in run(store, ["breaker"]).output


# ------------------------------------------------------------------ policy


def test_policy_check_accepts_a_good_file_and_shows_defaults(store: Store, tmp_path: Path) -> None:
    f = tmp_path / "policy.toml"
    f.write_text('[approvals]\ndefault = "manual"\n[[approvals.rules]]\nfault = "gpu.xid.119"\n'
                 'action = "reboot"\nmode = "auto"\n'
                 '[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\n')
    result = run(store, ["policy", "check", str(f), "--no-slurm"])
    assert result.exit_code == 0 and "OK" in result.output and "1 approval rule" in result.output
    shown = json.loads(run(store, ["policy", "show", str(f), "--json"]).output)["policy"]
    assert shown["waiting"]["max_wait"] == "2h"
    assert shown["approvals"]["rules"][0]["mode"] == "auto"
    plain = run(store, ["policy", "show", str(f)]).output
    assert "fault=gpu.xid.119, action=reboot -> auto" in plain


def test_policy_check_names_the_key_of_a_bad_file(store: Store, tmp_path: Path) -> None:
    """SPEC P3: more than 24h of waiting is rejected with a clear error (exit 2)."""
    f = tmp_path / "policy.toml"
    f.write_text('[waiting]\nmax_wait = "30h"\n')
    result = run(store, ["policy", "check", str(f)])
    assert result.exit_code == 2
    assert "waiting.max_wait" in result.output and "24h" in result.output
