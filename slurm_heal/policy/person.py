"""A person's hand wins (SPEC S8): a node slurm-heal is working on that a person resumed.

Functions of the working set (and, for `resumed`, the ledger's planned effects):
whether a remediation's node is back in service because a person resumed it
(`resumed`), and whether an alert is the one a remediation that ended so already
handed to that person, with nothing new seen since (`covers`). The life cycle ends the
remediation (`endings.hand_back`); intake opens nothing new from a covered alert.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from slurm_heal import reasons
from slurm_heal.models import Phase, Remediation
from slurm_heal.policy.facts import STARTED, act_attempts, ended_at
from slurm_heal.policy.working import Ledger, WorkingSet
from slurm_heal.types import Alert, NodeInfo

BEFORE_CORDON = frozenset({Phase.PROPOSED, Phase.APPROVED})


def check_drained(node: NodeInfo) -> bool:
    """The node is drained under the node check's own marker (``heal: ... by=check``)."""
    marker = reasons.marker_of(node.reason)
    return node.drained and marker is not None and marker.by == "check"


def check_holds(ws: WorkingSet, node: NodeInfo) -> bool:
    """The node check says in Extra that its own drain holds the node (``drained``,
    written only after that drain took effect), on the boot it published from. Such a
    node seen in service was resumed by someone, even if the controller never saw it
    drained (the drain and a person's resume both between two of its looks)."""
    data = ws.check_of(node.name)
    if not data.drained:
        return False
    return not (node.boot_time is not None and data.checked_at is not None
                and node.boot_time > data.checked_at)  # a boot since: Slurm's return


def person_holds(node: NodeInfo) -> bool:
    """The node is drained (not DOWN) under a person's own reason (`reasons.persons_drain`:
    not a tool's that lifts itself)."""
    return node.drained and not node.down and reasons.persons_drain(node.reason)


def marks(alert: Alert | None) -> tuple[str, ...]:
    """The alert's evidence as short fingerprints (a later event of it is a new one)."""
    if alert is None:
        return ()
    return tuple(sorted({hashlib.sha256(f"{e.source}\0{e.at or ''}\0{e.text}".encode())
                         .hexdigest()[:16] for e in alert.evidence}))


def acknowledged(ws: WorkingSet, name: str, fault: str) -> Alert | None:
    """The node check's acknowledgement of ``fault`` on the node (published after a
    person's resume), or None."""
    return next((a for a in ws.check_of(name).acknowledged if a.fault == fault), None)


def resumed(ws: WorkingSet, led: Ledger, rem: Remediation, node: NodeInfo) -> str | None:
    """Why ``rem``'s node is in a person's hands now, or None: it is in service again
    (not drained, not down) although

    * our cordon took effect (a started remediation; not one sent in this very call);
    * the act was never sent (acting; one the controller's last look did not send is
      no act);
    * the node check had drained it before our cordon (seen drained so, or its Extra
      says its drain holds: the drain and the resume may both fall between two looks),
      and the alert is still there or acknowledged (the check's own release of a fault
      that cleared is L4's);
    * a person had drained it with a reason of their own before our cordon.
    """
    if node.drained or node.down:
        return None
    name = rem.node
    if rem.phase in STARTED:
        cordons = [a for a in rem.attempts if a.effect == "cordon"]
        if ("cordon", rem.id) in led.planned or not cordons or cordons[-1].outcome != "ok":
            return None  # our cordon is in flight or failed (cordon_again)
        return f"{name} was resumed by a person after our cordon"
    if rem.phase is Phase.ACTING:
        if act_attempts(rem):
            return None  # the action was sent: polled to its end (L5)
        held = [a for a in rem.attempts if a.effect == "act"]
        return (f"{name} was resumed by a person before the {rem.action.value} ran"
                + (f" (not sent: {held[-1].detail})" if held else ""))
    if rem.phase is Phase.RETURNING and not reasons.slurm_rebooting(node.states) \
            and not gate_lifted(ws, rem):
        # SPEC S8, V4 (issue 32 item 8): our drain stays through the action (the reboot
        # keeps it; a reset's job drains it again before its end) until the health check
        # and the gate; only our own gate lifts it, for its job. In service otherwise: a
        # person resumed it, and no gate (nor a drain after one) undoes that.
        return (f"{name} was resumed by a person after the {rem.action.value}, before "
                "slurm-heal resumed it")
    if rem.phase in BEFORE_CORDON and rem.data.held_by_person:
        # SPEC S8 (issue 32, the deployed suite's own-drain): the person who drained the
        # node while this waited (D5) resumed it: the faults published so far are theirs.
        return f"{name}, drained by a person, was resumed by them before our cordon"
    if rem.phase in BEFORE_CORDON and (rem.data.held_by_check or check_holds(ws, node)):
        ev = rem.data.evidence_fault
        if ev and not ws.check_of(name).problem and not ws.active(name, ev) \
                and acknowledged(ws, name, ev) is None:
            return None  # the fault cleared and the check released its own drain (L4)
        return f"{name}, drained by the node check, was resumed by a person before our cordon"
    return None


