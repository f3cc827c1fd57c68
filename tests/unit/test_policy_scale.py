"""decide()'s work grows with the cluster and the open work, not with closed history
(issue 13; SPEC E1/E2/E3 and S2 still see the history they need).

Not timed: `decide_counted` reports how many stored remediations the rules looked at,
and these tests hold that number to the working set. The timings live in benchmarks/.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from slurm_heal.config import policy_from_dict
from slurm_heal.models import Attempt, Phase, Plan, Remediation, State
from slurm_heal.types import Action, Alert, ClusterView, NodeInfo, Severity
from tests.policycore import decide, decide_counted

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
POLICY = policy_from_dict({"approvals": {"default": "auto"}})
NODES = 200
ALERTING = tuple(f"n{i:03d}" for i in range(0, NODES, 50))  # 4 nodes, one per pool of 50


def view() -> ClusterView:
    return ClusterView(nodes=tuple(
        NodeInfo(name=f"n{i:03d}", states=frozenset({"IDLE"}), partitions=(f"p{i // 50}",))
        for i in range(NODES)))


def alerts() -> dict[str, list[Alert]]:
    seen = T0 - timedelta(hours=1)
    return {n: [Alert(node=n, fault="gpu.xid.119", severity=Severity.CRITICAL,
                      summary="GSP RPC timeout", first_seen=seen, last_seen=T0)]
            for n in ALERTING}


def closed(k: int, node: str, days_ago: float) -> Remediation:
    """A remediation that ended ``days_ago``: a reboot that was done."""
    at = T0 - timedelta(days=days_ago)
    return Remediation(
        id=f"h-{k:06d}", node=node, host=node, fault="gpu.xid.119", severity=Severity.CRITICAL,
        action=Action.REBOOT, phase=Phase.DONE, created=at, updated=at + timedelta(hours=1),
        phase_times={"proposed": at, "cordoned": at, "acting": at,
                     "done": at + timedelta(hours=1)},
        attempts=(Attempt(key=f"h-{k:06d}:act:0", effect="act", action=Action.REBOOT,
                          started=at, finished=at, outcome="ok"),))


def history(count: int) -> State:
    """``count`` closed remediations over a year, on the nodes that are not alerting now."""
    quiet = [f"n{i:03d}" for i in range(NODES) if f"n{i:03d}" not in ALERTING]
    return State(remediations=tuple(
        closed(k, quiet[k % len(quiet)], 365 * (k + 1) / (count + 1)) for k in range(count)))


def applied(state: State, plan: Plan) -> State:
    """The state after a plan, as the store keeps it (updates replace by id)."""
    rems = {r.id: r for r in state.remediations}
    rems.update({r.id: r for r in plan.updates})
    return state.model_copy(update={"remediations": tuple(rems.values())})


def test_decide_work_does_not_grow_with_closed_history() -> None:
    """A hundred times more closed history elsewhere: the same plan, the same work."""
    small, large = history(20), history(2000)
    plan_s, work_s = decide_counted(view(), small, T0, POLICY, alerts())
    plan_l, work_l = decide_counted(view(), large, T0, POLICY, alerts())
    assert len(plan_s.updates) == len(plan_l.updates) == len(ALERTING)
    assert work_l == work_s
    # The steady state (the remediations now open) too.
    state_s, state_l = applied(small, plan_s), applied(large, plan_l)
    later = T0 + timedelta(minutes=1)
    _, work_s = decide_counted(view(), state_s, later, POLICY, alerts())
    _, work_l = decide_counted(view(), state_l, later, POLICY, alerts())
    assert work_l == work_s
    # Bounded by the open work: a few looks per open remediation, not per stored one.
    assert work_l <= 10 * len(ALERTING)


def test_decide_work_counts_the_alerting_machine_history_e1_needs() -> None:
    """SPEC E1: the history of the machine at fault is looked at (and so counted); the
    third reboot within the week becomes a rebuild, whatever else the store holds."""
    node = ALERTING[0]
    own = (closed(900001, node, 2), closed(900002, node, 4))
    for state in (State(remediations=own), State(remediations=history(2000).remediations + own)):
        plan, work = decide_counted(view(), state, T0, POLICY, alerts())
        rem = next(r for r in plan.updates if r.node == node)
        assert rem.action is Action.REBUILD and rem.escalated_from is Action.REBOOT
        assert work >= len(own)


def test_decide_counted_plans_what_decide_plans() -> None:
    state = history(50)
    assert decide_counted(view(), state, T0, POLICY, alerts())[0] == \
        decide(view(), state, T0, POLICY, alerts())
