"""The cluster at a glance (SPEC I4, O1, O2, S5, P2, D5): what `slurm-heal status` shows,
gathered in one function (`gather`) that returns one typed model (`Overview`); the text
rendering (`render`) is separate, so the HTTP API serves the same model.

What it reads: the store (remediations, the breaker, the pause), the controller's
heartbeat (`slurm_heal.heartbeat`) and, when Slurm answers, the nodes (their reasons and
the node checks' Extra). It only reads; nothing here changes the cluster or the store.

Node categories (each node is in exactly one, first match wins):

* ``handed_to_person``: its last remediation ended handed to a person (E1) and the node
  is still out of service;
* ``remediating``: it has an open remediation (any phase before the end);
* ``drained_by_others``: DOWN or drained for a reason slurm-heal did not set (D5), or
  for a ``heal-request:`` that does not parse (Q1, O6: never "healthy");
* ``cordoned``: drained with our reason and no open remediation (the node check's own
  drain, waiting for the controller);
* ``alerting``: with active alerts in Extra (in service), or drained by a well-formed
  ``heal-request:`` that no alert in Extra explains (its alert is ``request``, as
  `alerts` lists it);
* ``healthy``: the rest.

Besides: ``unrecorded`` (SPEC I5, O6): nodes out of service under our controller's marker
for a remediation the store does not know (a store set aside as corrupt, or started
afresh), with the commands that release them or hand them back; ``check_stale`` (the node check's ``checked_at`` is older than its heartbeat
plus the slack, `stale_after`, or it never published) and ``check_erroring`` (a ``check.detector_error`` alert, O1).
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from slurm_heal import extra, isotime, reasons
from slurm_heal.errors import ReasonError
from slurm_heal.heartbeat import Heartbeat
from slurm_heal.models import HeldBy, Pause, Phase, Remediation, State
from slurm_heal.readmodel import incidents as incidents_mod
from slurm_heal.readmodel.incidents import IncidentView
from slurm_heal.readmodel.words import elapsed as _dur
from slurm_heal.readmodel.words import (
    held,
    held_head,
    held_words,
    provider_error,
    waiting_for_evidence,
)
from slurm_heal.readmodel.words import stamp as _ts
from slurm_heal.sources import SITE_SOURCES
from slurm_heal.types import NodeInfo

# A heartbeat older than this many cycle intervals (and at least STALE_MIN) is stale.
STALE_INTERVALS = 5
STALE_MIN = timedelta(minutes=2)
# A node check that has not published for this long past its own heartbeat is stale
# (SPEC O1, issue 43): the check rewrites checked_at at most every [check] heartbeat
# while nothing changes, and publishes that heartbeat (``heartbeat_s``); the slack is
# HealthCheckInterval (typically 5 minutes): three missed runs and some more. A check
# that publishes no heartbeat (older versions wrote every run) has the slack alone.
CHECK_STALE = timedelta(minutes=20)
# A published heartbeat longer than this is read as this (the check's own limit): a
# forged one never hides a dead check for long.
MAX_HEARTBEAT = timedelta(days=1)
DETECTOR_ERROR = "check.detector_error"  # the same id as slurm_heal.checks.runner's
CATEGORIES = ("healthy", "alerting", "cordoned", "remediating", "handed_to_person",
              "drained_by_others")

ControllerState = Literal["running", "failing", "stale", "not seen"]


class _M(BaseModel):
    model_config = ConfigDict(frozen=True)


class ControllerView(_M):
    state: ControllerState
    words: str  # the first line of `status`: said in words
    heartbeat_at: datetime | None = None
    age_s: float | None = None
    last_success: datetime | None = None
    last_error: str = ""
    last_error_at: datetime | None = None
    version: str = ""
    mode: str = ""
    paused: bool = False
    pause: Pause | None = None
    problems: tuple[str, ...] = ()  # what does not work beside succeeding cycles (O1)

    @property
    def healthy(self) -> bool:
        return self.state == "running"


class BreakerView(_M):
    open: bool
    opened_at: datetime | None = None
    why: str = ""
    count_in_window: int | None = None  # automatic remediations started in the window
    threshold: int | None = None
    window_s: float | None = None
    reset_by: str | None = None
    reset_at: datetime | None = None


class Waiting(_M):
    """A remediation waiting for a person's approval (P2)."""

    remediation: str
    node: str
    fault: str
    action: str
    since: datetime
    age_s: float
    rule: str | None = None
    approve: str  # the command that approves it
    source: str = ""  # SPEC D13: the site's monitor its alert came from ("" = ours)


