"""What a notice is about, typed (SPEC O6 "notified once", S6; issue 33): the key
`working.Ledger.once` records a condition under while it holds.

A notice is a kind (`NoticeKind`: one per condition a rule says once) and the values
that tell one condition of that kind from another (the node, the fault, when it was
first seen). Rules build a `Notice`; none writes a key's text. `Notice.key` is the text
the store keeps under ``data["noted"]``: the same text the keys had before they were
typed (``d5:gpu03``, ``s1:gpu01:gpu.xid.79:2026-01-05T00:00:00+00:00``), so a store of an
older build means the same conditions and nothing is said twice after an upgrade. That
text is only ever compared, never split: what a notice is about is read from the
`Notice`, never from its key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# The kinds of notice, each said once while its condition holds: the keys' first words in
# the store, never renamed (a store holds them). A Literal, so mypy holds every rule to
# one of them (the core's classes inherit nothing, tests/unit/test_policy_shape.py).
NoticeKind = Literal[
    "person",  # E1: a node handed to a person (its last remediation)
    "req-nonode",  # Q1: a request for a node Slurm does not know
    "q2",  # Q2: a detector's request to remove a node
    "q3",  # Q3: the same request again
    "l3",  # L3: a request while the node has an open remediation
    "malformed",  # Q1, O6: a request reason that does not parse
    "s1",  # S1: an alert that must persist before action
    "ladder-end",  # E1: the ladder ran out for a fault on a node
    "d5",  # D5: a node DOWN or drained by someone else
    "unreadable",  # I2: check data in a node's Extra that cannot be read
    "d8",  # D8: an alert whose fault has no action
    "orphan",  # L1: our cordon marker left on a node
    "unrecorded",  # I5: our marker naming a remediation with no record
    "provider",  # O6: a provider that does not answer an act
    "topology-problem",  # S7: the topology cannot be read
    "incident-unreadable",  # S7, O6: stored incident entries that cannot be read
]


@dataclass(frozen=True, slots=True)
class Notice:
    """One condition said once: its kind and what tells it from the others of its kind."""

    kind: NoticeKind
    about: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The text the store keeps it under (``data["noted"]``), as it always was."""
        return ":".join((self.kind, *self.about))


def notice(kind: NoticeKind, *about: str) -> Notice:
    """A `Notice` of ``kind`` about ``about`` (the node first, then what else tells it)."""
    return Notice(kind, about)
