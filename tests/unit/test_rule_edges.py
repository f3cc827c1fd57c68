"""The edges of five rules that a bounded mutation run of the core found unguarded
(issue 33): each test below fails when its rule's edge is taken out of the code (the
mutant named in its docstring) and passes on the code as it is. Through the public
entry points only (`decide`, `policy_from_dict`, `extra`), never the engine's insides.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from slurm_heal import extra
from slurm_heal.config import policy_from_dict
from slurm_heal.errors import ConfigError
from slurm_heal.models import Breaker, Command, Phase, State, idempotency_key
from slurm_heal.reasons import format_marker
from slurm_heal.types import Action, Severity
from tests.unit.test_policy_engine import (
    T0,
    alert,
    history,
    kinds,
    node,
    phases,
    pol,
    rem,
    run,
)


@pytest.mark.parametrize("serial", ["FFFFFFFFFFFFFFFF", "ffffffff", "0xFFFFFFFF",
                                    "FFFF-FFFF-FFFF"])
def test_d11_an_all_f_serial_is_a_placeholder_and_no_identity(serial: str) -> None:
    """SPEC D11: all F (a tool's unsigned -1 printed in hex) is the same on every broken
    machine: no identity, so two such nodes are never one machine (mutant: only all
    zeros counted)."""
    assert extra.is_placeholder_serial(serial)
    assert extra.machine_identity([serial]) == {"identity": "node_name",
                                                "placeholder_serials": [serial]}
    assert extra.machine_identity([serial], "i-0abc") == {
        "host": "instance-i-0abc", "instance_id": "i-0abc", "identity": "instance_id",
        "placeholder_serials": [serial]}
    assert not extra.is_placeholder_serial("1654922001234")  # a real serial stays one


def test_s6_a_remediation_whose_act_was_recorded_never_acts_again() -> None:
    """SPEC S6: the act of a remediation is sent once. A record that still says
    ``cordoned`` while its act (``act:0``) is recorded (a replica's plan, a crash between
    records) gets no second act from decide() itself; the store's refusal of a known key
    is not what keeps it from acting twice (mutant: the guard in the life cycle removed)."""
    r = rem("gpu01", Phase.CORDONED, Action.REBOOT, acted=True)
    assert [a.key for a in r.attempts] == [idempotency_key(r.id, "act", 0)]
    drained = node("gpu01", "IDLE", "DRAIN",
                   reason=format_marker("gpu.xid.48", r.id, "controller", "for reboot"))
    plan = run([drained, node("gpu02")], {"gpu01": [alert("gpu01")]},
               State(remediations=(r,)), T0 + timedelta(minutes=1))
    assert "act" not in kinds(plan)
    assert ("acting", "L1") not in phases(plan, "gpu01")


def test_e3_critical_evidence_11_days_old_is_outside_the_window() -> None:
    """SPEC E3: a critical alert recorded on the machine 11 days ago is older than the
    10-day window: a migrate with only a warning now becomes a rebuild (mutant: the
    window ignored, any past critical alert counted). 9 days: test_policy_engine."""
    cmd = Command(id="c1", at=T0, kind="request", by="alice", node="gpu01",
                  action=Action.MIGRATE)
    al = {"gpu01": [alert("gpu01", "service.restart_loop", Severity.WARNING)]}
    old = history(1, days_ago=11)
    assert old[0].severity is Severity.CRITICAL and old[0].host == "gpu01"
    plan = run([node("gpu01"), node("gpu02")], al, State(inbox=(cmd,), remediations=old))
    assert plan.updates[0].action is Action.REBUILD and ("escalated", "E3") in phases(plan)
    # the same evidence inside a window set to 12 days keeps the migrate
    longer = pol(escalation={"migrate_evidence_window": "12d"})
    plan = run([node("gpu01"), node("gpu02")], al, State(inbox=(cmd,), remediations=old),
               policy=longer)
    assert plan.updates[0].action is Action.MIGRATE


def test_p3_a_wait_of_exactly_24h_is_allowed_and_a_minute_more_refused() -> None:
    """SPEC P3: configurable up to 24 hours, more is rejected (mutant: 24h itself
    refused)."""
    assert policy_from_dict({"waiting": {"max_wait": "24h"}}).waiting.max_wait == \
        timedelta(hours=24)
    assert policy_from_dict({"waiting": {"max_wait": "1d"}}).waiting.max_wait == \
        timedelta(hours=24)
    with pytest.raises(ConfigError, match=r"waiting\.max_wait.*24h"):
        policy_from_dict({"waiting": {"max_wait": "1441m"}}, "p.toml")


def test_s5_a_breaker_reset_restarts_the_count() -> None:
    """SPEC S5: after a person resets the breaker, the starts before the reset no longer
    count: the next automatic remediation starts (mutant: the reset ignored, the surge
    still counted in the window, the breaker opening again at once)."""
    recent = tuple(rem(f"gpu0{i}", Phase.DONE, at=T0 - timedelta(minutes=10 * i))
                   for i in range(2, 4))
    nodes = [node(f"gpu0{i}", pool=f"p{i}") for i in range(1, 5)]
    p = pol(safety={"breaker_threshold": 2, "concurrency": 5})
    reset = Breaker(open=False, reset_by="alice", reset_at=T0 - timedelta(minutes=5))
    plan = run(nodes, {"gpu01": [alert("gpu01")]},
               State(remediations=recent, breaker=reset), policy=p)
    assert ("blocked", "S5") not in phases(plan)
    assert kinds(plan) == ["cordon"] and plan.breaker is None
    # the same starts after the reset do count: the breaker opens again
    before = Breaker(open=False, reset_by="alice", reset_at=T0 - timedelta(minutes=45))
    plan = run(nodes, {"gpu01": [alert("gpu01")]},
               State(remediations=recent, breaker=before), policy=p)
    assert ("blocked", "S5") in phases(plan) and plan.breaker is not None
    assert plan.breaker.open