class InFlight(_M):
    remediation: str
    node: str
    fault: str
    action: str
    phase: str
    since: datetime  # when it entered the phase
    for_s: float
    waiting_for: str = ""  # a request held for want of evidence: what it waits for (O6)
    held: HeldBy | None = None  # what holds it now, until when, what lifts it (O6)
    provider_error: str = ""  # O6: the provider does not answer: the last error
    provider_error_at: datetime | None = None
    provider_errors: int = 0  # failed tries in a row
    source: str = ""  # SPEC D13: the site's monitor its alert came from ("" = ours)


class Foreign(_M):
    """A node out of service for a reason not ours (D5)."""

    node: str
    state: Literal["down", "drained"]
    reason: str
    user: str = ""
    since: datetime | None = None
    problem: str = ""  # a malformed heal-request: what is wrong in it (Q1, O6)
    resolve: str = ""  # the command that resolves it, when there is one


class NodeLine(_M):
    """One node's line behind `status --node`."""

    name: str
    category: str
    states: tuple[str, ...]
    reason: str = ""
    alerts: tuple[str, ...] = ()
    acknowledged: tuple[str, ...] = ()  # SPEC S8: by a person's resume, never acted on
    checked_at: datetime | None = None
    check_stale: bool = False
    check_erroring: bool = False
    remediation: str | None = None
    phase: str | None = None


class Unrecorded(_M):
    """A node under our controller's marker for a remediation the store does not know
    (SPEC I5, O6; issue 22): what slurm-heal was doing to it is unknown, so nothing
    automatic touches it until a person releases it or asks for an action."""

    node: str
    reason: str
    remediation: str  # "?" when the marker names none
    set_aside: str = ""  # the file the corrupt store was moved to, when the store says
    release: str  # a person takes the node back into service
    request: str  # a person hands it to slurm-heal again, under a new record


class VLine(_M):
    """One validation of a vacated machine (SPEC V1, V2): open, or finished lately."""

    validation: str
    node: str
    phase: str
    origin: str
    job_id: int | None = None
    outcome: str | None = None
    ticket: str = ""
    why: str = ""  # the last audit step, in words
    since: datetime


class Overview(_M):
    at: datetime
    store: str
    controller: ControllerView
    breaker: BreakerView
    slurm_error: str | None = None  # Slurm did not answer: node figures are unknown
    counts: dict[str, int]
    groups: dict[str, str]  # category -> folded host list (ClusterShell)
    check_stale: str = ""  # folded host list
    check_erroring: str = ""
    approvals: tuple[Waiting, ...] = ()
    in_flight: tuple[InFlight, ...] = ()
    foreign: tuple[Foreign, ...] = ()  # oldest first
    unrecorded: tuple[Unrecorded, ...] = ()  # markers the store does not know (I5, O6)
    nodes: tuple[NodeLine, ...] = ()  # only with details (``--node``)
    validations: tuple[VLine, ...] = ()  # open ones and those finished in the last day
    incidents: tuple[IncidentView, ...] = ()  # SPEC S7: open, and ended in the last day

    @property
    def ok(self) -> bool:
        """For `status --check`: a controller that runs and succeeds."""
        return self.controller.healthy


# A name ClusterShell reads as one pattern with one number at its end (``gpu0042``,
# ``rack-a07``): `fold` hands NodeSet the runs of these, the rest name by name.
_SIMPLE = re.compile(r"([A-Za-z_](?:[A-Za-z_-]*[A-Za-z_])?)([0-9]+)")


def _runs(digits: list[str]) -> str:
    """``00001-00499,00501``: the numbers (as written) in runs of consecutive values of
    one width, the way NodeSet reads them back as exactly these strings."""
    by_width: dict[int, list[str]] = {}
    for d in digits:
        by_width.setdefault(len(d), []).append(d)
    out = []
    for width in sorted(by_width):
        ds = sorted(set(by_width[width]))  # one width: by the text is by the value
        start = prev = ds[0]
        value = int(prev)
        for d in ds[1:]:
            v = int(d)
            if v != value + 1:
                out.append(start if start == prev else f"{start}-{prev}")
                start = d
            prev, value = d, v
        out.append(start if start == prev else f"{start}-{prev}")
    return ",".join(out)


