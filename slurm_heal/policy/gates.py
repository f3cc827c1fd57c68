"""The safety gates held before a remediation's next disruptive step: recommend-only,
pause, D5, the breaker (S5), the cooldown (S2), evidence (P1/Q4), migrate spares (E5),
concurrency (S3), one per pool (S4) and pool capacity (Q4)."""

from __future__ import annotations

from slurm_heal.config import format_duration
from slurm_heal.models import Remediation
from slurm_heal.policy.cordon import Cordon
from slurm_heal.policy.facts import POLL_EVERY, act_attempts, ended_at, is_automatic, iso
from slurm_heal.types import Action, NodeInfo


class Gates(Cordon):
    """The limits that hold a remediation back."""

    def blocked(self, rem: Remediation, rule: str, why: str) -> Remediation:
        if rem.data.blocked == rule:
            return rem
        rem = self.step(rem, "blocked", rule, why)
        return self.put(rem.model_copy(update={"data": rem.data.but(blocked=rule)}))

    def hold(self, rem: Remediation, rule: str, why: str) -> bool:
        """Record (once) that a limit holds ``rem`` back; always True."""
        self.blocked(rem, rule, why)
        return True

    def gate(self, rem: Remediation, starting: bool) -> bool:
        """The first limit that holds ``rem`` back from its next disruptive step, or None."""
        pol = self.policy
        if pol.mode == "recommend_only":
            return self.hold(rem, "recommend_only", f"recommend-only mode: would "
                                f"{'cordon ' + rem.node + ' and ' if starting else ''}"
                                f"{rem.action.value} now; nothing is executed")
        if self.paused:
            return self.hold(rem, "pause", "slurm-heal is paused: nothing disruptive "
                                "starts until a person unpauses it")
        if not starting:
            # Started remediations finish: the breaker stops new automatic work (S5);
            # holding a half-done one would only keep its node drained longer.
            return False
        node = self.node(rem.node)
        if node is not None and self.foreign(node):
            # SPEC D5 / house style 2: cordoning would replace someone else's reason with
            # our marker, and the resume at the end would undo their drain. Hold until
            # they resume the node (or turn their reason into a heal-request).
            return self.hold(rem, "D5", f"{rem.node} is {'DOWN' if node.down else 'drained'} "
                                f"by someone else ({node.reason!r}): slurm-heal does not "
                                "cordon over it; it waits until that person resumes the node")
        if is_automatic(rem) and self.breaker_gate(rem):
            return True
        ends = [t for r in self.of_node(rem.node) if r.phase.terminal
                and act_attempts(r) and (t := ended_at(r)) is not None]
        last_end = max(ends, default=None)
        if last_end is not None and self.now < last_end + pol.safety.cooldown:
            self.wake(last_end + pol.safety.cooldown)
            return self.hold(rem, "S2", f"cooldown: the last remediation on {rem.node} "
                                f"ended at {iso(last_end)}; the next may start "
                                f"{format_duration(pol.safety.cooldown)} later")
        if rem.origin != "alert":
            enough = (pol.requests.operator_is_evidence if rem.origin == "operator"
                      else pol.requests.detector_is_evidence)
            ev = self.evidence(rem.node)
            if ev is None and not enough:
                return self.hold(rem, "P1", f"no confirmed alert on {rem.node}: a request "
                                    "needs evidence (SPEC P1/Q4); it waits for one")
            if ev is not None and rem.data.evidence_fault is None and not enough:
                rem = self.put(rem.model_copy(update={
                    "data": rem.data.but(evidence_fault=ev.fault)}))
        started = [self.rems[i] for i in sorted(self.started_ids, key=self.pos.__getitem__)
                   if i != rem.id]
        self.touched += len(started)
        spares = pol.escalation.migrate_spares
        if rem.action is Action.MIGRATE and spares is not None:
            moving = sum(1 for r in started if r.action is Action.MIGRATE)
            if moving >= spares:
                return self.hold(rem, "E5", f"all {spares} reserved spare host(s) are in "
                                    "use by other migrations")
        limit = pol.safety.concurrency_limit(len(self.view.nodes))
        if len(started) >= limit:
            return self.hold(rem, "S3", f"{len(started)} remediation(s) already run; the "
                                f"limit for {len(self.view.nodes)} nodes is {limit}")
        pool = self.pool(rem.node)
        if pol.safety.one_per_pool:
            same = [r for r in started if self.pool(r.node) == pool]
            if same:
                return self.hold(rem, "S4", f"pool {pool} already has {same[0].id} on "
                                    f"{same[0].node}: one at a time per pool")
        members = [n for n in self.pool_members(pool) if n.name != rem.node]
        if members:
            busy = {r.node for r in started}
            up = [n for n in members if not (n.down or n.drained) and n.name not in busy]
            need = int(len(members) * pol.capacity.min_available_percent // 100)
            if len(up) < need:
                return self.hold(rem, "Q4", f"pool {pool}: only {len(up)} of {len(members)} "
                                    f"other nodes in service, {need} must stay")
        return False

    def breaker_gate(self, rem: Remediation) -> bool:
        """SPEC S5: N automatic starts within the window open the breaker."""
        pol = self.policy.safety
        if not self.breaker.open:
            since = self.now - pol.breaker_window
            if self.breaker.reset_at and self.breaker.reset_at > since:
                since = self.breaker.reset_at  # a reset starts a fresh count
            self.touched += len(self.recent_starts)
            starts = sum(1 for i in self.recent_starts if i != rem.id
                         and (t := self.rems[i].phase_times.get("cordoned")) is not None
                         and t >= since)
            if starts >= pol.breaker_threshold:
                why = (f"{starts} automatic remediations started within "
                       f"{format_duration(pol.breaker_window)} (threshold "
                       f"{pol.breaker_threshold}): the breaker opens; automatic remediation "
                       "stops until a person resets it")
                # Keep reset_by/reset_at: the count restarts from the last reset.
                self.breaker = self.breaker.model_copy(update={
                    "open": True, "opened_at": self.now, "why": why})
                self.breaker_changed = True
                return self.hold(rem, "S5", why)
        if self.breaker.open:
            return self.hold(rem, "S5", "the breaker is open: automatic remediation waits "
                                "for a person (slurm-heal breaker reset)")
        return False

    def taken_over(self, rem: Remediation, node: NodeInfo) -> bool:
        """House style 2 / D5 (issue 8): someone else drained (or downed) the node with a
        reason of their own after our cordon and before the act. Nothing disruptive runs
        on it (no signal, no eviction, no act): the remediation is held, recorded once
        and a person is told once. It goes on when our marker is back; when that person
        resumes the node, cordon_again() cancels it (the node is theirs)."""
        if not self.foreign(node):
            return False
        if rem.data.blocked != "D5":
            why = (f"{rem.node} was {'set DOWN' if node.down else 'drained'} by someone else "
                   f"({node.reason!r}) before the {rem.action.value} ran: nothing disruptive "
                   f"runs on it; {rem.id} is held until that person resumes the node "
                   "(the remediation is then cancelled) or cancels it")
            self.blocked(rem, "D5", why)
            n = sum(1 for a in rem.attempts if a.key.startswith(f"{rem.id}:notify-held:"))
            self.effect("notify", rem.node, rem, "notify-held", n, why=why, rule="D5")
        self.wake(self.now + POLL_EVERY)
        return True
