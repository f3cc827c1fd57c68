"""What the API's endpoints and the console's pages show, as JSON-able dicts built on
the admin CLI's own code (`slurm_heal.operations`, `commands.status`): the same facts,
whichever way a person looks (SPEC O5, I4, D7, P4).

`overview` is the one call behind ``GET /api/v1/overview`` and the console's first
page: what ``slurm-heal status`` gathers plus the store's summary; `status` is
``GET /api/v1/status``, what ``slurm-heal status --json`` prints. Both are computed once
and answered from memory (`api.memo`) until the store's bytes, the heartbeat or Slurm's
node list change, and at most `FRESH_S` seconds for what depends on the time alone.
"""

from __future__ import annotations

import gc
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from slurm_heal import operations
from slurm_heal.api.memo import Memo, Same
from slurm_heal.errors import HealError, NotFound
from slurm_heal.heartbeat import Heartbeat
from slurm_heal.location import Location
from slurm_heal.models import Command, Remediation, State
from slurm_heal.readmodel.nodepage import NodeQuery
from slurm_heal.readmodel.overview import NodeChecks
from slurm_heal.slurm.base import SlurmClient
from slurm_heal.types import Alert, NodeInfo

if TYPE_CHECKING:
    from slurm_heal.store import Store

# A controller heartbeat older than this is shown as stale (the daemon writes one every
# cycle; the CLI warns at the same age).
STALE_HEARTBEAT = timedelta(minutes=10)

# How old the overview and Slurm's node list served from memory may be (issue 34 item 3):
# the ages it shows ("waiting for 3 min"), a heartbeat turning stale and a node Slurm
# changed show within this; a change of the store or of the heartbeat shows at once.
# One Slurm read a bound, however many people look (about 0.4 s at 10,000 nodes).
FRESH_S = 2.0


@dataclass(frozen=True)
class SlurmNodes:
    """One read of Slurm's node list, by name; ``nodes`` is None when Slurm did not
    answer and ``error`` says why (the overview says it, it is no error of the page)."""

    nodes: tuple[NodeInfo, ...] | None
    error: str | None = None


