"""The store's remediations, indexed for the rules (issue 13) and kept between cycles
(issue 20).

Rules look up a node's or a machine's remediations, the open ones and the started ones
instead of scanning the store, so a cycle's work grows with the open work, not with
closed history. `Records.of` builds the index of a store's records; given the index of
the last cycle's records it reuses it and reindexes only the records that are not the
same objects as then (the ones a plan replaced or added), so a store that did not
change costs nothing to index. A built index is never changed: each decide() call
works on its own `fork`, which copies a container before it changes it.

``looked`` counts the records the accessors handed out (what `decide_counted` reports).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from slurm_heal.models import DISRUPTIVE_PHASES, TERMINAL_PHASES, Remediation
from slurm_heal.policy.facts import is_automatic


class Records:
    """The remediations of a store, indexed by id, node, machine and phase."""

    __slots__ = ("source", "rems", "pos", "order", "by_node", "by_host", "open_by_node",
                 "started_ids", "auto_cordoned", "unsettled", "known", "looked", "since",
                 "recent")

    def __init__(self) -> None:
        self.source: tuple[Remediation, ...] = ()  # the store's records this indexes
        self.rems: dict[str, Remediation] = {}
        self.pos: dict[str, int] = {}
        self.order: list[str] = []
        self.by_node: dict[str, list[str]] = {}
        self.by_host: dict[str, list[str]] = {}
        self.open_by_node: dict[str, dict[str, None]] = {}
        self.started_ids: dict[str, None] = {}  # open, in a disruptive phase (S3, S4, E5)
        self.auto_cordoned: dict[str, datetime] = {}  # automatic, when cordoned (S5)
        self.unsettled: dict[str, None] = {}  # with an attempt that has no outcome (L1)
        self.known: dict[str, None] = {}  # on record before this call (I5)
        self.looked = 0
        # A fork's: the S5 window's start and the automatic starts within it.
        self.since: datetime | None = None
        self.recent: dict[str, None] = {}

    # ------------------------------------------------------------------ building
    @classmethod
    def of(cls, remediations: tuple[Remediation, ...],
           previous: Records | None = None) -> Records:
        """The index of ``remediations``; built from ``previous`` (the index of the last
        cycle's records) where it can be."""
        if previous is not None:
            if previous.source is remediations:
                return previous
            again = previous._again(remediations)
            if again is not None:
                return again
        out = cls()
        out.source = remediations
        rems, pos, order, by_node, by_host = (out.rems, out.pos, out.order, out.by_node,
                                              out.by_host)
        for r in remediations:
            rid = r.id
            if rid in rems:  # a duplicate id: the general path keeps the last record
                out.put(r)
                continue
            rems[rid] = r
            pos[rid] = len(order)
            order.append(rid)
            by_node.setdefault(r.node, []).append(rid)
            if r.host is not None:
                by_host.setdefault(r.host, []).append(rid)
            if r.phase not in TERMINAL_PHASES:
                out.open_by_node.setdefault(r.node, {})[rid] = None
                if r.phase in DISRUPTIVE_PHASES:
                    out.started_ids[rid] = None
            t = r.phase_times.get("cordoned")
            if t is not None and is_automatic(r):
                out.auto_cordoned[rid] = t
            for a in r.attempts:
                if a.outcome is None:
                    out.unsettled[rid] = None
                    break
        out.known = dict.fromkeys(rems)
        return out

    def _again(self, remediations: tuple[Remediation, ...]) -> Records | None:
        """This index brought up to ``remediations`` when they are this index's records
        with some replaced in place (same id, node and machine) and new ones added at
        the end; None when anything else changed (a record removed or moved)."""
        old = self.source
        if len(remediations) < len(old) or len(self.rems) != len(old):
            return None  # records removed (retention), or duplicate ids: index afresh
        changed = [new for new, was in zip(remediations, old, strict=False) if new is not was]
        for new in changed:
            i = self.pos.get(new.id, len(old))
            was = old[i] if i < len(old) else None
            if was is None or was.id != new.id or remediations[i] is not new \
                    or was.node != new.node or was.host != new.host:
                return None
        added = remediations[len(old):]
        ids = {r.id for r in added}
        if len(ids) != len(added) or any(i in self.rems for i in ids):
            return None
        out = self.fork()
        for r in (*changed, *added):
            out.put(r)
        out.source = remediations
        out.known = dict.fromkeys(out.rems)
        out.looked = 0
        return out

    def fork(self, since: datetime | None = None) -> Records:
        """A copy to change: the containers are copied, the lists and inner maps are
        copied by `put` before it changes them. ``since``: the start of the S5 window,
        from which on the automatic starts are kept at hand (`recent_starts`)."""
        out = Records()
        if since is not None:
            out.since = since
            out.recent = {i: None for i, t in self.auto_cordoned.items() if t >= since}
        out.source = self.source
        out.rems = dict(self.rems)
        out.pos = dict(self.pos)
        out.order = list(self.order)
        out.by_node = dict(self.by_node)
        out.by_host = dict(self.by_host)
        out.open_by_node = dict(self.open_by_node)
        out.started_ids = dict(self.started_ids)
        out.auto_cordoned = dict(self.auto_cordoned)
        out.unsettled = dict(self.unsettled)
        out.known = self.known
        return out

    def put(self, rem: Remediation) -> None:
        """Keep the indexes true for ``rem`` (new or updated)."""
        rid = rem.id
        if rid not in self.rems:
            self.pos[rid] = len(self.order)
            self.order.append(rid)
            self.by_node[rem.node] = [*self.by_node.get(rem.node, ()), rid]
            if rem.host is not None:
                self.by_host[rem.host] = [*self.by_host.get(rem.host, ()), rid]
        self.rems[rid] = rem
        opened = self.open_by_node.get(rem.node)
        if rem.phase.terminal:
            if opened and rid in opened:
                opened = dict(opened)
                del opened[rid]
                self.open_by_node[rem.node] = opened
        elif opened is None or rid not in opened:
            self.open_by_node[rem.node] = {**(opened or {}), rid: None}
        if rem.phase in DISRUPTIVE_PHASES:
            self.started_ids[rid] = None
        else:
            self.started_ids.pop(rid, None)
        t = rem.phase_times.get("cordoned")
        if t is not None and is_automatic(rem):
            self.auto_cordoned[rid] = t
        else:
            self.auto_cordoned.pop(rid, None)
        if self.since is not None:
            if t is not None and t >= self.since and rid in self.auto_cordoned:
                self.recent[rid] = None
            else:
                self.recent.pop(rid, None)
        if any(a.outcome is None for a in rem.attempts):
            self.unsettled[rid] = None
        else:
            self.unsettled.pop(rid, None)

    # ------------------------------------------------------------------ reading
    def _hand(self, ids: Iterable[str]) -> list[Remediation]:
        out = [self.rems[i] for i in ids]
        self.looked += len(out)
        return out

    def of_node(self, name: str) -> list[Remediation]:
        """Every remediation of a node on record (open and closed), oldest first."""
        return self._hand(self.by_node.get(name, ()))

    def of_host(self, host: str) -> list[Remediation]:
        """Every remediation of a machine on record (E1, E3), oldest first."""
        return self._hand(self.by_host.get(host, ()))

    def has_open(self, name: str) -> bool:
        return bool(self.open_by_node.get(name))

    def open_on(self, name: str) -> list[Remediation]:
        """The node's open remediations, in store order."""
        return self._hand(sorted(self.open_by_node.get(name, ()), key=self.pos.__getitem__))

    def open_all(self) -> list[Remediation]:
        """Every open remediation, in store order."""
        return self._hand(sorted((i for opened in self.open_by_node.values() for i in opened),
                                 key=self.pos.__getitem__))

    def started(self, but: str) -> list[Remediation]:
        """The open remediations in a disruptive phase (S3, S4, E5) but ``but``."""
        return self._hand(i for i in sorted(self.started_ids, key=self.pos.__getitem__)
                          if i != but)

    def recent_starts(self) -> list[str]:
        """Automatic remediations cordoned within the S5 window of this fork."""
        out = list(self.recent)
        self.looked += len(out)
        return out

    def unsettled_ids(self) -> list[str]:
        """Remediations with an attempt that has no outcome, in store order (L1)."""
        return sorted(self.unsettled, key=self.pos.__getitem__)
