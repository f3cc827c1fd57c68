"""The words the CLI, the API and the console use for a remediation and a policy: who
asked for it, where its approval stands (SPEC Q1, Q3, P2, P4), and a policy's values as
plain JSON data in the file's own form (durations as "30m").
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from slurm_heal.durations import format_duration
from slurm_heal.models import Attempt, HeldBy, Remediation
from slurm_heal.types import Action


def stamp(at: datetime | None) -> str:
    """A time as "2026-01-05 10:00:00Z" (UTC), "-" for none: `status` and the console."""
    return at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ") if at else "-"


def elapsed(seconds: float) -> str:
    """A time span in a few characters ("45s", "12m", "3h05m", "2d4h"): how long ago or
    for how long, in `status` and the console alike."""
    s = max(int(seconds), 0)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"


def requester(rem: Remediation) -> str:
    """Who asked: a person, or a detector with its request id when it gave one (Q1, Q3)."""
    if not rem.detector:
        return rem.requested_by
    return f"{rem.requested_by} (detector {rem.detector}" + (
        f" id {rem.request_id})" if rem.request_id else ")")


def approval(rem: Remediation) -> str:
    """The approval as it stands (P2, P4): never "approved" for one still waiting or denied."""
    decided = next((s for s in reversed(rem.steps) if s.phase in ("approved", "denied")), None)
    if rem.phase.value == "denied" or (decided is not None and decided.phase == "denied"):
        return decided.why if decided is not None and decided.phase == "denied" else "denied"
    if waiting_for_evidence(rem) and decided is None:
        return "not put to approval yet: waiting for evidence (SPEC P1)"
    if decided is not None:
        if rem.approved_by:
            # P4: the approval step says who and when in typed fields: a person's
            # approve command is theirs (``by``; its words carry their reason), a
            # person's own request approves itself (recorded by slurm-heal, no ``by``).
            return (decided.why if decided.by is not None
                    else f"approved by {rem.approved_by} (who requested it)")
        return f"auto-approved by {rem.approval_rule or decided.rule}"
    h = held(rem)
    if rem.phase.value == "proposed" and h is not None and h.by_incident:
        return (f"not put to approval: held by incident {h.incident} (SPEC S7); it goes on "
                "by its own rules once the incident ends")
    if rem.phase.value == "proposed":
        return (f"waiting for a person's approval ({rem.approval_rule}: slurm-heal approve "
                f"{rem.node} or deny)" if rem.approval_rule else "not decided yet")
    return f"never approved ({rem.phase.value} before approval)"


def held(rem: Remediation) -> HeldBy | None:
    """What holds an open remediation back now (SPEC O6, issue 32 item 6): the engine's
    own typed record of it (`Work.hold`), the one answer status, explain, the API and the
    console give; None when nothing holds it."""
    h = rem.data.hold
    # Set and cleared with ``blocked`` (an older build may clear that one alone).
    if rem.phase.terminal or h is None or h.mark != rem.data.blocked:
        return None
    return h


def held_head(h: HeldBy) -> str:
    """"HELD by S7 (incident i-1) until 2026-01-05 10:00:00Z": which hold, and its end."""
    return f"HELD by {h.name}" + (f" until {stamp(h.until)}" if h.until is not None else "")


def held_words(h: HeldBy) -> str:
    """Why it holds, what lifts it and the command for that (O6), in one line."""
    cmd = f" (`{h.command}`)" if h.command else ""
    return f"{h.why}; lifts: {h.lifts or 'see the rule'}{cmd}"


def waiting_for_evidence(rem: Remediation) -> str:
    """What a request held for want of evidence waits for (P1/Q4, O6), in the engine's
    words, or "" when it does not: such a request is neither approved nor running."""
    h = held(rem)
    if rem.origin == "alert" or rem.phase.value not in ("proposed", "approved") \
            or h is None or h.rule != "P1":
        return ""
    return h.why


def provider_error(rem: Remediation) -> Attempt | None:
    """The act attempt the provider has not answered (O6): failed tries in a row, the
    last error and when; None while the provider answers (or nothing was sent)."""
    if rem.phase.terminal:
        return None
    return next((a for a in reversed(rem.attempts) if a.effect in ("act", "poll")
                 and a.outcome in (None, "running") and a.errors), None)


def provider_words(a: Attempt, now: datetime) -> str:
    """"4 failed tries, the last 2m ago: connection refused"."""
    ago = ""
    if a.last_error_at is not None:
        s = int(max(0.0, (now - a.last_error_at).total_seconds()))
        ago = f", the last {s}s ago" if s < 120 else (f", the last {s // 60}m ago" if s < 7200
                                                      else f", the last {s // 3600}h ago")
    return (f"{a.errors} failed tr{'y' if a.errors == 1 else 'ies'}"
            f"{ago}: {a.last_error}")


def plain(value: Any) -> Any:
    """A policy value as plain JSON data, durations in the file's own "30m" form."""
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if isinstance(value, Action):
        return value.value
    return value
