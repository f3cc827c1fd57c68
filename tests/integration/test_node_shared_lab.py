"""A node shared by the node check, our Prolog/Epilog, our maintenance jobs and a person,
on the real Slurm lab (issue 32 items 1, 2, 3, 7, 11; SPEC S8, D1, E6, V1, V4, I1, O1).

* A person's resume acknowledges only what was published before it: a new Xid 79 written
  to the real /dev/kmsg right after the resume drains the node at once, with the check
  run by hand and with the node agent following the kernel log (item 1).
* While our own maintenance reservation holds the node (the controller lifted its drain
  for the GPU reset), the check publishes but never drains nor takes it for a person's
  resume (item 2); a site's own reservation is a person's resume like any other (item 7).
* Our Prolog and Epilog, run by slurmd, let our own reset job through in our reservation,
  and fail a job named like ours outside it (item 3); a crash of the check itself never
  fails the job nor drains the node, and is said in Extra (item 11).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_heal.slurm.cli import CliSlurm
from tests.integration.test_check_lab import NOISE, XID79, Replay
from tests.lab import Lab

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
GLUE = REPO / "slurm_heal" / "glue"
ONLY_KERNEL_LOG = "".join(f"[{s}]\nenabled = false\n" for s in (
    "mounts", "gpus", "services", "nvidia", "amd", "infiniband", "network", "disk"))


def ours(client: CliSlurm, node: str) -> dict[str, Any]:
    value = (client.node(node).extra or {}).get("slurm_heal")
    return value if isinstance(value, dict) else {}


def reserve(lab: Lab, name: str, node: str, *flags: str) -> None:
    """A reservation as the GPU reset creates it (`validation.slurmjobs.reserve`), or,
    with other flags, a site's own."""
    lab.scontrol("create", "reservation", f"ReservationName={name}", "StartTime=now",
                 "Duration=infinite", *flags, "Users=root", f"Nodes={node}")


def unreserve(lab: Lab, *names: str) -> None:
    for name in names:
        lab.scontrol("delete", f"ReservationName={name}", check=False)


# ---------------------------------------------------------------- the real /dev/kmsg

def kmsg_writable() -> str:
    if os.geteuid() != 0 or not os.access("/dev/kmsg", os.W_OK):
        return "writing the real /dev/kmsg needs root"
    return ""


def kmsg_xid(bus: str) -> str:
    """A new Xid 79 record in the real kernel log (what the driver writes), unique."""
    pid = random.randrange(10_000, 99_999)
    line = (f"NVRM: Xid (PCI:0000:{bus}:00): 79, pid={pid}, name=slurm-heal-test, "
            "GPU has fallen off the bus.")
    with open("/dev/kmsg", "w") as fh:
        fh.write(f"<4>{line}\n")
    return line


@pytest.fixture
def real_node(tmp_path: Path) -> Path:
    """check.toml for the real kernel log (only the kernel-log detector: the lab's nodes
    share this machine), its state of its own."""
    cfg = tmp_path / "check.toml"
    cfg.write_text(f'[check]\nstate_dir = "{tmp_path / "state"}"\n' + ONLY_KERNEL_LOG)
    return cfg


