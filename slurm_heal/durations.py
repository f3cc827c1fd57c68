"""The one duration syntax of slurm-heal's files (house style 13): "30s", "10m", "2h",
"7d", "1w", "1d12h".

Policy knobs (`parse_duration_knob`) must carry their unit; the settings that have always
been bare seconds (``controller.interval``, ``notify.backoff``, check.toml's
``kernel_log.hold``: `parse_seconds`) take the same strings and, so existing files keep
working, a bare number of seconds. Kept free of pydantic: the node check imports it.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from typing import Any

_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?[smhdw])+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: Any) -> timedelta:
    """Parse "30s", "30m", "2h", "7d", "1w", "1d12h" (or seconds) into a timedelta."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    try:
        if isinstance(value, (int, float)):
            if math.isnan(value) or value < 0:
                raise ValueError(f"{value!r} is negative or not a number")
            return timedelta(seconds=value)
        if isinstance(value, str) and _DURATION.match(value.strip().replace(" ", "")):
            return timedelta(seconds=sum(float(n) * _UNIT[u]
                                         for n, u in _PART.findall(value.replace(" ", ""))))
    except OverflowError:
        raise ValueError(f"{value!r} is too long a duration") from None
    raise ValueError(f"{value!r} is not a duration (use e.g. \"30s\", \"30m\", \"2h\", \"7d\")")


def parse_duration_knob(value: Any) -> timedelta:
    """A duration knob of the file: a string with its unit ("30s", "30m", "2h", "7d").

    A bare number is rejected: ``cooldown = 30`` reads as 30 minutes to a person and was
    taken as 30 seconds, so the unit must be written.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(f"{value!r} is a bare number: write the duration with its unit, "
                         f"e.g. \"{value}s\" or \"{value}m\"")
    return parse_duration(value)


def parse_seconds(value: Any) -> float:
    """A duration setting that has always been a number of seconds (``controller.interval``,
    ``notify.backoff``, check.toml's ``kernel_log.hold``): the unit form ("30s", "10m",
    "1h") like every other duration, and, so existing files keep working, bare seconds
    (``interval = 30``). Raises ValueError with the same words as every duration."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if math.isnan(value):
            raise ValueError(f"{value!r} is not a duration")
        return float(value)
    return parse_duration(value).total_seconds()


def format_duration(value: timedelta) -> str:
    """The shortest exact "30m"/"2h"/"7d" form of ``value`` (for records and docs)."""
    secs = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs and secs % size == 0:
            return f"{secs // size}{unit}"
    return f"{secs}s"
