"""Idempotency keys name what an effect is about, never its words (issue 21; SPEC S6,
D8, O3): rewording a message in an upgrade must not change a key, nor the id of the
notification it becomes. The keys a store holds (a remediation's) are pinned here."""

from __future__ import annotations

from datetime import datetime, timezone

from slurm_heal.config import policy_from_dict
from slurm_heal.models import Effect, Plan, State, idempotency_key, remediation_id
from slurm_heal.notify.events import cycle_events
from slurm_heal.policy import decide
from slurm_heal.policy.working import Ledger, node_key
from slurm_heal.types import Alert, ClusterView, NodeInfo, Severity

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
