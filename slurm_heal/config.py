"""The operator's policy file (TOML) as a frozen, validated model (SPEC P, Q, E, S).

One TOML file holds the policy knobs (this module) plus sections owned by other parts of
slurm-heal, typed by their models in `slurm_heal.sections` and validated here when the
policy is loaded: ``[controller]``, ``[provider]`` (an envelope: the provider's own model
reads its table), ``[api]`` (`slurm-heal serve`), ``[notify]``, ``[metrics]`` and
``[validation]``. Every knob, its default and why is documented in ``docs/policy.md``.

Errors never escape as pydantic tracebacks: `load_policy` / `policy_from_dict` raise
`ConfigError` naming the file, the dotted key and why, e.g.
``policy.toml: waiting.max_wait: 30h is more than the 24h allowed (SPEC P3)``.
"""

from __future__ import annotations

import fnmatch
import functools
import math
import re
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from slurm_heal import jsonsafe
from slurm_heal.durations import (  # the one duration syntax; re-exported for its importers
    format_duration as format_duration,
)
from slurm_heal.durations import parse_duration as parse_duration
from slurm_heal.durations import parse_duration_knob
from slurm_heal.errors import ConfigError, not_toml
from slurm_heal.providerconf import check_table
from slurm_heal.sections import (  # the typed sections; Duration, Seconds and read_section
    ApiSettings,  # are re-exported for their importers
    ControllerSettings,
    Gate,
    MetricsSettings,
    NotifySettings,
    ProviderSection,
    Section,  # the one base of every section: frozen, no unknown keys (issue 33)
    Validation,
    _problem,
    read_sections,
)
from slurm_heal.sections import Duration as Duration
from slurm_heal.sections import Seconds as Seconds
from slurm_heal.sections import read_section as read_section
from slurm_heal.sources.settings import Sources
from slurm_heal.types import Action, Severity

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

MAX_WAIT_LIMIT = timedelta(hours=24)  # SPEC P3: more is rejected
Mode = Literal["auto", "manual", "deny"]


