"""A person's word is kept and shown as it was meant (SPEC P4, P2, L3, Q1).

approve / deny / cancel / request reasons land on the remediation and show in `history`,
`explain` and `--json`; a remediation still waiting for a person never reads "approved",
a denied one never reads "approved by"; a request that waits for an open remediation is
not lost when that one ends. The engine is the real `decide()`; the store is a real one.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from click.testing import CliRunner, Result

from slurm_heal.cli import cli
from slurm_heal.config import policy_from_dict
from slurm_heal.models import Command, Phase, Plan, Remediation, State
from slurm_heal.readmodel.words import approval
from slurm_heal.store import Store
from slurm_heal.types import Action
from tests.unit.test_policy_engine import T0, alert, apply, node, phases, run

MANUAL = policy_from_dict({})  # approvals.default = manual


def cli_run(store: Store, args: list[str]) -> Result:
    env = {"SLURM_HEAL_STATE_DIR": str(store.dir), "SLURM_HEAL_CONFIG": None}
    return CliRunner().invoke(cli, args, env=env)


def stored(tmp_path: Path, state: State) -> Store:
    store = Store(tmp_path / "state")
    store.apply(Plan(updates=state.remediations), T0)
    return store


def proposed_state() -> State:
    p0 = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]}, policy=MANUAL)
    return apply(State(), p0)


def after(state: State, cmd: Command) -> State:
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01")]},
               state.model_copy(update={"inbox": (cmd,)}), T0 + timedelta(minutes=1),
               policy=MANUAL)
    return apply(state.model_copy(update={"inbox": (cmd,)}), plan)


def test_a_remediation_waiting_for_a_person_never_reads_approved(tmp_path: Path) -> None:
    store = stored(tmp_path, proposed_state())
    out = cli_run(store, ["history", "gpu01"]).output
    assert "waiting for a person's approval (P2:default" in out
    assert "approved by" not in out
    assert "approved by" not in cli_run(store, ["explain", "gpu01"]).output


def test_approve_reason_is_kept_on_the_remediation_and_shown(tmp_path: Path) -> None:
    """SPEC P4: who approved and why, in history and --json."""
    cmd = Command(id="c1", at=T0, kind="approve", by="bob", node="gpu01",
                  reason="checked the Xid, reboot is fine")
    state = after(proposed_state(), cmd)
    (rem,) = state.remediations
    step = next(s for s in rem.steps if s.phase == "approved")
    assert step.by == "bob" and "checked the Xid, reboot is fine" in step.why
    store = stored(tmp_path, state)
    assert "approved by bob: checked the Xid, reboot is fine" in \
        cli_run(store, ["history", "gpu01"]).output
    data = json.loads(cli_run(store, ["history", "gpu01", "--json"]).stdout)
    assert any("checked the Xid" in s["why"] and s["by"] == "bob"
               for s in data["remediations"][0]["steps"])


def test_a_denied_remediation_reads_denied_with_the_reason(tmp_path: Path) -> None:
    cmd = Command(id="c1", at=T0, kind="deny", by="bob", node="gpu01",
                  reason="vendor ticket open, leave it")
    state = after(proposed_state(), cmd)
    assert state.remediations[0].phase is Phase.DENIED
    out = cli_run(stored(tmp_path, state), ["history", "gpu01"]).output
    assert "denied by bob: vendor ticket open, leave it" in out
    assert "approved by" not in out


def test_a_detector_request_without_id_names_no_id_none(tmp_path: Path) -> None:
    reason = "heal-request: reboot detector=kernel_log flapping"
    nodes = [node("gpu01", "IDLE", "DRAIN", reason=reason), node("gpu02")]
    plan = run(nodes, {"gpu01": [alert("gpu01")]}, policy=MANUAL)
    out = cli_run(stored(tmp_path, apply(State(), plan)), ["history", "gpu01"]).output
    assert "(detector kernel_log)" in out and "id None" not in out


def test_after_deny_a_detector_drain_says_a_person_resumes_the_node() -> None:
    """Q1 / house style 2: the detector's drain is not ours to undo; the record says who."""
    reason = "heal-request: reboot detector=ibmon id=7 port flapping"
    nodes = [node("gpu01", "IDLE", "DRAIN", reason=reason), node("gpu02")]
    s = apply(State(), run(nodes, {"gpu01": [alert("gpu01")]}, policy=MANUAL))
    cmd = Command(id="c1", at=T0, kind="deny", by="bob", node="gpu01")
    plan = run(nodes, {"gpu01": [alert("gpu01")]}, s.model_copy(update={"inbox": (cmd,)}),
               T0 + timedelta(minutes=1), policy=MANUAL)
    (denied,) = [r for r in plan.updates if r.phase is Phase.DENIED]
    assert denied.origin == "request"
    last = denied.steps[-1]
    assert "a person resumes it: scontrol update nodename=gpu01 state=resume" in last.why
    assert "release" not in [e.kind for e in plan.effects]  # the detector's reason stays


