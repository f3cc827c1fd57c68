"""One way to write a time and a time span (issue 21): `status` (readmodel.overview) and
the console's ``ts`` and ``ago`` filters (api/app.py) use readmodel.words' stamp and
elapsed."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from slurm_heal.api.app import _ago, _ts
from slurm_heal.readmodel.words import elapsed, stamp

AT = datetime(2026, 1, 5, 10, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(("seconds", "words"), [
    (0, "0s"), (59.9, "59s"), (119, "119s"), (120, "2m"), (7199, "119m"),
    (7200, "2h00m"), (3 * 3600 + 5 * 60, "3h05m"), (172800, "2d0h"),
    (2 * 86400 + 4 * 3600, "2d4h"), (-5, "0s")])
def test_a_time_span_in_a_few_characters(seconds: float, words: str) -> None:
    assert elapsed(seconds) == words


def test_a_time_is_written_in_utc() -> None:
    assert stamp(AT.astimezone(timezone(timedelta(hours=2)))) == "2026-01-05 10:00:00Z"
    assert stamp(None) == "-"


def test_the_console_writes_times_as_status_does() -> None:
    """The templates get JSON (ISO strings); a naive time is UTC; what is not a time is
    shown as it is."""
    assert _ts(AT.isoformat()) == _ts("2026-01-05T10:00:00") == stamp(AT)
    assert (_ts(None), _ts("soon")) == ("-", "soon")
    assert (_ago(None), _ago("soon")) == ("never", "soon")
    assert _ago((datetime.now(timezone.utc) - timedelta(hours=3, minutes=5)).isoformat()) \
        in ("3h05m ago", "3h06m ago")  # the clock moves on while the test runs
    assert _ago((datetime.now(timezone.utc) + timedelta(minutes=1)).isoformat()) == "0s ago"