def fold(names: Iterable[str]) -> str:
    """``gpu[01-03,07]``: ClusterShell's folding of a host list.

    The same text NodeSet gives name by name, at a fraction of its cost for 10,000 names
    (issue 42: the overview folds every node once per store change): names of one prefix
    and a trailing number are handed to NodeSet as their runs (``n[00001-04999]``, one
    parse), so NodeSet folds and writes them (its own order and padding rules), and any
    other name (``c1n2``, ``node-1``, ...) is added one by one as before. The last
    lists folded are remembered (serve folds the same 9,000 healthy nodes again after
    each store change)."""
    return _fold(tuple(names))


@functools.lru_cache(maxsize=16)
def _fold(names: tuple[str, ...]) -> str:
    from ClusterShell.NodeSet import NodeSet

    runs: dict[str, list[str]] = {}
    other: list[str] = []
    for n in names:
        m = _SIMPLE.fullmatch(n)
        if m is None:
            other.append(n)
        else:
            runs.setdefault(m[1], []).append(m[2])
    ns = NodeSet(",".join(f"{p}[{_runs(ds)}]" for p, ds in runs.items())) if runs \
        else NodeSet()
    for n in other:
        ns.update(n)
    return str(ns)


def _age(now: datetime, then: datetime) -> float:
    return max(0.0, (now - then).total_seconds())


def controller_view(beat: Heartbeat | None, state: State | None, now: datetime,
                    interval: float | None = None) -> ControllerView:
    """The controller's state in words (O1), the pause (O2)."""
    paused = bool(state and state.paused)
    pause = state.pause if state is not None else None
    if beat is None:
        return ControllerView(state="not seen", paused=paused, pause=pause,
                              words="NO CONTROLLER: no heartbeat in the store; no daemon "
                                    "runs on it (nothing is remediated)")
    every = beat.interval or interval or 30.0
    limit = max(STALE_MIN, timedelta(seconds=every * STALE_INTERVALS))
    age = _age(now, beat.at)
    common: dict[str, Any] = dict(
        heartbeat_at=beat.at, age_s=age, last_success=beat.last_success,
        last_error=beat.last_error, last_error_at=beat.last_error_at, version=beat.version,
        mode=beat.mode, paused=paused, pause=pause, problems=beat.problems)
    if now - beat.at > limit:
        return ControllerView(state="stale", words=(
            f"CONTROLLER STALE: last heartbeat {_dur(age)} ago (expected every {every:g}s); "
            "is the daemon running?"), **common)
    if beat.failing:
        since = (f"last success {_dur(_age(now, beat.last_success))} ago"
                 if beat.last_success else "no cycle has succeeded yet")
        return ControllerView(state="failing", words=(
            f"CONTROLLER FAILING: {beat.failures_since_success} cycle(s) in a row failed "
            f"({beat.last_error}); {since}"), **common)
    mode = f", mode {beat.mode}" if beat.mode else ""
    return ControllerView(state="running", words=(
        f"Controller running: last cycle {_dur(age)} ago{mode}"
        + (f", version {beat.version}" if beat.version else "")), **common)


def _breaker(state: State, now: datetime, policy: Any) -> BreakerView:
    b = state.breaker
    count = threshold = window_s = None
    safety = getattr(policy, "safety", None)
    if safety is not None:
        window: timedelta = safety.breaker_window
        threshold, window_s = int(safety.breaker_threshold), window.total_seconds()
        from slurm_heal.policy.engine import is_automatic

        since = now - window
        if b.reset_at and b.reset_at > since:
            since = b.reset_at  # as the engine counts (SPEC S5): a reset starts afresh
        count = sum(1 for r in state.remediations if is_automatic(r)
                    and (at := r.phase_times.get(Phase.CORDONED.value)) is not None
                    and at >= since)
    return BreakerView(open=b.open, opened_at=b.opened_at, why=b.why, count_in_window=count,
                       threshold=threshold, window_s=window_s, reset_by=b.reset_by,
                       reset_at=b.reset_at)


def waits_for_approval(rem: Remediation) -> bool:
    """Proposed, and the approval rule that decided says a person approves (SPEC P2);
    not one an open incident holds: that waits for the incident's close, not for an
    approval of this node (S7, O6: shown held by the incident instead)."""
    h = held(rem)
    return rem.phase is Phase.PROPOSED and bool(rem.data.approval_pending) \
        and not (h is not None and h.by_incident)


def _provider(rem: Remediation) -> dict[str, Any]:
    a = provider_error(rem)
    if a is None:
        return {}
    return {"provider_error": a.last_error, "provider_error_at": a.last_error_at,
            "provider_errors": a.errors}


