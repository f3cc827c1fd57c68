"""A simulated cluster on virtual time that drives the real `decide()` (slurm-heal simulate).

The operator's "what would my policy do?" and the scenario test harness. The scenario
format is documented in docs/simulate.md. The simulation applies each plan the way the
daemon does: every effect is recorded as an Attempt (outcome None) before it runs, its
outcome is filled in after, and an idempotency key is never handed out twice (SPEC S6).

Simulated world:
- nodes with a pool (their first partition), a machine identity (``slurm_heal.host`` in
  Extra; migrate moves the node to a new one), Slurm states and reasons;
- jobs that end at a given time (requeue/cancel removes them from the node);
- a health check that re-confirms active alerts on every cycle while the node is up;
- a provider whose actions succeed after a configurable duration (or fail, after an
  ``action_fails`` event); a completed action clears the node's alerts;
- the post-repair gate (SPEC V4): a ``gate`` effect records the gate's run as the
  validation flow would, which passes after ``sim.gate_duration`` (or fails, or is
  interrupted, after a ``gate_fails`` event);
- injected faults (``fault`` events): an effect on a node that fails, times out, is
  carried out with its answer lost, never reports, or a daemon that dies between
  recording an effect and running it (docs/simulate.md "Injected faults").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from slurm_heal import catalog as catalog_mod
from slurm_heal import isotime, jsonsafe, reasons
from slurm_heal.config import Policy, parse_duration, policy_from_dict
from slurm_heal.errors import CatalogError, ConfigError, ReasonError, ScenarioError
from slurm_heal.models import (
    Attempt,
    Command,
    Decision,
    Effect,
    Plan,
    Remediation,
    State,
    ValidationRun,
    key_step,
)
from slurm_heal.policy.incremental import Decide
from slurm_heal.types import Action, Alert, ClusterView, Evidence, JobInfo, NodeInfo, Severity
from slurm_heal.validation.flow import gate_run_id

EVENT_TYPES = ("alert", "clear", "job", "approve", "deny", "cancel", "request", "action_fails",
               "reset_breaker", "pause", "unpause", "drain", "resume", "fault", "gate_fails",
               "close_incident")
# SPEC V4: how the next post-repair gate on a node ends (`gate_fails` event's ``mode``).
GATE_MODES = ("fail", "interrupt")
DEFAULT_GATE_DURATION = timedelta(minutes=3)
# Injected faults (docs/simulate.md): which effect, and what goes wrong with it.
FAULT_EFFECTS = ("cordon", "signal_jobs", "requeue_jobs", "cancel_jobs", "act", "poll", "resume",
                 "release", "notify", "gate", "any")
FAULT_MODES = ("fail", "timeout", "lost", "never_reports", "crash")
# Modes that only make sense for a provider action.
_ACT_ONLY_MODES = ("never_reports",)
MAX_FAULT_COUNT = 1000
DEFAULT_DURATIONS = {Action.REBOOT: timedelta(minutes=5), Action.REBUILD: timedelta(minutes=20),
                     Action.MIGRATE: timedelta(minutes=30),
                     Action.POWER_CYCLE: timedelta(minutes=10),
                     Action.RESET_GPU: timedelta(minutes=2)}  # SPEC E6: a job, no boot
MAX_CYCLES = 50_000
# Longest action duration / cycle interval a scenario may set: beyond it the virtual
# clock would run past the end of the calendar.
MAX_SIM_DURATION = timedelta(days=366)
MAX_JOB_ID = 2**32
_OFFSET = re.compile(r"^\+\s*\d")


@dataclass(frozen=True)
class Event:
    at: datetime
    seq: int
    type: str
    raw: dict[str, Any]


@dataclass(frozen=True)
class Scenario:
    """A parsed, validated scenario."""

    start: datetime
    until: datetime
    policy: Policy
    nodes: tuple[tuple[str, str, tuple[str, ...]], ...]  # (name, pool, features)
    events: tuple[Event, ...]
    interval: timedelta = timedelta(seconds=30)
    durations: dict[Action, timedelta] = field(default_factory=lambda: dict(DEFAULT_DURATIONS))
    expect: tuple[dict[str, Any], ...] = ()
    expect_not: tuple[dict[str, Any], ...] = ()
    description: str = ""
    # The fault catalog the scenario was read with, and decide() is given (issue 20).
    catalog: catalog_mod.Catalog | None = None
    gate_duration: timedelta = DEFAULT_GATE_DURATION  # SPEC V4: a gate run, queued to verdict
    # SPEC S7, D12: the domains each node's check publishes (NVLink domain, driver cohort).
    domains: dict[str, dict[str, str]] = field(default_factory=dict)


def _time(value: Any, start: datetime | None, where: str) -> datetime:
    if isinstance(value, str):
        if _OFFSET.match(value.strip()):
            if start is None:
                raise ScenarioError(f"{where}: an offset needs an absolute start")
            try:
                t = start + parse_duration(value.strip()[1:])
                if t.year > 9000:
                    raise OverflowError
                return t
            except OverflowError:
                raise ScenarioError(f"{where}: {value!r} is too far away") from None
            except ValueError as exc:
                raise ScenarioError(f"{where}: {exc}") from None
        try:
            t = isotime.parse(value.strip())
        except ValueError:
            pass
        else:
            t = t if t.tzinfo else t.replace(tzinfo=timezone.utc)
            if not 1970 <= t.year <= 9000:
                raise ScenarioError(f"{where}: {value!r} is outside the years 1970-9000")
            return t
    raise ScenarioError(f"{where}: {value!r} is neither an offset like \"+20m\" nor an "
                        "ISO-8601 time")


def _need(raw: dict[str, Any], key: str, where: str) -> Any:
    if key not in raw:
        raise ScenarioError(f"{where}: missing {key!r}")
    return raw[key]


def parse_scenario(data: Any, source: str = "<scenario>",
                   catalog: catalog_mod.Catalog | None = None) -> Scenario:
    """Validate a scenario document (see docs/simulate.md). Raises ScenarioError."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario is a JSON object")
    if jsonsafe.depth_exceeds(data):
        raise ScenarioError(f"{source}: nested more than {jsonsafe.MAX_DEPTH} levels deep")
    known = {"start", "config", "nodes", "events", "until", "sim", "expect", "expect_not",
             "description"}
    extra = sorted(set(data) - known)
    if extra:
        raise ScenarioError(f"{source}: unknown key(s) {', '.join(extra)}")
    start = _time(_need(data, "start", source), None, f"{source}: start")
    try:
        policy = policy_from_dict(data.get("config") or {}, source=f"{source}: config")
    except ConfigError as exc:
        raise ScenarioError(str(exc)) from None
    nodes_raw = _need(data, "nodes", source)
    if not isinstance(nodes_raw, list) or not nodes_raw:
        raise ScenarioError(f"{source}: nodes: a non-empty list of {{\"name\", \"pool\"}}")
    nodes: list[tuple[str, str, tuple[str, ...]]] = []
    domains: dict[str, dict[str, str]] = {}
    names: set[str] = set()
    for i, n in enumerate(nodes_raw):
        where = f"{source}: nodes[{i}]"
        if not isinstance(n, dict) or not isinstance(n.get("name"), str) or not n["name"]:
            raise ScenarioError(f"{where}: needs a \"name\"")
        if n["name"] in names:  # a set: linear in the number of nodes
            raise ScenarioError(f"{where}: node {n['name']!r} appears twice")
        names.add(n["name"])
        feats = n.get("features", [])
        if not isinstance(feats, list):
            raise ScenarioError(f"{where}: features must be a list")
        if "pool" in n and not isinstance(n["pool"], str):
            raise ScenarioError(f"{where}.pool: {n['pool']!r} must be a string")
        nodes.append((n["name"], str(n.get("pool", "default")), tuple(str(f) for f in feats)))
        said = n.get("domains")  # SPEC S7, D12: what the node check publishes (issue 37)
        if said is not None:
            from slurm_heal.extra import DOMAIN_KEYS

            if not isinstance(said, dict) or any(
                    k not in DOMAIN_KEYS or not isinstance(v, str) for k, v in said.items()):
                raise ScenarioError(f"{where}.domains: an object of {', '.join(DOMAIN_KEYS)} "
                                    "to strings (what the node check publishes)")
            domains[n["name"]] = dict(said)
    events: list[Event] = []
    cat = catalog if catalog is not None else catalog_mod.load()
    events_raw = data.get("events") or []
    if not isinstance(events_raw, list):
        raise ScenarioError(f"{source}: events must be a list of event objects")
    for i, e in enumerate(events_raw):
        where = f"{source}: events[{i}]"
        if not isinstance(e, dict):
            raise ScenarioError(f"{where}: an event is an object")
        etype = _need(e, "type", where)
        if etype not in EVENT_TYPES:
            raise ScenarioError(f"{where}: unknown type {etype!r} (one of {', '.join(EVENT_TYPES)})")
        at = _time(_need(e, "at", where), start, f"{where}.at")
        if etype == "close_incident" and not isinstance(_need(e, "incident", where), str):
            raise ScenarioError(f"{where}.incident: an incident id or a component "
                                "(\"switch:leaf1\")")
        if etype not in ("reset_breaker", "pause", "unpause", "close_incident"):
            node = _need(e, "node", where)
            if not isinstance(node, str) or node not in names:
                raise ScenarioError(f"{where}: unknown node {node!r}")
        if etype in ("alert", "clear"):
            fault = _need(e, "fault", where)
            try:
                cat.get(str(fault))
            except CatalogError as exc:
                raise ScenarioError(f"{where}: {exc}") from None
            if "severity" in e and (not isinstance(e["severity"], str)
                                    or e["severity"] not in [s.value for s in Severity]):
                raise ScenarioError(f"{where}: severity {e['severity']!r} is not info, "
                                    "warning or critical")
        if etype == "job":
            jid = _need(e, "id", where)
            if isinstance(jid, bool) or not isinstance(jid, (int, str)) \
                    or not str(jid).isascii() or not str(jid).isdigit() \
                    or len(str(jid)) > 10 or not 0 < int(jid) < MAX_JOB_ID:
                raise ScenarioError(f"{where}.id: {str(jid)[:40]!r} is not a job id (a number)")
            _time(_need(e, "ends", where), start, f"{where}.ends")
        for key in ("by", "remediation", "reason", "detector", "summary"):
            if key in e and not isinstance(e[key], str):
                raise ScenarioError(f"{where}.{key}: {e[key]!r} must be a string")
        if "id" in e and (isinstance(e["id"], bool) or not isinstance(e["id"], (int, str))):
            raise ScenarioError(f"{where}.id: {e['id']!r} must be a string or a number")
        if etype == "request":
            _need(e, "action", where)
        if "action" in e and e["action"] is not None:
            try:
                Action(_need(e, "action", where))
            except (ValueError, TypeError):
                raise ScenarioError(f"{where}.action: unknown action {e['action']!r}") from None
        if etype == "fault":
            _check_fault(e, where)
        if etype == "gate_fails" and e.get("mode", "fail") not in GATE_MODES:
            raise ScenarioError(f"{where}.mode: {e['mode']!r} is not one of "
                                f"{', '.join(GATE_MODES)}")
        if "evidence" in e:
            _check_evidence(e["evidence"], f"{where}.evidence")
        events.append(Event(at=at, seq=i, type=etype, raw=e))
    until = _time(data.get("until", "+1d"), start, f"{source}: until")
    if until < start:
        raise ScenarioError(f"{source}: until is before start")
    sim = data.get("sim") or {}
    if not isinstance(sim, dict):
        raise ScenarioError(f"{source}: sim must be an object")
    durations = dict(DEFAULT_DURATIONS)
    if not isinstance(sim.get("action_duration") or {}, dict):
        raise ScenarioError(f"{source}: sim.action_duration must be an object of action = "
                            "duration")
    unknown_sim = sorted(set(sim) - {"action_duration", "interval", "gate_duration"})
    if unknown_sim:
        raise ScenarioError(f"{source}: sim: unknown key(s) {', '.join(unknown_sim)}")
    for name in ("expect", "expect_not"):
        got = data.get(name) or []
        if not isinstance(got, list) or not all(isinstance(w, dict) for w in got):
            raise ScenarioError(f"{source}: {name} must be a list of record objects")
    try:
        for k, v in (sim.get("action_duration") or {}).items():
            durations[Action(k)] = parse_duration(v)
        interval = parse_duration(sim.get("interval", "30s"))
        gate_duration = parse_duration(sim.get("gate_duration", "3m"))
    except ValueError as exc:
        raise ScenarioError(f"{source}: sim: {exc}") from None
    if interval <= timedelta(0):
        raise ScenarioError(f"{source}: sim.interval must be positive")
    if interval > MAX_SIM_DURATION or gate_duration > MAX_SIM_DURATION or any(
            d > MAX_SIM_DURATION for d in durations.values()):
        raise ScenarioError(f"{source}: sim: a duration longer than "
                            f"{MAX_SIM_DURATION.days}d")
    return Scenario(start=start, until=until, policy=policy, nodes=tuple(nodes),
                    domains=domains,
                    events=tuple(sorted(events, key=lambda ev: (ev.at, ev.seq))),
                    interval=interval, durations=durations,
                    expect=tuple(data.get("expect") or ()),
                    expect_not=tuple(data.get("expect_not") or ()),
                    description=str(data.get("description", "")), catalog=cat,
                    gate_duration=gate_duration)


