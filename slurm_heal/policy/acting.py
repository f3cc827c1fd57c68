"""The action and the return (SPEC L1, L5, S6): steps recorded but never run are
settled within a bound, the act is polled by its key, the node comes back and passes
its health check or the remediation fails."""

from __future__ import annotations

import slurm_heal.policy.endings as endings
import slurm_heal.policy.holding as holding
import slurm_heal.policy.person as person
import slurm_heal.policy.postgate as postgate
from slurm_heal import reasons
from slurm_heal.config import format_duration
from slurm_heal.models import NOT_SENT, Remediation, idempotency_key
from slurm_heal.policy.facts import (
    BOOT_TIME_SLACK,
    POLL_EVERY,
    RESEND_TRIES,
    STARTED,
    acted_at,
    iso,
)
from slurm_heal.policy.notices import notice
from slurm_heal.policy.working import Ledger, WorkingSet
from slurm_heal.types import Action, NodeInfo, Severity


def settle(ws: WorkingSet, led: Ledger, rem: Remediation) -> None:
    """L1 / house style (issue 8): every attempt recorded before it ran gets an outcome
    within a bound. An attempt still without one ``safety.step_timeout`` after it was
    recorded means the controller stopped between recording and acting (SIGTERM,
    kill -9, OOM, an exception). What happens depends on the step:

    * ``act``: polled by its key while the remediation is open (acting(): the
      provider is asked first and the act is re-sent under the same key only when it
      never saw it); left on a finished remediation, it is marked failed (unknown).
    * ``cordon``: sent again under the same key while the node is not drained
      (cordon_again()); otherwise settled from the node: drained with our marker for
      this remediation = ok, else failed.
    * ``notify``: sent again under the same key (at most RESEND_TRIES times).
    * ``signal_jobs`` / ``requeue_jobs`` / ``cancel_jobs``: failed, never re-sent
      blindly; eviction is tried again (new key, bounded) while jobs remain.
    * ``resume`` / ``release``: failed, never re-sent: the node's reason may have
      changed since; the cordon sweep (orphan_marker) or a person takes it from there.
    """
    tmo = ws.policy.safety.step_timeout
    node = ws.node(rem.node)
    settled: dict[str, tuple[str, str]] = {}
    for a in rem.attempts:
        if a.outcome is not None or a.effect == "poll":
            continue
        due = a.started + tmo
        if ws.now < due:
            led.wake(due)
            continue
        why = f"no outcome {format_duration(tmo)} after it was recorded"
        if a.effect == "act":
            if not rem.phase.terminal:
                continue  # acting() polls it by its key
            settled[a.key] = ("failed", f"{why}; the remediation is over: outcome unknown")
        elif a.effect == "cordon":
            if rem.phase in STARTED and node is not None and not node.drained:
                continue  # cordon_again() sends it again under the same key
            marker = reasons.marker_of(node.reason) if node is not None else None
            mine = (node is not None and node.drained and marker is not None
                    and marker.remediation == rem.id)
            settled[a.key] = ("ok", f"{why}; {rem.node} is drained with our marker") \
                if mine else ("failed", f"{why}; not sent again: the remediation went on")
        elif a.effect == "notify":
            if a.resent < RESEND_TRIES:
                last = rem.steps[-1].why if rem.steps else rem.id
                led.effect("notify", rem.node, rem, "notify", same=a.key, rule="L1",
                           why=f"(sent again: the notice was recorded but never sent) "
                           f"{last}")
                continue
            settled[a.key] = ("failed", f"{why}; sent {a.resent + 1} times")
        else:
            settled[a.key] = ("failed", f"{why} (the controller stopped before it ran?); "
                              f"{a.effect} is not sent again blindly")
    if not settled:
        return
    attempts = tuple(a.model_copy(update={"outcome": settled[a.key][0],
                                          "finished": ws.now,
                                          "detail": settled[a.key][1]})
                     if a.key in settled else a for a in rem.attempts)
    led.put(rem.model_copy(update={"attempts": attempts}))
    for key, (outcome, detail) in settled.items():
        led.record(rem.node, rem.phase.value, "L1", f"step {key} settled as {outcome}: "
                   f"{detail}", rem)