def real_check(lab: Lab, node: str, cfg: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in lab.env.items() if k != "SLURM_HEAL_ROOT"}
    return subprocess.run([sys.executable, "-m", "slurm_heal.checks", "--node", node,
                           "--check-config", str(cfg)], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.skipif(bool(kmsg_writable()), reason=kmsg_writable() or "ok")
def test_a_new_xid_in_the_real_kernel_log_right_after_a_persons_resume_drains_the_node(
        lab_clean: Lab, real_node: Path) -> None:
    """SPEC S8, D1 (issue 32 item 1): drained for an Xid 79 from the real /dev/kmsg, a
    person resumes the node, and right after it another GPU falls off the bus. The run
    that notices the resume is the one that reads the new Xid: it was never published,
    so the node is drained again for it, and nothing is acknowledged."""
    node = lab_clean.nodes[0]
    client = CliSlurm(slurm_conf=str(lab_clean.conf))
    kmsg_xid("3b")
    out = real_check(lab_clean, node, real_node)
    assert out.returncode == 1, out.stdout + out.stderr
    assert client.node(node).reason.startswith("heal: gpu.xid.79 by=check")
    lab_clean.scontrol("update", f"nodename={node}", "state=resume")  # a person
    new = kmsg_xid("86")
    out = real_check(lab_clean, node, real_node)
    assert out.returncode == 1, out.stdout + out.stderr
    info = client.node(node)
    assert info.drained and info.reason.startswith("heal: gpu.xid.79 by=check"), info.reason
    section = ours(client, node)
    assert "gpu.xid.79" in [a["fault"] for a in section["alerts"]]
    # (other kernel records of this machine's log may be acknowledged; never the Xid 79)
    assert "gpu.xid.79" not in [a["fault"] for a in section.get("acknowledged", [])]
    assert "0000:86:00" in out.stdout, out.stdout  # the new Xid is among the findings
    assert new


@pytest.fixture
def agent(lab_clean: Lab, real_node: Path) -> Iterator[str]:
    """The node agent on the real /dev/kmsg for the lab's first node (full check every
    60 s: what drains in between is the follower's doing)."""
    node = lab_clean.nodes[1]
    env = {k: v for k, v in lab_clean.env.items() if k != "SLURM_HEAL_ROOT"}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "slurm-heal"), "agent", "--node", node,
                             "--interval", "60", "--check-config", str(real_node)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    client = CliSlurm(slurm_conf=str(lab_clean.conf))
    try:
        lab_clean.wait_for(lambda: ours(client, node).get("checked_at"), timeout=60,
                           what="the agent's first check")
        yield node
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.skipif(bool(kmsg_writable()), reason=kmsg_writable() or "ok")
def test_with_the_agent_each_new_xid_after_a_persons_resume_drains_within_a_second(
        lab_clean: Lab, agent: str) -> None:
    """SPEC S8, D1 (issue 32 items 1, 12): the agent wakes on the new kernel record; its
    run notices the person's resume and the new Xid together, and drains at once."""
    node = agent
    client = CliSlurm(slurm_conf=str(lab_clean.conf))
    kmsg_xid("3b")
    lab_clean.wait_for(lambda: client.node(node).drained, timeout=10, interval=0.05,
                       what="the first Xid drained")
    took = []
    for bus in ("86", "af", "d8"):
        lab_clean.scontrol("update", f"nodename={node}", "state=resume")  # a person
        assert not client.node(node).drained
        t0 = time.monotonic()
        kmsg_xid(bus)
        lab_clean.wait_for(lambda: client.node(node).drained, timeout=10, interval=0.02,
                           what=f"the Xid on {bus} after the resume drained")
        took.append(time.monotonic() - t0)
        # (this machine's kernel log is shared: another Xid may be the one named)
        assert client.node(node).reason.startswith("heal: gpu.xid."), client.node(node).reason
    assert max(took) < 2.0, took


# ---------------------------------------------------------------- reservations

@pytest.fixture
def replay(tmp_path: Path) -> Replay:
    return Replay(tmp_path / "node")


def check(lab: Lab, replay: Replay, node: str) -> subprocess.CompletedProcess[str]:
    env = dict(lab.env, SLURM_HEAL_ROOT=str(replay.root))
    return subprocess.run([sys.executable, "-m", "slurm_heal.checks", "--node", node],
                          env=env, capture_output=True, text=True, timeout=120)


def test_the_check_never_drains_a_node_our_reset_reservation_holds(
        lab_clean: Lab, replay: Replay) -> None:
    """SPEC E6, V1, V4 (issue 32 item 2): the controller lifted its drain to run the GPU
    reset in its MAINT reservation; the check's next runs publish the Xid (an alert, not
    acknowledged: no person acted) and never drain the node: the job's result decides."""
    node = lab_clean.nodes[2]
    name = f"slurm-heal-reset-{node}"
    client = CliSlurm(slurm_conf=str(lab_clean.conf))
    replay.inject(XID79)
    assert check(lab_clean, replay, node).returncode == 1
    assert client.node(node).drained
    reserve(lab_clean, name, node, "Flags=MAINT,IGNORE_JOBS")
    try:
        lab_clean.scontrol("update", f"nodename={node}", "state=resume")  # the controller
        for _ in range(2):
            out = check(lab_clean, replay, node)
            assert out.returncode == 1, out.stdout + out.stderr
            info = client.node(node)
            assert not info.drained, info.reason
            section = ours(client, node)
            assert [a["fault"] for a in section["alerts"]] == ["gpu.xid.79"]
            assert "acknowledged" not in section
            assert f"held by our maintenance reservation {name}" in out.stdout
    finally:
        unreserve(lab_clean, name)