def hand_over_ended(old: Remediation, node: NodeInfo) -> str | None:
    """SPEC S8 (issue 32 item 10): why the hand-over of ``old`` (``handed_to_person``)
    has ended, or None while it holds. It holds until a person acts on the node: resumes
    it (out of service when it was handed over, in service now) or drains or re-reasons
    it (a reason of a person's that is not the one it was handed over with). Our own
    drain of a node handed over in service is no person's act; a new reason of ours on
    one handed over drained is (its drain was lifted in between). A hand-over recorded
    before its node's state was (None) was one that left the node cordoned."""
    was_out = old.data.handed_out_of_service
    out = node.drained or node.down
    if (was_out is None or was_out) and not out:
        return f"{node.name} was resumed by a person after {old.id} was handed to them"
    if was_out is None or not node.drained or node.reason == old.data.handed_reason:
        return None
    if reasons.owner(node.reason) == "person":
        return (f"{node.name} was drained by a person ({node.reason!r}) after {old.id} was "
                "handed to them")
    if was_out:
        # Nothing of ours runs on a node with a person, and the node check never
        # relabels a drained node: a new reason of ours means the drain it was handed
        # over with was lifted (a person's resume the controller did not see) and the
        # node drained again since, for something new.
        return (f"{node.name} was resumed by a person after {old.id} was handed to them, "
                f"and drained again since ({node.reason!r})")
    return None


def seen_now(ws: WorkingSet, name: str) -> tuple[str, ...]:
    """The evidence of every active alert of the node, as `marks` (what is published
    now: a hand-over's "seen so far")."""
    return tuple(sorted({m for a in ws.active(name) for m in marks(a)}))


def gate_lifted(ws: WorkingSet, rem: Remediation) -> bool:
    """``rem``'s post-repair gate (SPEC V4) holds its node in service now: a run of it
    past its start and not yet restored (its job in our reservation), or one that passed
    (the reservation removed, the node in service until ``rem`` ends done)."""
    return any(v.origin == "gate" and v.remediation == rem.id and (
        v.phase == "passed" or (not v.terminal and v.phase != "requested"))
        for v in ws.state.validations)


def person_drained(rem: Remediation, node: NodeInfo) -> str | None:
    """SPEC S8 (issue 32 item 8): after the action, a person drained the node with a
    reason of their own (not Slurm's reboot reason, not DOWN): why, or None."""
    if rem.phase is not Phase.RETURNING or not node.drained or node.down \
            or reasons.owner(node.reason) != "person":
        return None
    return f"{node.name} was drained by a person ({node.reason!r}) after the {rem.action.value}"


def covers(old: Remediation, alert: Alert, node: NodeInfo | None,
           checked_at: datetime | None = None) -> bool:
    """``old`` ended because a person resumed its node, and ``alert`` was published
    then with nothing new since: first seen before it ended, no evidence that was not
    seen then (``seen_evidence``: every alert published on the node at the resume, its
    own and any other fault's), no boot of the node since. Such an alert opens nothing
    new (SPEC S8): the node check acknowledges it on its next run. (A record of a build
    before kept only its own alert's evidence: only that alert is covered.)

    ``old`` handed to a person (``handed_to_person``, its evidence recorded then): any
    alert seen then whose evidence was all published at the hand-over is covered too,
    once that person acted on the node (issue 32 item 10: only a new fault is
    remediated again). And until the node check publishes after that person acted
    (``checked_at``, its last publication, not after ``handed_ended_at``), everything it
    published was there before they acted, evidence that came between the hand-over
    and their act included: the check's next run acknowledges what was published and
    drains for anything new (the deployed suite's resume-race: an Xid event published
    while the node was with the person, then their resume, opened a new remediation
    and drained the node again 0.9 s after it)."""
    end = ended_at(old) or old.updated
    if node is not None and node.boot_time is not None and node.boot_time > end:
        return False  # a reboot ends the acknowledgement
    acted = old.data.handed_ended_at
    if old.data.handed_to_person and acted is not None and checked_at is not None \
            and checked_at <= acted and alert.last_seen <= acted \
            and not (node is not None and check_drained(node)):
        return True
    own = old.data.resumed_by_person and old.fault == alert.fault \
        and old.alert_first_seen == alert.first_seen  # its own alert, as it was
    seen_then = (old.data.handed_to_person or old.data.resumed_by_person) \
        and bool(old.data.seen_evidence) and bool(alert.evidence) \
        and alert.first_seen <= end  # an alert first seen after it ended is new
    return (own or seen_then) and set(marks(alert)) <= set(old.data.seen_evidence)