def _phase_since(rem: Remediation) -> datetime:
    return rem.phase_times.get(rem.phase.value) or rem.updated


def _checked_at_in(ex: dict[str, Any] | None) -> datetime | None:
    section = (ex or {}).get(extra.KEY)
    raw = section.get("checked_at") if isinstance(section, dict) else None
    if not isinstance(raw, str):
        return None
    try:
        at = isotime.parse(raw)
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def _heartbeat_in(ex: dict[str, Any] | None) -> timedelta:
    section = (ex or {}).get(extra.KEY)
    raw = section.get("heartbeat_s") if isinstance(section, dict) else None
    if not isinstance(raw, (int, float)) or isinstance(raw, bool) or not raw > 0:
        return timedelta(0)
    return timedelta(seconds=min(float(raw), MAX_HEARTBEAT.total_seconds()))


def heartbeat_of(node: NodeInfo) -> timedelta:
    """The heartbeat the node's check published (``heartbeat_s``; 0 when none or not a
    positive number), at most `MAX_HEARTBEAT`."""
    return _heartbeat_in(node.extra)


def stale_after(node: NodeInfo, slack: timedelta = CHECK_STALE) -> timedelta:
    """SPEC O1: how long after its ``checked_at`` the node's check counts as stale: its
    heartbeat plus ``slack`` (50 min at the default heartbeat of 30 min)."""
    return heartbeat_of(node) + slack


@dataclass(frozen=True, slots=True)
class NodeCheck:
    """What the overview reads of one node's Extra: its check data (alerts, the
    acknowledged ones; `extra.read_check_data`), when its check last published and the
    heartbeat it published (`heartbeat_of`)."""

    data: extra.CheckData
    checked_at: datetime | None
    heartbeat: timedelta

    def stale(self, now: datetime, slack: timedelta = CHECK_STALE) -> bool:
        """SPEC O1: the check never published, or not within its heartbeat plus
        ``slack`` (`stale_after`)."""
        return self.checked_at is None or now - self.checked_at > self.heartbeat + slack


def node_check(node: NodeInfo, now: datetime) -> NodeCheck:
    """One node's `NodeCheck`, read now."""
    ex = node.extra
    return NodeCheck(extra.read_check_data(node.name, ex, now), _checked_at_in(ex),
                     _heartbeat_in(ex))


class NodeChecks:
    """What serve keeps of each node from one overview to the next (issue 42), so that
    a store change (the daemon writes it every cycle) or a new read of Slurm costs the
    nodes that changed, not the cluster: each node's `NodeCheck`, read once per change
    of its Extra text (`read`), and its `NodeLine`, classified again only when what it
    is classified from changed (`lines`). The check data is `extra.CheckCache`'s (the
    controller's own: the result `read_check_data` gives at ``now``, time-dependent data
    read again); the published time and heartbeat depend on the text alone.
    Thread-safe."""

    def __init__(self) -> None:
        self._cache = extra.CheckCache()
        # node -> (Extra text, Extra object when there is no text, its NodeCheck)
        self._seen: dict[str, tuple[str, object, NodeCheck]] = {}
        # the last read: (the nodes, now, its NodeChecks)
        self._last: tuple[Sequence[NodeInfo], datetime, list[NodeCheck]] | None = None
        # node -> (its NodeCheck, stale?, Slurm states, reason, the slack, its
        # remediations, its line): what its line was classified from, and the line
        self._lines: dict[str, tuple[Any, ...]] = {}
        self._lock = threading.Lock()

    def read(self, nodes: Sequence[NodeInfo], now: datetime) -> list[NodeCheck]:
        """Each node's NodeCheck at ``now``, in the order of ``nodes`` (a name that
        appears twice is read node by node, as `node_check` reads it)."""
        with self._lock:
            last = self._last
            if last is not None and last[0] is nodes and last[1] == now:
                return last[2]
            data = self._cache.read_view(nodes, now)
            seen: dict[str, tuple[str, object, NodeCheck]] = {}
            out: list[NodeCheck] = []
            twice: set[str] = set()
            for n in nodes:
                if n.name in seen:
                    twice.add(n.name)
                raw = n.extra_raw
                d = data[n.name]
                hit = self._seen.get(n.name)
                if hit is None or hit[0] != raw or (not raw and hit[1] is not n.extra):
                    ex = n.peek_extra() if raw else n.extra
                    hit = (raw, None if raw else n.extra,
                           NodeCheck(d, _checked_at_in(ex), _heartbeat_in(ex)))
                elif hit[2].data is not d:
                    hit = (hit[0], hit[1], NodeCheck(d, hit[2].checked_at, hit[2].heartbeat))
                seen[n.name] = hit
                out.append(hit[2])
            self._seen = seen
            if twice:
                out = [node_check(n, now) if n.name in twice else c
                       for n, c in zip(nodes, out, strict=True)]
            self._last = (nodes, now, out)
            return out

    def lines(self, nodes: Sequence[NodeInfo], reads: Sequence[NodeCheck],
              by_node: Mapping[str, Sequence[Remediation]], state: State, now: datetime,
              check_stale: timedelta = CHECK_STALE) -> list[NodeLine]:
        """Each node's line (`classify`), in the order of ``nodes``: the one of the last
        call when the node's Slurm state and reason, its NodeCheck (the same object: the
        same Extra), its remediations (the same objects) and whether its check is stale
        are those it was classified from."""
        with self._lock:
            last = self._lines
            kept: dict[str, tuple[Any, ...]] = {}
            out: list[NodeLine] = []
            for n, r in zip(nodes, reads, strict=True):
                mine = by_node.get(n.name, ())
                stale = r.stale(now, check_stale)
                hit = last.get(n.name)
                if (hit is not None and hit[0] is r and hit[1] == stale and hit[2] == n.states
                        and hit[3] == n.reason and hit[4] == check_stale
                        and (not mine and not hit[5] or _same(hit[5], mine))):
                    line = hit[6]
                else:
                    line = classify(n, state, now, check_stale, mine, r)
                    # the same object for the same line, whatever it was made from
                    if hit is not None and hit[6] == line:
                        line = hit[6]
                    hit = (r, stale, n.states, n.reason, check_stale, tuple(mine), line)
                kept[n.name] = hit
                out.append(line)
            self._lines = kept
            return out