def test_a_persons_resume_in_a_sites_reservation_is_not_undone(
        lab_clean: Lab, replay: Replay) -> None:
    """SPEC S8 (issue 32 item 7): a node in a site's own reservation (IDLE+RESERVED), and
    one in a reservation named like ours that is not ours (no MAINT flag), drained by the
    check and resumed by a person: the next checks acknowledge the fault and leave it in
    service, as without a reservation."""
    node = lab_clean.nodes[3]
    client = CliSlurm(slurm_conf=str(lab_clean.conf))
    names = ("site-window", f"slurm-heal-gate-{node}")
    for name in names:
        replay.boot(f"boot-{name}", NOISE)
        reserve(lab_clean, name, node)
        try:
            # Slurm 22.05 shows RESERVED in the node's state only from its next pass
            lab_clean.wait_for(lambda: "RESERVED" in lab_clean.state(node), timeout=150,
                               interval=1, what=f"{node} shown RESERVED")
            replay.inject(XID79)
            assert check(lab_clean, replay, node).returncode == 1
            assert client.node(node).drained
            lab_clean.scontrol("update", f"nodename={node}", "state=resume")  # a person
            for _ in range(2):
                out = check(lab_clean, replay, node)
                assert out.returncode == 0, out.stdout + out.stderr
                info = client.node(node)
                assert not info.drained, (name, info.reason)
                assert [a["fault"] for a in ours(client, node)["acknowledged"]] == ["gpu.xid.79"]
        finally:
            unreserve(lab_clean, name)
        lab_clean.reset_node(node)
        lab_clean.scontrol("update", f"nodename={node}", "extra=")


# ---------------------------------------------------------------- our Prolog and Epilog

class PrologLab:
    """A lab whose slurmd runs our Prolog and Epilog glue (slurm_heal/glue), each node's
    check on a replay root of its own; ``crash(node)`` makes that node's check break."""

    def __init__(self, base: Path, slurm: str) -> None:
        self.base = base
        self.roots = base / "roots"
        bindir = base / "bin"
        bindir.mkdir(parents=True)
        self.program = bindir / "slurm-heal"
        crash = ("import sys, slurm_heal.checks.runner as r; r.to_alerts = None; "
                 "from slurm_heal.checks import fastcli; sys.exit(fastcli.main(sys.argv[1:]))")
        self.program.write_text(
            "#!/bin/sh\n[ \"$1\" = check ] && shift\n"
            f'export SLURM_HEAL_ROOT="{self.roots}/$SLURMD_NODENAME"\n'
            f'if [ -e "{base}/crash-$SLURMD_NODENAME" ]; then\n'
            f'  exec "{sys.executable}" -c "{crash}" "$@"\nfi\n'
            f'exec "{sys.executable}" -m slurm_heal.checks "$@"\n')
        self.program.chmod(0o755)
        self.lab = Lab(base / "lab", nodes=3, slurm=slurm,
                       conf_lines=[f"Prolog={bindir}/prolog", f"Epilog={bindir}/epilog"])
        # the lab's Slurm commands first, as install-node writes it (SLURM_HEAL_SLURM_BIN)
        commands = self.lab.path_prefix.split(":", 1)[0]
        for kind in ("prolog", "epilog"):
            script = bindir / kind
            script.write_text(f'#!/bin/sh\nexport SLURM_CONF="{self.lab.conf}" '
                              f'SLURM_HEAL_BIN="{self.program}" '
                              f'SLURM_HEAL_SLURM_BIN="{commands}"\n'
                              f'exec "{GLUE / ("slurm-heal-" + kind)}"\n')
            script.chmod(0o755)
        self.replays = {n: Replay(self.roots / n) for n in self.lab.nodes}

    @property
    def client(self) -> CliSlurm:
        return CliSlurm(slurm_conf=str(self.lab.conf))

    def check(self, node: str) -> subprocess.CompletedProcess[str]:
        return check(self.lab, self.replays[node], node)

    def crash(self, node: str) -> None:
        (self.base / f"crash-{node}").write_text("")

    def job(self, node: str, *args: str) -> str:
        out = self.lab.run(["sbatch", "--parsable", "-w", node, "-t", "2", *args, "--wrap",
                            "true"]).stdout
        return out.strip().split(";")[0]

    def job_state(self, job: str) -> str:
        shown = self.lab.scontrol("show", "job", job).stdout
        return shown.split("JobState=", 1)[1].split()[0] if "JobState=" in shown else ""

    def ended(self, job: str) -> str:
        return self.lab.wait_for(lambda: self.job_state(job) if self.job_state(job) in (
            "COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL") else "", timeout=60,
                                 interval=0.5, what=f"job {job} to end")