def provider_unreachable(ws: WorkingSet, led: Ledger, rem: Remediation, act_key: str) -> None:
    """O6: an act the provider has not answered ``safety.provider_errors_notify``
    times in a row is said and notified once (per outage), with the last error."""
    act = next((a for a in rem.attempts if a.key == act_key), None)
    limit = ws.policy.safety.provider_errors_notify
    if act is None or act.errors < limit or not led.once(notice("provider", rem.id),
                                                                 act_key):
        return
    tmo = format_duration(ws.policy.safety.act_timeout)
    why = (f"the provider did not answer the {rem.action.value} of {rem.node} "
           f"{act.errors} times in a row (last at "
           f"{iso(act.last_error_at) if act.last_error_at else '?'}: "
           f"{act.last_error}); it is asked again every cycle under the same key, and "
           f"handed to a person after {tmo} (safety.act_timeout); check the provider")
    led.record(rem.node, rem.phase.value, "O6", why, rem)
    led.effect("notify", rem.node, rem, "notify-provider", why=why, rule="O6")


def acting(ws: WorkingSet, led: Ledger, rem: Remediation) -> None:
    act_key = idempotency_key(rem.id, "act", 0)
    seen = [a for a in rem.attempts if a.effect in ("act", "poll")]
    if not any(a.key == act_key for a in seen):
        node = ws.node(rem.node)
        if node is not None and holding.taken_over(ws, led, rem, node):
            return
        if holding.gate(ws, led, rem):
            led.wake(ws.now + POLL_EVERY)
            return  # O2: paused: the act is not sent (again) either
        # Recorded before it runs: no Attempt means it never ran; ask again, same key.
        led.effect("act", rem.node, rem, "act", 0, rule="L1",
                   why=f"{rem.action.value} {rem.node}")
        led.wake(ws.now + POLL_EVERY)
        return
    # The daemon writes a poll's answer onto the act Attempt itself; a store that
    # records polls as Attempts of their own works too: the last final answer counts.
    finals = [a for a in seen if a.outcome in ("ok", "failed")]
    if not finals:
        started = rem.phase_times.get("acting") or acted_at(rem) or ws.now
        limit = started + ws.policy.safety.act_timeout
        if ws.now >= limit:
            # SPEC L5: the outcome is unknown, so it is neither retried nor escalated
            # to another automatic action: the node stays cordoned, a person decides.
            tmo = format_duration(ws.policy.safety.act_timeout)
            endings.fail_to_person(
                ws, led, rem, "L5",
                f"the {rem.action.value} of {rem.node} did not finish within {tmo} "
                f"(safety.act_timeout); its outcome is unknown; {rem.node} stays cordoned",
                f"the {rem.action.value} of {rem.node} did not finish within {tmo}: its "
                f"outcome is unknown; {rem.node} stays cordoned and is handed to a person "
                "(never retried automatically)")
            return
        led.wake(limit)
        provider_unreachable(ws, led, rem, act_key)
        polls = sum(1 for a in rem.attempts if a.effect == "poll")
        led.effect("poll", rem.node, rem, "poll", polls, ref=act_key, rule="S6",
                   why=f"is the {rem.action.value} of {rem.node} finished?")
        led.wake(ws.now + POLL_EVERY)
        return
    latest = finals[-1]
    if latest.outcome == "ok":
        done = latest.finished or ws.now
        led.step(rem, "returning", "L5", f"the {rem.action.value} finished; waiting for "
                 f"{rem.node} to come back and pass its health check",
                 data={"act_done": done})
        led.wake(ws.now + POLL_EVERY)
        return
    if latest.by_person:
        # SPEC S8 (issue 32 item 10): a person ended our action (their scancel of the
        # reset job): their hand. Not an E1 failure (no reboot follows): the
        # remediation is handed to them; the node stays as the job's end left it.
        endings.fail_to_person(
            ws, led, rem, "S8",
            f"the {rem.action.value} of {rem.node} was ended by a person ({latest.detail}); "
            f"{rem.id} is handed to them: nothing automatic on {rem.node} until a person acts",
            f"a person ended the {rem.action.value} of {rem.node}: it is theirs now (resume "
            "it, or request an action); slurm-heal does nothing automatic on it until a "
            "person acts", phase="cancelled")
        return
    if not latest.sent:
        # House style 2 (issue 8, defect 11): someone else took the node over between
        # our snapshot and the act; nothing ran. Not an E1 failure: a person decides.
        why = latest.detail.removeprefix(NOT_SENT)  # the words, not the flag
        endings.fail_to_person(
            ws, led, rem, "D5", f"the {rem.action.value} of {rem.node} was not sent: {why}",
            f"the {rem.action.value} of {rem.node} was not sent ({why}): the node is with "
            "that person now; nothing automatic on it until a person acts")
        return
    endings.fail(ws, led, rem, "L5", f"the {rem.action.value} failed"
                 + (f": {latest.detail}" if latest.detail else ""))