def _same(kept: tuple[Remediation, ...], mine: Sequence[Remediation]) -> bool:
    """The very same remediations (kept alive by the key, so an id is never another's)."""
    return len(kept) == len(mine) and all(a is b for a, b in zip(kept, mine, strict=True))


def _foreign(node: NodeInfo) -> bool:
    """Someone else's drain (D5); a malformed request is one too (O6): nothing of ours
    will ever act on it, so it is never counted as healthy."""
    return bool((node.drained or node.down) and node.reason and (
        reasons.request_problem(node.reason) or reasons.owner(node.reason) == "person"))


def classify(node: NodeInfo, state: State, now: datetime,
             check_stale: timedelta = CHECK_STALE,
             mine: Sequence[Remediation] | None = None,
             read: NodeCheck | None = None) -> NodeLine:
    """One node's category and flags (see the module docstring). ``mine``: the node's
    remediations, when the caller has them indexed already; ``read``: its Extra, when
    the caller has read it already (`NodeChecks`)."""
    if mine is None:
        mine = [r for r in state.remediations if r.node == node.name]
    open_ = [r for r in mine if not r.phase.terminal] if mine else []
    last = max(mine, key=lambda r: r.updated) if mine else None
    if read is None:
        read = node_check(node, now)
    check = read.data
    alerts = check.alerts
    out_of_service = node.drained or node.down
    faults = tuple(a.fault for a in alerts)
    if (out_of_service and not alerts and reasons.owner(node.reason) == "request"
            and not reasons.request_problem(node.reason)):
        # A request's drain with no alert in Extra: `alerts` lists it (fault "request",
        # operations.alerts_of), so it is alerting here too, never healthy (issue 36).
        faults = ("request",)
    if last is not None and last.data.handed_to_person and not last.data.handed_ended \
            and not open_ and out_of_service:  # S8: the hand-over ends when they act
        category = "handed_to_person"
    elif open_:
        category = "remediating"
    elif _foreign(node):
        category = "drained_by_others"
    elif out_of_service and reasons.is_ours(node.reason):
        category = "cordoned"
    elif faults:
        category = "alerting"
    else:
        category = "healthy"
    checked = read.checked_at
    rem = open_[0] if open_ else None
    return NodeLine(
        name=node.name, category=category, states=tuple(sorted(node.states)),
        reason=node.reason, alerts=faults,
        acknowledged=tuple(a.fault for a in check.acknowledged), checked_at=checked,
        check_stale=read.stale(now, check_stale),
        check_erroring=any(a.fault == DETECTOR_ERROR for a in alerts),
        remediation=rem.id if rem else None, phase=rem.phase.value if rem else None)