@dataclass
class Sources:
    """Where the facts come from: the store found as every command finds it, and Slurm.

    One Store for every request (issue 34 item 3): it keeps the last document it parsed
    with its bytes, so a read whose file has the same bytes is answered from memory, and
    a write (the inbox, the daemon's cycle) is seen by the next read, which finds other
    bytes. Each request still reads the file: no stat-based key can miss a change.

    What is costly is kept too (`memo`, `slurm_nodes`): at most ``fresh`` seconds old,
    computed once for every request that asks while it is computed (``clock``: the
    monotonic seconds that age it; a test's own). Each node's Extra is read once per
    change of its text (`checks`, issue 42): a store change, or a new read of Slurm,
    re-reads only the nodes whose check published something new."""

    loc: Location
    slurm: Callable[[], SlurmClient]  # may raise HealError (SlurmError, ...)
    fresh: float = FRESH_S
    clock: Callable[[], float] = time.monotonic
    # The fleet map's topology (issue 42): serve's config's [topology] (its defaults
    # without one), read as the controller reads it, at most once per topology.refresh;
    # and E7's lemon settings (the map marks a lemon machine's node).
    topology_conf: Callable[[], Any] | None = None
    lemon: Callable[[], Any] | None = None
    _store: Store | None = field(default=None, repr=False)
    _topology: Any = field(default=None, init=False, repr=False)
    memo: Memo[Any] = field(init=False, repr=False)
    _nodes: Memo[SlurmNodes] = field(init=False, repr=False)
    checks: NodeChecks = field(init=False, repr=False)
    fleet: Memo[Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Two memos, two locks: a read of Slurm never waits behind an overview, which
        # reads Slurm before it computes.
        self.memo = Memo(self.fresh, self.clock)
        self._nodes = Memo(self.fresh, self.clock)
        self.checks = NodeChecks()
        # the last fleet map built (issue 42): a pure function of its inputs, so kept
        # for as long as they are the same, however old
        self.fleet = Memo(math.inf, self.clock)

    def _the_store(self) -> Store:
        from slurm_heal.store import Store

        if self._store is None:
            self._store = Store(self.loc.state_dir)
        return self._store

    def state(self) -> State:
        return self._the_store().load()

    def slurm_nodes(self) -> SlurmNodes:
        """Slurm's node list by name, read at most once a ``fresh`` bound: one read in
        flight at a time, its answer (or its error) shared by every request until then."""
        def read() -> SlurmNodes:
            try:
                return SlurmNodes(tuple(sorted(self.slurm().nodes(), key=lambda n: n.name)))
            except HealError as exc:
                return SlurmNodes(None, str(exc))

        return self._nodes.get("nodes", (), read)

    def topology(self, nodes: tuple[NodeInfo, ...]) -> Any:
        """The cluster's components as the controller reads them (`TopologyReader`:
        Slurm's switches and blocks, node features, a file), None when there are none;
        a topology that cannot be read is one with its ``problem`` said."""
        from slurm_heal.config import TopologyConf
        from slurm_heal.topology import TopologyReader

        conf = self.topology_conf() if self.topology_conf is not None else None
        try:
            if self._topology is None:
                self._topology = TopologyReader(self.slurm())
            return self._topology.read(conf or TopologyConf(), _now(), nodes)
        except HealError as exc:
            from slurm_heal.components import Topology

            return Topology(source="slurm", problem=str(exc))

    def lemons(self, state: State, now: datetime) -> frozenset[str]:
        """The node names last seen on a machine E7 calls a lemon now."""
        from slurm_heal.config import Lemon
        from slurm_heal.readmodel import machines as machines_view

        try:
            lemon = self.lemon() if self.lemon is not None else Lemon()
        except HealError:  # serve's config is bad: every page says it; the map goes on
            lemon = Lemon()
        if not lemon.enabled:
            return frozenset()
        led = machines_view.current(self.loc.state_dir, state, now)
        return frozenset(m.name for m in led.machines.values()
                         if m.acted_within(now, lemon.window) >= lemon.remediations)

    def history(self, **only: str | None) -> State:
        """The state with the archived remediations that match ``only`` (node, host,
        remediation) put back: what pages of history show (Store.load_history)."""
        return self._the_store().load_history(**only)


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(timezone.utc).isoformat() if value else None


def _now() -> datetime:
    return datetime.now(timezone.utc)


# --------------------------------------------------------------------------- overview


def controller_info(loc: Location, now: datetime,
                    record: Heartbeat | None | bool = False) -> dict[str, Any]:
    """The controller's heartbeat as the overview shows it; ``record``: the heartbeat
    already read (False: read it now)."""
    found = loc.heartbeat_record() if record is False else record
    beat = found.at if isinstance(found, Heartbeat) else None
    return {"last_heartbeat": _iso(beat), "heartbeat_file": str(loc.heartbeat_file),
            "stale": beat is None or now - beat > STALE_HEARTBEAT}


def pause_info(state: State) -> dict[str, Any]:
    """Paused or not, and who said so and why when the record shows it (SPEC O2)."""
    from slurm_heal.store import decisions

    last = next((d for d in reversed(decisions(state)) if d.rule == "pause"), None)
    pending = [c.model_dump(mode="json") for c in state.inbox if c.kind in ("pause", "unpause")]
    return {"paused": state.paused, "last": last.model_dump(mode="json") if last else None,
            "pending": pending}


def overview(src: Sources, query: NodeQuery | None = None) -> dict[str, Any]:
    """The cluster at a glance: what ``slurm-heal status`` gathers (each node's state,
    reason, alerts) and the store's summary (controller heartbeat, breaker, pause,
    counts, approvals waiting). Slurm not answering is said, not an error.

    With ``query`` (the console): ``nodes`` is one page of the nodes that match it,
    attention first, and ``page`` says where it is (`readmodel.nodepage`); without, every
    node by name (the API's shape).

    From memory (issue 34 item 3): the same dict for every request while the store's
    bytes, the heartbeat and Slurm's node list are those it was computed from, and for
    at most ``src.fresh`` seconds; requests during its computation wait for it. Callers
    read it, never change it."""
    with heap_frozen():
        state = src.state()
        beat = src.loc.heartbeat_record()
        snap = src.slurm_nodes()
        got: dict[str, Any] = src.memo.get(
            ("overview", query), (Same(state), beat, Same(snap)),
            lambda: _overview(src, state, beat, snap, query))
    return got


_frozen = 0  # the threads in `heap_frozen` now
_frozen_lock = threading.Lock()


@contextmanager
def heap_frozen() -> Iterator[None]:
    """What is alive when an overview is asked (what serve keeps, Slurm's last node
    list, the modules) is left out of the garbage collector's passes while it is
    computed, as the controller's cycle does (issue 20): at 10,000 nodes a full pass
    over it cost about 0.1 s every third overview (issue 42). Nothing is kept longer:
    the last thread out gives it back to the collector."""
    global _frozen
    with _frozen_lock:
        if _frozen == 0:
            gc.freeze()
        _frozen += 1
    try:
        yield
    finally:
        with _frozen_lock:
            _frozen -= 1
            if _frozen == 0:
                gc.unfreeze()


def _overview(src: Sources, state: State, beat: Heartbeat | None, snap: SlurmNodes,
              query: NodeQuery | None) -> dict[str, Any]:
    from slurm_heal.nodealerts import node_alerts
    from slurm_heal.readmodel import nodepage
    from slurm_heal.readmodel import overview as status_overview
    from slurm_heal.readmodel.nodes import node_status

    now = _now()
    infos, slurm_error = snap.nodes, snap.error
    nodes: list[dict[str, Any]] = []
    if infos is not None and query is None:
        nodes = [node_status(n, now) for n in infos]
    # The same overview `slurm-heal status --json` prints (one gathering for both, I4/O5).
    status = status_overview.gather(state, infos, now, heartbeat=beat,
                                    store=src.loc.describe(), slurm_error=slurm_error,
                                    all_details=query is not None, checks=src.checks)
    checks = src.checks.read(infos, now) if infos is not None else []  # gather's own
    page, kept = (nodepage.page_and_selected(query, infos or (), status.nodes, now)
                  if query is not None else (None, []))
    open_rems = [r for r in state.remediations if not r.phase.terminal]
    waiting = [r for r in open_rems if waits_for_person(r)]
    fleet = (fleet_map(src, state, infos, status, query, now, kept)
             if query is not None and infos is not None else None)
    if query is not None:  # the page has them; 10,000 lines are not sent twice
        status_json = status.model_dump(mode="json", exclude={"nodes"})
        status_json["nodes"] = []
    else:
        status_json = status.model_dump(mode="json")
    return {
        "at": now.isoformat(),
        "store": src.loc.as_json(),
        "controller": controller_info(src.loc, now, beat),
        "breaker": state.breaker.model_dump(mode="json"),
        "pause": pause_info(state),
        "counts": {
            "nodes": len(infos or ()),
            # the nodes `alerts` lists: the node checks' alerts, and a node out of
            # service for a reason (ours, a request, someone else's: D5; issue 25 item 8),
            # counted by the one function the Alerts column shows too (issue 36 item 11)
            # (a node in service with no alert in Extra has none: not asked again)
            "nodes_with_alerts": sum(1 for n, c in zip(infos or (), checks, strict=True)
                                     if c.data.alerts or ((n.drained or n.down)
                                                          and node_alerts(n, now, ()))),
            "foreign_drains": status.counts.get("drained_by_others", 0),
            "open_remediations": len(open_rems),
            "in_progress": sum(1 for r in open_rems if r.phase.disruptive),
            "waiting_for_approval": len(waiting),
            "pending_commands": len(state.inbox),
        },
        "approvals_waiting": [r.id for r in waiting],
        "open_remediations": [summary(r) for r in open_rems],
        "slurm": {"reachable": slurm_error is None, "error": slurm_error},
        "nodes": page["nodes"] if page is not None else nodes,
        "page": page,
        "status": status_json,
        # the console's fleet map (issue 42; a model the page draws, not in the API)
        **({"map": fleet} if query is not None else {}),
    }


def fleet_map(src: Sources, state: State, infos: tuple[NodeInfo, ...], status: Any,
              query: NodeQuery, now: datetime,
              kept: list[tuple[NodeInfo, Any]] | None = None) -> Any:
    """The overview's fleet map (issue 42): the nodes the query's filters keep (``kept``,
    `nodepage.selected`'s, when the caller has them), on the topology, with the open
    incidents, the held remediations and the lemons."""
    from dataclasses import replace

    from slurm_heal.readmodel import fleetmap, nodepage
    from slurm_heal.readmodel.words import held, waiting_for_evidence

    if kept is None:
        kept = nodepage.selected(query, infos, status.nodes)
    topo = src.topology(infos)
    # held as the console's badge says it (`badges.rem_badge`): the engine's hold, or the
    # mark of a store from before it; waiting for a person's approval or for evidence
    held_ids = {r.id for r in state.remediations if not r.phase.terminal
                and (held(r) is not None or r.data.blocked is not None
                     or waits_for_person(r) or bool(waiting_for_evidence(r)))}
    lines = [line for _n, line in kept]
    pools = {n.name: n.partitions[0] for n, _l in kept if n.partitions}
    shown = topo if topo else None
    lemons = src.lemons(state, now)
    params = replace(query, map="").params()
    # The map is what these are (compared by equality: the lines `NodeChecks` kept are
    # the same objects): a store change that changes none of them (most of the daemon's
    # cycles) costs a comparison, not the map.
    got = src.fleet.get(
        ("map",), (lines, pools, shown, status.incidents, held_ids, lemons, query.map, params),
        lambda: fleetmap.build(lines, pools, shown, incidents=status.incidents,
                               held=held_ids, lemons=lemons, expand=query.map,
                               params=params))
    if topo is not None and topo.problem and not got.problem:
        got = replace(got, problem=f"the topology could not be read ({topo.problem}); "
                                   "nodes are grouped by partition")
    return got


def status(src: Sources, policy: Callable[[], Any]) -> dict[str, Any]:
    """What ``slurm-heal status --json`` prints (the same gathering and shape,
    `readmodel.overview.as_json`), with serve's policy (``policy``: its config's, None
    without one) as the CLI reads its config's. Slurm not answering is said in
    ``slurm_error`` (the CLI's exit 3), not an error. From memory as `overview` is."""
    state = src.state()
    beat = src.loc.heartbeat_record()
    snap = src.slurm_nodes()

    def compute() -> dict[str, Any]:
        from slurm_heal.readmodel import overview as status_overview

        now = _now()
        ov = status_overview.gather(
            state, snap.nodes, now, heartbeat=beat, store=src.loc.describe(),
            policy=policy(), slurm_error=snap.error,
            checks=src.checks)
        return status_overview.as_json(ov, src.loc.as_json(), snap.nodes, now)

    with heap_frozen():
        got: dict[str, Any] = src.memo.get(("status",), (Same(state), beat, Same(snap)),
                                           compute)
    return got


def summary(rem: Remediation) -> dict[str, Any]:
    """One line of a remediation for lists."""
    from slurm_heal.readmodel.words import (
        held,
        held_words,
        provider_error,
        provider_words,
        waiting_for_evidence,
    )

    waiting = waiting_for_evidence(rem)
    h = held(rem)
    trouble = provider_error(rem)
    if trouble is not None:  # O6: the cause beside the remediation, with its age
        waiting = "provider not answering: " + provider_words(trouble, _now())
    return {"id": rem.id, "node": rem.node, "fault": rem.fault, "action": rem.action.value,
            "phase": rem.phase.value, "origin": rem.origin, "updated": _iso(rem.updated),
            "open": not rem.phase.terminal,
            "blocked": None if rem.data.blocked is None else str(rem.data.blocked),
            # O6: what holds it, until when, what lifts it (the engine's Work.hold)
            "hold": h.model_dump(mode="json") if h is not None else None,
            "why": waiting or (held_words(h) if h is not None else "")
            or (rem.steps[-1].why if rem.steps else ""),
            "waiting_for_evidence": bool(waiting) and trouble is None,  # O6: not "approved"
            "provider_error": trouble is not None}


# --------------------------------------------------------------------------- remediations


def waits_for_person(rem: Remediation) -> bool:
    """Proposed, and the approval rule that decided says a person approves (SPEC P2);
    never one an open incident holds (S7: `status`'s own rule, one answer for both)."""
    from slurm_heal.readmodel.overview import waits_for_approval

    return waits_for_approval(rem)


def machine_history(state: State, rem: Remediation) -> list[dict[str, Any]]:
    """Earlier remediations on the same machine (by host identity when known, else the
    node), oldest first: what escalation (E1) counts, for a person to judge."""
    def same(r: Remediation) -> bool:
        if r.id == rem.id:
            return False
        return r.host == rem.host if rem.host else r.node == rem.node

    out = []
    for r in sorted(filter(same, state.remediations), key=lambda r: r.created):
        end = r.phase_times.get(r.phase.value) if r.phase.terminal else None
        out.append({**summary(r), "created": _iso(r.created), "ended": _iso(end),
                    "host": r.host, "escalated_from":
                    r.escalated_from.value if r.escalated_from else None,
                    "action_rule": r.action_rule})
    return out


def pending_for(state: State, rem: Remediation) -> list[dict[str, Any]]:
    """Commands in the inbox that name this remediation (a decision on its way)."""
    return [c.model_dump(mode="json") for c in state.inbox
            if c.remediation == rem.id or (c.remediation is None and c.node == rem.node
                                           and c.kind != "request")]


def remediation_detail(state: State, rem: Remediation) -> dict[str, Any]:
    from slurm_heal.readmodel.words import approval, requester

    return {"remediation": operations.rem_json(rem), "requester": requester(rem),
            "approval": approval(rem), "waiting_for_approval": waits_for_person(rem),
            "machine_history": machine_history(state, rem),
            "pending_commands": pending_for(state, rem)}


def remediation(src: Sources, rid: str) -> dict[str, Any]:
    """One remediation: ``rid`` is its id (open or finished, the archive too) or a node
    with one open remediation (docs/api.md; issue 36 item 7), as the CLI's targets are."""
    state = src.history(remediation=rid)
    rem = state.get(rid)
    if rem is None:
        from slurm_heal.store import resolve_open

        try:
            rem = resolve_open(src.state(), rid)
        except NotFound as exc:
            raise NotFound(f"no remediation {rid!r} in the store or its audit archive, "
                           f"and {exc}") from None
    # the machine's earlier remediations, the archived ones too (issue 26)
    state = src.history(host=rem.host) if rem.host else src.history(node=rem.node)
    out = remediation_detail(state, rem)
    out["store"] = src.loc.as_json()
    return out


def remediations(src: Sources, show_all: bool, node: str | None) -> dict[str, Any]:
    """What ``slurm-heal remediations --json`` prints."""
    state = src.history(node=node) if show_all else src.state()
    rems = [r for r in state.remediations
            if (show_all or not r.phase.terminal) and (node is None or r.node == node)]
    pending = [c for c in state.inbox if node is None or c.node == node]
    return {"remediations": [operations.rem_json(r) for r in rems],
            "pending_commands": [c.model_dump(mode="json") for c in pending],
            "breaker": state.breaker.model_dump(mode="json"), "paused": state.paused,
            "store": src.loc.as_json()}


def history(src: Sources, node: str) -> dict[str, Any]:
    """What ``slurm-heal history NODE --json`` prints."""
    state = src.history(node=node)
    rems = sorted((r for r in state.remediations if r.node == node), key=lambda r: r.created)
    if not rems:
        try:
            src.slurm().node(node)
        except NotFound:
            raise NotFound(f"Slurm does not know a node {node!r} and the store has no record "
                           "of it") from None
        except HealError:
            pass  # a Slurm that does not answer proves nothing
    return {"node": node, "remediations": [operations.rem_json(r) for r in rems],
            "store": src.loc.as_json()}


# --------------------------------------------------------------------------- approvals


def _alerts_by_node(src: Sources, nodes: set[str]) -> tuple[dict[str, list[Alert]], str | None]:
    if not nodes:
        return {}, None
    try:
        client = src.slurm()
        found = operations.alerts_of(client, None)
    except HealError as exc:
        return {}, str(exc)
    out: dict[str, list[Alert]] = {}
    for a in found:
        if a.node in nodes:
            out.setdefault(a.node, []).append(a)
    return out, None


def approvals(src: Sources) -> dict[str, Any]:
    """The approvals queue (SPEC P2, D7, P4): each proposal waiting for a person, with
    the alert's plain text and evidence as the node check published it, the action, the
    rule that chose it, the rule that asks for a person, and the machine's earlier
    remediations (escalation history, E1)."""
    state = src.state()
    waiting = sorted((r for r in state.remediations if waits_for_person(r)),
                     key=lambda r: r.created)
    alerts, slurm_error = _alerts_by_node(src, {r.node for r in waiting})
    items = []
    for rem in waiting:
        item = remediation_detail(state, rem)
        related = [a for a in alerts.get(rem.node, []) if a.fault == rem.fault]
        item["alerts"] = [operations.alert_json(a) for a in
                          (related or alerts.get(rem.node, []))]
        item["explanation"] = _explanation(rem.fault)
        items.append(item)
    return {"approvals": items, "slurm": {"reachable": slurm_error is None,
                                          "error": slurm_error},
            "store": src.loc.as_json()}


def _explanation(fault: str) -> str | None:
    from slurm_heal import catalog

    try:
        return catalog.load().get(fault).explanation
    except HealError:
        return None


# --------------------------------------------------------------------------- nodes


def node(src: Sources, name: str) -> dict[str, Any]:
    """What ``slurm-heal explain NODE --json`` prints, plus the node's whole history."""
    got = operations.explain(name, src.slurm, lambda: src.history(node=name))
    out = got.as_json()
    out["history"] = [operations.rem_json(r) for r in sorted(
        (r for r in got.state.remediations if r.node == name), key=lambda r: r.created)]
    out["store"] = src.loc.as_json()
    return out


def node_with_machine(src: Sources, name: str, lemon: Any) -> dict[str, Any]:
    """`node`, plus the ledger of the machine under it (``machine``, SPEC E7; None when
    the ledger does not know the node): the API's node and the console's node page."""
    from slurm_heal.readmodel import machines as machines_view

    out = node(src, name)
    out["machine"] = machines_view.of_node(src.loc.state_dir, src.state(), _now(), lemon,
                                           name)
    return out


def machines(src: Sources, lemon: Any, limit: int | None) -> dict[str, Any]:
    """What ``slurm-heal machines --json`` prints (SPEC E7)."""
    from slurm_heal.readmodel import machines as machines_view

    out = machines_view.machines(src.loc.state_dir, src.state(), _now(), lemon, limit)
    out["store"] = src.loc.as_json()
    return out


def machine(src: Sources, lemon: Any, target: str) -> dict[str, Any]:
    """What ``slurm-heal machines MACHINE --json`` prints (SPEC E7)."""
    from slurm_heal.readmodel import machines as machines_view

    out = machines_view.machine(src.loc.state_dir, src.state(), _now(), lemon, target)
    out["store"] = src.loc.as_json()
    return out


def nodes(src: Sources) -> dict[str, Any]:
    """What ``slurm-heal status --json`` prints."""
    from slurm_heal.readmodel.nodes import node_status

    now = _now()
    client = src.slurm()
    return {"nodes": [node_status(n, now) for n in sorted(client.nodes(), key=lambda n: n.name)]}


def alerts(src: Sources, node: str | None) -> dict[str, Any]:
    """What ``slurm-heal alerts --json`` prints."""
    found = operations.alerts_of(src.slurm(), node, src.state())  # D13: the site's too
    return {"alerts": [operations.alert_json(a) for a in found]}


def incidents(src: Sources, show_all: bool = False) -> dict[str, Any]:
    """What ``slurm-heal incidents --json`` prints (SPEC S7)."""
    from slurm_heal.readmodel import incidents as incident_views

    state = src.state()
    shown = (tuple(incident_views.view(state, i) for i in incident_views.incidents_of(state))
             if show_all else incident_views.shown(state, _now()))
    return {"incidents": [v.model_dump(mode="json") for v in shown],
            "store": src.loc.as_json()}


def incident(src: Sources, target: str) -> dict[str, Any]:
    """One incident by id, or the open one on a component; NotFound otherwise."""
    from slurm_heal.readmodel import incidents as incident_views

    state = src.state()
    inc = incident_views.find(state, target)
    if inc is None:
        raise NotFound(f"no incident {target!r} (an id i-..., or a component with an open "
                       "incident, such as switch:leaf1)")
    return {"incident": incident_views.view(state, inc).model_dump(mode="json"),
            "store": src.loc.as_json()}


def breaker(src: Sources) -> dict[str, Any]:
    """What ``slurm-heal breaker --json`` prints."""
    state = src.state()
    return {"breaker": state.breaker.model_dump(mode="json"), "paused": state.paused,
            "reset_pending": any(c.kind == "reset_breaker" for c in state.inbox),
            "store": src.loc.as_json()}


def pause(src: Sources) -> dict[str, Any]:
    state = src.state()
    return {**pause_info(state), "store": src.loc.as_json()}


def queued(cmd: Command, state: State | None) -> dict[str, Any]:
    """The answer to a write: the command as queued, and what a person must still know."""
    rem = state.get(cmd.remediation) if state is not None and cmd.remediation else None
    return {"queued": cmd.model_dump(mode="json"),
            "note": operations.detector_drain_note(rem, cmd.kind),
            "message": f"{cmd.kind} queued by {cmd.by}; the controller acts on it at its "
                       "next cycle"}


# --------------------------------------------------------------------------- repairs


def repairs(src: Sources, days: int) -> dict[str, Any]:
    """Repairs over the last ``days`` days (issue 42, `readmodel.repairs`): the store's
    remediations with the audit archive's put back, the incidents on record, the
    breaker's openings. What ``GET /api/v1/history`` answers and the history page draws.
    From memory while the store's bytes are the same (and at most ``src.fresh`` s)."""
    state = src.state()

    def compute() -> dict[str, Any]:
        from slurm_heal.readmodel import repairs as repairs_mod
        from slurm_heal.readmodel.incidents import incidents_of

        everything = src.history()
        out = repairs_mod.summarize(
            everything.remediations, incidents_of(state),
            repairs_mod.breaker_openings(state.breaker),
            _now(), days)
        out["store"] = src.loc.as_json()
        return out

    got: dict[str, Any] = src.memo.get(("repairs", days), (Same(state),), compute)
    return got
