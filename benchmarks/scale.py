"""Generated clusters for the scale benchmarks (fixed sizes and seeds, so runs compare).

* `sinfo_json(n, seed, now)`: a ``sinfo --json`` document (22.05, OpenAPI v0.0.38) of
  ``n`` nodes in pools of 64 (``gpu-NNN`` partitions), 2 % of them alerting (a critical
  ``gpu.xid.79`` in their Extra, first seen an hour ago), half of them running a job.
  Each node is the lab's real 22.05 record (tests/data/slurm/sinfo.json) with its name,
  state, partition and Extra changed, so the parser reads what a real cluster prints;
* `squeue_json(n, seed, now)`: one job on every other node, each the real 22.05 record
  of tests/data/slurm/squeue.json renamed;
* `history(n, seed, now)`: the store of one year of that cluster's life: 20 closed
  remediations per 100 nodes (done, failed, withdrawn, denied), each with the steps and
  attempts a real one carries, spread over the year.

Used by benchmarks/run.py (``make bench``) and by the engine's work-counting tests.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from slurm_heal.models import Attempt, Phase, Remediation, State, Step
from slurm_heal.types import Action, Severity

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
POOL_SIZE = 64
ALERTING = 0.02
HISTORY_PER_100 = 20
SEED = 13
GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "data" / "slurm"


def node_name(i: int) -> str:
    return f"gpu{i:06d}"


def _alerting(n: int, seed: int) -> set[int]:
    rng = random.Random(seed)
    return set(rng.sample(range(n), max(1, int(n * ALERTING))))


def sinfo_json(n: int, seed: int = SEED, now: datetime = NOW) -> str:
    alerting = _alerting(n, seed)
    first = (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    checked = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    epoch = int((now - timedelta(days=3)).timestamp())
    template = json.loads((GOLDEN / "sinfo.json").read_text())["nodes"][0]
    nodes = []
    for i in range(n):
        name = node_name(i)
        ours: dict[str, Any] = {"v": 1, "checked_at": checked, "host": f"m-{name}", "alerts": []}
        if i in alerting:
            ours["alerts"] = [{
                "fault": "gpu.xid.79", "severity": "critical",
                "summary": "GPU has fallen off the bus", "detector": "kernlog",
                "first_seen": first, "last_seen": checked,
                "evidence": [{"source": "kmsg", "text": "NVRM: Xid (PCI:0000:3b:00): 79, "
                              "pid=1234, name=python3, GPU has fallen off the bus.",
                              "at": first}],
            }]
        node = dict(template)
        node.update({
            "name": name, "hostname": name, "address": name,
            "state": "allocated" if i % 2 else "idle", "state_flags": [],
            "reason": "", "reason_set_by_user": None, "reason_changed_at": 0,
            "extra": json.dumps({"slurm_heal": ours}, separators=(",", ":")),
            "partitions": [f"gpu-{i // POOL_SIZE:04d}"], "features": "h100,ib",
            "active_features": "h100,ib", "boot_time": epoch, "slurmd_start_time": epoch,
        })
        nodes.append(node)
    return json.dumps({"meta": {"Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}}},
                       "errors": [], "nodes": nodes})


def squeue_json(n: int, seed: int = SEED, now: datetime = NOW) -> str:
    start = int((now - timedelta(hours=2)).timestamp())
    template = json.loads((GOLDEN / "squeue.json").read_text())["jobs"][0]
    jobs = []
    for i in range(1, n, 2):
        job = dict(template)
        job.update({"job_id": 1000 + i, "nodes": node_name(i), "name": f"train-{i}",
                    "job_state": "RUNNING", "start_time": start, "end_time": start + 86400,
                    "time_limit": 1440})
        jobs.append(job)
    return json.dumps({"errors": [], "jobs": jobs})


def history(n: int, seed: int = SEED, now: datetime = NOW, per_100: int = HISTORY_PER_100,
            days: int = 365) -> State:
    """Closed remediations of one year (none open): the store a cluster of ``n`` nodes
    carries when nothing is pruned."""
    rng = random.Random(seed + 1)
    rems = []
    ends = (Phase.DONE, Phase.DONE, Phase.DONE, Phase.FAILED, Phase.WITHDRAWN, Phase.DENIED)
    for k in range(n * per_100 // 100):
        i = rng.randrange(n)
        name = node_name(i)
        created = now - timedelta(days=days) + timedelta(seconds=rng.randrange(days * 86400))
        phase = ends[k % len(ends)]
        t = [created + timedelta(minutes=m) for m in (0, 1, 2, 30, 45, 50)]
        acted = phase in (Phase.DONE, Phase.FAILED)
        steps = [Step(at=t[0], phase="proposed", rule="catalog", why="gpu.xid.79: reboot"),
                 Step(at=t[1], phase="approved", rule="P2", why="auto-approved by rule xid-79")]
        attempts: list[Attempt] = []
        times = {"proposed": t[0], "approved": t[1]}
        if acted:
            rid = f"h-{k:07d}"
            steps += [Step(at=t[2], phase="cordoned", rule="L1", why="cordon: no new jobs"),
                      Step(at=t[3], phase="acting", rule="L1", why="reboot sent"),
                      Step(at=t[4], phase="returning", rule="L5", why="health check"),
                      Step(at=t[5], phase=phase.value, rule="L5", why="passed: resumed")]
            attempts = [Attempt(key=f"{rid}:cordon:0", effect="cordon", action=Action.REBOOT,
                                started=t[2], finished=t[2], outcome="ok"),
                        Attempt(key=f"{rid}:act:0", effect="act", action=Action.REBOOT,
                                started=t[3], finished=t[4], outcome="ok", operation="op-1"),
                        Attempt(key=f"{rid}:resume:0", effect="resume", action=Action.REBOOT,
                                started=t[5], finished=t[5], outcome="ok")]
            times.update(cordoned=t[2], acting=t[3], returning=t[4])
        else:
            steps.append(Step(at=t[2], phase=phase.value, rule="L4", why="the alert cleared"))
        times[phase.value] = t[5] if acted else t[2]
        rems.append(Remediation(
            id=f"h-{k:07d}", node=name, host=f"m-{name}", pool=f"gpu-{i // POOL_SIZE:04d}",
            fault="gpu.xid.79", severity=Severity.CRITICAL, action=Action.REBOOT, phase=phase,
            action_rule="catalog", alert_first_seen=created, created=created,
            updated=times[phase.value], phase_times=times, steps=tuple(steps),
            attempts=tuple(attempts)))
    rems.sort(key=lambda r: r.created)
    return State(remediations=tuple(rems))


# The text forms the cli backend reads (issue 26), made from the same JSON documents so
# that both say the same. ``SEP_MARK`` stands for the separator the backend draws per
# call; the stand-in commands put the one they were given in its place.
SEP_MARK = "@SEP@"


def sinfo_text(sinfo_doc: str) -> str:
    """`sinfo -N -h -O` (the backend's fields) of a `sinfo --json` document."""
    lines = []
    for node in json.loads(sinfo_doc)["nodes"]:
        state = "+".join([node["state"], *(f.lower() for f in node["state_flags"])])
        feats = node["features"] or "(null)"
        for part in node["partitions"] or ["(null)"]:
            fields = (node["name"], state, node["reason"] or "none", "Unknown", "Unknown",
                      node["extra"] or "(null)", "(null)", part, feats, node["address"],
                      node["hostname"])
            lines.append("".join(f + SEP_MARK for f in fields))
    return "\n".join(lines) + "\n"


def scontrol_text(sinfo_doc: str) -> str:
    """`scontrol show node -o` (SLURM_TIME_FORMAT=%s) of a `sinfo --json` document, in
    22.05.8's field order."""
    lines = []
    for node in json.loads(sinfo_doc)["nodes"]:
        extra = f" Extra={node['extra']}" if node["extra"] else ""
        lines.append(
            f"NodeName={node['name']} Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 "
            f"CPUTot=2 CPULoad=0.00 AvailableFeatures={node['features']} "
            f"ActiveFeatures={node['features']} Gres=(null) NodeAddr={node['address']} "
            f"NodeHostName={node['hostname']} Version=22.05.8 OS=Linux 6.x #1 SMP  "
            f"RealMemory=1000 AllocMem=0 FreeMem=900 Sockets=2 Boards=1 "
            f"State={node['state'].upper()} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
            f"MCS_label=N/A Partitions={','.join(node['partitions'])}  "
            f"BootTime={node['boot_time']} SlurmdStartTime={node['slurmd_start_time']} "
            f"LastBusyTime={node['slurmd_start_time']} CfgTRES=cpu=2,mem=1000M,billing=2 "
            f"AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
            f"ExtSensorsWatts=0 ExtSensorsTemp=n/s{extra}")
    return "\n".join(lines) + "\n"


def squeue_text(squeue_doc: str) -> str:
    """`squeue -h -t all -o` (the backend's fields) of a `squeue --json` document."""
    lines = []
    for job in json.loads(squeue_doc)["jobs"]:
        limit = job["time_limit"]
        fields = (str(job["job_id"]), job["user_name"], job["job_state"], job["nodes"],
                  str(job["start_time"]), str(job["end_time"]),
                  f"{limit // 1440}-{limit % 1440 // 60:02d}:{limit % 60:02d}:00", job["name"])
        lines.append("".join(f + SEP_MARK for f in fields))
    return "\n".join(lines) + "\n"
