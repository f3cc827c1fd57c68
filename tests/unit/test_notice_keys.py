"""Idempotency keys name what an effect is about, never its words (issue 21; SPEC S6,
D8, O3): rewording a message in an upgrade must not change a key, nor the id of the
notification it becomes. The keys a store holds (a remediation's) are pinned here."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import get_args

import pytest

from slurm_heal.config import policy_from_dict
from slurm_heal.models import Effect, Plan, State, idempotency_key, remediation_id
from slurm_heal.notify.events import cycle_events
from slurm_heal.policy.notices import NoticeKind, notice
from slurm_heal.policy.working import Ledger, node_key
from slurm_heal.types import Alert, ClusterView, NodeInfo, Severity
from tests.policycore import decide

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
POLICY = policy_from_dict({"approvals": {"default": "auto"}})
VIEW = ClusterView(nodes=(NodeInfo(name="gpu01", states=frozenset({"IDLE"})),
                          NodeInfo(name="gpu02", states=frozenset({"IDLE"}))))


def _notice_key(why: str, topic: str = "d8:gpu01:disk.low_space:2026-01-05T00:00:00+00:00") -> str:
    led = Ledger(State(), T0, POLICY)
    led.effect("notify", "gpu01", None, "notify", topic=topic, why=why, rule="D8")
    (eff,) = led.effects
    return eff.key


def test_rewording_a_node_notice_keeps_its_key() -> None:
    assert _notice_key("disk.low_space: 3% free; sent to support") == _notice_key(
        "disk.low_space (warning): only 3% left, no action is mapped: sent to support")


def test_notices_about_different_things_have_different_keys() -> None:
    assert _notice_key("same words", topic="d8:gpu01:disk.low_space:a") != _notice_key(
        "same words", topic="d8:gpu01:disk.low_space:b")
    assert node_key("gpu01", "D8", "x") != node_key("gpu01", "I5", "x")
    assert node_key("gpu01", "D8", "x") != node_key("gpu02", "D8", "x")


def test_the_d8_notice_of_a_fault_without_an_action_keeps_its_key_across_releases() -> None:
    """SPEC D8: pinned, so a change of the engine that would key it differently (its
    words included) shows here first."""
    al = {"gpu01": [Alert(node="gpu01", fault="disk.low_space", severity=Severity.WARNING,
                          summary="3% free", first_seen=T0, last_seen=T0)]}
    plan = decide(VIEW, State(), T0, POLICY, al)
    (eff,) = plan.effects
    assert (eff.kind, eff.rule, eff.remediation) == ("notify", "D8", None)
    # sha256("gpu01|D8|d8:gpu01:disk.low_space:2026-01-05T00:00:00+00:00")[:12]
    assert eff.key == "n-1cf20eea6baf:notify:0"


def test_the_keys_a_store_holds_are_the_remediations_own_and_never_change() -> None:
    """A store written by an earlier release holds remediation ids and their attempts'
    keys; the same input must give the same id and keys (S6)."""
    rid = remediation_id("gpu01", "gpu.xid.79", None, None, T0)
    assert rid == "r-4441c4df3e85"  # sha256("gpu01|gpu.xid.79|||2026-01-05T00:00:00+00:00")
    assert idempotency_key(rid, "notify", 0) == f"{rid}:notify:0"
    assert idempotency_key(rid, "act", 2) == f"{rid}:act:2"


def test_a_notification_is_identified_by_its_effects_key_not_its_words() -> None:
    """SPEC O3: the outbox identifies a notification by the effect's key, so a reworded
    message is the same notification, and two notices are two."""
    def ids(*effects: Effect) -> list[str]:
        return [e.id for e in cycle_events(State(), State(), Plan(), effects, {}, T0)]

    one = Effect(kind="notify", node="gpu01", key="n-1:notify:0", rule="I5", why="old words")
    reworded = one.model_copy(update={"why": "new words"})
    other = one.model_copy(update={"key": "n-2:notify:0"})
    assert ids(one) == ids(reworded) == ["person:n-1:notify:0"]
    assert ids(one, other) == ["person:n-1:notify:0", "person:n-2:notify:0"]


# Issue 33: what a notice is about is typed (`policy.notices.Notice`); its key is the text
# a store of an older build holds under data["noted"], pinned here kind by kind.
OLDER_KEYS = [
    (notice("person", "gpu01"), "person:gpu01"),
    (notice("req-nonode", "gpu09", "reboot"), "req-nonode:gpu09:reboot"),
    (notice("q2", "gpu01", "ibmon", "None", "remove"),
     "q2:gpu01:ibmon:None:remove"),
    (notice("q3", "gpu01", "ibmon", "4711", "reboot"),
     "q3:gpu01:ibmon:4711:reboot"),
    (notice("l3", "gpu01", "None", "None", "reboot"),
     "l3:gpu01:None:None:reboot"),
    (notice("malformed", "gpu01"), "malformed:gpu01"),
    (notice("s1", "gpu01", "gpu.xid.79", "2026-01-05T00:00:00+00:00"),
     "s1:gpu01:gpu.xid.79:2026-01-05T00:00:00+00:00"),
    (notice("ladder-end", "gpu01", "gpu.xid.79"), "ladder-end:gpu01:gpu.xid.79"),
    (notice("d5", "gpu03"), "d5:gpu03"),
    (notice("unreadable", "gpu01"), "unreadable:gpu01"),
    (notice("d8", "gpu01", "disk.low_space", "2026-01-05T00:00:00+00:00"),
     "d8:gpu01:disk.low_space:2026-01-05T00:00:00+00:00"),
    (notice("orphan", "gpu01"), "orphan:gpu01"),
    (notice("unrecorded", "gpu01"), "unrecorded:gpu01"),
    (notice("provider", "r-4441c4df3e85"), "provider:r-4441c4df3e85"),
    (notice("topology-problem"), "topology-problem"),
    # Issue 37 (new): stored incident entries that cannot be read, said once.
    (notice("incident-unreadable"), "incident-unreadable"),
]


def test_every_kind_of_notice_keeps_the_key_an_older_store_holds() -> None:
    assert {n.kind for n, _ in OLDER_KEYS} == set(get_args(NoticeKind))
    assert [n.key for n, _ in OLDER_KEYS] == [key for _, key in OLDER_KEYS]


D5_NODES = [NodeInfo(name="gpu01", states=frozenset({"IDLE", "DRAIN"}), reason="maint"),
            NodeInfo(name="gpu02", states=frozenset({"IDLE"}))]
D8_ALERT = {"gpu01": [Alert(node="gpu01", fault="disk.low_space", severity=Severity.WARNING,
                            summary="3% free", first_seen=T0, last_seen=T0)]}


@pytest.mark.parametrize(("nodes", "alerts", "noted", "rule"), [
    (D5_NODES, {}, {"d5:gpu01": "slurm.node_drain:maint"}, "D5"),
    (list(VIEW.nodes), D8_ALERT, {"d8:gpu01:disk.low_space:2026-01-05T00:00:00+00:00": True},
     "D8"),
], ids=["D5", "D8"])
def test_a_notice_an_older_store_noted_is_not_said_again(
        nodes: list[NodeInfo], alerts: dict[str, list[Alert]], noted: dict[str, object],
        rule: str) -> None:
    """SPEC O6 (said once), D5, D8: the store of an older build holds its notices under
    the text keys; the typed notices find them, so an upgrade says nothing twice. Without
    them, the same cycle says it once."""
    view = ClusterView(nodes=tuple(nodes))
    fresh = decide(view, State(), T0, POLICY, alerts)
    assert [r.rule for r in fresh.records] == [rule]
    assert fresh.data is not None and fresh.data["noted"] == noted
    old = decide(view, State(data={"noted": noted}), T0, POLICY, alerts)
    assert old.records == () and old.effects == () and old.data is None
