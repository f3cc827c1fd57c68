"""What an operator sees and does (SPEC O1, O2, I4, P2, D5, S5): `pause`/`unpause` hold
a remediation mid-way without touching its jobs, and `status` shows each state.

The real engine, store, controller cycle and http provider against the in-process
simulated cluster (the rig of test_controller_cycle.py), the commands through click."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from slurm_heal.cli import cli
from slurm_heal.heartbeat import Heartbeat
from slurm_heal.models import Phase
from tests.fakes import Rig
from tests.integration.test_controller_cycle import make_rig


def _cli(rig: Rig, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--state-dir", str(rig.store.file.parent)],
                              obj={"slurm": rig.cluster}, catch_exceptions=False)


def _beat(rig: Rig, **kw: Any) -> None:
    # `status` reads the real clock: the heartbeat is written as the daemon would now
    now = datetime.now(timezone.utc)
    fields: dict[str, Any] = {"at": now, "last_success": now,
                              "interval": 30.0, "mode": "normal", "version": "t"}
    fields.update(kw)
    Heartbeat(**fields).write(rig.store.file.parent / "heartbeat")


def _status(rig: Rig, *args: str) -> tuple[int, dict[str, Any]]:
    res = CliRunner().invoke(cli, ["status", "--json", *args, "--state-dir",
                                   str(rig.store.file.parent)],
                             obj={"slurm": rig.cluster}, catch_exceptions=False)
    return res.exit_code, json.loads(res.output)


def test_pause_holds_a_waiting_remediation_without_touching_its_job_and_unpause_finishes_it(
        tmp_path: Path) -> None:
    """SPEC O2, P3: paused past the wait limit: no requeue, no act; who/why shown."""
    with make_rig(tmp_path) as rig:
        jid = rig.cluster.submit_job("gpu02", timedelta(hours=5))
        rig.alert("gpu02", "gpu.xid.119")
        ctl = rig.controller()
        rig.run(ctl, 2)
        assert rig.rems("gpu02")[0].phase is Phase.WAITING
        _beat(rig)
        res = _cli(rig, "pause", "--reason", "firmware rollout", "--by", "alice")
        assert res.exit_code == 0, res.output
        rig.run(ctl, 1)
        state = rig.store.load()
        assert state.paused and state.pause is not None
        assert (state.pause.by, state.pause.reason) == ("alice", "firmware rollout")
        rig.clock.advance(hours=3)  # past the 2 h wait limit: would requeue, if not paused
        rig.run(ctl, 5)
        assert [j.job_id for j in rig.cluster.jobs("gpu02")] == [jid]  # untouched
        assert rig.rems("gpu02")[0].phase is Phase.WAITING
        assert rig.sim.stats()["executed"] == {}
        _beat(rig)
        code, ov = _status(rig)
        assert code == 0 and ov["controller"]["paused"] is True
        assert ov["controller"]["pause"]["by"] == "alice"
        text = _cli(rig, "status").output
        assert "PAUSED by alice" in text and "firmware rollout" in text
        explain = _cli(rig, "explain", "gpu02").output
        assert "PAUSED by alice" in explain and "firmware rollout" in explain

        assert _cli(rig, "unpause", "--by", "bob").exit_code == 0
        rig.run(ctl, 40)
        rem = rig.rems("gpu02")[0]
        assert rem.phase is Phase.DONE, rem.steps[-1]
        # the wait limit had passed: the job is requeued only now, then the reboot (P3)
        assert rig.cluster.history("gpu02") == [f"requeue:{jid}", "reboot"]
        state = rig.store.load()
        assert not state.paused and state.pause is not None and state.pause.by == "bob"


def test_status_shows_controller_breaker_counts_approvals_in_flight_and_foreign_drains(
        tmp_path: Path) -> None:
    """SPEC I4, D5, P2, O1: each state created, then seen in `status` (text and JSON)."""
    with make_rig(tmp_path) as rig:
        # no heartbeat yet: said on the first line; --check exits 1
        res = _cli(rig, "status", "--check")
        assert res.exit_code == 1 and res.stdout.startswith("NO CONTROLLER")
        rig.alert("gpu01", "gpu.xid.119")  # auto-approved: will be in flight
        rig.alert("gpu03", "gpu.ecc.dbe")  # no auto rule: waits for a person (P2)
        rig.cluster.mark_down("gpu04", "PSU fault, ticket 77", user="ops")
        ctl = rig.controller()
        rig.run(ctl, 2)
        _beat(rig)
        code, ov = _status(rig, "--check", "--node", "gpu[01-02]")
        assert code == 0 and ov["controller"]["state"] == "running"
        assert ov["counts"]["remediating"] >= 1 and ov["counts"]["drained_by_others"] == 1
        assert ov["groups"]["drained_by_others"] == "gpu04"
        (foreign,) = ov["foreign"]
        assert (foreign["node"], foreign["state"], foreign["user"]) == ("gpu04", "down", "ops")
        flying = {f["node"]: f for f in ov["in_flight"]}
        assert "gpu01" in flying and flying["gpu01"]["phase"]
        assert [n["name"] for n in ov["nodes"]] == ["gpu01", "gpu02"]
        assert ov["breaker"]["open"] is False
        assert {n["name"] for n in ov["node_status"]} == {"gpu01", "gpu02", "gpu03", "gpu04"}
        (waiting,) = ov["approvals"]
        assert waiting["node"] == "gpu03" and waiting["approve"].startswith("slurm-heal approve r-")
        text = _cli(rig, "status").stdout
        assert "Waiting for approval: 1" in text and "gpu04 down by ops" in text

        # a failing controller (alive, cycles fail) and a stale one: --check exits 1
        _beat(rig, last_success=datetime.now(timezone.utc) - timedelta(minutes=10),
              failures_since_success=3, last_error="Slurm unavailable: timeout")
        res = _cli(rig, "status", "--check")
        assert res.exit_code == 1 and res.stdout.startswith("CONTROLLER FAILING")
        assert "Slurm unavailable" in res.stdout.splitlines()[0]
        _beat(rig, at=datetime.now(timezone.utc) - timedelta(hours=1))
        res = _cli(rig, "status", "--check")
        assert res.exit_code == 1 and res.stdout.startswith("CONTROLLER STALE")
        assert _cli(rig, "status").exit_code == 0  # without --check it only says so


def test_alerts_shows_what_drained_a_node_when_no_alert_says_so(tmp_path: Path) -> None:
    """Issue 11, D7: our cordon (or a detector's request) with nothing in Extra is still
    shown by `alerts`, with the reason that drained the node."""
    with make_rig(tmp_path) as rig:
        rig.cluster.drain("gpu01", "heal: gpu.xid.79 by=check GPU has fallen off the bus")
        rig.cluster.drain("gpu02", "heal-request: reboot detector=ibmon id=4711")
        res = CliRunner().invoke(cli, ["alerts", "--json", "--state-dir",
                                       str(rig.store.file.parent)],
                                 obj={"slurm": rig.cluster}, catch_exceptions=False)
        assert res.exit_code == 0, res.output
        found = {a["node"]: a for a in json.loads(res.stdout)["alerts"]}
        assert found["gpu01"]["fault"] == "gpu.xid.79"
        assert found["gpu01"]["severity"] == "critical"
        assert "heal: gpu.xid.79 by=check" in found["gpu01"]["summary"]
        assert found["gpu02"]["fault"] == "request"
        assert "detector=ibmon" in found["gpu02"]["summary"]
        assert "gpu03" not in found