def _check_fault(e: dict[str, Any], where: str) -> None:
    """A ``fault`` event: ``effect`` (default "any"), ``mode``, ``count`` (default 1)."""
    effect = e.get("effect", "any")
    if effect not in FAULT_EFFECTS:
        raise ScenarioError(f"{where}.effect: {effect!r} is not one of "
                            f"{', '.join(FAULT_EFFECTS)}")
    mode = _need(e, "mode", where)
    if mode not in FAULT_MODES:
        raise ScenarioError(f"{where}.mode: {mode!r} is not one of {', '.join(FAULT_MODES)}")
    if mode in _ACT_ONLY_MODES and effect != "act":
        raise ScenarioError(f"{where}.mode: {mode!r} is a provider action's fault; it needs "
                            "\"effect\": \"act\"")
    count = e.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_FAULT_COUNT:
        raise ScenarioError(f"{where}.count: {count!r} is not a whole number from 1 to "
                            f"{MAX_FAULT_COUNT}")
    unknown = sorted(set(e) - {"at", "type", "node", "effect", "mode", "count"})
    if unknown:
        raise ScenarioError(f"{where}: unknown key(s) {', '.join(unknown)} for a fault")


def _check_evidence(raw: Any, where: str) -> None:
    """Evidence in a scenario: a list of {"source", "text", "at", "data"} objects."""
    if not isinstance(raw, list):
        raise ScenarioError(f"{where}: a list of evidence objects")
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ScenarioError(f"{where}[{i}]: an evidence object")
        for key in ("source", "text", "at"):
            if key in item and not isinstance(item[key], str):
                raise ScenarioError(f"{where}[{i}].{key}: {item[key]!r} must be a string")
        if "data" in item and not isinstance(item["data"], dict):
            raise ScenarioError(f"{where}[{i}].data: must be an object")


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file. Raises ScenarioError."""
    p = Path(path)
    try:
        data = jsonsafe.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise ScenarioError(f"{p}: not valid JSON: {exc}") from None
    return parse_scenario(data, source=str(p))


@dataclass
class _Fault:
    """An injected fault waiting for the next matching effect on its node."""

    effect: str  # an EffectKind, or "any"
    mode: str  # one of FAULT_MODES
    left: int

    def matches(self, kind: str) -> bool:
        return self.left > 0 and self.effect in (kind, "any")


class _Crash(Exception):
    """The simulated daemon dies between recording an effect and running it."""


@dataclass
class _Node:
    name: str
    pool: str
    features: tuple[str, ...]
    host: str
    states: set[str] = field(default_factory=lambda: {"IDLE"})
    reason: str = ""
    reason_time: datetime | None = None
    boot_time: datetime | None = None
    checked_at: datetime | None = None
    alerts: dict[str, Alert] = field(default_factory=dict)
    fail_next: bool = False
    moves: int = 0
    faults: list[_Fault] = field(default_factory=list)
    gate_fails: list[str] = field(default_factory=list)  # SPEC V4: the next gates' ends


@dataclass
class _Op:
    id: str
    key: str
    node: str
    action: Action
    ends: datetime
    fails: bool
    done: bool = False
    silent: bool = False  # never reports: stays running (an injected never_reports)


@dataclass
class Cycle:
    """One decide() call, for invariant checks (property tests)."""

    at: datetime
    view: ClusterView
    alerts: dict[str, list[Alert]]
    state: State  # before the plan
    plan: Plan


@dataclass
class Result:
    records: list[Decision]
    state: State
    violations: list[str]
    faults_fired: dict[str, int] = field(default_factory=dict)  # "effect:mode" -> count


class Simulation:
    """Runs a scenario with the real decide(). ``on_cycle`` sees every cycle."""

    def __init__(self, scenario: Scenario, on_cycle: Callable[[Cycle], None] | None = None):
        self.sc = scenario
        self.on_cycle = on_cycle
        self.nodes = {n: _Node(name=n, pool=p, features=f, host=n) for n, p, f in scenario.nodes}
        self.jobs: dict[int, tuple[str, datetime]] = {}
        self.ops: dict[str, _Op] = {}
        self.state = State()
        self.records: list[Decision] = []
        self.violations: list[str] = []
        self.cmd_seq = 0
        self.cat = scenario.catalog if scenario.catalog is not None else catalog_mod.load()
        # Issue 20: each node's check data is validated once per change of its Extra.
        self.decide = Decide(self.cat)
        self.faults_fired: dict[str, int] = {}
        # Issue 13: the view is built incrementally. A node is "live" while something
        # goes on with it (an alert, a reason, a job, an action, a state other than idle,
        # an open remediation): its health check re-runs and its NodeInfo is built again
        # every cycle. A quiet node keeps the NodeInfo (and the checked_at) of its last
        # live cycle; decide() reads checked_at only for a node under remediation (L5),
        # which is always live. A 10k-node day then costs what its busy nodes cost.
        self.live: set[str] = set(self.nodes)
        self._infos: dict[str, NodeInfo] = {}
        # SPEC V4: gate runs under way: run id -> (when it ends, how: pass/fail/interrupt)
        self.gates: dict[str, tuple[datetime, str]] = {}
        self.gate_seq = 0

    # -------------------------------------------------------------- the world
    def _command(self, at: datetime, kind: str, e: dict[str, Any]) -> None:
        self.cmd_seq += 1
        action = Action(e["action"]) if e.get("action") else None
        cmd = Command(id=f"c-{self.cmd_seq}", at=at, kind=kind,
                      by=str(e.get("by", "operator")), node=e.get("node"),
                      remediation=e.get("remediation"), action=action,
                      detector=e.get("detector"), request_id=str(e["id"]) if "id" in e else None,
                      reason=str(e.get("reason", "")), incident=e.get("incident"))
        self.state = self.state.model_copy(update={"inbox": self.state.inbox + (cmd,)})

    def _event(self, ev: Event) -> None:
        e, t = ev.raw, ev.at
        n = self.nodes.get(str(e.get("node", "")))
        if n is not None:
            self.live.add(n.name)
        if ev.type == "alert" and n is not None:
            fault = str(e["fault"])
            sev = Severity(e["severity"]) if "severity" in e else self.cat.get(fault).severity
            old = n.alerts.get(fault)
            evidence = tuple(Evidence.from_json(x) for x in e.get("evidence", [])
                             if isinstance(x, dict))
            n.alerts[fault] = Alert(
                node=n.name, fault=fault, severity=sev, summary=str(e.get("summary", "")),
                first_seen=old.first_seen if old else t, last_seen=t,
                evidence=evidence or (old.evidence if old else ()),
                detector=str(e.get("detector", "sim")))
        elif ev.type == "clear" and n is not None:
            n.alerts.pop(str(e["fault"]), None)
        elif ev.type == "job" and n is not None:
            self.jobs[int(e["id"])] = (n.name, _time(e["ends"], self.sc.start, "ends"))
        elif ev.type == "action_fails" and n is not None:
            n.fail_next = True
        elif ev.type == "gate_fails" and n is not None:
            n.gate_fails.append(str(e.get("mode", "fail")))
        elif ev.type == "fault" and n is not None:
            n.faults.append(_Fault(effect=str(e.get("effect", "any")), mode=str(e["mode"]),
                                   left=int(e.get("count", 1))))
        elif ev.type == "drain" and n is not None:
            n.states.add("DRAIN")
            n.reason, n.reason_time = str(e.get("reason", "drained by someone")), t
        elif ev.type == "resume" and n is not None:
            n.states.discard("DRAIN")
            n.reason = ""
        elif ev.type == "request" and n is not None and e.get("detector") and "by" not in e:
            # A detector's request travels in the reason string (SPEC Q1).
            try:
                n.reason = reasons.format_request(Action(e["action"]), str(e["detector"]),
                                                  str(e["id"]) if "id" in e else None)
            except ReasonError as exc:
                raise ScenarioError(f"events[{ev.seq}]: {exc}") from None
            n.states.add("DRAIN")
            n.reason_time = t
        else:
            self._command(t, ev.type, e)

    def _advance_world(self, t: datetime) -> None:
        for jid, (node, ends) in list(self.jobs.items()):
            if ends <= t:
                del self.jobs[jid]
                self.live.add(node)
        self.live.update(r.node for r in self.state.remediations if not r.phase.terminal)
        for op in self.ops.values():
            if op.done or op.silent or op.ends > t:
                continue
            op.done = True
            self.live.add(op.node)
            n = self.nodes[op.node]
            n.states.discard("DOWN")
            if not op.fails:
                n.alerts.clear()  # a completed action clears the node's alerts
                if op.action is not Action.RESET_GPU:  # SPEC E6: a GPU reset is no boot
                    n.boot_time = op.ends
                if op.action in (Action.MIGRATE,):
                    n.moves += 1
                    n.host = f"{n.name}~{n.moves}"  # new hardware: a new machine identity
        self._end_gates(t)
        for name in self.live:
            n = self.nodes[name]
            if "DOWN" not in n.states:
                n.checked_at = t  # the node's health check re-runs
                for f, a in n.alerts.items():
                    n.alerts[f] = Alert(node=a.node, fault=a.fault, severity=a.severity,
                                        summary=a.summary, first_seen=a.first_seen, last_seen=t,
                                        evidence=a.evidence, detector=a.detector)

    def view(self) -> ClusterView:
        busy = {node for node, _ in self.jobs.values()}
        for name in self.live:
            self._infos[name] = self._info(self.nodes[name], busy)
        # Quiet from now on: nothing left that changes this node's view by itself.
        self.live = {name for name in self.live if self.nodes[name].alerts or name in busy
                     or self.nodes[name].reason or self.nodes[name].states - {"IDLE"}}
        jobs = tuple(JobInfo(job_id=j, user="sim", state="RUNNING", nodes=(node,), end_time=end)
                     for j, (node, end) in sorted(self.jobs.items()))
        return ClusterView(nodes=tuple(self._infos[name] for name in self.nodes), jobs=jobs)

    def _info(self, n: _Node, busy: set[str]) -> NodeInfo:
        """The node as Slurm would show it now."""
        states = set(n.states)
        if n.name not in busy and "DOWN" not in states:
            states.add("IDLE")
        elif "DOWN" not in states:
            states.discard("IDLE")
            states.add("ALLOCATED")
        extra: dict[str, Any] = {"slurm_heal": {"v": 1, "host": n.host}}
        if n.name in self.sc.domains:
            extra["slurm_heal"]["domains"] = self.sc.domains[n.name]
        if n.checked_at is not None:
            extra["slurm_heal"]["checked_at"] = n.checked_at.isoformat()
        return NodeInfo(name=n.name, states=frozenset(states), reason=n.reason,
                        reason_time=n.reason_time, extra=extra, partitions=(n.pool,),
                        features=n.features, boot_time=n.boot_time)

    # -------------------------------------------------------------- applying a plan
    def _apply(self, plan: Plan, t: datetime) -> None:
        rems = {r.id: r for r in self.state.remediations}
        order = [r.id for r in self.state.remediations]
        for r in plan.updates:
            if r.id not in rems:
                order.append(r.id)
            rems[r.id] = r
        inbox = tuple(c for c in self.state.inbox if c.id not in plan.consumed)
        update: dict[str, Any] = {"inbox": inbox}
        if plan.breaker is not None:
            update["breaker"] = plan.breaker
        if plan.paused is not None:
            update["paused"] = plan.paused
        if plan.pause is not None:
            update["pause"] = plan.pause
        if plan.data is not None:
            update["data"] = plan.data
        self.records.extend(plan.records)
        crashed = False
        for eff in plan.effects:
            rem = rems.get(eff.remediation) if eff.remediation else None
            if rem is not None and eff.kind != "poll":
                same = next((a for a in rem.attempts if a.key == eff.key), None)
                if same is not None and not (eff.resend and same.outcome is None):
                    self.violations.append(f"{t.isoformat()}: key {eff.key} handed out twice")
                    continue
                if same is None:
                    # Record intent before acting (ARCHITECTURE "record intent, act, record
                    # outcome"); the daemon records every intent of a plan before it runs any.
                    rem = rem.model_copy(update={"attempts": rem.attempts + (Attempt(
                        key=eff.key, effect=eff.kind, action=eff.action, started=t,
                        step=eff.step or key_step(eff.key)),)})
                else:
                    # Sent again under the same key (its intent never got an outcome), as the
                    # store records it.
                    again = same.model_copy(update={"started": t, "resent": same.resent + 1})
                    rem = rem.model_copy(update={"attempts": tuple(
                        again if a.key == eff.key else a for a in rem.attempts)})
                rems[rem.id] = rem
            if crashed:
                continue  # the daemon died earlier in this plan: recorded, never run
            try:
                outcome, op_id, finished, detail = self._execute(eff, t)
            except _Crash:
                crashed = True
                continue
            if rem is None or outcome is None:
                continue  # no record to update, or left in flight (no answer)
            # As the daemon does: a poll's answer goes onto the act Attempt it names.
            key = eff.ref if eff.kind == "poll" else eff.key
            rems[rem.id] = rem.model_copy(update={"attempts": tuple(
                a.model_copy(update={"outcome": outcome, "operation": op_id or a.operation,
                                     "finished": finished, "detail": detail or a.detail})
                if a.key == key else a for a in rem.attempts)})
        update["remediations"] = tuple(rems[i] for i in order)
        self.state = self.state.model_copy(update=update)

    def _execute(self, eff: Effect, t: datetime) -> tuple[Any, str | None, datetime | None, str]:
        """Run one effect in the simulated world, with the node's next matching injected
        fault (if any). Returns (outcome, operation id, finished, detail); outcome None
        means no answer came back: the attempt stays in flight, as in the daemon."""
        n = self.nodes[eff.node]
        fault = next((f for f in n.faults if f.matches(eff.kind)), None)
        mode = None
        if fault is not None:
            fault.left -= 1
            mode = fault.mode
            name = f"{eff.kind}:{mode}"
            self.faults_fired[name] = self.faults_fired.get(name, 0) + 1
        what = f"{eff.kind} of {eff.node}"
        if mode == "crash":
            raise _Crash(what)
        provider = eff.kind in ("act", "poll")
        if mode == "fail":
            if eff.kind == "poll":
                return None, None, None, ""  # an error answer: the daemon asks again later
            return "failed", None, t, f"{what} failed (injected fault)"
        if mode == "timeout":
            # Nothing was done. The daemon cannot know that: a provider call stays in
            # flight, a Slurm command that was killed at its timeout counts as failed.
            if provider:
                return None, None, None, ""
            return "failed", None, t, f"{what} timed out (injected fault)"
        outcome, op_id, finished = self._world(eff, t, silent=mode == "never_reports")
        if mode == "lost":
            # Carried out, but the answer never came back.
            if provider:
                return None, None, None, ""
            return "failed", None, t, f"{what} timed out after it was done (injected fault)"
        return outcome, op_id, finished, ""

    def _world(self, eff: Effect, t: datetime, silent: bool = False
               ) -> tuple[Any, str | None, datetime | None]:
        n = self.nodes[eff.node]
        self.live.add(n.name)
        if eff.kind == "cordon":
            n.states.add("DRAIN")
            n.reason, n.reason_time = eff.reason, t
        elif eff.kind in ("resume", "release"):
            if reasons.is_ours(n.reason):  # house style 2: never a reason not ours
                n.states.discard("DRAIN")
                n.reason = ""
        elif eff.kind in ("requeue_jobs", "cancel_jobs"):
            for jid in [j for j, (node, _) in self.jobs.items() if node == eff.node]:
                del self.jobs[jid]
        elif eff.kind == "act":
            op = self._submit(eff.key, eff.node, eff.action, t, silent)
            return "running", op.id, None
        elif eff.kind == "gate":
            self._gate(eff, t)
        elif eff.kind == "poll":
            found = self.ops.get(eff.ref)
            if found is None:
                # As the daemon does: the provider never saw the key (the submit never
                # arrived), so it is sent again with the SAME key; it cannot run twice.
                found = self._submit(eff.ref, eff.node, eff.action, t, silent)
            if not found.done:
                return "running", found.id, None
            return ("failed" if found.fails else "ok"), found.id, t
        return "ok", None, t

    def _gate(self, eff: Effect, t: datetime) -> None:
        """SPEC V4: the gate's run, as the validation flow would record it: running
        until ``sim.gate_duration`` has passed, then as the node's next ``gate_fails``
        says (a pass when none)."""
        rid = gate_run_id(eff.node, eff.key)
        if any(v.id == rid for v in self.state.validations):
            return  # the same key queues the same run (S6)
        n = self.nodes[eff.node]
        how = n.gate_fails.pop(0) if n.gate_fails else "pass"
        self.gate_seq += 1
        run = ValidationRun(id=rid, node=eff.node, origin="gate", remediation=eff.remediation,
                            created=t, updated=t, phase="running", job_id=self.gate_seq,
                            reason=eff.why)
        self.gates[rid] = (t + self.sc.gate_duration, how)
        self.state = self.state.model_copy(update={
            "validations": self.state.validations + (run,)})

    def _end_gates(self, t: datetime) -> None:
        ended = {rid: how for rid, (ends, how) in self.gates.items() if ends <= t}
        if not ended:
            return
        words = {"pass": ("passed", "pass", "all steps passed (simulated)"),
                 "fail": ("failed", "fail", "a step failed (simulated gate_fails)"),
                 "interrupt": ("interrupted", "error", "job ended CANCELLED (simulated)")}
        runs = []
        for v in self.state.validations:
            if v.id in ended:
                phase, outcome, summary = words[ended[v.id]]
                v = v.model_copy(update={"phase": phase, "outcome": outcome,
                                         "summary": summary, "updated": t})
                self.live.add(v.node)
            runs.append(v)
        for rid in ended:
            del self.gates[rid]
        self.state = self.state.model_copy(update={"validations": tuple(runs)})

    def _submit(self, key: str, node: str, action: Action, t: datetime, silent: bool) -> _Op:
        """The provider's create: the same key always names the same operation."""
        if key in self.ops:
            return self.ops[key]
        n = self.nodes[node]
        op = _Op(id=f"op-{len(self.ops) + 1}", key=key, node=node, action=action,
                 ends=t + self.sc.durations[action], fails=n.fail_next, silent=silent)
        n.fail_next = False
        self.ops[key] = op
        if action is not Action.RESET_GPU:  # SPEC E6: the reset is a job; the node stays up
            n.states.add("DOWN")
        return op

    # -------------------------------------------------------------- the loop
    def run(self) -> Result:
        """Run the scenario to its end; return the decision records in time order."""
        sc = self.sc
        pending = list(sc.events)
        t = sc.start
        for _ in range(MAX_CYCLES):
            while pending and pending[0].at <= t:
                self._event(pending.pop(0))
            self._advance_world(t)
            view = self.view()
            alerts = {name: list(self.nodes[name].alerts.values()) for name in self.live
                      if self.nodes[name].alerts}
            before = self.state
            plan = self.decide(view, before, t, sc.policy, alerts)
            if self.on_cycle is not None:
                self.on_cycle(Cycle(at=t, view=view, alerts=alerts, state=before, plan=plan))
            self._apply(plan, t)
            cands = [e.at for e in pending[:1]]
            cands += [op.ends for op in self.ops.values() if not op.done and not op.silent]
            cands += [ends for _, ends in self.jobs.values()]
            cands += [ends for ends, _ in self.gates.values()]
            if plan.next_wake is not None:
                cands.append(plan.next_wake)
            if plan.effects or plan.updates or plan.consumed:
                cands.append(t + sc.interval)  # the daemon's next cycle sees the effects
            later = [c for c in cands if c > t]
            if not later or min(later) > sc.until:
                break
            t = min(later)
        else:  # pragma: no cover - a bug in the engine, not in a scenario
            self.violations.append(f"more than {MAX_CYCLES} cycles")
        return Result(records=self.records, state=self.state, violations=self.violations,
                      faults_fired=dict(self.faults_fired))