def malformed_resolve(node: str) -> str:
    """What resolves a malformed request drain (O6): the detector fixed, the node resumed
    (a person's drain reason is never ours to undo, house style 2)."""
    return (f"fix the detector that wrote it, then `scontrol update nodename={node} "
            "state=resume` (or write a request that parses)")


def unrecorded(node: NodeInfo, state: State, known: frozenset[str]) -> Unrecorded | None:
    """The node's line when it is out of service under our controller's marker for a
    remediation the store does not know (the engine's ``unknown_marker``, I5)."""
    if not (node.drained or node.down) or not reasons.is_ours(node.reason):
        return None
    try:
        marker = reasons.parse_marker(node.reason)
    except ReasonError:
        ref = "?"
    else:
        if marker.by != "controller" or (marker.remediation and marker.remediation in known):
            return None
        ref = marker.remediation or "?"
    from slurm_heal.store import RECOVERED_KEY

    recovered = state.data.get(RECOVERED_KEY) if isinstance(state.data, dict) else None
    moved = str(recovered.get("moved_to", "")) if isinstance(recovered, dict) else ""
    return Unrecorded(
        node=node.name, reason=node.reason, remediation=ref, set_aside=moved,
        release=f"scontrol update nodename={node.name} state=resume",
        request=f'slurm-heal request {node.name} reboot --reason "after the store was '
                'set aside"')


def _interval_s(value: Any) -> float | None:
    """``controller.interval`` in seconds, written "2s" or 2 (the one duration rule); a
    value the daemon would refuse shows as unknown here, never a crash of `status`."""
    from slurm_heal.durations import parse_seconds

    try:
        return parse_seconds(value) if value not in (None, "", 0) else None
    except ValueError:
        return None


def _source(rem: Remediation) -> str:
    """SPEC D13: the site's monitor a remediation's alert came from, or ""."""
    return rem.detector if rem.origin == "alert" and rem.detector in SITE_SOURCES else ""


def _from(source: str) -> str:
    return f", from {source}" if source else ""


def gather(state: State, nodes: Sequence[NodeInfo] | None, now: datetime, *,
           heartbeat: Heartbeat | None, store: str = "", policy: Any = None,
           slurm_error: str | None = None, details: Iterable[str] = (),
           all_details: bool = False, check_stale: timedelta = CHECK_STALE,
           checks: NodeChecks | None = None) -> Overview:
    """The whole overview. ``nodes`` is None when Slurm did not answer (``slurm_error``
    says why); the store's part is shown anyway. ``details`` names the nodes whose lines
    are included (``status --node``); ``checks``: what is kept of each node between
    gatherings (serve's), else each node is read and classified here."""
    # the typed [controller] section (issue 21); its default is the view's own 30s
    interval = getattr(getattr(policy, "controller", None), "interval", None)
    ctl = controller_view(heartbeat, state, now, _interval_s(interval))
    waiting = tuple(sorted((
        Waiting(remediation=r.id, node=r.node, fault=r.fault, action=r.action.value,
                since=r.created, age_s=_age(now, r.created), rule=r.approval_rule,
                approve=f"slurm-heal approve {r.id}", source=_source(r))
        for r in state.remediations if waits_for_approval(r)),
        key=lambda w: w.since))
    flying = tuple(sorted((
        InFlight(remediation=r.id, node=r.node, fault=r.fault, action=r.action.value,
                 phase=r.phase.value, since=_phase_since(r), for_s=_age(now, _phase_since(r)),
                 waiting_for=waiting_for_evidence(r), held=held(r), source=_source(r),
                 **_provider(r))
        for r in state.remediations if not r.phase.terminal
        and (r.phase is not Phase.PROPOSED or held(r) is not None)),
        key=lambda f: f.since))
    counts = {c: 0 for c in CATEGORIES}
    groups: dict[str, list[str]] = {c: [] for c in CATEGORIES}
    stale: list[str] = []
    erroring: list[str] = []
    foreign: list[Foreign] = []
    lost: list[Unrecorded] = []
    known = frozenset(r.id for r in state.remediations)
    lines: list[NodeLine] = []
    wanted = set(details)
    by_node: dict[str, list[Remediation]] = {}
    for r in state.remediations:  # one pass: 1,000 nodes x thousands of records
        by_node.setdefault(r.node, []).append(r)
    if checks is not None and nodes is not None:
        classified = checks.lines(nodes, checks.read(nodes, now), by_node, state, now,
                                  check_stale)
    else:
        classified = [classify(n, state, now, check_stale, by_node.get(n.name, ()))
                      for n in nodes or ()]
    for node, line in zip(nodes or (), classified, strict=True):
        counts[line.category] += 1
        groups[line.category].append(node.name)
        if line.check_stale:
            stale.append(node.name)
        if line.check_erroring:
            erroring.append(node.name)
        if line.category == "drained_by_others":
            problem = reasons.request_problem(node.reason)
            foreign.append(Foreign(node=node.name, state="down" if node.down else "drained",
                                   reason=node.reason, user=node.reason_user,
                                   since=node.reason_time, problem=problem,
                                   resolve=malformed_resolve(node.name) if problem else ""))
        if (node.drained or node.down) and (u := unrecorded(node, state, known)) is not None:
            lost.append(u)
        if all_details or node.name in wanted:
            lines.append(line)
    far_past = datetime.min.replace(tzinfo=timezone.utc)
    foreign.sort(key=lambda f: (f.since or far_past, f.node))
    return Overview(
        at=now, store=store, controller=ctl, breaker=_breaker(state, now, policy),
        slurm_error=slurm_error,
        counts=counts if nodes is not None else {},
        groups={c: fold(v) for c, v in groups.items() if v},
        check_stale=fold(stale), check_erroring=fold(erroring),
        approvals=waiting, in_flight=flying, foreign=tuple(foreign),
        unrecorded=tuple(lost), nodes=tuple(lines),
        validations=_validations(state, now), incidents=incidents_mod.shown(state, now))