class ApprovalRule(Section):
    """One approval rule (SPEC P2). Unset matchers match anything."""

    fault: str | None = None  # glob, e.g. "gpu.xid.119" or "gpu.xid.*"
    action: Action | None = None
    nodes: str | None = None  # Slurm host list, e.g. "gpu[01-08]"
    pools: tuple[str, ...] | None = None
    mode: Mode

    @field_validator("nodes")
    @classmethod
    def _nodeset(cls, value: str | None) -> str | None:
        if value is not None:
            node_names(value)  # raises ValueError on a malformed host list
        return value

    @field_validator("pools", mode="before")
    @classmethod
    def _pools(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    def matches(self, fault: str, action: Action, node: str, pool: str | None) -> bool:
        """Whether this rule applies to (fault, action, node, pool)."""
        if self.fault is not None and not fnmatch.fnmatchcase(fault, self.fault):
            return False
        if self.action is not None and self.action is not action:
            return False
        if self.nodes is not None and node not in node_names(self.nodes):
            return False
        return not (self.pools is not None and pool not in self.pools)

    def specificity(self) -> tuple[int, int, int, int]:
        """Sort key: more matchers first, then node > pool, exact fault > glob, action."""
        exact_fault = self.fault is not None and not any(c in self.fault for c in "*?[")
        given = sum(x is not None for x in (self.fault, self.action, self.nodes, self.pools))
        scope = 2 if self.nodes is not None else (1 if self.pools is not None else 0)
        fault_rank = 2 if exact_fault else (1 if self.fault is not None else 0)
        return (given, scope, fault_rank, int(self.action is not None))


# A host list in the policy names at most this many nodes: "gpu[1-99999999]" is a typo,
# and expanding it would take gigabytes.
MAX_HOSTLIST = 100_000
_BRACKETS = re.compile(r"\[([^\[\]]*)\]")
_RANGE = re.compile(r"^\s*(\d{1,12})(?:\s*-\s*(\d{1,12}))?(?:/(\d{1,12}))?\s*$")


def _hostlist_size(hostlist: str) -> int:
    """How many names ``hostlist`` expands to, counted without expanding it (an upper
    bound: overlaps are counted twice). ValueError when a range is not one."""
    total = 0
    for pattern in re.split(r",(?![^\[]*\])", hostlist):
        size = 1
        for group in _BRACKETS.findall(pattern):
            count = 0
            for item in group.split(","):
                m = _RANGE.match(item)
                if m is None:
                    raise ValueError(f"{item!r} is not a number or a range")
                lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
                count += max(0, hi - lo) // int(m.group(3) or 1) + 1
            size *= count
            if size > MAX_HOSTLIST:
                return size
        total += size
    return total


@functools.lru_cache(maxsize=256)
def node_names(hostlist: str) -> frozenset[str]:
    """Expand a Slurm host list ("gpu[01-04],cpu1") with ClusterShell's NodeSet, once per
    distinct list (cached: approval rules match it on every decision). ValueError for a
    malformed list and for one naming more than MAX_HOSTLIST nodes."""
    try:
        size = _hostlist_size(hostlist)
    except ValueError as exc:
        raise ValueError(f"{hostlist[:80]!r} is not a Slurm host list: {exc}") from None
    if size > MAX_HOSTLIST:
        raise ValueError(f"{hostlist[:80]!r} names {size:,} nodes, more than the "
                         f"{MAX_HOSTLIST:,} a host list here may name")
    from ClusterShell.NodeSet import NodeSet  # imported lazily: only approvals need it

    try:
        return frozenset(str(n) for n in NodeSet(hostlist))
    except Exception as exc:  # ClusterShell raises its own parse errors
        raise ValueError(f"{hostlist[:80]!r} is not a Slurm host list: {exc}") from None


class Approvals(Section):
    """SPEC P2: who approves a proposed remediation."""

    default: Mode = "manual"
    rules: tuple[ApprovalRule, ...] = ()

    def decide(self, fault: str, action: Action, node: str, pool: str | None) -> tuple[Mode, str]:
        """The mode for (fault, action, node, pool) and the rule id that decided it: the
        most specific matching rule, a tie to the more cautious mode, then file order;
        none: the default (``P2:default``)."""
        matching = [(i, r) for i, r in enumerate(self.rules)
                    if r.matches(fault, action, node, pool)]
        if not matching:
            return self.default, "P2:default"
        strict = {"deny": 2, "manual": 1, "auto": 0}
        i, rule = sorted(matching, key=lambda m: (
            tuple(-x for x in m[1].specificity()), -strict[m[1].mode], m[0]))[0]
        return rule.mode, f"P2:approvals[{i}]"


class Waiting(Section):
    """SPEC P3: waiting for running jobs before acting."""

    max_wait: timedelta | None = timedelta(hours=2)  # None = "never" interrupt jobs
    at_limit: Literal["requeue", "cancel"] = "requeue"
    signal: str | None = None  # e.g. "USR1": sent before the limit so jobs can checkpoint
    signal_lead: Duration = timedelta(minutes=10)
    # Issue 8: eviction is bounded. At the limit jobs are requeued (or cancelled) at most
    # evict_tries times, evict_every apart; with cancel_when_stuck a requeue that does not
    # empty the node is followed by as many cancels. Jobs still there after that: the
    # remediation fails and a person is told (the node stays cordoned).
    evict_tries: int = Field(default=3, ge=1, le=100)
    evict_every: Duration = timedelta(minutes=5)
    cancel_when_stuck: bool = False

    @field_validator("max_wait", mode="before")
    @classmethod
    def _max_wait(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() == "never":
            return None
        if value is None:
            return None
        wait = parse_duration_knob(value)
        if wait > MAX_WAIT_LIMIT:
            raise ValueError(f"{value} is more than the 24h allowed (SPEC P3); "
                             "use \"never\" to never interrupt running jobs")
        return wait



class Safety(Section):
    """SPEC S1-S5 (plus the return timeout of L5)."""

    # S1: keys are a severity (info/warning/critical) or a fault glob; a fault glob wins.
    persistence: dict[str, timedelta] = Field(default_factory=lambda: {
        "critical": timedelta(0), "warning": timedelta(minutes=10), "info": timedelta(minutes=30)})
    cooldown: Duration = timedelta(minutes=30)  # S2
    # S3: None = max(concurrency_min, floor(concurrency_percent % of the cluster's nodes))
    concurrency: int | None = Field(default=None, ge=1)
    concurrency_percent: float = Field(default=5.0, gt=0, le=100)
    concurrency_min: int = Field(default=1, ge=1)
    one_per_pool: bool = True  # S4
    breaker_threshold: int = Field(default=5, ge=1)  # S5: N automatic starts in the window
    breaker_window: Duration = timedelta(hours=1)
    return_timeout: Duration = timedelta(hours=1)  # L5: node must come back within this
    # L5: a provider operation still "running" this long after the act is given up on:
    # its outcome is unknown, so the node goes to a person (never retried, never escalated).
    act_timeout: Duration = timedelta(hours=2)
    # O6: after this many failed tries in a row to reach the provider for an act (or its
    # poll), a person is notified once (the act stays in flight until act_timeout).
    provider_errors_notify: int = Field(default=3, ge=1)
    # L1 (issue 8): a step recorded before it ran that has no outcome this long (the
    # controller stopped between recording and acting) is resolved: sent again under the
    # same key where that is safe (at most twice), else failed and handed to a person.
    step_timeout: Duration = timedelta(minutes=10)
    # L5: "required": a node returns only after its slurm-heal node check published
    # (Extra slurm_heal.checked_at) later than the action's end; "if_present": a node
    # with no slurm-heal check data counts as passed (sites that run no slurm-heal check).
    health_check: Literal["required", "if_present"] = "required"

    @field_validator("persistence", mode="before")
    @classmethod
    def _persistence(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError("must be a table of severity or fault glob = duration")
        out = {"critical": timedelta(0), "warning": timedelta(minutes=10),
               "info": timedelta(minutes=30)}
        for key, raw in value.items():
            out[str(key)] = parse_duration_knob(raw)
        return out


    def persistence_for(self, fault: str, severity: Severity) -> timedelta:
        """S1: how long an alert must persist: exact fault, then longest glob, then severity."""
        if fault in self.persistence:
            return self.persistence[fault]
        globs = [k for k in self.persistence
                 if k not in ("critical", "warning", "info") and fnmatch.fnmatchcase(fault, k)]
        if globs:
            return self.persistence[max(globs, key=len)]
        return self.persistence.get(severity.value, timedelta(0))

    def concurrency_limit(self, cluster_size: int) -> int:
        """S3: the cap on remediations in disruptive phases for a cluster of this size."""
        if self.concurrency is not None:
            return self.concurrency
        return max(self.concurrency_min, math.floor(cluster_size * self.concurrency_percent / 100))


class Lemon(Section):
    """SPEC E7: a machine past ``remediations`` acted within ``window`` gets no more
    automatic remediation; a person gets a removal recommendation with its ledger."""

    enabled: bool = True
    remediations: int = Field(default=5, ge=1)
    window: Duration = timedelta(days=7)


class Escalation(Section):
    """SPEC E1-E5, E7."""

    repeats: int = Field(default=2, ge=1)  # E1: after this many, the next step of the ladder
    window: Duration = timedelta(days=7)  # E2
    migrate_evidence_window: Duration = timedelta(days=10)  # E3
    ladder: tuple[Action, ...] = (Action.REBOOT, Action.REBUILD, Action.MIGRATE)
    power_cycle: bool = False  # E4: preview; off unless enabled
    # E6: preview; off unless enabled. Faults whose NVIDIA resolution is RESET_GPU start
    # the ladder with reset_gpu (a Slurm job on the drained node), before the reboot.
    gpu_reset: bool = False
    # E6: how long the reset tool may take inside the job before it is killed and the
    # step fails; the job's Slurm time limit is this plus the node check, rounded up.
    gpu_reset_timeout: Duration = timedelta(minutes=2)
    # E6: the node check config the reset job runs the node check with after the reset
    # (None: the node check's default, /etc/slurm-heal/check.toml).
    gpu_reset_check_config: str | None = None
    migrate_spares: int | None = Field(default=None, ge=0)  # E5: None = the provider decides
    lemon: Lemon = Lemon()  # E7


    @field_validator("ladder")
    @classmethod
    def _ladder(cls, value: tuple[Action, ...]) -> tuple[Action, ...]:
        if not value:
            raise ValueError("the ladder needs at least one action")
        if len(set(value)) != len(value):
            raise ValueError("an action appears twice in the ladder")
        bad = [a.value for a in value if a in (Action.REMOVE, Action.NONE)]
        if bad:
            raise ValueError(f"{', '.join(bad)} cannot be on the ladder (remove is only "
                             "ever done by a person, SPEC Q2)")
        return value

    @field_validator("gpu_reset_timeout")
    @classmethod
    def _gpu_reset_timeout(cls, value: timedelta) -> timedelta:
        if not timedelta(seconds=1) <= value <= timedelta(hours=1):
            raise ValueError("gpu_reset_timeout must be between 1s and 1h (the reset job "
                             "holds a drained node while it runs)")
        return value

    @property
    def steps(self) -> tuple[Action, ...]:
        """SPEC E1/E6: the ladder as it runs: reset_gpu first where enabled (when the
        ladder does not place it itself), then the configured ladder."""
        if self.gpu_reset and Action.RESET_GPU not in self.ladder:
            return (Action.RESET_GPU, *self.ladder)
        return self.ladder


class Requests(Section):
    """SPEC Q2-Q4: requests from people and detectors."""

    # P1/Q4: by default a request needs an active alert on the node (evidence). Set these
    # to accept the request itself as evidence enough.
    operator_is_evidence: bool = False
    detector_is_evidence: bool = False
    # O6: the longest a request waits for that evidence; then it is withdrawn (and our
    # cordon, if any, released). Never forever: a request holds a drained node.
    evidence_wait: Duration = timedelta(hours=1)


class Capacity(Section):
    """SPEC Q4: keep enough of a pool in service."""

    # A remediation may not start when fewer than this share of the pool's other nodes
    # would remain in service (floor; a one-node pool is never held by it).
    min_available_percent: float = Field(default=50.0, ge=0, le=100)


class Pools(Section):
    """How nodes are grouped into pools (S4)."""

    by: Literal["partition", "feature"] = "partition"
    feature_prefix: str = "pool="  # by feature: the first feature starting with this


# SPEC S7: the related faults that, seen together under one component, are one incident.
# Each group is a list of fault globs (a fault class); a group named in ``each_fault``
# correlates each of its faults only with itself (the same Xid code on several nodes, not
# any two Xids). A fault may be in several groups (an Xid 79 is off-the-bus power, and an
# Xid of a driver cohort); each group is counted over the domains that can cause it.
# NVIDIA's NVLink-domain Xids: 74 (NVLink error), 144-150 (NVLink 5), 155 (NVLink
# software-defined error): on GB200/GB300 the NVLink domain, not the node, is suspect.
NVLINK_XIDS = tuple(f"gpu.xid.{n}" for n in (74, 144, 145, 146, 147, 148, 149, 150, 155))
DEFAULT_RELATED: dict[str, tuple[str, ...]] = {
    "ib": ("ib.link_down", "ib.link_degraded"),
    "unreachable": ("host.unreachable",),
    "nvlink": ("gpu.nvlink.down", "gpu.fabric.*", "nvswitch.sxid.fatal", "fabric.*",
               *NVLINK_XIDS),
    "power": ("gpu.off_bus", "gpu.xid.79"),
    "xid": ("gpu.xid.*",),
}


class IncidentDomain(Section):
    """SPEC S7 (issue 37): one kind of cause domain, what it is made of and which fault
    classes (groups of ``incidents.related``) it can cause."""

    # The groups of incidents.related this kind of domain can cause ([] turns it off).
    faults: tuple[str, ...] = ()
    # The component kinds that are such a domain: Slurm's ("switch" from topology/tree,
    # "block" from topology/block), a feature prefix's name ("leaf", "rack", "block"), or
    # what the node check publishes ("nvlink": the GPUs' ClusterUUID + CliqueId;
    # "cohort": the driver version, VBIOS and image).
    components: tuple[str, ...] = ()
    # Whether a lone fault of these classes waits incidents.settle for others (a fleet-wide
    # cohort never delays a GPU-local fault: its incident forms as the fault repeats).
    settle: bool = True
    # Whether the blast radius (topology.blast_radius) counts per domain of this kind.
    blast_radius: bool = True


# The default cause domains (docs/policy.md's [incidents] table says them in words).
DEFAULT_DOMAINS: dict[str, dict[str, Any]] = {
    "leaf": {"faults": ("ib", "unreachable"), "components": ("switch", "leaf")},
    "nvlink": {"faults": ("nvlink",), "components": ("block", "nvlink")},
    "rack": {"faults": ("power", "unreachable"), "components": ("rack",)},
    "cohort": {"faults": ("xid",), "components": ("cohort",), "settle": False,
               "blast_radius": False},
}


def _default_domains() -> dict[str, IncidentDomain]:
    return {k: IncidentDomain(**v) for k, v in DEFAULT_DOMAINS.items()}


class TopologyConf(Section):
    """SPEC S7: where the components that nodes share come from (docs/policy.md)."""

    # auto: Slurm's topology (tree switches, 23.11+ blocks) when it has one, else node
    # features with ``feature_prefixes``, else ``file``; or one of them alone; none: off.
    source: Literal["auto", "slurm", "features", "file", "none"] = "auto"
    feature_prefixes: tuple[str, ...] = ("rack=", "leaf=", "block=")
    file: str | None = None  # topology.conf syntax (SwitchName=... Nodes=..., BlockName=...)
    refresh: Duration = timedelta(minutes=10)  # the controller reads Slurm's/the file again
    # At most this many remediations in disruptive phases at once under one switch, block
    # or rack (beside S3 per cluster and S4 per pool).
    blast_radius: int = Field(default=1, ge=1)

    @field_validator("feature_prefixes")
    @classmethod
    def _prefixes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [p for p in value if not p.rstrip("=:")]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a feature prefix (e.g. \"rack=\")")
        return value


@dataclass(frozen=True, slots=True)
class FaultGroup:
    """SPEC S7: what related faults correlate by (issue 33: a value, never a string split
    back): the group of ``incidents.related``, and for a group of ``each_fault`` the fault
    itself. ``key`` is how an incident stores it (`models.Incident.group`, compared whole,
    hashed into its id), ``words`` how its sentences name it."""

    name: str
    fault: str = ""  # only for a group of each_fault

    @property
    def key(self) -> str:
        return f"{self.name}:{self.fault}" if self.fault else self.name

    @property
    def words(self) -> str:
        return self.fault or self.name


class Incidents(Section):
    """SPEC S7: one incident per cause, on the domain that can cause it."""

    enabled: bool = True
    related: dict[str, tuple[str, ...]] = Field(default_factory=lambda: dict(DEFAULT_RELATED))
    each_fault: tuple[str, ...] = ("xid",)
    # The cause domains (issue 37): a site's table for one kind replaces that kind's
    # defaults; the kinds it does not name keep theirs.
    domains: dict[str, IncidentDomain] = Field(default_factory=_default_domains)
    min_nodes: int = Field(default=3, ge=2)  # K nodes of one component ...
    min_percent: float = Field(default=50.0, gt=0, le=100)  # ... or X % of them (>= 2 nodes)
    window: Duration = timedelta(minutes=10)  # their alerts first seen within this
    # A related fault's remediation waits this long after its alert was first seen, so that
    # a domain's failure can show on its other nodes before one of them is cordoned; only
    # where a domain that can cause the fault could still form an incident (issue 37).
    settle: Duration = timedelta(minutes=5)
    # SPEC O6: an incident open this long is handed to a person with a notice, and its
    # held remediations with it (a wait with a bound).
    max_age: Duration = timedelta(hours=24)

    @field_validator("domains", mode="before")
    @classmethod
    def _with_defaults(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {**DEFAULT_DOMAINS, **value}
        return value

    @model_validator(mode="after")
    def _groups(self) -> Incidents:
        # (The default ["xid"] names nothing once a site's own ``related`` has no xid.)
        unknown = [g for g in self.each_fault if g not in self.related]
        if unknown and "each_fault" in self.model_fields_set:
            raise ValueError(f"each_fault names {unknown[0]!r}, which is not a group of "
                             "incidents.related")
        empty = [g for g, globs in self.related.items() if not globs]
        if empty:
            raise ValueError(f"related.{empty[0]} lists no fault")
        for kind, dom in self.domains.items():
            # A default domain may name a group a site's own ``related`` does not have
            # (it names nothing then); a domain the site wrote must name its groups.
            if kind in DEFAULT_DOMAINS and dom == IncidentDomain(**DEFAULT_DOMAINS[kind]):
                continue
            bad = [g for g in dom.faults if g not in self.related]
            if bad:
                raise ValueError(f"domains.{kind}.faults names {bad[0]!r}, which is not a "
                                 "group of incidents.related")
        return self

    def group_of(self, fault: str) -> FaultGroup | None:
        """The first group of ``fault`` (`groups_of`); None: related to nothing."""
        groups = self.groups_of(fault)
        return groups[0] if groups else None

    def key_of(self, fault: str) -> str | None:
        """The stored key of ``fault``'s first group (`FaultGroup.key`), None when
        unrelated."""
        group = self.group_of(fault)
        return group.key if group is not None else None

    def keys_of(self, fault: str) -> tuple[str, ...]:
        """The stored keys of every group of ``fault`` (`FaultGroup.key`)."""
        return tuple(g.key for g in self.groups_of(fault))

    def groups_of(self, fault: str) -> tuple[FaultGroup, ...]:
        """What ``fault`` correlates by: each group it is in, with the fault itself for a
        group of ``each_fault`` (issue 33: a value, never a string split back); () when
        the fault is related to nothing."""
        return _groups_of(self.related_key, fault)

    @functools.cached_property
    def related_key(self) -> tuple[tuple[str, tuple[str, ...], bool], ...]:
        return tuple((name, globs, name in self.each_fault)
                     for name, globs in self.related.items())

    def domains_of(self, group: FaultGroup) -> tuple[str, ...]:
        """The domain kinds that can cause a group's faults."""
        return tuple(k for k, d in self.domains.items() if group.name in d.faults)

    def domain_of_component(self, kind: str) -> str | None:
        """The domain kind a component kind is (a "switch" is a network leaf)."""
        return next((k for k, d in self.domains.items() if kind in d.components), None)


@functools.lru_cache(maxsize=4096)
def _groups_of(related: tuple[tuple[str, tuple[str, ...], bool], ...],
               fault: str) -> tuple[FaultGroup, ...]:
    return tuple(FaultGroup(name, fault if each else "") for name, globs, each in related
                 if any(fnmatch.fnmatchcase(fault, g) for g in globs))


# SPEC E6: the GPU reset's reservation is this prefix + the node (fixed, slurm_heal.gpureset).
RESET_RESERVATION_PREFIX = "slurm-heal-reset-"


class Policy(Section):
    """The whole configuration file: policy knobs + pass-through sections."""

    mode: Literal["normal", "recommend_only"] = "normal"
    approvals: Approvals = Approvals()
    waiting: Waiting = Waiting()
    safety: Safety = Safety()
    escalation: Escalation = Escalation()
    requests: Requests = Requests()
    capacity: Capacity = Capacity()
    pools: Pools = Pools()
    gate: Gate = Gate()  # SPEC V4: the post-repair gate (slurm_heal.sections)
    topology: TopologyConf = TopologyConf()  # SPEC S7
    incidents: Incidents = Incidents()  # SPEC S7
    # The sections other parts own, typed by their models (slurm_heal.sections, issue 21):
    controller: ControllerSettings = ControllerSettings()  # read by the controller
    # The envelope: the provider's own model validates its table when it is built.
    provider: ProviderSection = ProviderSection()
    api: ApiSettings | None = None  # `serve` (api/settings.py); None: no [api] section
    notify: NotifySettings = NotifySettings()  # slurm_heal.notify
    metrics: MetricsSettings = MetricsSettings()  # slurm_heal.metrics
    validation: Validation = Validation()  # slurm_heal.validation.suite
    sources: Sources = Sources()  # SPEC D13: the site's own monitors (slurm_heal.sources)
    source: str = Field(default="<defaults>", exclude=True)

    @model_validator(mode="after")
    def _power_cycle_on_ladder(self) -> Policy:
        if Action.POWER_CYCLE in self.escalation.ladder and not self.escalation.power_cycle:
            raise ValueError("escalation.ladder names power_cycle but escalation.power_cycle "
                             "(preview, SPEC E4) is off")
        if Action.RESET_GPU in self.escalation.ladder and not self.escalation.gpu_reset:
            raise ValueError("escalation.ladder names reset_gpu but escalation.gpu_reset "
                             "(preview, SPEC E6) is off")
        return self

    @model_validator(mode="after")
    def _reservations_apart(self) -> Policy:
        """SPEC E6, V1, V4: the reset, the validation and the gate each hold a node in a
        reservation named <prefix><node>; with one prefix, one would take the other's
        reservation for its own (a reset after a gate on the same node)."""
        named = [("the GPU reset (SPEC E6, fixed)", RESET_RESERVATION_PREFIX),
                 ("gate.reservation_prefix", self.gate.reservation_prefix)]
        named.append(("validation.reservation_prefix", self.validation.reservation_prefix))
        for i, (key, value) in enumerate(named):
            for other, taken in named[:i]:
                if value == taken:
                    raise ValueError(f"{key} {value!r} is also {other}'s reservation "
                                     "prefix: their reservations of one node would have "
                                     "one name; choose another prefix")
        return self

    def pool_of(self, partitions: tuple[str, ...], features: tuple[str, ...]) -> str:
        """The pool a node belongs to (S4): first partition, or its pool feature."""
        if self.pools.by == "feature":
            for f in features:
                if f.startswith(self.pools.feature_prefix):
                    return f[len(self.pools.feature_prefix):]
            return "default"
        return partitions[0] if partitions else "default"


def policy_from_dict(data: dict[str, Any], source: str = "<dict>") -> Policy:
    """Validate a policy document (parsed TOML or scenario JSON). Raises ConfigError."""
    if not isinstance(data, dict):
        raise ConfigError("the policy must be a table/object", file=source)
    if jsonsafe.depth_exceeds(data):
        raise ConfigError(f"nested more than {jsonsafe.MAX_DEPTH} levels deep", file=source)
    sections = read_sections(data, file=source)  # each in its reader's words (issue 21)
    if isinstance(data.get("provider"), dict):
        # Issue 33: the provider's table as `policy check`'s construction reads it (its
        # type, its own model, what spans its keys), in its words; the machine aside.
        check_table(data["provider"], file=source)
    try:
        return Policy.model_validate({**data, **sections, "source": source})
    except ValidationError as exc:
        key, msg = _problem(exc, None)
        raise ConfigError(msg, file=source, key=key) from None


def load_policy(path: str | Path) -> Policy:
    """Read and validate the policy TOML file at ``path``. Raises ConfigError."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=str(p)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", file=str(p)) from None
    try:
        data = tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or an int of over 4,300 digits (issue 34)
        raise not_toml(exc, text, str(p)) from None
    except RecursionError:
        raise ConfigError(f"not valid TOML: nested too deeply (more than "
                          f"{jsonsafe.MAX_DEPTH} levels)", file=str(p)) from None
    return policy_from_dict(data, source=str(p))
