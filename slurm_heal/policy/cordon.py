"""Our cordon: the reason marker on a node, undone when it is ours and nothing keeps
the node out (house style 2, SPEC L1, I5)."""

from __future__ import annotations

from slurm_heal import reasons
from slurm_heal.models import Remediation
from slurm_heal.policy.notices import notice
from slurm_heal.policy.working import Ledger, WorkingSet
from slurm_heal.types import NodeInfo


def marker(rem: Remediation) -> str:
    """The reason our controller's cordon of ``rem`` sets (the one builder of it)."""
    return reasons.format_marker(rem.fault, rem.id, "controller", f"for {rem.action.value}")


def orphan_marker(ws: WorkingSet, led: Ledger, node: NodeInfo) -> None:
    """House style 2 / L1: our controller's cordon with no open remediation behind it
    (release() skipped it while a fault was active, or its resume failed). Undo it
    once the node is healthy but for us; until then a person is told, once. A node
    handed to a person (E1) stays as it is: that is theirs to decide."""
    marker = reasons.marker_of(node.reason)
    if not node.drained or marker is None:
        return
    if marker.by != "controller":
        return  # the node check's own drain clears itself (checks/)
    name = node.name
    if led.ix.has_open(name):
        return
    if ("undo", name) in led.planned:
        return  # released by a command in this very call
    if unknown_marker(led, node) is not None:
        unrecorded(led, node)
        return
    owner = led.rems.get(marker.remediation or "")
    if owner is not None and (owner.data.handed_to_person or owner.id in led.changed):
        return  # a person's node now, or it ended in this call (release() decided)
    if owner is not None and owner.data.gate_failed:
        # SPEC V4: it failed its post-repair gate: healthy to its node check, not fit.
        if led.once(notice("orphan", name), owner.id):
            led.record(name, "blocked", "V4", f"{name} stays cordoned: it failed the "
                       f"post-repair gate of {owner.id}; the fault seen again starts the next "
                       f"step (E1), or a person resumes it or requests an action")
        return
    ref = marker.remediation or "?"
    if ws.healthy_but_for_us(name):
        led.effect("release", name, None, "release", topic=ref, reason=node.reason,
                   rule="L1",
                   why=f"{name} is still cordoned for {ref}, which is over: undo the "
                   "cordon")
        if led.once(notice("orphan", name), ref):
            led.record(name, "released", "L1", f"{name} is still cordoned for {ref}, "
                       "which is no longer open, and nothing keeps it out of service: "
                       "the cordon is undone")
    elif led.once(notice("orphan", name), ref):
        led.record(name, "blocked", "L1", f"{name} is still cordoned for {ref}, which is "
                   "no longer open, and a fault that keeps it out of service is active: "
                   "it stays drained until the fault clears or a person resumes it")


def unknown_marker(led: Ledger, node: NodeInfo) -> str | None:
    """SPEC I5 / L5 (issue 8): the remediation named by our controller's marker on a
    node that is out of service, when the store has no record of it (a store set
    aside or started afresh, or a marker without ``rem=``): we do not know what we
    were doing to that node (it may be mid-rebuild), so it is a person's to look at,
    never ours to resume or act on again. None when the marker is on record or the
    node carries no controller marker."""
    if not (node.drained or node.down) or reasons.owner(node.reason) != "ours":
        return None
    marker = reasons.marker_of(node.reason)
    if marker is None:
        return "?"
    if marker.by != "controller":
        return None
    if marker.remediation and marker.remediation in led.ix.known:
        return None
    return marker.remediation or "?"


def unrecorded(led: Ledger, node: NodeInfo) -> None:
    """Hand a node with an unrecorded marker of ours to a person: recorded and
    notified once, nothing released, resumed or started on it until a person acts."""
    ref = unknown_marker(led, node) or "?"
    if led.once(notice("unrecorded", node.name), ref):
        why = (f"{node.name} is {'DOWN and ' if node.down else ''}drained with our marker "
               f"for {ref}, but the store has no record of it (set aside or started "
               "afresh): what slurm-heal was doing to it is unknown, so it is handed to a "
               "person; nothing is resumed, released or started on it until a person "
               "resumes the node or asks for an action")
        led.record(node.name, "blocked", "I5", why)
        led.effect("notify", node.name, None, "notify", topic=ref, why=why, rule="I5")


def release(ws: WorkingSet, led: Ledger, rem: Remediation, what: str) -> None:
    """Undo our cordon (never a reason that is not ours, house style 2)."""
    node = ws.node(rem.node)
    if node is not None and node.drained and reasons.owner(node.reason) == "request":
        # The detector's own drain is not ours to undo (house style 2): say who must.
        led.step(rem, rem.phase.value, "Q1", f"{what}: {rem.node} stays drained by the "
                 f"detector's request ({node.reason!r}); a person resumes it: "
                 f"scontrol update nodename={rem.node} state=resume")
        return
    if node is None or not node.drained or reasons.owner(node.reason) != "ours":
        return
    if not ws.healthy_but_for_us(rem.node):
        led.record(rem.node, rem.phase.value, "L1", f"{what}, but {rem.node} stays drained: "
                   "a fault that keeps it out of service is still active", rem)
        return
    led.effect("release", rem.node, rem, "release", reason=node.reason,
               why=f"{what}: undo the cordon", rule="L4" if what == "withdrawn" else "P4")