def returning(ws: WorkingSet, led: Ledger, rem: Remediation, node: NodeInfo) -> None:
    done = rem.data.act_done or rem.updated
    acted = acted_at(rem) or done
    rebooting = node.down or reasons.slurm_rebooting(node.states)
    back = (node.boot_time is not None and node.boot_time > acted) or not rebooting
    checked = ws.check_of(node.name).checked_at
    # The check that counts is one that ran on the node as it is now: after the boot
    # our action caused (the check at boot often runs before the provider reports
    # the operation finished), else after the action started.
    since = node.boot_time if node.boot_time is not None and node.boot_time > acted \
        else acted
    # SPEC L5: the node check always leaves checked_at (an empty alert list when
    # healthy); no check data at all passes only with safety.health_check=if_present.
    if checked is None:
        health_ran = ws.policy.safety.health_check == "if_present"
    else:
        # Slurm's BootTime is now - uptime in whole seconds and can stand up to a
        # second after the real boot: the check slurmd runs as it starts may carry an
        # earlier time (seen on 22.05 under load); never earlier than the act.
        health_ran = checked >= max(acted, since - BOOT_TIME_SLACK)
    limit = done + ws.policy.safety.return_timeout
    if back and health_ran:
        bad = [a for a in ws.active(rem.node)
               if a.last_seen > since and (a.severity is Severity.CRITICAL
                                           or a.fault == rem.data.evidence_fault)]
        # SPEC E6: a GPU reset restarts nothing; its outcome comes after the job's own
        # node check, so a fault seen since is the reset's failure, at once.
        restarted = rem.action is Action.RESET_GPU or any(
            t is not None and t > acted for t in (node.boot_time, node.slurmd_start_time))
        if bad and not restarted and ws.now < limit:
            # A cloud or BMC may report the reboot done once it accepted it, before
            # the node went down: a check that ran in between still sees the fault
            # from before the reboot. Not a failure until the node has restarted
            # (boot or slurmd start after the action) or the return timeout passes.
            led.wake(min(limit, ws.now + POLL_EVERY))
            return
        if bad:
            endings.fail(ws, led, rem, "L5", f"after the {rem.action.value} the health check still "
                         f"sees {', '.join(sorted({a.fault for a in bad}))}")
            return
        drained = person.person_drained(rem, node)
        if drained is not None and (ws.policy.gate.enabled or postgate.tries(rem)) \
                and not person.gate_lifted(ws, rem):
            # SPEC S8, V4 (issue 32 item 8): a person drained the node after the
            # action: their hand, recorded as such; no gate runs on a node of theirs
            # (never "the gate was interrupted" and a person later).
            endings.fail_to_person(
                ws, led, rem, "S8",
                f"{drained}: a person's hand wins; {rem.id} is handed to them, no "
                "post-repair gate runs",
                f"{drained}: {rem.node} is theirs now; slurm-heal does nothing automatic on "
                "it until a person acts", phase="cancelled")
            return
        gated = postgate.after_check(ws, led, rem, node)  # SPEC V4, before the resume
        if gated is None:
            return
        out = node.drained or node.down
        # Slurm may replace our marker with its own reboot reason (ReturnToService
        # 0/1): that boot is the one our action caused, so it is ours to clear.
        # A reboot still pending or under way (REBOOT_REQUESTED/ISSUED) is not the one
        # our finished action caused: someone asked Slurm for another one.
        whose = reasons.owner(node.reason)
        ours = whose == "ours" or (
            whose == "slurm" and node.boot_time is not None
            and node.boot_time > acted and not reasons.slurm_rebooting(node.states))
        if out and ours:
            led.effect("resume", rem.node, rem, "resume", reason=node.reason, rule="L5",
                       why="health check passed")
        led.step(rem, "done", "L5", f"{rem.node} is back and passed its health check"
                 + gated + ("; resumed" if out and ours else
                     "" if not out else "; its reason is not ours: not resumed"))
        return
    if ws.now >= limit:
        endings.fail(ws, led, rem, "L5", f"{rem.node} did not come back healthy within "
                     f"{format_duration(ws.policy.safety.return_timeout)}")
        return
    led.wake(min(limit, ws.now + POLL_EVERY))
