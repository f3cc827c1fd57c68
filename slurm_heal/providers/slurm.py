"""The `slurm` provider: reboot through Slurm itself (``scontrol reboot NODE`` on a node
kept drained with our reason), which runs the site's RebootProgram. The drain survives
the reboot, so Slurm never puts the node back in service before slurm-heal's health
check (SPEC L5): the controller resumes it. Slurm cannot re-image or move a node, so
rebuild, migrate and power_cycle are refused (ProviderRefused).

The operation succeeds once Slurm reports the node back: its boot time is later than
it was at submit, no further reboot requested (REBOOT_REQUESTED gone; a REBOOT_ISSUED
left beside the new boot time is 22.05's leftover, see `status`) and not DOWN. It fails when Slurm gives up on the boot (DOWN, no reboot pending any more, and
"reboot timed out" among the reasons Slurm appended) or the node is not back within
``timeout`` seconds.

What Slurm shows around such a reboot, the same on 22.05 and 25.11 (seen on 22.05.8 and
25.11.7; golden captures in tests/data/slurm/25.11/reboot-*.json): IDLE+DRAIN+
REBOOT_REQUESTED, then DOWN+DRAIN+REBOOT_ISSUED with " : reboot issued" appended to our
reason, then IDLE+DRAIN with a new boot time (the appended text stays); on a timeout,
DOWN+DRAIN with " : reboot timed out" appended. Slurm appends each text only once and
keeps it, so the reboot is submitted with our marker stripped of those texts (the node
is drained again with the clean marker): a "reboot timed out" left by an earlier
attempt is never read as the fate of this one. Submitted keys are kept in memory and in a JSON
file in the state directory, so a key is never rebooted twice (SPEC S6).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from slurm_heal import isotime
from slurm_heal.errors import NotFound, ProviderError, ProviderRefused, SlurmError
from slurm_heal.providerconf import SlurmSettings as SlurmSettings
from slurm_heal.providers._records import (
    KeyRecords,
    RecordedOperations,
    operation,
    require_key,
)
from slurm_heal.providers.base import SLURM_REBOOT_TIMEOUT, Operation
from slurm_heal.reasons import (
    OUR_PREFIX,
    format_marker,
    is_ours,
    without_slurm_reboot_reasons,
)
from slurm_heal.slurm.base import SlurmClient
from slurm_heal.types import Action

# A reboot still to come (REBOOT: pyslurm's spelling of the requested flag).
_REBOOT_REQUESTED = frozenset({"REBOOT_REQUESTED", "REBOOT"})


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class SlurmRebootProvider(RecordedOperations):
    """Reboots nodes with ``scontrol reboot``; refuses every other action."""

    name = "slurm"

    def __init__(self, slurm: SlurmClient, *, state_dir: str | os.PathLike[str] | None = None,
                 nextstate: str = "DRAIN", timeout: float = SLURM_REBOOT_TIMEOUT,
                 clock: Callable[[], datetime] = _utcnow):
        self.slurm = slurm
        self.nextstate = nextstate
        self.timeout = timeout
        self.clock = clock
        self.records = KeyRecords(Path(state_dir) / "slurm-provider.json"
                                  if state_dir is not None else None)

    def supports(self, action: Action) -> bool:
        """Only reboot."""
        return action == Action.REBOOT

    def submit(self, node: str, action: Action, key: str) -> Operation:
        """``scontrol reboot`` the node once per ``key``; returns the running operation."""
        if action != Action.REBOOT:
            raise ProviderRefused(
                f"slurm provider cannot {action.value} a node: Slurm can only reboot it "
                "(through the site's RebootProgram); configure an exec, http or openstack "
                "provider for rebuild, migrate and power_cycle")
        require_key(key)
        existing = self.status(key)
        if existing is not None:
            if existing.node != node:
                raise ProviderError(f"idempotency key {key!r} was used for {existing.node}, "
                                    f"not {node}")
            return existing
        try:
            info = self.slurm.node(node)
        except NotFound as exc:
            raise ProviderError(f"slurm provider: {exc}") from exc
        now = self.clock()
        rec: dict[str, Any] = {
            "id": "slurm-" + uuid.uuid4().hex[:12], "node": node, "action": action.value,
            "submitted": _aware(now).isoformat(),
            "boot_before": _aware(info.boot_time).isoformat() if info.boot_time else None,
            "status": "running", "detail": "",
        }
        with self.records.locked() as records:
            if key in records:  # another replica got there first
                return operation(key, records[key])
            records[key] = rec  # intent before the call: a crash never reboots twice
        # Keep our cordon marker as the reason: the node must stay recognisably ours.
        reason = without_slurm_reboot_reasons(info.reason) if is_ours(info.reason) else format_marker(
            "provider.reboot", remediation=key.split(":", 1)[0] or None, text=f"key={key}")
        if not reason.startswith(OUR_PREFIX):  # pragma: no cover - format_marker guarantees
            raise ProviderError("internal: reboot reason must be ours")
        try:
            self.slurm.reboot(node, reason, nextstate=self.nextstate)
        except SlurmError as exc:
            rec.update(status="failed", detail=f"scontrol reboot failed: {exc}")
            self.records.put(key, rec)
            return operation(key, rec)
        rec["detail"] = ("scontrol reboot issued; the node stays drained until slurm-heal's "
                         "health check passes (SPEC L5)" if self.nextstate == "DRAIN"
                         else f"scontrol reboot ASAP nextstate={self.nextstate} issued")
        self.records.put(key, rec)
        return operation(key, rec)

    def _advance(self, key: str, rec: dict[str, Any]) -> Operation:
        """Ask Slurm whether the node rebooted for ``key`` is back (``status``)."""
        node = str(rec["node"])
        try:
            info = self.slurm.node(node)
        except NotFound:
            rec.update(status="failed", detail=f"node {node} no longer exists in Slurm")
            self.records.put(key, rec)
            return operation(key, rec)
        submitted = _parse(rec["submitted"]) or self.clock()
        before = _parse(rec.get("boot_before"))
        boot = _aware(info.boot_time) if info.boot_time is not None else None
        booted = boot is not None and (
            boot > before if before is not None
            # Slurm's boot time has one-second resolution.
            else boot >= submitted.replace(microsecond=0))
        requested = bool(info.states & _REBOOT_REQUESTED)
        issued = "REBOOT_ISSUED" in info.states
        # REBOOT_ISSUED on a node that answers with a boot after the submit is Slurm's
        # leftover, not a boot still to come: 22.05 "returns to service" a node whose
        # slurmd acknowledged the reboot RPC before it went (node_did_resp; 25.11 waits
        # for the boot), and the new boot's registration then keeps the flag for good,
        # IDLE+DRAIN+REBOOT_ISSUED with no "reboot timed out" ever (seen on 22.05.8).
        if booted and not requested and not info.down:
            rec.update(status="succeeded",
                       detail=f"node {node} is back (boot time {info.boot_time:%Y-%m-%dT%H:%M:%S})")
        elif info.down and not (requested or issued) and _slurm_timed_out(info.reason):
            rec.update(status="failed", detail=f"Slurm: {info.reason}")
        elif _aware(self.clock()) - submitted > timedelta(seconds=self.timeout):
            rec.update(status="failed", detail=f"node {node} did not come back within "
                                               f"{self.timeout:g}s (states: "
                                               f"{','.join(sorted(info.states))})")
        else:
            return operation(key, rec)
        self.records.put(key, rec)
        return operation(key, rec)


def _slurm_timed_out(reason: str) -> bool:
    """Slurm's own "reboot timed out" (appended as " : reboot timed out", or the whole
    reason when there was none), not those words inside a person's text."""
    return any(part.strip().lower() == "reboot timed out" for part in reason.split(" : "))


def _aware(value: datetime) -> datetime:
    # Backends may report naive times (local Slurm time); compare them as UTC-aware.
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _parse(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    return _aware(isotime.parse(value))

