"""Install to first remediation, the documented way, with the checks run by slurmd
(SPEC I1, L1-L5, P2, Q4): the README's install into a fresh prefix (`python3 -m venv` +
`pip install` of this checkout + `slurm-heal install-node`), the README's slurm.conf
lines in a private lab, and a remediation to resume in which HealthCheckProgram and
Prolog are really run by slurmd:

* slurmd's HealthCheckProgram (the installed wrapper, no SLURM_CONF from slurmd) publishes
  every node's check at start;
* a job asks for gpu02 whose kernel logged Xid 119: the Prolog's check drains gpu02 with
  our reason and fails, Slurm requeues the job without holding it
  (`nohold_on_prolog_fail`);
* the daemon (the installed one) auto-approves the reboot (P2), the `slurm` provider
  reboots gpu02 through Slurm (the lab's RebootProgram gives its replay root a new boot),
  the node stays drained through the boot (L5), slurmd's HealthCheckProgram runs at boot
  and publishes a clean check, and only then the controller resumes the node.

Each node's check reads a replay root (`SLURM_HEAL_ROOT=LAB/root/${SLURMD_NODENAME}`,
given to install-node with --env): lab nodes share this host's kernel.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_heal import extra
from slurm_heal.demo import XID_LINE, ReplayNode
from slurm_heal.models import Phase
from slurm_heal.slurm.cli import CliSlurm
from slurm_heal.store import Store
from tests.lab import Lab, run

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CHECK_TOML = '[services]\nenabled = false\n[mounts]\nrw = ["/"]\n'


def readme_slurm_conf_lines(prefix: Path) -> list[str]:
    """The slurm.conf lines exactly as the README gives them, for this prefix."""
    readme = (REPO / "README.md").read_text()
    block = re.search(r"```\n\s*(HealthCheckProgram=.*?)```", readme, re.DOTALL)
    assert block, "the README no longer shows the slurm.conf lines"
    return [line.strip().replace("/opt/slurm-heal", str(prefix))
            for line in block.group(1).strip().splitlines()]


def policy(state_dir: Path, conf: Path) -> str:
    return f"""
[approvals]
default = "manual"
[[approvals.rules]]
fault = "gpu.xid.119"
action = "reboot"
mode = "auto"

[safety]
one_per_pool = false
return_timeout = "5m"

[capacity]
min_available_percent = 0

[controller]
state_dir = "{state_dir}"
interval = 1
slurm_backend = "cli"
slurm_conf = "{conf}"

[provider]
type = "slurm"
timeout = 120
"""


@pytest.fixture
def installed(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Path, Lab]]:
    prefix = tmp_path / "opt" / "slurm-heal"
    lines = readme_slurm_conf_lines(prefix)
    # README step 1, as written: a venv under the prefix, pip install of this checkout,
    # from a copy of it: pip builds in the source tree, and the cli passes of the other
    # Slurm versions run this test at the same time (`make test` runs passes side by side).
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO, checkout, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".lab*", "build", "*.egg-info", ".*_cache", ".hypothesis",
        "__pycache__"))
    run([sys.executable, "-m", "venv", str(prefix)], timeout=120)
    # One host here is node and controller both: the node set and the controller extra.
    run([str(prefix / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
         f"{checkout}[controller]"], timeout=600)
    # The session's Slurm version (--slurm), as every other lab of the run: a 22.05 lab
    # here in a 25.11 run had the 25.11 commands on PATH talk to a 22.05 slurmctld.
    lab = Lab(tmp_path / "lab", nodes=3, conf_lines=lines,
              slurm=str(request.config.getoption("--slurm")))
    for node in lab.nodes:
        root = ReplayNode(lab.dir / "root", node).root
        (root / "etc" / "slurm-heal").mkdir(parents=True)
        (root / "etc" / "slurm-heal" / "check.toml").write_text(CHECK_TOML)
    lab.conf.parent.mkdir(parents=True, exist_ok=True)
    lab.conf.write_text("# written by `lab up` below\n")  # a site has slurm.conf already
    run([str(prefix / "bin" / "slurm-heal"), "install-node", "--prefix", str(prefix),
         "--slurm-conf", str(lab.conf),
         "--env", f"SLURM_HEAL_ROOT={lab.dir}/root/${{SLURMD_NODENAME}}"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, timeout=120)
    lab.start()
    try:
        yield prefix, lab
    finally:
        lab.stop()


def checked_at(slurm: CliSlurm, node: str) -> str | None:
    """When the node's slurm-heal check last published (its Extra, SPEC I2)."""
    section = slurm.node(node).extra.get(extra.KEY)
    value = section.get("checked_at") if isinstance(section, dict) else None
    return str(value) if value else None


