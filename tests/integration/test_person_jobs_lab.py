"""A person's hand and our maintenance jobs on the real Slurm lab (SPEC S8, E6, V4; issue
32 items 8 and 10): `slurm-heal daemon` as a process, the real node check, the GPU reset
and the post-repair gate as real Slurm jobs in real MAINT reservations, the provider
simulator whose reboot really reboots the lab node, and a person's own Slurm commands
(`scancel`, `scontrol update ... state=resume|drain`). The pure rules:
tests/unit/test_person_hand_jobs.py; the set-up: tests/integration/repairlab.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_heal.models import Phase
from slurm_heal.types import Action
from tests.integration.repairlab import GATE_PREFIX, RESET_PREFIX, Reset, gate_toml, installed
from tests.integration.test_daemon_lab import XID79
from tests.lab import Lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

XID119 = ("NVRM: Xid (PCI:0000:3b:00): 119, pid=1234, name=python3, Timeout after 6s of "
          "waiting for RPC response from GPU1 GSP!")


@pytest.fixture
def both(lab_clean: Lab, tmp_path: Path) -> Iterator[Reset]:
    """Reset and gate on, the reset tool's bound long enough to cancel its job by hand,
    and no S2 cooldown (a new fault after the hand-over is remediated at once)."""
    def make(sim: object) -> Reset:
        r = Reset(lab_clean, tmp_path, sim, timeout="2m", gate=gate_toml())  # type: ignore[arg-type]
        r.config.write_text(r.config.read_text().replace("[safety]\n",
                                                         '[safety]\ncooldown = "1s"\n', 1))
        return r
    with installed(lab_clean, make) as r:
        yield r


def _reset_job(r: Reset, key: str) -> str:
    return str(json.loads((r.results / "reset" / key.replace(":", "-") / "run.json")
                          .read_text())["job"])


def test_a_persons_scancel_of_the_reset_job_hands_it_to_them_and_never_reboots(
        lab: Lab, both: Reset) -> None:
    """SPEC S8, E6 (issue 32 item 10): the reset job runs (its tool hangs); a person
    cancels it with scancel: the remediation is handed to them (recorded, S8), no reboot
    and no second remediation; the node stays drained under our marker. The person then
    resumes it: the hand-over ends, and a new Xid on it is remediated again."""
    node = "gpu03"
    both.tool(rc=0, sleep=120)
    both.gpus(node, "0000:1b:00.0", "0000:3b:00.0")
    both.kernel_says(node, XID119)
    assert both.check(node).returncode == 1 and "DRAIN" in lab.state(node)
    both.start_daemon()
    both.wait(lambda: "MAINTENANCE" in lab.state(node) and both.calls(),
              f"{node}: the reset job running in its reservation", timeout=90)
    (rem,) = both.rems(node)
    act = next(a for a in rem.attempts if a.effect == "act")
    job = _reset_job(both, act.key)
    lab.run(["scancel", job])  # a person's hand

    def ended() -> object:
        rems = both.rems(node)
        return rems and rems[0].phase.terminal
    both.wait(ended, f"{node}: the reset ended", timeout=90)
    (rem,) = both.rems(node)
    assert rem.phase is Phase.CANCELLED and rem.data.handed_to_person, rem.steps
    s8 = [s for s in rem.steps if s.rule == "S8"]
    assert s8 and "ended by a person" in s8[0].why and "scancel" in s8[0].why, rem.steps
    assert next(a for a in rem.attempts if a.effect == "act").by_person
    lab.wait_for(lambda: RESET_PREFIX not in both.reservations(), timeout=30,
                 what="the reset's reservation removed")
    assert "DRAIN" in lab.state(node)
    assert f"rem={rem.id}" in lab.scontrol("show", "node", node).stdout
    lab.wait_for(lambda: any(d.get("rule") == "E1" and d.get("phase") == "blocked"
                             for d in both.store.load().data.get("decisions", [])),
                 timeout=30, what="the 'with a person' record")
    assert [r.id for r in both.rems(node)] == [rem.id]  # no reboot recommended
    assert both.executed() == {}  # nothing sent to the provider

    # the person resumes it; its check acknowledges what it had published
    lab.scontrol("update", f"nodename={node}", "state=resume")
    both.check(node)
    assert "DRAIN" not in lab.state(node)
    # a new Xid after that: remediated again (the hand-over has ended)
    both.tool(rc=0, say="GPU 00000000:3B:00.0 was successfully reset.\n", sleep=0)
    both.kernel_says(node, XID119.replace("pid=1234", "pid=4321"))
    assert both.check(node).returncode == 1 and "DRAIN" in lab.state(node)
    both.wait(lambda: len(both.rems(node)) == 2, f"{node}: the new Xid remediated", 60)
    new = both.rems(node)[-1]
    assert new.id != rem.id and new.fault == "gpu.xid.119" and new.action is Action.RESET_GPU


def _back_unchecked(r: Reset, node: str) -> None:
    """Xid 79 -> the reboot (the provider simulator reboots the lab node); the boot's
    health check is held back (the test runs it), so the remediation waits in
    ``returning`` with the node back and drained under our marker."""
    r._stop.set()  # no boot watcher: the test is HealthCheckProgram now
    r.kernel_says(node, XID79)
    assert r.check(node).returncode == 1 and "DRAIN" in r.lab.state(node)
    r.start_daemon()

    def returning() -> object:
        rems = r.rems(node)
        return rems and rems[-1].phase is Phase.RETURNING and r.executed()
    r.wait(returning, f"{node}: the reboot done, the remediation returning", timeout=90)
    r.lab.wait_for(lambda: {"IDLE", "DRAIN"} <= r.lab.state(node)
                   and "DOWN" not in r.lab.state(node), timeout=60,
                   what=f"{node} back, drained under our marker")


def test_a_persons_resume_while_returning_wins_no_gate_and_no_drain_after_it(
        lab: Lab, both: Reset) -> None:
    """SPEC S8, V4 (issue 32 item 8): after the reboot, before the gate, a person resumes
    the node: the remediation is handed back to them; no gate reservation, no gate job,
    and the gate that would have failed never drains the node again."""
    node = "gpu02"
    both.gate_tool(rc=1)  # the gate would fail (and drain) if it ran
    _back_unchecked(both, node)
    lab.scontrol("update", f"nodename={node}", "state=resume")  # a person's hand

    def handed_back() -> object:
        rems = both.rems(node)
        return rems and rems[-1].phase is Phase.CANCELLED
    both.wait(handed_back, f"{node}: handed back to the person", timeout=60)
    both.new_boot(node)  # the boot's fresh kernel log; its check now
    both.check(node)
    (rem,) = both.rems(node)
    assert rem.steps[-1].rule == "S8" and "resumed by a person" in rem.steps[-1].why
    assert rem.data.resumed_by_person and not [a for a in rem.attempts if a.effect == "gate"]
    lab.wait_for(lambda: not both.gate_runs(node) and lab.state(node) == {"IDLE"},
                 timeout=10, what="still nothing gated")
    import time
    time.sleep(5)  # a few daemon cycles: nothing is reserved or drained
    assert not both.gate_runs(node) and GATE_PREFIX not in both.reservations()
    assert lab.state(node) == {"IDLE"} and both.rems(node) == [rem]


def test_a_persons_drain_after_the_action_is_a_hand_over_not_an_interrupted_gate(
        lab: Lab, both: Reset) -> None:
    """SPEC S8, V4 (issue 32 item 8): after the reboot a person drains the node with
    their own reason: once it is checked, the remediation is handed to that person
    (recorded, S8), no gate runs, and their drain stays; never "failed V4: the gate
    interrupted 2 times"."""
    node = "gpu04"
    both.gate_tool(rc=0)
    _back_unchecked(both, node)
    lab.scontrol("update", f"nodename={node}", "state=drain", "reason=alice: cable check")
    both.new_boot(node)
    both.check(node)

    def ended() -> object:
        rems = both.rems(node)
        return rems and rems[-1].phase.terminal
    both.wait(ended, f"{node}: the remediation ended", timeout=60)
    (rem,) = both.rems(node)
    assert rem.phase is Phase.CANCELLED and rem.data.handed_to_person, rem.steps
    assert [s.rule for s in rem.steps[-2:]] == ["S8", "S8"], rem.steps
    assert "drained by a person ('alice: cable check')" in rem.steps[-2].why
    assert not [a for a in rem.attempts if a.effect == "gate"] and not both.gate_runs(node)
    assert "Reason=alice: cable check" in lab.scontrol("show", "node", node).stdout
    assert GATE_PREFIX not in both.reservations()