@pytest.fixture(scope="module")
def prolog_lab(tmp_path_factory: pytest.TempPathFactory, lab: Lab,
               request: pytest.FixtureRequest) -> Iterator[PrologLab]:
    pl = PrologLab(tmp_path_factory.mktemp("prolog"), str(request.config.getoption("--slurm")))
    pl.lab.start()
    try:
        yield pl
    finally:
        pl.lab.stop()


def test_our_prolog_lets_our_reset_job_through_and_fails_one_only_named_like_it(
        prolog_lab: PrologLab) -> None:
    """SPEC S8, E6, I1 (issue 32 item 3): the node's Xid is still latched when the
    controller runs the GPU reset on it in our MAINT reservation, as root: our Prolog
    lets it run and neither the Prolog nor the Epilog drains the node. A job that only
    carries our reservation's name as its name, on a faulty node outside a reservation,
    is stopped by the Prolog as every user's job is (the node drained with our reason)."""
    pl = prolog_lab
    node, other = pl.lab.nodes[0], pl.lab.nodes[1]
    name = f"slurm-heal-reset-{node}"
    pl.replays[node].inject(XID79)
    assert pl.check(node).returncode == 1
    assert pl.client.node(node).drained
    reserve(pl.lab, name, node, "Flags=MAINT,IGNORE_JOBS")
    try:
        pl.lab.scontrol("update", f"nodename={node}", "state=resume")  # the controller
        job = pl.job(node, f"--reservation={name}", f"--job-name={name}")
        assert pl.ended(job) == "COMPLETED", pl.lab.scontrol("show", "job", job).stdout
        time.sleep(1.0)  # the Epilog has run
        info = pl.client.node(node)
        assert not info.drained, info.reason
        assert [a["fault"] for a in ours(pl.client, node)["alerts"]] == ["gpu.xid.79"]
    finally:
        unreserve(pl.lab, name)
    pl.replays[other].inject(XID79)  # latched, never checked yet
    job = pl.job(other, f"--job-name=slurm-heal-reset-{other}")
    pl.lab.wait_for(lambda: pl.client.node(other).drained, timeout=60,
                    what=f"{other} drained by the Prolog")
    assert pl.client.node(other).reason.startswith("heal: gpu.xid.79 by=check")
    assert pl.job_state(job) != "COMPLETED"
    pl.lab.run(["scancel", job], check=False)


def test_a_crash_of_the_check_in_the_prolog_lets_the_job_run_and_is_said_in_extra(
        prolog_lab: PrologLab) -> None:
    """SPEC I1, O1 (issue 32 item 11): the check itself breaks (forced: an unexpected
    exception inside it) in the Prolog slurmd runs: the job runs to its end, the node is
    not drained (neither by us nor by Slurm's prolog failure), and the node's Extra says
    the check failed, as a record-only alert."""
    pl = prolog_lab
    node = pl.lab.nodes[2]
    pl.crash(node)
    job = pl.job(node)
    assert pl.ended(job) == "COMPLETED", pl.lab.scontrol("show", "job", job).stdout
    info = pl.client.node(node)
    assert not info.drained, info.reason
    alerts = ours(pl.client, node).get("alerts", [])
    assert [(a["fault"], a["detector"]) for a in alerts] == [("check.detector_error", "check")]
    assert "the node check itself failed" in alerts[0]["summary"]