def as_json(ov: Overview, store: dict[str, Any], nodes: Sequence[NodeInfo] | None,
            now: datetime) -> dict[str, Any]:
    """What ``slurm-heal status --json`` prints, and ``GET /api/v1/status`` answers: the
    overview; ``store`` as every command's JSON says it (``{"dir", "from", "config"}``,
    docs/cli.md) with the sentence the text output shows as ``"text"``; and
    ``node_status``, each node as the node checks and Slurm show it (the shape before
    the overview)."""
    from slurm_heal.readmodel.nodes import node_status

    out = ov.model_dump(mode="json")
    out["store"] = {**store, "text": out["store"]}
    out["node_status"] = [node_status(n, now) for n in nodes or ()]
    return out


VALIDATIONS_SHOWN = timedelta(days=1)


def _validations(state: State, now: datetime) -> tuple[VLine, ...]:
    out = []
    for v in state.validations:
        if v.terminal and _age(now, v.updated) > VALIDATIONS_SHOWN.total_seconds():
            continue
        out.append(VLine(validation=v.id, node=v.node, phase=v.phase, origin=v.origin,
                         job_id=v.job_id, outcome=v.outcome, ticket=v.ticket,
                         why=v.steps[-1].why if v.steps else v.reason,
                         since=v.phase_times.get(v.phase, v.created)))
    return tuple(sorted(out, key=lambda x: (x.since, x.node)))