def stored_with_inbox(tmp_path: Path, state: State) -> Store:
    store = stored(tmp_path, state)
    for cmd in state.inbox:
        store.add_command(cmd)
    return store


def test_a_request_that_waits_for_an_open_remediation_survives_its_cancel(
        tmp_path: Path) -> None:
    """L3: one remediation per node at a time; the second request waits (kept in the
    inbox) and runs when the first ends, instead of vanishing."""
    nodes = [node("gpu01"), node("gpu02")]
    al = {"gpu01": [alert("gpu01")]}
    first = proposed_state()
    req = Command(id="c2", at=T0, kind="request", by="alice", node="gpu01",
                  action=first.remediations[0].action, reason="after the other one")
    waiting = first.model_copy(update={"inbox": (req,)})
    p1 = run(nodes, al, waiting, T0 + timedelta(minutes=1), policy=MANUAL)
    assert ("blocked", "L3") in phases(p1) and "c2" not in p1.consumed
    s1 = apply(waiting, p1)
    assert [c.id for c in s1.inbox] == ["c2"]
    shown = cli_run(stored_with_inbox(tmp_path, s1), ["remediations"]).output
    assert f"request gpu01 (waits for {first.remediations[0].id} to end, rule L3)" in shown
    cancel = Command(id="c3", at=T0, kind="cancel", by="bob", node="gpu01")
    s2 = apply(s1.model_copy(update={"inbox": (cancel, *s1.inbox)}),
               run(nodes, al, s1.model_copy(update={"inbox": (cancel, *s1.inbox)}),
                   T0 + timedelta(minutes=2), policy=MANUAL))
    p3 = run(nodes, al, s2, T0 + timedelta(minutes=3), policy=MANUAL)
    assert "c2" in p3.consumed
    new = [r for r in p3.updates if r.origin == "operator"]
    assert new and "after the other one" in new[0].steps[0].why


def test_who_approved_is_read_from_the_approval_step_never_from_its_words() -> None:
    """SPEC P4, issue 33: the approval as it stands comes from the typed step (its
    ``by``: a person's approve command), not from how its sentence begins. A person's own
    request approves itself (no ``by``) and reads "who requested it" whatever its words."""
    cmd = Command(id="c1", at=T0, kind="approve", by="bob", node="gpu01", reason="ok")
    (rem,) = after(proposed_state(), cmd).remediations
    assert approval(rem) == "approved by bob: ok"
    i = next(i for i, s in enumerate(rem.steps) if s.phase == "approved")

    def reworded(why: str, by: str | None) -> Remediation:
        steps = list(rem.steps)
        steps[i] = steps[i].model_copy(update={"why": why, "by": by})
        return rem.model_copy(update={"steps": tuple(steps)})

    assert approval(reworded("bob approved it: ok", "bob")) == "bob approved it: ok"
    assert approval(reworded("approved by bob", None)) == \
        "approved by bob (who requested it)"


def test_a_persons_own_request_reads_approved_by_who_requested_it(tmp_path: Path) -> None:
    """SPEC P2, P4: a person's request needs no second approval; history says so."""
    cmd = Command(id="c1", at=T0, kind="request", by="alice", node="gpu01",
                  action=Action.REBOOT)
    state = after(State(), cmd)
    (rem,) = state.remediations
    assert rem.approved_by == "alice"
    assert approval(rem) == "approved by alice (who requested it)"
    assert "approved by alice (who requested it)" in \
        cli_run(stored(tmp_path, state), ["history", "gpu01"]).output
