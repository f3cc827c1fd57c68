"""Facts the rules share (pure functions of a record, a node or the catalog): the
constants of the life cycle, a machine's identity, whether a remediation is automatic,
when it acted and ended."""

from __future__ import annotations

from datetime import datetime, timedelta

from slurm_heal import extra as extra_mod
from slurm_heal.models import NOT_SENT, Attempt, Phase, Remediation
from slurm_heal.types import NodeInfo

# How soon to look again while an action runs (the daemon's own interval may be shorter).
POLL_EVERY = timedelta(minutes=1)
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
    return [a for a in rem.attempts if a.effect == "act" and not a.detail.startswith(NOT_SENT)]


def acted_at(rem: Remediation) -> datetime | None:
    acts = act_attempts(rem)
    return acts[0].started if acts else None


def ended_at(rem: Remediation) -> datetime | None:
    return rem.phase_times.get(rem.phase.value) if rem.phase.terminal else None