def record_json(d: Decision) -> dict[str, Any]:
    """One output record: {"at", "node", "remediation", "action", "phase", "rule", "why"}."""
    return {"at": d.at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z"),
            "node": d.node, "remediation": d.remediation, "action": d.action.value,
            "phase": d.phase, "rule": d.rule, "why": d.why}


def simulate(scenario: Scenario) -> Result:
    """Run ``scenario`` and return its result (records, final state, violations)."""
    return Simulation(scenario).run()


def matches(record: dict[str, Any], want: dict[str, Any]) -> bool:
    """Whether an output record has every field of ``want`` (``why`` as a substring)."""
    for k, v in want.items():
        if k == "why":
            if str(v) not in str(record.get("why", "")):
                return False
        elif record.get(k) != v:
            return False
    return True


def check_expectations(scenario: Scenario, records: list[dict[str, Any]]) -> list[str]:
    """Problems with ``records`` against the scenario's ``expect`` (in order) and
    ``expect_not`` lists; empty when all hold."""
    problems: list[str] = []
    i = 0
    for want in scenario.expect:
        while i < len(records) and not matches(records[i], want):
            i += 1
        if i == len(records):
            problems.append(f"expected, in order, a record like {want}")
            break
        i += 1
    for bad in scenario.expect_not:
        hit = next((r for r in records if matches(r, bad)), None)
        if hit is not None:
            problems.append(f"unexpected record {hit} (matches {bad})")
    return problems


def remediation_of(state: State, rid: str) -> Remediation | None:
    """The final record of one remediation (for tests and --json consumers)."""
    return state.get(rid)
