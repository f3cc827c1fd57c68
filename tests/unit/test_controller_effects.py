"""The controller's effects (ARCHITECTURE "the flow", step 6): one handler per effect
kind, and one map from what a step raised to its outcome (SPEC S6, house style 5, issue
8 defect 7). The cycle itself is tested end to end in tests/integration and
tests/reliability; these pin the table and the map on their own."""

from __future__ import annotations

from typing import get_args

import pytest

from slurm_heal.controller import DISRUPTIVE, HANDLERS, failure_outcome
from slurm_heal.errors import (
    NotFound,
    ProviderError,
    ProviderRefused,
    SlurmError,
    SlurmUnreachable,
    StoreError,
)
from slurm_heal.models import EffectKind

KINDS = get_args(EffectKind)


def test_every_effect_kind_has_exactly_one_handler() -> None:
    """A new EffectKind without a handler would fail every such effect at run time."""
    assert sorted(HANDLERS) == sorted(KINDS)
    assert DISRUPTIVE <= set(KINDS)


def test_resume_and_release_share_the_handler_that_only_undoes_our_own_reason() -> None:
    """House style 2: release (undo a cordon) obeys the same guard as resume."""
    assert HANDLERS["release"] is HANDLERS["resume"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_definite_no_from_the_provider_fails_the_effect(kind: str) -> None:
    assert failure_outcome(kind, ProviderRefused("quota: no")) == ("failed", "quota: no")


@pytest.mark.parametrize("kind", ["act", "poll"])
def test_an_unknown_provider_answer_leaves_act_and_poll_in_flight(kind: str) -> None:
    """SPEC S6: a timeout or a 5xx after retries: whether it ran is unknown, so it is
    asked about by the same key next cycle, never failed (nor sent under a new key)."""
    assert failure_outcome(kind, ProviderError("read timed out")) == (None, "read timed out")


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in ("act", "poll")])
def test_a_provider_error_on_any_other_effect_fails_it(kind: str) -> None:
    assert failure_outcome(kind, ProviderError("boom")) == ("failed", "boom")


@pytest.mark.parametrize("kind", KINDS)
def test_slurm_errors_fail_the_effect_in_slurms_words(kind: str) -> None:
    exc = SlurmError("scontrol update failed", command=["scontrol", "update"], returncode=1,
                     stderr="Invalid node state specified")
    outcome, detail = failure_outcome(kind, exc)
    assert outcome == "failed" and detail == str(exc)
    assert "Invalid node state specified" in detail
    assert failure_outcome(kind, SlurmUnreachable("no controller"))[0] == "failed"


@pytest.mark.parametrize("exc", [NotFound("gpu99 is gone"), StoreError("disk full")])
def test_our_other_errors_fail_the_effect_named_by_their_class(exc: Exception) -> None:
    """A node gone from Slurm (NotFound), a store that cannot be written: failed, the
    class named so the audit record says which."""
    assert failure_outcome("cordon", exc) == ("failed", f"{type(exc).__name__}: {exc}")
    assert failure_outcome("act", exc)[0] == "failed"


def test_an_unexpected_error_fails_a_step_but_leaves_an_act_in_flight() -> None:
    """Issue 8, defect 7: a full disk (OSError) or a bug fails that effect only; an act
    or a poll stays in flight, since whether the action ran is unknown."""
    full = OSError(28, "No space left on device")
    assert failure_outcome("notify", full) == (
        "failed", "unexpected OSError: [Errno 28] No space left on device")
    assert failure_outcome("act", full) == (None, "OSError: [Errno 28] No space left on device")
    assert failure_outcome("poll", KeyError("x")) == (None, "KeyError: 'x'")
