"""The site's alerts as the store keeps them: ``State.data["sources"]``, a list of
`SourceAlert` objects as JSON, one per (source, the source's own id, node) (SPEC Q3:
Alertmanager's fingerprint deduplicates; a second delivery updates the same entry).

The store owns the key (`store.STORE_KEYS`): the receiver writes it in its own locked
transaction and a plan never overwrites it. The pure core reads the firing entries of
known nodes as `types.Alert`s (`alerts_of`) with the payload as their evidence (D7, P1);
a resolved one is no longer active, so a recommendation not yet acted on is withdrawn
(L4).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from slurm_heal.types import Alert, Evidence, Severity

SOURCES_KEY = "sources"  # in State.data
MAX_KEPT = 5000  # entries kept at most (firing first, then the newest resolved)


class SourceAlert(BaseModel):
    """One alert of a site's monitor, mapped (or not) to a node and a fault."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    source: str  # "alertmanager", "nhc"
    id: str  # the source's own id (Alertmanager's fingerprint)
    node: str = ""  # the Slurm node; "" when no label named one
    fault: str = ""  # "" when no rule mapped the alert
    severity: Severity = Severity.WARNING
    status: Literal["firing", "resolved"] = "firing"
    summary: str = ""
    starts_at: datetime
    ends_at: datetime | None = None
    received: datetime  # first delivery
    updated: datetime  # latest delivery
    rule: str = ""  # the mapping rule that decided (``sources.alertmanager.map[0]``)
    problem: str = ""  # why it leads to nothing (no rule, no node, a node Slurm does not know)
    payload: dict[str, Any] = {}  # the alert as the source sent it, unchanged (D7)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.source, self.id, self.node)

    @property
    def usable(self) -> bool:
        """Firing, mapped to a node and a fault, nothing wrong with it."""
        return self.status == "firing" and bool(self.node and self.fault) and not self.problem

    def evidence(self) -> Evidence:
        """The payload as D7 evidence, unchanged."""
        return Evidence(source=self.source, text=self.summary,
                        at=self.payload.get("startsAt") or self.starts_at.isoformat(),
                        data={"payload": dict(self.payload), "id": self.id,
                              "rule": self.rule})

    def alert(self) -> Alert:
        """As the pure core reads it (P1 evidence; cleared when resolved, L4)."""
        return Alert(node=self.node, fault=self.fault, severity=self.severity,
                     summary=self.summary, first_seen=self.starts_at,
                     last_seen=self.updated, evidence=(self.evidence(),),
                     detector=self.source,
                     cleared=(self.ends_at or self.updated) if self.status == "resolved"
                     else None)


def load(raw: Any) -> list[SourceAlert]:
    """The stored entries; one that does not validate is skipped (a newer build's, or
    damaged: never a reason to stop deciding)."""
    out: list[SourceAlert] = []
    if not isinstance(raw, list):
        return out
    for item in raw:
        try:
            out.append(SourceAlert.model_validate(item))
        except ValidationError:
            continue
    return out


def merge(stored: Any, incoming: Iterable[SourceAlert], now: datetime,
          keep_resolved: timedelta) -> list[dict[str, Any]]:
    """The stored entries with ``incoming`` put in by key (Q3: one entry per alert, its
    first delivery kept), resolved ones older than ``keep_resolved`` dropped, bounded."""
    have = {a.key: a for a in load(stored)}
    for a in incoming:
        old = have.get(a.key)
        if old is not None:
            a = a.model_copy(update={"received": old.received})
        have[a.key] = a
    kept = [a for a in have.values()
            if a.status == "firing" or (a.ends_at or a.updated) >= now - keep_resolved]
    firing = sorted((a for a in kept if a.status == "firing"), key=lambda a: a.updated)
    resolved = sorted((a for a in kept if a.status != "firing"), key=lambda a: a.updated)
    chosen = (firing + resolved[-max(0, MAX_KEPT - len(firing)):])[-MAX_KEPT:]
    return [a.model_dump(mode="json") for a in sorted(chosen, key=lambda a: (
        a.received, a.source, a.id, a.node))]


def alerts_of(data: Mapping[str, Any], nodes: Iterable[str], now: datetime | None = None,
              stale_after: timedelta | None = None) -> dict[str, list[Alert]]:
    """The active alerts of the known ``nodes`` by node (what decide() adds to the node
    check's): firing, mapped, and for a node Slurm has (an unknown node's is shown by
    `slurm-heal alerts`, never acted on); with ``now`` and ``stale_after``, not one the
    source has not sent again for that long (its resolve was lost)."""
    raw = data.get(SOURCES_KEY)
    if not raw:
        return {}
    known = set(nodes)
    out: dict[str, list[Alert]] = {}
    for a in load(raw):
        if not a.usable or a.node not in known:
            continue
        if now is not None and stale_after is not None and a.updated < now - stale_after:
            continue
        out.setdefault(a.node, []).append(a.alert())
    return out
