"""The daemon's clock: wall time anchored to the monotonic clock (issue 34 item 5; SPEC
P3, L5, S2).

A cycle's waits compare the store's times with ``now``: the P3 wait limit is
``cordoned + max_wait``, the L5 return timeout ``act_done + return_timeout``, the S2
cooldown and the S5 window count from ended remediations. Read straight from the wall
clock, a step of that clock (a person's ``date -s``, NTP's first sync after a bad RTC,
a VM restored from a snapshot) shortens or lengthens every one of them by the step: a
+2 h step requeued a job that had waited 15 s of a 1 h limit.

`SteadyClock` answers the wall time as this boot's monotonic clock carries it on from an
anchor: ``zero + time.monotonic()``, where ``zero`` is the wall time that monotonic zero
stands for. NTP's slewing moves both clocks alike; only a step moves one without the
other. When the wall clock is more than ``tolerance`` away from the anchored time, it
stepped: the clock follows it (``zero`` moves by the step) so that the times we show and
compare with Slurm's (slurmctld reads the same host clock) stay right, and `Frame` says
so. The controller then moves every stored time a wait or a window counts from by the
same step, once, under the store's lock, in the same write that records the store's new
frame (`slurm_heal.store.Store.follow_clock`): between two cycles every wait sees the
real time elapsed, whatever the wall clock did.

The store records the frame (boot id and ``zero``) its times are on. A restart on the
same boot finds the store on the frame of the clock before it: a step made while the
daemon was stopped is seen there. After a reboot (a new boot id) the monotonic clock
starts again and the clock anchors fresh on the wall clock: the store's times are taken
as they are (no step).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import BaseModel

from slurm_heal import isotime
from slurm_heal.checks import paths

# The wall clock may stand this far from the anchored time without being a step: the two
# reads are not one instant, and a leap second is one second.
TOLERANCE = timedelta(seconds=2)


def utcnow() -> datetime:
    """The real wall clock."""
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Frame:
    """Which timeline times are on: this boot's monotonic zero as a wall time."""

    boot: str
    zero: datetime

    def dump(self) -> dict[str, Any]:
        """As the store records it (JSON)."""
        return {"boot": self.boot, "zero": self.zero.isoformat()}

    @classmethod
    def read(cls, raw: Any) -> Frame | None:
        """The frame a store recorded, or None (none recorded, or not readable)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("boot"), str) \
                or not isinstance(raw.get("zero"), str):
            return None
        try:
            zero = isotime.parse(raw["zero"])
        except ValueError:
            return None
        return cls(raw["boot"], zero if zero.tzinfo else zero.replace(tzinfo=timezone.utc))


class SteadyClock:
    """Wall time carried on by the monotonic clock; a wall-clock step is followed and
    reported through `frame`, never hidden in a wait (see the module's words).

    ``wall``, ``monotonic`` and ``boot_id`` are the real clocks by default; a test
    passes its own (the one Clock of tests/fakes.py for the wall time)."""

    def __init__(self, *, wall: Callable[[], datetime] = utcnow,
                 monotonic: Callable[[], float] = time.monotonic,
                 boot_id: Callable[[], str] = paths.boot_id,
                 tolerance: timedelta = TOLERANCE) -> None:
        self._wall = wall
        self._monotonic = monotonic
        self.tolerance = tolerance
        # Without a boot id (no /proc) a restart cannot tell the same boot from the next:
        # this process's own id, so steps are followed while it runs and a restart
        # anchors fresh (never a reboot's uptime taken for a step).
        boot = boot_id() or "process-" + os.urandom(8).hex()
        mono = monotonic()
        self.frame = Frame(boot, wall() - timedelta(seconds=mono))

    def __call__(self) -> datetime:
        """Now: the anchored time, which follows a step of the wall clock (the frame
        moves by the step; the controller moves the store's times with it)."""
        mono = timedelta(seconds=self._monotonic())
        now = self.frame.zero + mono
        step = self._wall() - now
        if abs(step) > self.tolerance:
            self.frame = Frame(self.frame.boot, self.frame.zero + step)
            now += step
        return now

    def follow(self, stored: Frame | None) -> None:
        """Take the frame the store's times are on as this clock's own when it is of
        this boot and within the tolerance (a restart on the same boot, nothing stepped
        while it was stopped). Another boot, or a step: this clock's frame stands and
        the store moves to it (`slurm_heal.store.Store.follow_clock`)."""
        if stored is not None and stored.boot == self.frame.boot \
                and abs(self.frame.zero - stored.zero) <= self.tolerance:
            self.frame = stored


def words(step: timedelta) -> str:
    """A step as people read it: "+2:00:00", "-0:00:05"."""
    sign = "-" if step < timedelta() else "+"
    return sign + str(abs(step)).split(".")[0]


def moved(value: Any, step: timedelta) -> Any:
    """``value`` with every time in it ``step`` later: a datetime, a model's typed fields
    (a model's copy, only where something moved), the items of a tuple, list or dict.
    Free JSON (a dict of strings) is left as it is: only typed times move."""
    if isinstance(value, datetime):
        return value + step
    if isinstance(value, BaseModel):
        changes = {}
        for name in type(value).model_fields:
            old = getattr(value, name)
            new = moved(old, step)
            if new is not old:
                changes[name] = new
        return value.model_copy(update=changes) if changes else value
    if isinstance(value, (tuple, list)):
        items = [moved(v, step) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(items)
    if isinstance(value, dict):
        out = {k: moved(v, step) for k, v in value.items()}
        return value if all(out[k] is v for k, v in value.items()) else out
    return value
