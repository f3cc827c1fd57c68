"""Facts the rules share (pure functions of a record, a node or the catalog): the
constants of the life cycle, a machine's identity, whether a remediation is automatic,
when it acted and ended."""

from __future__ import annotations

from datetime import datetime, timedelta

from slurm_heal import extra as extra_mod
from slurm_heal import reasons
from slurm_heal.catalog import Catalog
from slurm_heal.errors import CatalogError
from slurm_heal.models import Attempt, Phase, Remediation
from slurm_heal.types import Action, Alert, NodeInfo, Severity

# How soon to look again while an action runs (the daemon's own interval may be shorter).
POLL_EVERY = timedelta(minutes=1)
# Slurm's BootTime (now - uptime, whole seconds) may stand up to a second after the real
# boot; a check slurmd ran as it started can carry an earlier time (SPEC L5).
BOOT_TIME_SLACK = timedelta(seconds=2)
# SPEC L1: how many times a failed cordon is sent (one per cycle) before a person looks.
CORDON_TRIES = 3
# L1 (issue 8): how many times a step with no outcome after safety.step_timeout is sent
# again under the same key before it is failed (and, for a cordon, handed to a person).
RESEND_TRIES = 2
PRE_ACT = frozenset({Phase.PROPOSED, Phase.APPROVED, Phase.CORDONED, Phase.WAITING,
                     Phase.DRAINING})
# The record phases that are phases of a remediation (a step into one moves it there).
PHASES = frozenset(p.value for p in Phase)
STARTED = frozenset({Phase.CORDONED, Phase.WAITING, Phase.DRAINING})
# Job states that still occupy the node (PENDING jobs do not).
BUSY_JOB_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING", "STOPPED",
                             "RESIZING", "SIGNALING", "STAGE_OUT"})
# Faults that describe Slurm's own state or the request channel: never evidence (P1).
NOT_EVIDENCE = frozenset({"slurm.node_down", "slurm.node_drain", "request", "request.malformed"})

# A node the snapshot has no check data for (I2: no data, not bad data).
NO_CHECK_DATA = extra_mod.CheckData()


def iso(t: datetime) -> str:
    return t.isoformat()


def host_of(node: NodeInfo | None, name: str) -> str:
    """Machine identity for E1/E3: Extra ``slurm_heal_host.host`` (set by a migrate), else
    ``slurm_heal.host``, else the node name."""
    if node is not None and isinstance(node.extra, dict):
        moved = node.extra.get(extra_mod.HOST_KEY)
        if isinstance(moved, dict) and isinstance(moved.get("host"), str) and moved["host"]:
            return str(moved["host"])
        ours = node.extra.get(extra_mod.KEY)
        if isinstance(ours, dict) and isinstance(ours.get("host"), str) and ours["host"]:
            return str(ours["host"])
    return name


def is_automatic(rem: Remediation) -> bool:
    """S5: automatic = not requested by a person and not approved by a person."""
    return rem.automatic and rem.approved_by is None


def act_attempts(rem: Remediation) -> list[Attempt]:
    """Acts that were sent (one the controller did not send at all is no attempt, E1/S2)."""
    return [a for a in rem.attempts if a.effect == "act" and a.sent]


def acted_at(rem: Remediation) -> datetime | None:
    acts = act_attempts(rem)
    return acts[0].started if acts else None


def ended_at(rem: Remediation) -> datetime | None:
    return rem.phase_times.get(rem.phase.value) if rem.phase.terminal else None


def gate_failed_last(rems: list[Remediation]) -> Remediation | None:
    """SPEC V4, P1: the node's latest ended remediation, when it failed its post-repair
    gate: a confirmed failure with the gate's results as evidence, although the node's
    health check shows no alert. None otherwise."""
    ended = [r for r in rems if r.phase.terminal]
    last = max(ended, key=lambda r: (ended_at(r) or r.updated, r.id), default=None)
    return last if last is not None and last.data.gate_failed else None


def foreign(node: NodeInfo) -> bool:
    """House style 2 / D5: DOWN or DRAIN for a reason that is neither ours nor a
    request: a person (or Slurm) owns the node, and we never cordon or resume it."""
    return (node.down or node.drained) and reasons.owner(node.reason) in ("slurm", "person")


def fault_action(catalog: Catalog, power_cycle: bool, alert: Alert,
                 gpu_reset: bool = False) -> Action:
    """The catalog's action for an alert (Xid 154 names its own; E4 power cut; E6 a GPU
    reset first where NVIDIA's resolution is one and the policy enables it)."""
    try:
        fault = catalog.get(alert.fault)
    except CatalogError:
        return Action.NONE
    if fault.record_only:
        return Action.NONE
    action = fault.action
    if fault.recovery_action:
        for ev in alert.evidence:
            named = ev.data.get("recovery_action") if ev.data else None
            if isinstance(named, str):
                action = catalog.recovery_action(named) or action
    if fault.power_cut and power_cycle:
        action = Action.POWER_CYCLE  # SPEC E4 (preview, enabled by policy)
    elif fault.gpu_reset and gpu_reset and action is Action.REBOOT:
        action = Action.RESET_GPU  # SPEC E6 (preview, enabled by policy): before a reboot
    return action


def record_only(catalog: Catalog, fault: str) -> bool:
    try:
        return catalog.get(fault).record_only
    except CatalogError:
        return False  # a site's own fault: its severity decides


def evidence(catalog: Catalog, alerts: list[Alert]) -> Alert | None:
    """P1: the worst of a node's active ``alerts`` that counts as a confirmed failure:
    not Slurm's own state or the request channel (NOT_EVIDENCE), not a record-only
    fault (D8: low disk space never causes a reboot), and at least a warning."""
    cands = [a for a in alerts if a.fault not in NOT_EVIDENCE
             and a.severity.rank >= Severity.WARNING.rank and not record_only(catalog, a.fault)]
    if not cands:
        return None
    return sorted(cands, key=lambda a: (-a.severity.rank, a.fault))[0]


def keeps_out(catalog: Catalog, alerts: list[Alert]) -> bool:
    """An active alert that would itself keep the node out of service (a fault that
    cordons, or anything critical)."""
    for a in alerts:
        try:
            f = catalog.get(a.fault)
        except CatalogError:
            continue
        if f.cordon or a.severity is Severity.CRITICAL:
            return True
    return False


def explain(catalog: Catalog, fault: str) -> str:
    try:
        return catalog.get(fault).explanation
    except CatalogError:
        return fault
