"""NHC's own drains as alerts (SPEC D13, D5, S8), opt-in by ``[sources.nhc]``.

LBNL NHC drains a node whose check fails with the reason ``NHC: <check>:  <message>``
(its ``die`` prefixes the message with the check's function name; its
``node-mark-offline`` helper writes the ``NHC:`` leader and never overwrites a note that
is not its own). With ``[sources.nhc] enabled`` and the check mapped to a fault, such a
drain is an alert of that fault with the reason as its evidence, and the node is
remediated under the same policy: slurm-heal's cordon replaces NHC's reason with its own
marker (so NHC no longer resumes it, and slurm-heal resumes only what it then repaired
and checked, L5). Any other drain, a person's included, stays someone else's (D5).
"""

from __future__ import annotations

import re
from datetime import datetime

from slurm_heal import catalog as catalog_mod
from slurm_heal.errors import CatalogError
from slurm_heal.sources.settings import NhcSource
from slurm_heal.types import Alert, Evidence, NodeInfo, Severity

SOURCE = "nhc"
# NHC's reason: "NHC: check_hw_ib:  No IB port mlx4_0:1 is ACTIVE ..." (two spaces in
# NHC's own messages; one accepted).
_REASON = re.compile(r"^NHC:\s+(check_[a-z0-9_]+):?\s*(.*)$", re.DOTALL)


def parse(reason: str) -> tuple[str, str] | None:
    """(check, message) of an NHC drain reason; None when ``reason`` is not one that
    names a check (a person's reason, NHC's own timeouts)."""
    m = _REASON.match(reason.strip())
    return (m.group(1), m.group(2).strip()) if m else None


def mapped_fault(reason: str, conf: NhcSource) -> str | None:
    """The fault the policy maps ``reason``'s check to, when NHC sources are enabled."""
    if not conf.enabled:
        return None
    got = parse(reason)
    return conf.map.get(got[0]) if got else None


def taken_over(node: NodeInfo, conf: NhcSource) -> bool:
    """A node drained (or DOWN) by NHC for a mapped check: slurm-heal may remediate it
    (it is not someone else's, D5)."""
    return (node.drained or node.down) and mapped_fault(node.reason, conf) is not None


def alert_of(node: NodeInfo, conf: NhcSource, now: datetime,
             cat: catalog_mod.Catalog | None = None) -> Alert | None:
    """The alert an NHC drain of ``node`` stands for, or None (not NHC's, not mapped,
    not enabled). First seen: Slurm's reason time (the drain's), else ``now``."""
    if not taken_over(node, conf):
        return None
    fault = mapped_fault(node.reason, conf)
    got = parse(node.reason)
    if fault is None or got is None:
        return None
    check, message = got
    cat = cat if cat is not None else catalog_mod.load()
    if conf.severity is not None:
        severity = Severity(conf.severity)
    else:
        try:
            severity = cat.get(fault).severity
        except CatalogError:
            severity = Severity.WARNING
    seen = node.reason_time or now
    evidence = Evidence(source=SOURCE, text=node.reason, at=seen.isoformat(),
                        data={"check": check, "message": message,
                              "reason_user": node.reason_user})
    return Alert(node=node.name, fault=fault, severity=severity,
                 summary=f"NHC {check}: {message}", first_seen=seen, last_seen=now,
                 evidence=(evidence,), detector=SOURCE)


def carried(node: NodeInfo, fault: str, severity: Severity, since: datetime,
            now: datetime) -> Alert:
    """The alert of an NHC drain slurm-heal took over: its cordon replaced NHC's reason
    with its own marker, so the reason no longer says it; until the action has run, the
    remediation's evidence stands (it is not a cleared alert, L4)."""
    evidence = Evidence(source=SOURCE, text=f"NHC drained {node.name} for {fault}; "
                        f"slurm-heal's cordon took the drain over ({node.reason})",
                        at=since.isoformat(), data={"taken_over": True})
    return Alert(node=node.name, fault=fault, severity=severity,
                 summary=f"NHC's drain for {fault}, taken over by slurm-heal's cordon",
                 first_seen=since, last_seen=now, evidence=(evidence,), detector=SOURCE)
