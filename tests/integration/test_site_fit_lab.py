"""A site's own slurm.conf settings survive the documented install (SPEC I7; issue 36
item 1), on the real lab: the lab starts with the site's own lines (SchedulerParameters
with the site's options, the site's Prolog, which leaves a mark), `install-node` reads
the live configuration and prints what to merge, the printed lines are applied exactly
as the README says (a 'merge' line replaces the site's line of that key, an 'add' line
is added) and `scontrol reconfigure` run. Then `scontrol show config` holds the site's
options and ours, and a job runs the site's prolog and ours: the site's leaves its mark,
ours finds the node's Xid, drains it with our reason and fails the job's start.

Before, the printed lines were a fixed `SchedulerParameters=nohold_on_prolog_fail` and
`Prolog=PREFIX/libexec/slurm-heal-prolog`: applied, they replaced the site's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from slurm_heal import reasons
from slurm_heal.demo import XID_LINE, ReplayNode
from slurm_heal.siteconf import parse_show_config
from tests.lab import Lab, run

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CHECK_TOML = '[services]\nenabled = false\n[mounts]\nrw = ["/"]\n'
SITE_PARAMS = "bf_continue,bf_interval=60"


def apply(conf: Path, lines: list[dict[str, object]]) -> None:
    """The README's step: a 'merge' line replaces the site's line of its key, an 'add'
    line is added; 'keep' and 'present' leave slurm.conf alone."""
    text = conf.read_text().splitlines()
    for item in lines:
        key, line, status = str(item["key"]), item["line"], item["status"]
        if status == "merge":
            mine = [i for i, ln in enumerate(text) if ln.split("=", 1)[0].strip() == key]
            assert len(mine) == 1, (key, mine)
            text[mine[0]] = str(line)
        elif status == "add":
            text.append(str(line))
        elif isinstance(item.get("link"), dict):  # a site's glob: a link into its directory
            link = item["link"]
            Path(str(link["path"])).symlink_to(str(link["target"]))  # type: ignore[index]
        else:
            assert status in ("keep", "present") and line is None, item
    conf.write_text("\n".join(text) + "\n")


@pytest.fixture
def site_lab(tmp_path: Path, request: pytest.FixtureRequest) -> Lab:
    site = tmp_path / "site"
    site.mkdir()
    prolog = site / "prolog.sh"
    prolog.write_text(f'#!/bin/sh\necho "$SLURM_JOB_ID" >> {site}/prolog.ran\nexit 0\n')
    prolog.chmod(0o755)
    (site / "epilog.d").mkdir()
    epilog = site / "epilog.d" / "10-site"
    epilog.write_text(f'#!/bin/sh\necho "$SLURM_JOB_ID" >> {site}/epilog.ran\nexit 0\n')
    epilog.chmod(0o755)
    lab = Lab(tmp_path / "lab", nodes=2, slurm=str(request.config.getoption("--slurm")),
              conf_lines=[f"SchedulerParameters={SITE_PARAMS}", f"Prolog={prolog}",
                          f"Epilog={site}/epilog.d/*"])
    for node in lab.nodes:
        root = ReplayNode(lab.dir / "root", node).root
        (root / "etc" / "slurm-heal").mkdir(parents=True)
        (root / "etc" / "slurm-heal" / "check.toml").write_text(CHECK_TOML)
    lab.start()
    request.addfinalizer(lab.stop)
    return lab


def config_of(lab: Lab) -> dict[str, str]:
    """`scontrol show config` (25.11+ shows `Prolog[0] = ...`: read as Prolog)."""
    return parse_show_config(lab.scontrol("show", "config").stdout)


def test_a_site_s_scheduler_parameters_and_prolog_survive_the_documented_install(
        site_lab: Lab, tmp_path: Path) -> None:
    lab = site_lab
    prefix = tmp_path / "opt" / "slurm-heal"
    exe = Path(sys.executable).parent / "slurm-heal"  # this installation's (--no-venv)
    done = run([str(exe), "install-node", "--prefix", str(prefix), "--no-venv",
                "--slurm-conf", str(lab.conf), "--json",
                "--env", f"SLURM_HEAL_ROOT={lab.dir}/root/${{SLURMD_NODENAME}}"],
               env=lab.env, timeout=120)
    report = json.loads(done.stdout)
    lines = report["slurm_conf"]["lines"]
    assert report["slurm_conf"]["live"], report
    by_key = {ln["key"]: ln for ln in lines}
    assert by_key["SchedulerParameters"]["status"] == "merge"
    assert by_key["Prolog"]["status"] == "merge"
    assert by_key["Epilog"]["status"] == "keep" and by_key["Epilog"]["line"] is None
    assert by_key["Epilog"]["link"] == {
        "path": str(tmp_path / "site" / "epilog.d" / "slurm-heal"),
        "target": str(prefix / "libexec" / "slurm-heal-epilog")}
    # the printed text (what a person reads) holds the merged line, never ours alone
    assert f"SchedulerParameters={SITE_PARAMS},nohold_on_prolog_fail" in report["snippet"]
    assert "\nSchedulerParameters=nohold_on_prolog_fail" not in report["snippet"]

    apply(lab.conf, lines)
    lab.scontrol("reconfigure")
    shown = config_of(lab)
    assert shown["SchedulerParameters"] == f"{SITE_PARAMS},nohold_on_prolog_fail", shown
    assert shown["Prolog"] == str(prefix / "libexec" / "slurm-heal-site-prolog"), shown
    assert shown["Epilog"] == f"{tmp_path}/site/epilog.d/*", shown

    # A healthy node: the site's prolog runs, the job runs.
    ran = tmp_path / "site" / "prolog.ran"
    ok = lab.run(["sbatch", "--parsable", "-w", "gpu01", "-t", "2", "--wrap",
                  "true"]).stdout.strip().split(";")[0]
    lab.wait_for(lambda: ran.exists() and ok in ran.read_text().split(), timeout=60,
                 what="the site's prolog run by slurmd for a job on gpu01")
    ended = tmp_path / "site" / "epilog.ran"
    lab.wait_for(lambda: ended.exists() and ok in ended.read_text().split(), timeout=60,
                 what="the site's epilog (its glob) run by slurmd after the job")
    # A node with an Xid: the site's prolog ran first, then ours drained the node.
    node = "gpu02"
    with (lab.dir / "root" / node / "dev" / "kmsg").open("a") as fh:
        fh.write(f"3,50,3000000,-;{XID_LINE}\n")  # within the replay boot's 5 s of uptime
    bad = lab.run(["sbatch", "--parsable", "-w", node, "-t", "2", "--wrap",
                   "true"]).stdout.strip().split(";")[0]
    lab.wait_for(lambda: "DRAIN" in lab.state(node), timeout=60,
                 what=f"{node} drained by slurm-heal's prolog")
    reason = lab.scontrol("show", "node", node).stdout.split("Reason=", 1)[1].strip()
    assert reasons.is_ours(reason), reason
    assert bad in ran.read_text().split()
    # Ours in the site's epilog glob: an Xid logged while a job runs on gpu01 drains it
    # when the job ends, the site's epilog having run too.
    job = lab.run(["sbatch", "--parsable", "-w", "gpu01", "-t", "2", "--wrap",
                   "sleep 4"]).stdout.strip().split(";")[0]
    lab.wait_for(lambda: "RUNNING" in lab.scontrol("show", "job", job).stdout, timeout=60,
                 what="the job on gpu01 running")
    with (lab.dir / "root" / "gpu01" / "dev" / "kmsg").open("a") as fh:
        fh.write(f"3,60,4000000,-;{XID_LINE}\n")  # within the 5 s of uptime
    lab.wait_for(lambda: "DRAIN" in lab.state("gpu01"), timeout=60,
                 what="gpu01 drained by slurm-heal's epilog (linked into the site's glob)")
    # (Slurm runs a glob's programs in its own order: 25.11 ran ours before the site's.)
    lab.wait_for(lambda: job in ended.read_text().split(), timeout=60,
                 what="the site's epilog run after the job too")
