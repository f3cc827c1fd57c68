"""A person's resume during each phase of a remediation (issue 22 item 1, SPEC S8).

The real daemon as a process against the Slurm lab, the provider simulator over HTTP.
A remediation is brought to a phase (proposed on a node the node check drained; waiting
for a job; acting, the provider's reboot in flight; returning, waiting for the health
check), then a person runs `scontrol update state=resume` and the node check publishes
what it does after a person's resume (the faults seen so far as acknowledged, no alert).

Afterwards: the remediation is over, nothing was sent to the provider after the resume
(no reboot), the node is in service (never drained again by us), no new remediation
opened on it, and the store's history records what happened. CI runs each phase once;
``SLURM_HEAL_RELIABILITY=long`` runs each 5 times. The figures are printed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_heal import extra, reasons
from slurm_heal.models import Phase, Remediation
from slurm_heal.providers.simulator import SimulatorServer
from slurm_heal.slurm.cli import CliSlurm
from slurm_heal.types import Alert, Evidence, Severity
from tests.lab import Lab
from tests.reliability.harness import Figures, scaled
from tests.reliability.labrig import XID119, InstantBoot, LabDaemon

pytestmark = [pytest.mark.slurm, pytest.mark.reliability]

NODE = "gpu02"
PHASES = ("proposed", "waiting", "acting", "returning")
ROUNDS = scaled(1, 5)


def _alert(node: str) -> Alert:
    now = datetime.now(timezone.utc)
    return Alert(node=node, fault=XID119, severity=Severity.CRITICAL, summary=f"{XID119} seen",
                 first_seen=now, last_seen=now, detector="kernel_log",
                 evidence=(Evidence(source="kmsg", text=f"NVRM: Xid: {XID119}"),))


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def _round(lab: Lab, tmp: Path, slurm: CliSlurm, hook: InstantBoot,
           gate: threading.Event, phase: str) -> tuple[str, list[Remediation], str]:
    """One remediation brought to ``phase``, then a person's resume. Returns the
    remediation's id, the node's remediations at the end and what was undone ("")."""
    gate.clear()
    with SimulatorServer(port=0, on_action=hook, duration=0.2) as sim:
        d = LabDaemon(lab, tmp, sim)
        if phase == "proposed":  # a person approves; the node check drained the node
            d.config.write_text(d.config.read_text().replace('default = "auto"',
                                                             'default = "manual"'))
            lab.scontrol("update", f"nodename={NODE}", "state=drain",
                         "reason=" + reasons.format_marker(XID119, by="check",
                                                           text=f"{XID119} seen"))
        job = None
        if phase == "waiting":
            job = lab.run(["sbatch", "--parsable", "-w", NODE, "-t", "10", "--wrap",
                           "sleep 600"]).stdout.strip()
            lab.wait_for(lambda: bool({"ALLOCATED", "MIXED"} & lab.state(NODE)), timeout=30,
                         what="the job to run")
        alert = _alert(NODE)
        slurm.set_extra(NODE, extra.KEY, extra.our_section([alert], alert.first_seen))
        proc = d.start()
        try:
            d.wait(lambda: any(r.phase.value == phase for r in d.rems(NODE)),
                   f"a remediation on {NODE} in phase {phase}", timeout=90)
            if phase == "acting":  # the provider has the reboot (held by the gate)
                d.wait(lambda: any(o["node"] == NODE for o in sim.operations()),
                       "the provider to have the reboot")
            (rem,) = d.rems(NODE)
            ops_before = len([o for o in sim.operations() if o["node"] == NODE])
            # the person's resume, then what the node check publishes after it (S8)
            lab.scontrol("update", f"nodename={NODE}", "state=resume")
            slurm.set_extra(NODE, extra.KEY, extra.our_section(
                [], datetime.now(timezone.utc), acknowledged=[alert]))
            gate.set()
            d.wait(lambda: all(r.phase.terminal for r in d.rems(NODE)),
                   f"the remediation on {NODE} to end after the resume", timeout=90)
            time.sleep(2.0)  # a few more cycles: nothing more may happen
            ops_after = len([o for o in sim.operations() if o["node"] == NODE])
            after = d.rems(NODE)
            info = slurm.node(NODE)
        finally:
            if job:
                lab.run(["scancel", job], check=False)
            assert d.stop(proc) == 0, d.logs()
        assert "Traceback" not in d.logs(tail=10**7)
    undone = ""
    if ops_after != ops_before or info.drained or len(after) != 1:
        undone = (f"provider operations {ops_before}->{ops_after}, drained={info.drained} "
                  f"({info.reason!r}), remediations {[(r.id, r.phase.value) for r in after]}")
    return rem.id, after, undone


@pytest.mark.parametrize("phase", PHASES)
def test_a_persons_resume_in_each_phase_is_never_undone(
        lab_clean: Lab, tmp_path: Path, gate: threading.Event, phase: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    slurm = CliSlurm(slurm_conf=str(lab_clean.conf))
    hook = InstantBoot(slurm, gate=gate if phase == "acting" else None,
                       check=phase != "returning")
    fig = Figures()
    undone: list[str] = []
    for n in range(ROUNDS):
        (tmp := tmp_path / f"round-{n}").mkdir()
        rid, after, what = _round(lab_clean, tmp, slurm, hook, gate, phase)
        fig.remediations += len(after)
        fig.steps += sum(len(r.attempts) for r in after)
        if what:
            undone.append(f"round {n}: {what}")
        done = after[0]
        assert done.id == rid and done.phase.terminal
        if phase in ("proposed", "waiting"):  # before the act: it never runs
            # handed to the person (S8), not withdrawn as if the alert had cleared (L4)
            assert done.phase is Phase.CANCELLED, done.phase
            assert done.steps[-1].rule == "S8", done.steps[-1]
            assert not [a for a in done.attempts if a.effect == "act"]
    fig.notes.append(f"phase={phase} rounds={ROUNDS} persons' actions undone={len(undone)}")
    with capsys.disabled():
        print("\n" + fig.line("person's resume"))
    assert undone == []
