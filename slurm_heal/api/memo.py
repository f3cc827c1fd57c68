"""What serve computes once and answers from memory (issue 34 item 3, SPEC O5).

A `Memo` keeps the last value computed for each slot (the API's overview, the console's
overview for one query, Slurm's node list, ...) with the inputs it was computed from
and when. A read whose inputs are the same objects, within ``bound`` seconds of that
computation, gets the very same value. One computation at a time: requests that arrive
while it runs wait for it and take its value (single flight), so a hundred clients
asking at once cost one computation, not a hundred.

The inputs are compared by equality, a large one wrapped in `Same` by identity: the
Store answers unchanged bytes with the very same State (issue 20), so a changed store, a
write through the inbox included, is a new object and the next read computes again. ``bound`` is for what depends on the time alone
(ages, "waiting for 3 min", a heartbeat turning stale) and for inputs read at most that
often (Slurm's node list): a status page may be that many seconds old, never more.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

# Slots kept at most: the console's queries (filters, pages) each have one; the oldest
# goes first. A slot older than the bound is never answered, so few live at once.
MAX_SLOTS = 64


class Same:
    """An input compared by identity, not by value: a State the Store gives again for
    the same bytes, a Slurm snapshot shared for the bound (comparing 10,000 nodes field
    by field would cost what the memo saves). It keeps the object alive."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


@dataclass(frozen=True)
class _Entry(Generic[T]):
    inputs: tuple[object, ...]
    at: float
    value: T
    done: float  # when its computation ended


class Memo(Generic[T]):
    """The last value of each slot, recomputed when its inputs change or ``bound``
    seconds after it was computed; one computation at a time (`get`)."""

    def __init__(self, bound: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.bound = bound
        self.clock = clock
        self._entries: dict[Hashable, _Entry[T]] = {}
        self._lock = threading.Lock()

    def get(self, slot: Hashable, inputs: tuple[object, ...], compute: Callable[[], T]) -> T:
        """The slot's value for ``inputs`` (compared by equality, `Same` by identity): the one in memory when
        it was computed from the same objects less than ``bound`` seconds ago (or ended
        after this call began: the one it waited for), else ``compute()``, run once while
        every other caller waits for it. An exception
        from ``compute`` is raised to this caller and keeps nothing."""
        arrived = self.clock()
        with self._lock:
            hit = self._entries.get(slot)
            if hit is not None and self._valid(hit, inputs, arrived):
                return hit.value
            at = self.clock()  # before computing: the value is at least this old
            value = compute()
            self._entries.pop(slot, None)
            if len(self._entries) >= MAX_SLOTS:
                del self._entries[next(iter(self._entries))]
            self._entries[slot] = _Entry(inputs, at, value, self.clock())
            return value

    def clear(self) -> None:
        """Forget every value: the next read of each slot computes again."""
        with self._lock:
            self._entries.clear()

    def _valid(self, hit: _Entry[T], inputs: tuple[object, ...], arrived: float) -> bool:
        # A caller that waited for this computation takes its value, however long it
        # took: it is the newest there is. Aged from its start, a computation longer
        # than the bound (the 10,000-node overview on a loaded machine) was stale when it
        # ended, and each waiting request computed it again in turn.
        if not (0 <= self.clock() - hit.at < self.bound or hit.done >= arrived):
            return False
        return len(hit.inputs) == len(inputs) and all(
            a is b or a == b for a, b in zip(hit.inputs, inputs, strict=True))