def test_installed_the_readme_way_a_fault_is_remediated_with_the_checks_run_by_slurmd(
        installed: tuple[Path, Lab], tmp_path: Path) -> None:
    prefix, lab = installed
    slurm = CliSlurm(slurm_conf=str(lab.conf))
    for name in ("healthcheck", "prolog", "epilog"):
        assert os.access(prefix / "libexec" / f"slurm-heal-{name}", os.X_OK)
    # slurmd ran HealthCheckProgram at start: every node published its check (I1).
    for node in lab.nodes:
        lab.wait_for(lambda n=node: checked_at(slurm, n), timeout=60,  # type: ignore[misc]
                     what=f"{node}'s health check, run by slurmd")
    booted_check = {n: checked_at(slurm, n) for n in lab.nodes}

    config = tmp_path / "heal.toml"
    state_dir = tmp_path / "state"
    config.write_text(policy(state_dir, lab.conf))
    daemon_log = (tmp_path / "daemon.log").open("wb")
    daemon = subprocess.Popen([str(prefix / "bin" / "slurm-heal"), "daemon", "--config",
                               str(config)], stdout=daemon_log, stderr=subprocess.STDOUT,
                              env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    try:
        node = "gpu02"
        with (lab.dir / "root" / node / "dev/kmsg").open("a") as fh:
            fh.write(f"3,50,3000000,-;{XID_LINE}\n")  # within the replay boot's 5 s of uptime
        job = lab.run(["sbatch", "--parsable", "-w", node, "-t", "5", "--wrap",
                       "hostname"]).stdout.strip().split(";")[0]
        # The Prolog (run by slurmd) found the fault, drained the node with our reason,
        # and Slurm requeued the job without holding it.
        def requeued() -> str:
            shown = lab.scontrol("show", "job", job).stdout
            return shown if "Restarts=1" in shown and "JobState=PENDING" in shown else ""

        shown = lab.wait_for(requeued, timeout=60, what="the job requeued by the failed prolog")
        assert "JobState=PENDING" in shown and "held" not in shown.lower(), shown
        # The daemon: alert -> auto-approved reboot -> Slurm reboot -> checked -> resumed.
        store = Store(state_dir)

        def finished() -> bool:
            rems = [r for r in store.load().remediations if r.node == node]
            return bool(rems) and rems[-1].phase.terminal

        lab.wait_for(finished, timeout=240, interval=1, what="the remediation to end")
        rem = [r for r in store.load().remediations if r.node == node][-1]
        assert rem.phase is Phase.DONE, (rem.phase, [s.why for s in rem.steps],
                                         (tmp_path / "daemon.log").read_text()[-3000:])
        assert rem.fault == "gpu.xid.119" and rem.action.value == "reboot"
        assert rem.approval_rule == "P2:approvals[0]"
        assert node in (lab.dir / "log" / "reboot-program.log").read_text()
        # Resumed (right after a resume Slurm shows the node not responding for a moment).
        lab.wait_for(lambda: not lab.state(node) & {"DRAIN", "DOWN", "NOT_RESPONDING"},
                     timeout=30, what=f"{node} back in service")
        # The check that let it back was run by slurmd at the reboot's boot (nobody else
        # runs a check in this test): a newer one than at the lab's start.
        assert checked_at(slurm, node) != booted_check[node]
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
        daemon_log.close()
