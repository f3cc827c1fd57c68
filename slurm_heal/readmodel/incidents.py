"""Incidents as people see them (SPEC S7): what `status`, `explain`, `slurm-heal
incidents`, the API and the console show of the store's incidents, in one place."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from pydantic import BaseModel, ConfigDict

from slurm_heal.incidentstore import INCIDENTS_KEY, load
from slurm_heal.incidentstore import unreadable as _unreadable
from slurm_heal.models import Incident, IncidentAlert, Phase, State
from slurm_heal.policy.domains import DOMAIN_WORDS
from slurm_heal.readmodel.words import held

ENDED_SHOWN = timedelta(days=1)  # ended incidents the overview still shows
# How an incident ended, in words (SPEC O6, issue 37); a person's close names them.
ENDED_WORDS = {"cleared": "the alerts cleared",
               "released": "too few of its nodes kept the alerts: each went on by its own rules",
               "aged": "open past incidents.max_age: handed to a person"}


class IncidentView(BaseModel):
    """One incident in words: the component, its nodes, what holds, how to close it."""

    model_config = ConfigDict(frozen=True)

    id: str
    component: str
    kind: str
    name: str
    faults: tuple[str, ...]
    nodes: tuple[str, ...]
    hosts: str  # the nodes as a folded host list
    size: int
    state: str
    opened: datetime
    resolved: datetime | None = None
    resolved_by: str | None = None
    held: tuple[str, ...] = ()  # remediation ids it holds now
    why: str
    resolution: str = ""
    # Issue 37: the cause domain's kind (leaf, nvlink, rack, cohort) and how it ended
    # (closed, cleared, released: too few nodes kept the alerts, aged: handed to a person).
    domain: str = ""
    domain_words: str = ""  # the domain in words ("NVLink domain"); "" in an older store
    ended: str | None = None
    close: str  # the command that closes it
    alerts: tuple[IncidentAlert, ...] = ()  # every node's alert, with its evidence (D7)

    @property
    def words(self) -> str:
        end = ""
        if self.state != "open":
            by = f"closed by {self.resolved_by}" if self.resolved_by else ENDED_WORDS.get(
                self.ended or "", "the alerts cleared")
            end = f"; ended {_ts(self.resolved)} ({by})"
        domain = f" ({self.domain_words})" if self.domain_words else ""
        return (f"{self.id} on {self.kind} {self.name}{domain}: {', '.join(self.faults)} on "
                f"{len(self.nodes)} of {self.size} nodes ({self.hosts}) since "
                f"{_ts(self.opened)}; {len(self.held)} remediation(s) held{end}")


def _ts(value: datetime | None) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ") if value else "-"


def incidents_of(state: State) -> list[Incident]:
    """Every incident on record, newest first."""
    return sorted(load(state.data.get(INCIDENTS_KEY)).values(),
                  key=lambda i: (i.opened, i.id), reverse=True)


def unreadable(state: State) -> list[str]:
    """The stored incident entries that cannot be read, each with why (SPEC O6)."""
    return _unreadable(state.data.get(INCIDENTS_KEY))


def held_by(state: State, inc: Incident) -> tuple[str, ...]:
    """The open remediations the incident holds now: those whose stored hold (the
    engine's `Work.hold`, O6) names it, not started yet."""
    return tuple(r.id for r in state.remediations if r.node in inc.nodes
                 and r.phase in (Phase.PROPOSED, Phase.APPROVED)
                 and (h := held(r)) is not None and h.incident == inc.id)


def _fold(names: tuple[str, ...]) -> str:
    """``gpu[01-03]``: ClusterShell's folding (as the overview folds its lists)."""
    from ClusterShell.NodeSet import NodeSet

    return str(NodeSet.fromlist(list(names))) if names else ""


def view(state: State, inc: Incident) -> IncidentView:
    return IncidentView(
        id=inc.id, component=inc.component, kind=inc.kind, name=inc.name,
        faults=tuple(sorted({a.fault for a in inc.alerts})), nodes=inc.nodes,
        hosts=_fold(inc.nodes), size=inc.size, state=inc.state, opened=inc.opened,
        resolved=inc.resolved, resolved_by=inc.resolved_by,
        held=held_by(state, inc) if inc.open else (), why=inc.why, resolution=inc.resolution,
        domain=inc.domain, domain_words=DOMAIN_WORDS.get(inc.domain, inc.domain),
        ended=inc.ended, close=f"slurm-heal incident close {inc.id}", alerts=inc.alerts)


def shown(state: State, now: datetime) -> tuple[IncidentView, ...]:
    """The open incidents and those that ended in the last day, newest first."""
    return tuple(view(state, i) for i in incidents_of(state)
                 if i.open or (i.resolved is not None and now - i.resolved <= ENDED_SHOWN))


def of_node(state: State, node: str) -> tuple[IncidentView, ...]:
    """The incidents a node is (or was) part of, newest first."""
    return tuple(view(state, i) for i in incidents_of(state) if node in i.nodes)


def find(state: State, target: str) -> Incident | None:
    """An incident by id, else the open one on a component (``switch:leaf1``)."""
    got = load(state.data.get(INCIDENTS_KEY))
    return got.get(target) or next(
        (i for i in got.values() if i.open and i.component == target), None)


def render(views: tuple[IncidentView, ...]) -> list[str]:
    """Lines for a person (status, explain)."""
    out = []
    for v in views:
        head = "INCIDENT" if v.state == "open" else "incident ended"
        out.append(f"  {head} {v.words}")
        if v.state == "open":
            out.append(f"    a person looks at the {v.kind}; close it with `{v.close}`")
    return out
