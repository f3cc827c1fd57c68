"""The engine reads our cordon marker by parsing it (reasons.marker_of), never by looking
for ``rem=<id>`` somewhere in the reason text (issue 21; SPEC L1, S6, house style 2)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from slurm_heal.config import policy_from_dict
from slurm_heal.models import Attempt, Plan, State
from slurm_heal.reasons import format_marker
from slurm_heal.types import Alert, ClusterView, NodeInfo, Severity
from tests.policycore import decide

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
POLICY = policy_from_dict({"approvals": {"default": "auto"}})


def _view(reason: str = "", drained: bool = False) -> ClusterView:
    states = frozenset({"IDLE", "DRAIN"} if drained else {"IDLE"})
    return ClusterView(nodes=(
        NodeInfo(name="gpu01", states=states, reason=reason, partitions=("a",)),
        NodeInfo(name="gpu02", states=frozenset({"IDLE"}), partitions=("b",)),
        NodeInfo(name="gpu03", states=frozenset({"IDLE"}), partitions=("c",))))


def _alerts() -> dict[str, list[Alert]]:
    return {"gpu01": [Alert(node="gpu01", fault="gpu.xid.48", severity=Severity.CRITICAL,
                            summary="", first_seen=T0, last_seen=T0)]}


def _cordon_recorded_never_answered() -> tuple[State, str, str]:
    """The remediation's cordon recorded before it ran, and no outcome since (the
    controller stopped in between): the engine settles it from what Slurm shows."""
    plan: Plan = decide(_view(), State(), T0, POLICY, _alerts())
    (rem,) = plan.updates
    (cordon,) = [e for e in plan.effects if e.kind == "cordon"]
    rem = rem.model_copy(update={"attempts": (Attempt(key=cordon.key, effect="cordon",
                                                      started=T0),)})
    return State(remediations=(rem,)), rem.id, cordon.key


def _settled(reason: str) -> str | None:
    state, _, key = _cordon_recorded_never_answered()
    later = T0 + POLICY.safety.step_timeout + timedelta(seconds=1)
    plan = decide(_view(reason, drained=True), state, later, POLICY, _alerts())
    return next(a.outcome for u in plan.updates for a in u.attempts if a.key == key)


def test_a_cordon_left_unanswered_is_ok_when_the_node_carries_our_marker_for_it() -> None:
    _, rid, _ = _cordon_recorded_never_answered()
    assert _settled(format_marker("gpu.xid.48", rid, "controller", "for reboot")) == "ok"


@pytest.mark.parametrize("text", ["moved here from rem={rid}", "rem={rid}"])
def test_another_remediations_marker_naming_this_one_in_its_text_is_not_ours(
        text: str) -> None:
    """Our marker for another remediation whose free text happens to hold ``rem=<id>``
    of this one: the node is not drained for this remediation, so its cordon failed."""
    _, rid, _ = _cordon_recorded_never_answered()
    reason = format_marker("gpu.xid.48", "r-0ther", "controller", text.format(rid=rid))
    assert f"rem={rid}" in reason
    assert _settled(reason) == "failed"


def test_a_persons_reason_that_quotes_our_marker_is_not_ours() -> None:
    _, rid, _ = _cordon_recorded_never_answered()
    assert _settled(f"NHC: was heal: gpu.xid.48 rem={rid}") == "failed"