def render(ov: Overview) -> list[str]:
    """`status` for a person: the controller in words first, one screen for 1,000 nodes."""
    c = ov.controller
    out = [c.words]
    if c.state != "not seen" and c.last_error and c.state == "running":
        out.append(f"  last error {_ts(c.last_error_at)}: {c.last_error}")
    out.extend(f"  PROBLEM: {p}" for p in c.problems)
    if c.paused:
        p = c.pause
        who = (f" by {p.by} at {_ts(p.at)}" + (f": {p.reason}" if p.reason else "")
               if p is not None and p.paused else "")
        out.append(f"PAUSED{who} (nothing disruptive runs until `slurm-heal unpause`)")
    b = ov.breaker
    window = (f", {b.count_in_window} of {b.threshold} automatic starts in the window"
              if b.count_in_window is not None else "")
    if b.open:
        out.append(f"Breaker OPEN since {_ts(b.opened_at)}: {b.why}{window} "
                   "(`slurm-heal reset-breaker` once you have looked)")
    else:
        last = f", last reset by {b.reset_by} at {_ts(b.reset_at)}" if b.reset_by else ""
        out.append(f"Breaker closed{window}{last}")
    if ov.incidents:  # SPEC S7: one cause, many nodes: first, before the node figures
        n_open = sum(1 for i in ov.incidents if i.state == "open")
        out.append(f"Incidents: {n_open} open" + (f", {len(ov.incidents) - n_open} ended in "
                                                  "the last day" if len(ov.incidents) > n_open
                                                  else ""))
        out.extend(incidents_mod.render(ov.incidents))
    if ov.slurm_error:
        out.append(f"Nodes: unknown, Slurm did not answer ({ov.slurm_error})")
    else:
        total = sum(ov.counts.values())
        out.append(f"Nodes: {total}: " + ", ".join(
            f"{n} {cat.replace('_', ' ')}" for cat, n in ov.counts.items()))
        for cat in CATEGORIES[1:]:
            if ov.groups.get(cat):
                out.append(f"  {cat.replace('_', ' ')}: {ov.groups[cat]}")
        if ov.check_erroring:
            out.append(f"  node check erroring (a detector cannot run): {ov.check_erroring}")
        if ov.check_stale:
            out.append(f"  node check stale or never published: {ov.check_stale}")
    if ov.approvals:
        out.append(f"Waiting for approval: {len(ov.approvals)}")
        for w in ov.approvals:
            out.append(f"  {w.node} {w.fault}{_from(w.source)} -> {w.action}, waiting "
                       f"{_dur(w.age_s)} ({w.approve})")
    if ov.in_flight:
        out.append(f"Remediations in flight: {len(ov.in_flight)}")
        for f in ov.in_flight:
            if f.waiting_for:  # O6: held, not approved nor running
                out.append(f"  {f.node} {f.action} ({f.fault}) WAITING FOR EVIDENCE for "
                           f"{_dur(f.for_s)} [{f.remediation}]: {f.waiting_for}")
                continue
            if f.held is not None:  # O6: what holds it, until when, what lifts it
                out.append(f"  {f.node} {f.action} ({f.fault}) {f.phase}, "
                           f"{held_head(f.held)}, for {_dur(f.for_s)} [{f.remediation}]")
                out.append(f"    {held_words(f.held)}")
            else:
                out.append(f"  {f.node} {f.action} ({f.fault}{_from(f.source)}) {f.phase} "
                           f"for {_dur(f.for_s)} [{f.remediation}]")
            if f.provider_errors:  # O6: the cause beside the remediation, with its age
                age = (f", the last {_dur(_age(ov.at, f.provider_error_at))} ago"
                       if f.provider_error_at else "")
                out.append(f"    PROVIDER NOT ANSWERING: {f.provider_errors} failed "
                           f"tr{'y' if f.provider_errors == 1 else 'ies'}{age}: "
                           f"{f.provider_error}")
    if ov.validations:
        out.append(f"Validations (open, and finished in the last day): {len(ov.validations)}")
        for v in ov.validations:
            job = f" job {v.job_id}" if v.job_id is not None else ""
            end = f" {v.outcome}" if v.outcome else ""
            ticket = f" ticket {v.ticket}" if v.ticket else ""
            ticket += " (post-repair gate, SPEC V4)" if v.origin == "gate" else ""
            out.append(f"  {v.node} {v.phase}{job}{end}{ticket} since {_ts(v.since)} "
                       f"[{v.validation}]: {v.why[:160]}")
    if ov.unrecorded:
        out.append(f"Held under a marker the store does not know (a store set aside?): "
                   f"{len(ov.unrecorded)}; nothing automatic touches them until you act")
        for u in ov.unrecorded:
            aside = f"; the old store is {u.set_aside}" if u.set_aside else ""
            out.append(f"  {u.node} [{u.remediation}]{aside}: release `{u.release}`, or hand "
                       f"it to slurm-heal again `{u.request}`")
    if ov.foreign:
        out.append(f"Out of service for reasons not ours (oldest first): {len(ov.foreign)}")
        for fn in ov.foreign:
            who = f" by {fn.user}" if fn.user else ""
            out.append(f"  {fn.node} {fn.state}{who} since {_ts(fn.since)}: {fn.reason}")
            if fn.problem:
                out.append(f"    MALFORMED REQUEST, nothing is done: {fn.problem}; "
                           f"{fn.resolve}")
    for n in ov.nodes:
        extra_ = f" {n.phase} [{n.remediation}]" if n.remediation else ""
        out.append(f"{n.name}: {n.category.replace('_', ' ')}{extra_}; "
                   f"{'+'.join(n.states)}" + (f"; reason: {n.reason}" if n.reason else "")
                   + (f"; alerts: {', '.join(n.alerts)}" if n.alerts else "")
                   + (f"; acknowledged by a person's resume: {', '.join(n.acknowledged)}"
                      if n.acknowledged else "")
                   + f"; checked {_ts(n.checked_at)}" + (" (stale)" if n.check_stale else ""))
    return out