def test_a_persons_scancel_of_the_gate_job_hands_it_to_them_and_the_gate_is_not_rerun(
        lab: Lab, both: Reset) -> None:
    """SPEC S8, V4 (issue 32 item 10): the post-repair gate's job runs after the reboot;
    a person cancels it: the remediation is handed to them (S8), the gate is not run
    again, the node stays drained under our cordon (as it was before the gate), no
    reservation is left and nothing more is sent to the provider."""
    node = "gpu01"
    both.gate_tool(rc=0)
    (both.gate_bin / "sleep").write_text("120\n")
    both.kernel_says(node, XID79)
    assert both.check(node).returncode == 1
    both.start_daemon()

    def running() -> object:
        runs = both.gate_runs(node)
        return runs[0] if runs and runs[0].phase == "running" and runs[0].job_id else None
    first = lab.wait_for(running, timeout=150, what="the gate job running")
    lab.wait_for(lambda: "RUNNING" in lab.run(["squeue", "-h", "-j", str(first.job_id), "-o",
                                                "%T"], check=False).stdout, timeout=60,
                 what="job running")
    lab.run(["scancel", str(first.job_id)])  # a person's hand

    def ended() -> object:
        rems = both.rems(node)
        return rems and rems[-1].phase.terminal
    both.wait(ended, f"{node}: the remediation ended", timeout=90)
    (rem,) = both.rems(node)
    assert rem.phase is Phase.CANCELLED and rem.data.handed_to_person, rem.steps
    assert "cancelled the post-repair gate" in rem.steps[-2].why, rem.steps
    (run,) = both.gate_runs(node)  # not run again
    assert run.phase == "interrupted" and run.by_person and run.job_state == "CANCELLED"
    assert "DRAIN" in lab.state(node) and f"rem={rem.id}" in lab.scontrol(
        "show", "node", node).stdout
    assert GATE_PREFIX not in both.reservations()
    assert list(both.executed().values()) == [1]  # the reboot, once
