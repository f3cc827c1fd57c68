"""The one retry loop of the SDK providers (providers/_transport.py: `retrying`, `pause`,
`try_within`; SPEC S6). The providers' own tests run it against their HTTP emulators;
these pin the loop's rules one by one, with the sleep recorded instead of slept."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from slurm_heal.errors import ProviderError, ProviderTimeout
from slurm_heal.providers._transport import (
    MAX_PAUSE,
    Deadline,
    Retryable,
    Spent,
    pause,
    retrying,
    try_within,
)


def _tries(*outcomes: BaseException | str) -> tuple[Callable[[Deadline], str], list[int]]:
    """A call that raises (or returns) ``outcomes`` in turn, counting its tries."""
    seen: list[int] = []

    def once(deadline: Deadline) -> str:
        seen.append(len(seen))
        outcome = outcomes[len(seen) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return once, seen


def _run(once: Callable[[Deadline], str], sleeps: list[float], *, attempts: int = 4,
         seconds: float = 60.0, shorten: bool = False) -> str:
    return retrying(once, deadline=Deadline(seconds), attempts=attempts, backoff=0.5,
                    sleep=sleeps.append, shorten=shorten,
                    give_up=lambda n, last: f"x: gave up after {n} tries: {last}")


def test_a_retryable_failure_is_tried_again_until_it_answers() -> None:
    once, seen = _tries(Retryable("busy"), Retryable("busy"), "done")
    sleeps: list[float] = []
    assert _run(once, sleeps) == "done"
    assert len(seen) == 3 and len(sleeps) == 2
    # full jitter: uniform up to backoff * 2**attempt
    assert 0 <= sleeps[0] <= 0.5 and 0 <= sleeps[1] <= 1.0


def test_retry_after_is_honoured_and_capped() -> None:
    once, _ = _tries(Retryable("429", retry_after=7), Retryable("429", retry_after=600),
                     "done")
    sleeps: list[float] = []
    assert _run(once, sleeps, seconds=1000) == "done"
    assert sleeps == [7.0, MAX_PAUSE]


def test_giving_up_says_how_many_tries_and_the_last_reason() -> None:
    once, seen = _tries(Retryable("first"), Retryable("second"))
    sleeps: list[float] = []
    with pytest.raises(ProviderError, match="^x: gave up after 2 tries: second$") as info:
        _run(once, sleeps, attempts=2)
    assert not isinstance(info.value, ProviderTimeout)
    assert len(seen) == 2 and len(sleeps) == 1  # no pause after the last try


def test_a_last_try_that_timed_out_gives_up_with_a_timeout() -> None:
    once, _ = _tries(Retryable("slow", timed_out=True))
    with pytest.raises(ProviderTimeout, match="gave up after 1 tries: slow"):
        _run(once, [], attempts=1)


def test_anything_but_retryable_is_not_tried_again() -> None:
    """SPEC S6: what may be tried again is the caller's to say; an unknown outcome
    (here a plain ProviderError) is raised at once, as it is."""
    lost = ProviderError("lost answer")
    once, seen = _tries(Retryable("busy"), lost, "never")
    with pytest.raises(ProviderError) as info:
        _run(once, [])
    assert info.value is lost and len(seen) == 2


def test_a_final_retryable_ends_the_tries() -> None:
    once, seen = _tries(Retryable("still running", timed_out=True, final=True), "never")
    sleeps: list[float] = []
    with pytest.raises(ProviderTimeout, match="gave up after 1 tries: still running"):
        _run(once, sleeps)
    assert len(seen) == 1 and sleeps == []


def test_a_deadline_spent_before_a_try_keeps_the_last_reason() -> None:
    once, seen = _tries(Retryable("busy"), Spent())
    with pytest.raises(ProviderError, match="gave up after 2 tries: busy$"):
        _run(once, [])
    assert len(seen) == 2
    once, _ = _tries(Spent())
    with pytest.raises(ProviderError, match="gave up after 1 tries: $"):
        _run(once, [])


def test_no_pause_runs_past_the_deadline() -> None:
    sleeps: list[float] = []
    deadline = Deadline(5.0)
    assert not pause(0, 20.0, deadline, attempts=4, backoff=0.5, sleep=sleeps.append)
    assert sleeps == []
    # shorten: the pause is cut to the time left and the next try is still made
    assert pause(0, 20.0, deadline, attempts=4, backoff=0.5, sleep=sleeps.append,
                 shorten=True)
    assert len(sleeps) == 1 and 0 < sleeps[0] <= 5.0
    spent = Deadline(0.0)
    assert not pause(0, 1.0, spent, attempts=4, backoff=0.5, sleep=sleeps.append,
                     shorten=True)
    assert len(sleeps) == 1


class _Unknown(ProviderError):
    pass


def _within(fn: Callable[[], object], seconds: float, *, read: bool,
            on_timeout: Callable[[], None] | None = None) -> object:
    return try_within(fn, Deadline(seconds), who="p", what="GET x", read=read,
                      classify=lambda exc: Retryable(f"classified {exc}"),
                      unknown=_Unknown, on_timeout=on_timeout)


def test_try_within_maps_what_the_call_did() -> None:
    assert _within(lambda: 42, 5, read=True) == 42

    def boom() -> int:
        raise ValueError("bad")

    with pytest.raises(Retryable, match="classified bad") as info:
        _within(boom, 5, read=True)
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(Retryable, match="^p: GET x: the deadline of 0s is spent$"):
        _within(lambda: 1, 0, read=True)


def test_try_within_a_call_still_running_at_the_deadline() -> None:
    release = threading.Event()
    dropped: list[bool] = []
    try:
        with pytest.raises(Retryable, match="timed out: no complete answer") as info:
            _within(release.wait, 0.2, read=True)
        assert info.value.timed_out
        # An action still running at the deadline may have been sent: unknown (S6).
        with pytest.raises(_Unknown, match="^p: GET x: timed out: no complete answer"):
            _within(release.wait, 0.2, read=False, on_timeout=lambda: dropped.append(True))
        assert dropped == [True]
    finally:
        release.set()
