"""Run the node detectors, turn findings into alerts, publish them to Slurm (SPEC I1, I2).

What a run does, in order:

1. load the state (cursors, latched kernel faults, what we set in Slurm), under a lock;
2. run the enabled detectors for this mode, each in a thread with a deadline. A
   detector that is disabled contributes nothing; one that does not run in this mode,
   fails or times out keeps its previous findings (a broken detector never clears an
   alert or resumes a node);
3. group findings into alerts (one per fault id) with ``first_seen`` kept across runs,
   so the controller's persistence rule (SPEC S1) works;
4. unless ``dry_run``: write the alerts into the node's ``Extra`` under our key, drain
   the node with our reason (``heal: <fault> by=check``) for faults the catalog marks
   ``cordon``; once they are gone, remove our key and resume the node, but only when
   its reason is ours and was set by the check (house style 2: never a node drained by
   someone else, nor one the controller cordoned);
5. SPEC S8: a node we held out of service (our drain, or the controller's marker) that is
   found in service again on the same boot while its faults are still there was resumed
   by a person: the faults seen so far -- what we published (Extra, Reason) before the
   resume -- are acknowledged (``acknowledged`` in the state and in Extra, where the
   controller does not act on them) and never drain the node again; only a new fault
   does (another fault id, a new kernel event, or a fault that cleared and came back),
   also one found by the run that notices the resume. Unless one of our own maintenance
   reservations holds the node (`slurm_heal.checks.maintenance`: the controller lifted
   its drain for the GPU reset, gate or validation job): then the check publishes but
   never drains, and our Prolog lets that job through (SPEC E6, V1, V4);
6. save the state.

Light on slurmctld (issue 43): Extra and the Reason change only when what they say
changes (`said`: which faults, how severe, since when, each new kernel event, which
mount, GPU or port; not a counter or the time a condition was read). A run whose findings
did not change writes nothing and, on a node that holds no fault of ours, calls Slurm
not at all; the check's liveness (SPEC O1) is a heartbeat: the health check (and the
agent's full check) rewrites our key with a fresh ``checked_at`` once ``[check]
heartbeat`` (30 min) passed since its last write. A run that does call Slurm reads the
node's record at most once (`OneRead`): the S8 resume test, the drain decision and the
Extra merge share it. A new finding still publishes and drains in the same run.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone

from slurm_heal.checks import node, paths, proc, state
from slurm_heal.checks.config import CheckConfig, DetectorSpec
from slurm_heal.errors import HealError, SlurmError, SlurmUnreachable
from slurm_heal.frozen import dataclass, field, replace
from slurm_heal.types import Alert, Evidence, Finding, Severity

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from typing import Any

    from slurm_heal.checks.detector import Detector, Update

if TYPE_CHECKING:  # the Slurm package is imported only when something must be written
    from slurm_heal.slurm.base import SlurmClient
    from slurm_heal.types import ClusterView, JobInfo, NodeInfo

# Exit statuses of `slurm-heal check` (documented in docs/checks.md).
EXIT_HEALTHY = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_SLURM = 3
EXIT_DETECTOR_FAILED = 10
# The check itself broke (an unexpected exception, a bug): never a fault of the node, so
# our Prolog lets the job run and nothing is drained (SPEC I1); reported centrally (O1).
EXIT_CRASHED = 11

# The fault a failing detector is published as (SPEC O1; record only, never an action).
DETECTOR_ERROR = "check.detector_error"
# Modes whose full runs keep the heartbeat: checked_at rewritten into Extra once
# [check] heartbeat passed since the last write, even when nothing changed (SPEC O1).
# Prolog and epilog never do (cheap around every job); nor the agent's kernel-log
# wake-ups (``only``).
REFRESH_MODES = frozenset({"healthcheck", "agent"})


@dataclass(frozen=True, slots=True)
class DetectorStatus:
    """How one detector fared: ok, disabled, skipped (not in this mode), unsupported,
    error or timeout. Only ``ok`` replaces the detector's previous findings."""

    name: str
    status: str
    message: str = ""


@dataclass(slots=True)
class CheckResult:
    node: str
    mode: str
    findings: list[Finding]
    alerts: list[Alert]
    statuses: list[DetectorStatus]
    actions: list[str] = field(default_factory=list)  # what we changed in Slurm
    notes: list[str] = field(default_factory=list)  # what we chose not to change, and why
    exit_code: int = EXIT_HEALTHY
    # SPEC S8: alerts a person's resume acknowledged (published, never drained for)
    acknowledged: list[Alert] = field(default_factory=list)
    # SPEC E6, V1, V4: our maintenance reservation holding the node ("" none; None: not
    # asked this run)
    maintenance: str | None = None
    # SPEC S8, I1: the Prolog/Epilog runs for one of our own maintenance jobs (its
    # reservation's name): never failed by our Prolog
    maintenance_job: str = ""


def node_name(explicit: str | None = None) -> str:
    """--node, else $SLURMD_NODENAME (set by slurmd for HealthCheckProgram/Prolog/Epilog),
    else the short host name."""
    return explicit or os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]


def default_client() -> SlurmClient:
    """The Slurm client the node side uses: the `cli` backend, imported only when
    something must be written (pyslurm's import would cost more than the whole check)."""
    from slurm_heal.slurm import make_client

    # A $SLURM_CONF that names no file is said at once, with its path: the Slurm commands
    # would wait their whole timeout and blame slurmctld (issue 25 item 5). Unset, Slurm
    # finds its config itself (its default path, or configless from slurmd).
    conf = os.environ.get("SLURM_CONF")
    if conf and not os.path.isfile(conf):
        raise SlurmError(f"slurm.conf not found: {conf} ($SLURM_CONF); set SLURM_CONF to the "
                         "cluster's slurm.conf (the glue carries it: docs/checks.md)")
    if conf and not os.access(conf, os.R_OK):
        raise SlurmError(f"slurm.conf not readable: {conf} ($SLURM_CONF); run the check as a "
                         "user who can read it")
    return make_client(backend="cli", slurm_conf=conf or None)


def cordons(f: Finding) -> bool:
    """Whether a finding drains the node: the catalog says cordon and the finding is as
    severe as the catalog's fault (an Xid 154 whose recovery action is "None" is not)."""
    from slurm_heal import catalog

    fault = catalog.load().get(f.fault)
    return fault.cordon and f.severity.rank >= fault.severity.rank


def _hung(det: str, exc: Exception, st: dict[str, Any], name: str,
          now: datetime) -> tuple[list[Finding], Update]:
    """A vendor tool that hung is itself a finding (``gpu.tool.hung``); what the detector
    found before stays (never a false clear), its counter samples stay as they were."""
    kept = [f for f in _previous(st, det, name) if f.fault != "gpu.tool.hung"]
    argv = getattr(exc, "argv", ())
    hung = Finding(fault="gpu.tool.hung", severity=Severity.WARNING,
                   summary=f"{argv[0] if argv else det} did not answer in time and was killed",
                   detector=det, node=name,
                   evidence=(Evidence(source=det, text=str(exc), at=now.isoformat(),
                                      data={"argv": list(argv),
                                            "timeout_s": getattr(exc, "timeout", None)}),))
    return kept + [hung], {}


def run_detector(spec: DetectorSpec, cfg: CheckConfig, st: dict[str, Any], name: str,
                 now: datetime) -> tuple[list[Finding], Update]:
    """One detector, as its thread runs it: its precondition (`slurm_heal.checks.present`:
    `node.Unsupported` before its module is imported), then gather and evaluate. A hung
    vendor tool of a detector that says so is its ``gpu.tool.hung`` finding (SPEC D3)."""
    why = spec.present(cfg, name) if spec.present is not None else None
    if why is not None:
        raise node.Unsupported(why)
    det: Detector[Any] = spec.load()
    try:
        return det.evaluate(cfg, st, name, now, det.gather(cfg, st, name, now))
    except proc.ToolTimeout as exc:
        if not spec.tool_hang_is_finding:
            raise
        return _hung(spec.name, exc, st, name, now)


def _run_detectors(cfg: CheckConfig, st: dict[str, Any], name: str, now: datetime,
                   mode: str, only: frozenset[str] | None
                   ) -> tuple[dict[str, list[Finding]], list[DetectorStatus], Update]:
    results: dict[str, tuple[list[Finding], Update] | Exception] = {}
    threads: list[tuple[str, threading.Thread, float]] = []
    statuses: dict[str, DetectorStatus] = {}
    found: dict[str, list[Finding]] = {}
    order = []
    for spec, dcfg in cfg.detectors():
        det = spec.name
        order.append(det)
        if not dcfg.enabled:
            statuses[det] = DetectorStatus(det, "disabled")
            continue
        if mode not in dcfg.modes or (only is not None and det not in only):
            statuses[det] = DetectorStatus(det, "skipped", f"not run in {mode} mode")
            continue
        # Its precondition (a stat, a PATH lookup) here: a detector with nothing to look
        # at on this node costs neither a thread nor an import.
        why = spec.present(cfg, name) if spec.present is not None else None
        if why is not None:
            statuses[det] = DetectorStatus(det, "unsupported", why)
            found[det] = []
            continue

        def target(spec: DetectorSpec = spec) -> None:
            try:
                results[spec.name] = run_detector(spec, cfg, st, name, now)
            except Exception as exc:  # reported as the detector's status
                results[spec.name] = exc

        t = threading.Thread(target=target, name=f"check-{det}", daemon=True)
        t.start()
        threads.append((det, t, float(dcfg.timeout)))
    deadline = time.monotonic() + cfg.timeout
    updates: Update = {}
    for det, t, limit in threads:
        t.join(max(0.0, min(limit, deadline - time.monotonic())))
        res = results.get(det)
        if t.is_alive():
            statuses[det] = DetectorStatus(det, "timeout", f"no answer within {limit:g}s")
        elif res is None:  # its thread ended by an exit (SystemExit, KeyboardInterrupt)
            statuses[det] = DetectorStatus(det, "error", "ended without a result")
        elif isinstance(res, node.Unsupported):
            statuses[det] = DetectorStatus(det, "unsupported", str(res))
            found[det] = []
        elif isinstance(res, Exception):
            msg = str(res) if isinstance(res, HealError) else f"{type(res).__name__}: {res}"
            statuses[det] = DetectorStatus(det, "error", msg)
        else:
            # a detector's "_note" (e.g. amd: "ECC not readable") goes on its status line
            statuses[det] = DetectorStatus(det, "ok", str(res[1].pop("_note", "") or ""))
            found[det] = res[0]
            updates.update(res[1])
    return found, [statuses[d] for d in order], updates


def detector_errors(statuses: list[DetectorStatus], node_name: str,
                    now: datetime) -> list[Finding]:
    """One ``check.detector_error`` finding per detector that failed or timed out, with
    the error as evidence (SPEC O1, D7)."""
    return [Finding(fault=DETECTOR_ERROR, severity=Severity.WARNING,
                    summary=f"detector {s.name} could not run ({s.status}): {s.message}",
                    detector=s.name, node=node_name,
                    evidence=(Evidence(source=f"detector {s.name}", text=s.message,
                                       at=now.isoformat(),
                                       data={"detector": s.name, "status": s.status}),))
            for s in statuses if s.status in ("error", "timeout")]


def kept_errors(st: dict[str, Any], statuses: list[DetectorStatus]) -> list[DetectorStatus]:
    """SPEC O1: the detectors whose error stands after this run. A detector's error
    stands until a run of it works: a run that did not run it (a mode without it, the
    agent's wake-up for one kernel record) keeps the last error, as it keeps the
    detector's findings. Otherwise its alert went and came back with every such run, a
    new alert each time (the deployed suite: a notification to support every few
    seconds for one nvidia-smi missing). Kept in the state (``detector_errors``)."""
    saved = st.get("detector_errors")
    saved = saved if isinstance(saved, dict) else {}
    kept: dict[str, dict[str, str]] = {}
    out: list[DetectorStatus] = []
    for s in statuses:
        if s.status in ("error", "timeout"):
            kept[s.name] = {"status": s.status, "message": s.message}
            out.append(s)
        elif s.status == "skipped" and isinstance(old := saved.get(s.name), dict) \
                and old.get("status") in ("error", "timeout"):
            kept[s.name] = {"status": str(old["status"]), "message": str(old.get("message", ""))}
            out.append(DetectorStatus(s.name, kept[s.name]["status"], kept[s.name]["message"]))
    st["detector_errors"] = kept
    return out


def _previous(st: dict[str, Any], det: str, name: str) -> list[Finding]:
    out = []
    for raw in (st.get("findings") or {}).get(det, []):
        try:
            out.append(Finding(fault=raw["fault"], severity=Severity(raw["severity"]),
                               summary=raw["summary"], detector=det, node=name,
                               evidence=tuple(Evidence.from_json(e)
                                              for e in raw.get("evidence", []))))
        except (KeyError, ValueError, TypeError):
            continue
    return out


def to_alerts(findings: list[Finding], first_seen: dict[str, str], now: datetime) -> list[Alert]:
    """One alert per fault id, most severe first; ``first_seen`` survives across runs."""
    by_fault: dict[str, list[Finding]] = {}
    for f in findings:
        by_fault.setdefault(f.fault, []).append(f)
    out = []
    for fid, group in by_fault.items():
        group.sort(key=lambda f: -f.severity.rank)
        first = now
        if fid in first_seen:
            try:
                first = datetime.fromisoformat(first_seen[fid])
            except ValueError:
                pass
        summary = group[0].summary
        if len(group) > 1:
            summary += f" (and {len(group) - 1} more)"
        out.append(Alert(node=group[0].node, fault=fid, severity=group[0].severity,
                         summary=summary, first_seen=first, last_seen=now,
                         evidence=tuple(e for f in group for e in f.evidence),
                         detector=group[0].detector))
    out.sort(key=lambda a: (-a.severity.rank, a.fault))
    return out


# SPEC S8: detectors that report events (each kernel log line a new one); the others
# report conditions, which hold until they clear.
EVENT_DETECTORS = frozenset({"kernel_log"})


def _fingerprint(e: Evidence) -> str:
    import hashlib

    return hashlib.sha256(f"{e.source}\0{e.at or ''}\0{e.text}".encode()).hexdigest()[:16]


def said(alerts: list[Alert], acknowledged: list[Alert], gpu_serials: list[str],
         domains: dict[str, str] | None = None) -> str:
    """What our key in Extra says, as a short digest (issue 43; pure): per alert (the
    active ones and the acknowledged ones apart) its fault, severity, detector and first
    seen, and its evidence: each event of an event detector (`EVENT_DETECTORS`: a new
    kernel line is a change), else which sources (the mount, GPU or port) and how many,
    not their counters nor the time they were read. Plus the GPU serials (the machine).
    Extra is written when this changes, at once; otherwise only on the heartbeat. A short
    one is the text itself: a healthy node's run imports no hashlib (issue 26)."""
    import json

    def one(a: Alert) -> list[Any]:
        ev = sorted(_fingerprint(e) if a.detector in EVENT_DETECTORS else e.source
                    for e in a.evidence)
        return [a.fault, a.severity.value, a.detector, a.first_seen.isoformat(), ev]

    doc = [sorted(one(a) for a in alerts), sorted(one(a) for a in acknowledged),
           sorted({s.strip() for s in gpu_serials})]
    if domains:  # SPEC S7, D12: the node's NVLink domain and cohort (issue 37)
        doc.append(sorted(domains.items()))
    text = json.dumps(doc, separators=(",", ":"))
    if len(text) <= 400:
        return text
    import hashlib

    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def beat_due(pub: dict[str, Any], now: datetime, heartbeat: float) -> bool:
    """SPEC O1 (pure): whether the heartbeat is due: ``heartbeat`` seconds passed since
    our key was last written (``pub["at"]``), or that time is unknown, unreadable or
    ahead of the clock (a clock set back never silences the check)."""
    raw = pub.get("at")
    if not isinstance(raw, str):
        return True
    try:
        at = datetime.fromisoformat(raw)
    except ValueError:
        return True
    if at.tzinfo is None:
        return True
    age = (now - at).total_seconds()
    return age < 0 or age >= heartbeat


def _domains(st: dict[str, Any]) -> dict[str, str]:
    """SPEC S7, D12: the cause domains the GPU detectors found the node in (issue 37),
    and the OS image it runs where os-release names one."""
    out: dict[str, str] = {}
    for key in ("nvidia_state", "amd_state"):
        out.update((st.get(key) or {}).get("domains") or {})
    image = os_image()
    if image and out:  # a GPU node's cohort: its driver, VBIOS and image
        out["image"] = image
    return out


def os_image(path: str = "/etc/os-release") -> str:
    """``IMAGE_ID`` and ``IMAGE_VERSION`` of os-release (the fields an image-based OS
    build sets, os-release(5)), ``"gpu-node 2026.01.3"``; "" where it names none."""
    try:
        with open(paths.host_path(path), encoding="utf-8") as fh:
            text = fh.read(16384)
    except (OSError, UnicodeDecodeError):
        return ""
    fields = {}
    for line in text.splitlines():
        key, eq, value = line.partition("=")
        if eq and key.strip() in ("IMAGE_ID", "IMAGE_VERSION"):
            fields[key.strip()] = value.strip().strip("\"'")
    return " ".join(v for k in ("IMAGE_ID", "IMAGE_VERSION") if (v := fields.get(k)))[:120]


def _serials(st: dict[str, Any]) -> list[str]:
    return [s for key in ("nvidia_state", "amd_state")
            for s in (st.get(key) or {}).get("serials", [])]


class OneRead:
    """The run's Slurm client (issue 43): this node's record is read at most once per
    run, whoever asks (the S8 resume test, the drain decision, the instance id, the
    Extra write, which merges into that read instead of reading again). A drain,
    resume or reboot forgets it; other nodes and calls go to Slurm as they are.

    ``alone``: the instance id of this boot is known, so the record may come from the
    client's one-node read where it has one (the cli backend's `own_node`: `sinfo -n`,
    slurmctld's REQUEST_NODE_INFO_SINGLE, not the whole node table `scontrol show node`
    has it pack)."""

    def __init__(self, client: SlurmClient, name: str, alone: bool = False) -> None:
        self.client = client
        self.name = name
        self.alone = alone
        self.reads = 0
        self._info: NodeInfo | None = None
        self._extra: str | None = None  # our own write's text, once written

    def node(self, name: str) -> NodeInfo:
        if name != self.name:
            return self.client.node(name)
        if self._info is None:
            own = getattr(self.client, "own_node", None) if self.alone else None
            self._info = own(name) if own is not None else self.client.node(name)
            self.reads += 1
        return self._info

    def known(self) -> NodeInfo | None:
        """This node's record if this run read it (and did not change it since)."""
        return self._info

    def set_extra(self, node: str, key: str, value: Any | None,
                  current: str | None = None) -> None:
        if node != self.name or current is not None:
            self.client.set_extra(node, key, value, current=current)
            return
        from slurm_heal.extra import with_key

        base = self._extra if self._extra is not None else self.node(node).extra_raw
        self.client.set_extra(node, key, value, current=base)
        self._extra = with_key(base, key, value)

    def _forget(self, node: str) -> None:
        if node == self.name:
            self._info = None
            self._extra = None

    def drain(self, node: str, reason: str) -> None:
        kept = self._extra  # a drain leaves Extra as it was: our write merges into it
        self._forget(node)
        if node == self.name:
            self._extra = kept
        self.client.drain(node, reason)

    def resume(self, node: str) -> None:
        self._forget(node)
        self.client.resume(node)

    def reboot(self, node: str, reason: str, nextstate: str = "RESUME") -> None:
        self._forget(node)
        self.client.reboot(node, reason, nextstate)

    def snapshot(self) -> ClusterView:
        return self.client.snapshot()

    def nodes(self) -> tuple[NodeInfo, ...]:
        return self.client.nodes()

    def jobs(self, node: str | None = None) -> tuple[JobInfo, ...]:
        return self.client.jobs(node)

    def signal_jobs(self, node: str, signal: str) -> None:
        self.client.signal_jobs(node, signal)

    def requeue_jobs(self, node: str) -> None:
        self.client.requeue_jobs(node)

    def cancel_jobs(self, node: str) -> None:
        self.client.cancel_jobs(node)


def acknowledge(findings: list[Finding], now: datetime,
                published: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """SPEC S8: the acknowledgement a person's resume gives the faults seen so far (pure):
    fault id -> when, and the evidence seen then (a later event of the fault is new).

    "Seen so far" is what was published before the resume (``published``: fault id ->
    the fingerprints of the evidence we wrote into Extra or the Reason while we held the
    node): a fault never published is not acknowledged, and only the published evidence
    of an event fault is. The run that notices the resume is often the one a new kernel
    event woke (the node agent): that event was never published, so ``standing`` ends
    the acknowledgement of its fault at once and the node drains for it. ``None`` (a
    state written before this was recorded) acknowledges every finding, as before.
    """
    out: dict[str, Any] = {}
    for f in findings:
        if f.fault == DETECTOR_ERROR:
            continue  # SPEC O1: a detector that cannot run keeps saying so
        if published is not None and f.fault not in published:
            continue  # found after the resume: a new fault
        prints = {_fingerprint(e) for e in f.evidence}
        if published is not None:
            prints &= set(published[f.fault])
        rec = out.setdefault(f.fault, {"at": now.isoformat(), "evidence": []})
        rec["evidence"] = sorted(set(rec["evidence"]) | prints)
        downs = _downs(f)
        if downs is not None:
            rec["downs"] = {**(rec.get("downs") or {}), **downs}
    return out


def _downs(f: Finding) -> dict[str, int] | None:
    """How many times each source of a condition had gone down when it was seen (an
    InfiniBand port's ``link_downed``), or None where the finding does not count it."""
    out = {e.source: v for e in f.evidence
           if isinstance(v := (e.data or {}).get("link_downed"), int)}
    return out or None


def _went_down_again(f: Finding, seen: dict[str, Any]) -> bool:
    """SPEC S8: a condition the acknowledgement saw with its down count, down once more
    since (a port's link came back and went down between two runs), or a source it did
    not see at all (another port down): new evidence."""
    downs = _downs(f)
    if downs is None:
        return False
    return any(not isinstance(seen.get(src), int) or n > seen[src] for src, n in downs.items())


def remember_published(pub: dict[str, Any], published: list[Alert] | list[Finding]) -> None:
    """SPEC S8: add what was just written to Slurm (alerts into Extra, a fault into the
    Reason) to what a person could have seen while we hold the node (``pub["seen"]``)."""
    seen = pub.get("seen")
    seen = dict(seen) if isinstance(seen, dict) else {}
    for item in published:
        if item.fault == DETECTOR_ERROR:
            continue
        prints = set(seen.get(item.fault) or ()) | {_fingerprint(e) for e in item.evidence}
        seen[item.fault] = sorted(prints)
    pub["seen"] = seen


def forget_unpublished(pub: dict[str, Any], alerts: list[Alert]) -> None:
    """SPEC S8: what a person could have seen (``pub["seen"]``) keeps only the faults
    published now. A fault that cleared while we held the node for another one (the
    ports up again, the mount writable) is no longer in Extra; when it comes back, a
    resume acknowledges it only once it has been published again."""
    seen = pub.get("seen")
    if not isinstance(seen, dict):
        return
    now = {a.fault for a in alerts}
    pub["seen"] = {f: v for f, v in seen.items() if f in now}


def standing(findings: list[Finding], acked: dict[str, Any]) -> dict[str, Any]:
    """SPEC S8 (pure): the acknowledgements that still stand for these findings.

    A condition (a read-only mount, a missing GPU) stays acknowledged while it holds; an
    event fault (kernel log) stays acknowledged while it carries no evidence the person
    did not see. A condition that counts its downs (an InfiniBand port's
    ``link_downed``) stays acknowledged while that count holds for the sources seen: a
    port that came back up and went down again between two runs is down anew. An acknowledgement ends with the first run where its fault is not found
    or is found anew: its return is a new fault, which drains the node again.
    """
    by_fault: dict[str, list[Finding]] = {}
    for f in findings:
        by_fault.setdefault(f.fault, []).append(f)
    out: dict[str, Any] = {}
    for fault, rec in acked.items():
        group = by_fault.get(fault)
        if not group or not isinstance(rec, dict):
            continue
        seen = set(rec.get("evidence") or [])
        if any(f.detector in EVENT_DETECTORS and any(_fingerprint(e) not in seen
                                                     for e in f.evidence) for f in group):
            continue
        downs = rec.get("downs")
        if isinstance(downs, dict) and any(_went_down_again(f, downs) for f in group):
            continue  # the condition went away and came back between two runs: new
        out[fault] = rec
    return out


def _instance_id(client: SlurmClient, name: str, st: dict[str, Any]) -> str:
    """Slurm's InstanceId of this node (23.11+; "" before), read once per boot: it
    identifies the machine for escalation where GPU serials are not known (E1, E3)."""
    cached = st.get("instance") or {}
    if cached.get("boot") == st.get("boot_id") and isinstance(cached.get("id"), str):
        return str(cached["id"])
    try:
        value = client.node(name).instance_id
    except SlurmError:
        return ""  # publishing goes on; asked again next run
    st["instance"] = {"boot": st.get("boot_id") or "", "id": value}
    return value


def _our_maintenance(cfg: CheckConfig, name: str, states: frozenset[str],
                     result: CheckResult, held: bool, pending: Any = None) -> str:
    """SPEC E6, V1, V4, S8: the name of our own maintenance reservation that holds this
    node now ("" when none does), asked of Slurm at most once per run, and only where it
    can be one: a node we held out of service on this boot that is in service again (the
    controller lifts its drain for our job), or one Slurm shows in a reservation. Slurm
    22.05 sets MAINT/RESERVED in a node's state only at its next periodic pass (up to a
    minute after the reservation starts: the lab showed IDLE), so the state alone is not
    enough. A reservation that cannot be read is none of ours (the node is drained as
    before)."""
    if result.maintenance is not None:
        return result.maintenance
    if not held and not states & {"MAINT", "MAINTENANCE", "RESERVED"}:
        return ""
    from slurm_heal.checks import maintenance

    try:
        result.maintenance = maintenance.holding(
            name, cfg.maintenance_prefixes, maintenance.trusted_users(cfg.maintenance_users),
            pending)
    except HealError as exc:
        result.notes.append(f"the reservations holding {name} could not be read ({exc})")
        result.maintenance = ""
    return result.maintenance


def _held_by_us(st: dict[str, Any]) -> bool:
    """SPEC E6, V1, V4: this boot, the node was out of service under our hold (the
    check's drain, or the controller's marker seen by a run that read the node): a drain
    of ours may be lifted for our own maintenance job, so before the check drains the
    node it asks Slurm's reservations (22.05 shows MAINT in a node's state only at its
    next periodic pass, up to a minute after the reservation starts)."""
    pub = st.get("published") or {}
    boot = st.get("boot_id")
    return bool(boot) and boot in (pub.get("held"), pub.get("ours"))


def _remember_our_hold(info: NodeInfo | None, st: dict[str, Any]) -> None:
    """A run that read the node (no read of its own) and saw it drained under our
    marker: remembered for this boot (`_held_by_us`). The check's own hold ends when it
    releases the node, the controller's would not be seen again: after a GPU reset, the
    reset's latched Xid gone, the check released its part while the controller's
    cordon stood, and our gate's lift then looked like anyone's (issue 32 item 2, in CI's
    deployed-together run)."""
    if info is None or not info.drained:
        return
    from slurm_heal import reasons

    if reasons.owner(info.reason) == "ours":
        st.setdefault("published", {})["ours"] = st.get("boot_id") or ""


def _resumed_by_a_person(client: SlurmClient, name: str, findings: list[Finding],
                         st: dict[str, Any], now: datetime, result: CheckResult,
                         cfg: CheckConfig | None = None, ahead: bool = False) -> None:
    """SPEC S8: a node held out of service on this boot while its faults were published
    (our drain, the controller's marker, or a person's own drain) is in service again
    while faults that drain it are still found: a person resumed it. The faults published before (``published.seen``: Extra and
    Reason) are acknowledged (``st["acknowledged"]``) and never drain it again; evidence
    found after it (an event not published then, another fault) drains it at once. A new
    boot is no person's resume (Slurm returns a rebooted node to service by itself), so
    the faults found after it drain it as before; nor is the lift of our drain for one
    of our own maintenance jobs (its reservation holds the node: E6, V1, V4). A node in
    a site's own reservation is a person's resume like any other. ``ahead``: the
    reservations are read beside the node (the agent's kernel-log wake-up, the path from
    a kernel record to the drain); otherwise only once the node is seen in service, so a
    periodic run on a node still drained costs slurmctld the one node read (issue 43)."""
    pub = st.setdefault("published", {"extra": False, "drained": ""})
    acked = st.get("acknowledged") or {}
    active = [f for f in findings if f.fault not in acked]
    if not any(cordons(f) for f in active) or not pub.get("held") \
            or pub.get("held") != st.get("boot_id"):
        return
    pending = None
    if cfg is not None and ahead and result.maintenance is None:
        # The agent's path from a kernel record to the drain (issue 32 item 12): the
        # reservations are read while the node is, not after it.
        from slurm_heal.checks import maintenance

        pending = maintenance.Pending()
    try:
        info = client.node(name)
    except BaseException:
        if pending is not None:
            pending.cancel()
        raise
    if info.drained or info.down:
        if pending is not None:
            pending.cancel()
        return
    if cfg is not None and _our_maintenance(cfg, name, info.states, result, held=True,
                                            pending=pending):
        return  # SPEC E6/V1/V4: our drain lifted for our job in our reservation
    seen = pub.get("seen")
    new = acknowledge(active, now, seen if isinstance(seen, dict) else None)
    st["acknowledged"] = standing(findings, {**acked, **new})
    kept = sorted(f for f in new if f in st["acknowledged"])
    fresh = sorted({f.fault for f in active if cordons(f)} - set(kept))
    pub["drained"] = ""
    pub["held"] = ""
    pub["seen"] = {}
    if kept:
        result.notes.append(f"{name} was resumed by a person while slurm-heal held it: "
                            f"{', '.join(kept)} acknowledged, the node is not drained "
                            "again for them (only a new fault drains it) (SPEC S8)")
    if fresh:
        result.notes.append(f"{name} was resumed by a person; {', '.join(fresh)} has "
                            "evidence not published before the resume: a new fault "
                            "(SPEC S8)")


def _holds_drained(st: dict[str, Any]) -> bool:
    """The check's own drain holds the node on this boot (``published.drained``, the
    reason it drained with, on the boot it did)."""
    pub = st.get("published") or {}
    return bool(pub.get("drained")) and bool(st.get("boot_id")) \
        and pub.get("held") == st.get("boot_id")


def _publish(client: SlurmClient, name: str, alerts: list[Alert], findings: list[Finding],
             st: dict[str, Any], existed: bool, now: datetime, result: CheckResult,
             refresh: bool = False, acknowledged: list[Alert] | None = None,
             maintenance_of: Callable[[frozenset[str]], str] = lambda states: "",
             heartbeat: float | None = None) -> None:
    """Write our key into Extra when what it says changed (`said`), on a new boot, on
    the first run, or when ``refresh`` (the heartbeat, SPEC O1) is due; then drain for
    a fault that needs it (never while ``maintenance_of`` names our own maintenance
    reservation holding the node), or resume our drain once its faults are gone."""
    from slurm_heal import extra, reasons

    pub = st.setdefault("published", {"extra": False, "drained": ""})
    serials = _serials(st)
    domains = _domains(st)
    digest = said(alerts, acknowledged or [], serials, domains)
    # A state that published for another name (the machine renamed, its disk kept) has
    # published nothing for this one.
    write = refresh or digest != pub.get("said") or not existed \
        or pub.get("boot") != st.get("boot_id") or pub.get("node") != name
    worst = [f for f in findings if cordons(f)]

    def section(drained: bool) -> dict[str, Any]:
        """Our key's value; ``drained`` (SPEC S8): our drain holds the node."""
        machine = extra.machine_identity(serials, _instance_id(client, name, st))
        return extra.our_section(alerts, now, machine, acknowledged=acknowledged,
                                 heartbeat=heartbeat, domains=domains, drained=drained)

    try:
        if write:
            # Healthy: our key stays, with no alerts and the time of this write, so the
            # controller sees the health check ran after its action (SPEC L5; a reboot
            # is a new boot, which always writes) and that the check is alive (O1).
            client.set_extra(name, extra.KEY, section(bool(worst) and _holds_drained(st)))
            if alerts or acknowledged:
                if not pub.get("extra"):
                    result.actions.append(f"wrote {len(alerts)} alert(s) into {name}'s Extra")
                pub["extra"] = True
            else:
                pub["seen"] = {}
                if pub.get("extra"):
                    result.actions.append(f"removed our alerts from {name}'s Extra")
                pub["extra"] = False
            pub["said"] = digest
            pub["at"] = now.isoformat()
            pub["node"] = name
        # SPEC S8: what a person can see now. Written just now, or written before and
        # unchanged since (issue 43 writes only on a change: Extra says what the
        # digest says), it is published either way; a fault no longer published is no
        # longer seen (its return, even on a node we still hold, is a new fault).
        forget_unpublished(pub, alerts)
        if alerts:
            remember_published(pub, alerts)
        pub["boot"] = st.get("boot_id")
    except SlurmError as exc:
        if isinstance(exc, SlurmUnreachable):
            raise
        # e.g. the site keeps non-JSON text in Extra: never overwritten. The evidence
        # cannot be published, but a fault that makes the node unusable must still
        # drain it (below).
        result.notes.append(f"evidence not written to {name}'s Extra: {exc}")
    if worst:
        info = client.node(name)
        if info.down or (info.drained and reasons.owner(info.reason) != "ours"):
            # House style 2: a node someone else took out of service keeps their reason.
            result.notes.append(f"{name} is already {'down' if info.down else 'drained'} "
                                f"by someone else ({info.reason!r}); left as it is")
            if info.drained and not info.down and reasons.persons_drain(info.reason):
                # SPEC S8: out of service in a person's hands while these faults are
                # published: that person's resume acknowledges what was published
                # (issue 32, the deployed suite's own-drain). Not a DOWN node (Slurm
                # returns it by itself), nor a tool's drain it lifts itself (NHC's).
                pub["held"] = st.get("boot_id") or ""
        elif not info.drained and maintenance_of(info.states):
            # SPEC E6, V1, V4: our drain was lifted for our own job in our maintenance
            # reservation; the job's result decides (published above, never drained).
            result.notes.append(f"{name} is held by our maintenance reservation "
                                f"{result.maintenance}: published, not drained (the "
                                "job's result decides)")
        elif not info.drained:
            reason = reasons.format_marker(worst[0].fault, by="check", text=worst[0].summary)
            # Recorded before the drain: if scontrol times out after slurmctld applied it
            # (or the wrapper kills us here), a later healthy run still resumes the node.
            pub["drained"] = reason
            pub["held"] = st.get("boot_id") or ""  # SPEC S8: held by us on this boot
            remember_published(pub, worst[:1])  # the Reason names it
            st["published"] = pub
            client.drain(name, reason)
            result.actions.append(f"drained {name}: {reason}")
            # SPEC S8: once our drain took effect, Extra says so, written after it, never
            # before: a controller that sees the node in service again under that word
            # knows someone lifted our drain (a person's resume), even where it never saw
            # the node drained (the drain and the resume between two of its looks). The
            # drain does not wait for this write; one that fails only leaves the word out.
            try:
                client.set_extra(name, extra.KEY, section(True))
            except SlurmError as exc:
                if isinstance(exc, SlurmUnreachable):
                    raise
                result.notes.append(f"Extra of {name} does not say the check drained it: "
                                    f"{exc}")
        else:
            pub["held"] = st.get("boot_id") or ""  # SPEC S8: ours (ours or the controller's)
        return
    if not (pub.get("drained") or not existed):
        return
    info = client.node(name)
    pub["drained"] = ""
    pub["held"] = ""
    pub["seen"] = {}
    if not info.drained:
        return
    marker = reasons.marker_of(info.reason)
    if marker is not None and marker.by == "check":
        client.resume(name)
        result.actions.append(f"resumed {name} (its fault is gone)")
    else:
        result.notes.append(f"{name} stays drained: its reason {info.reason!r} "
                            "was not set by the node check")


def run_check(cfg: CheckConfig, *, node_name: str, mode: str = "healthcheck",
              dry_run: bool = False, client: SlurmClient | None = None,
              client_factory: Callable[[], SlurmClient] | None = None,
              only: frozenset[str] | None = None, now: datetime | None = None,
              publish: bool = False) -> CheckResult:
    """One check run on this node (see the module docstring). ``publish``: write our key
    now, changed or not (what our maintenance jobs run after a repair, so the controller
    sees a check after it at once: SPEC L5). Raises SlurmError when publishing fails
    (the state, cursors included, is saved first)."""
    now = now or datetime.now(timezone.utc)
    state_dir = cfg.state_path()
    with state.locked(state_dir):
        st, existed = state.load(state_dir, paths.boot_id())
        found, statuses, updates = _run_detectors(cfg, st, node_name, now, mode, only)
        st.update(updates)
        all_findings: list[Finding] = []
        saved: dict[str, list[dict[str, Any]]] = {}
        for s in statuses:
            if s.status == "disabled":
                continue
            det_findings = found[s.name] if s.name in found else _previous(st, s.name, node_name)
            det_findings = [replace(f, node=node_name) for f in det_findings]
            saved[s.name] = [f.to_json() for f in det_findings]
            all_findings.extend(det_findings)
        st["findings"] = saved
        # SPEC O1: a detector that failed says so centrally, never "healthy": a record-only
        # warning with its error as evidence (not saved as the detector's findings, so it
        # goes away by itself the first run the detector works again).
        all_findings.extend(detector_errors(kept_errors(st, statuses), node_name, now))
        alerts = to_alerts(all_findings, st.get("alerts") or {}, now)
        st["alerts"] = {a.fault: a.first_seen.isoformat() for a in alerts}
        # SPEC S8: what a person's resume acknowledged and still stands
        st["acknowledged"] = standing(all_findings, st.get("acknowledged") or {})
        result = CheckResult(node=node_name, mode=mode, findings=all_findings, alerts=alerts,
                             statuses=statuses)
        _split(result, all_findings, alerts, st)
        if mode in ("prolog", "epilog") and not dry_run:
            _our_job(cfg, node_name, result)
        try:
            pub = st.get("published") or {}
            # Issue 43: Slurm is called only when what Extra says changed, on the
            # heartbeat (SPEC O1: the health check's and the agent's full runs, at most
            # every [check] heartbeat; `status` sees a check gone quiet), for a fault
            # that drains the node (S8: was it resumed?), to release our drain, and on a
            # new boot or state. Prolog and epilog on a healthy node never call it.
            beat = publish or (mode in REFRESH_MODES and only is None
                               and beat_due(pub, now, cfg.heartbeat))
            changed = said(result.alerts, result.acknowledged, _serials(st),
                           _domains(st)) != pub.get("said")
            needs_slurm = changed or beat or any(cordons(f) for f in result.findings) \
                or bool(pub.get("drained")) or not existed or pub.get("boot") != st.get("boot_id") \
                or pub.get("node") != node_name
            if not dry_run and needs_slurm:
                if client is None:
                    client = (client_factory or default_client)()
                cached = st.get("instance") or {}
                one = OneRead(client, node_name, alone=cached.get("boot") == st.get("boot_id")
                              and isinstance(cached.get("id"), str))
                try:
                    # Every finding, the acknowledged ones too: `standing` keeps an
                    # earlier resume's acknowledgement only for a fault it is given.
                    _resumed_by_a_person(one, node_name, all_findings, st, now, result,
                                         cfg, ahead=mode == "agent" and only is not None)
                    _split(result, all_findings, alerts, st)
                    _publish(one, node_name, result.alerts, result.findings, st, existed,
                             now, result, refresh=beat, acknowledged=result.acknowledged,
                             heartbeat=cfg.heartbeat,
                             maintenance_of=lambda states: _our_maintenance(
                                 cfg, node_name, states, result,
                                 held=_held_by_us(st)))
                    _remember_our_hold(one.known(), st)
                except SlurmError as exc:
                    if mode != "prolog" or not any(cordons(f) for f in all_findings):
                        raise
                    # The node is unusable and we could not drain it: failing the prolog
                    # makes Slurm drain it itself and requeue the job.
                    result.notes.append(f"could not drain {node_name} through Slurm "
                                        f"({exc}); the prolog fails so Slurm drains it")
        finally:
            state.save(state_dir, st)
    result.exit_code = exit_code(result)
    return result


def _our_job(cfg: CheckConfig, name: str, result: CheckResult) -> None:
    """SPEC S8, E6, V1, V4: whether slurmd runs this Prolog/Epilog for one of our own
    maintenance jobs (`maintenance.job_is_ours`: our reservation, a trusted user; never
    the job's name). Slurm is asked only for a job in a reservation with our prefix."""
    from slurm_heal.checks import maintenance

    if not any(os.environ.get("SLURM_JOB_RESERVATION", "").startswith(p)
               for p in cfg.maintenance_prefixes if p):
        return
    try:
        found = maintenance.job_is_ours(os.environ, cfg.maintenance_prefixes,
                                        maintenance.trusted_users(cfg.maintenance_users),
                                        name)
    except HealError as exc:
        result.notes.append(f"the job's reservation could not be read ({exc}); "
                            "taken as a user's job")
        return
    if found:
        result.maintenance_job = found
        result.maintenance = found  # the reservation holds the node: never drained
        result.notes.append(f"our maintenance job in {found}: allowed, the node is not "
                            "drained while it holds it (its result decides)")


def _split(result: CheckResult, findings: list[Finding], alerts: list[Alert],
           st: dict[str, Any]) -> None:
    """SPEC S8: the findings and alerts a person's resume acknowledged go out of the
    active ones (they are published as acknowledged, and never drain the node)."""
    acked = st.get("acknowledged") or {}
    result.findings = [f for f in findings if f.fault not in acked]
    result.alerts = [a for a in alerts if a.fault not in acked]
    result.acknowledged = [a for a in alerts if a.fault in acked]


def exit_code(result: CheckResult) -> int:
    """0 healthy; 1 findings. Prolog: 1 only for faults that make the node unusable
    (cordon), so Slurm requeues the job, and never for our own maintenance job (its
    reservation holds the node for it: SPEC S8). Epilog: 0 (we drain with our own reason; a
    failing epilog would make Slurm drain with its own). 10: a detector failed and
    nothing was found."""
    if result.mode == "epilog":
        return EXIT_HEALTHY
    if result.mode == "prolog":
        if result.maintenance_job:
            return EXIT_HEALTHY  # SPEC S8: our own reset/gate/validation job goes through
        return EXIT_FINDINGS if any(cordons(f) for f in result.findings) else EXIT_HEALTHY
    if any(f.fault != DETECTOR_ERROR for f in result.findings):
        return EXIT_FINDINGS
    if any(s.status in ("error", "timeout") for s in result.statuses):
        return EXIT_DETECTOR_FAILED
    return EXIT_HEALTHY



def report_crash(node_name: str, error: str, client: SlurmClient | None = None,
                 now: datetime | None = None, state_dir: str | None = None) -> str:
    """SPEC O1, I1: the node check itself broke (``error``: what it raised). Said
    centrally as the record-only ``check.detector_error`` alert of the detector
    ``check``, added to what our key in the node's Extra holds now: the alerts published
    before stay as they are (the controller must not take a broken check for faults that
    cleared), and ``checked_at`` is not moved (the check did not complete, so it goes
    stale). The first run that completes writes its own alerts, without this one.
    Never drains or resumes anything. Returns what was done, in words; raises what the
    Slurm client raises."""
    from slurm_heal import extra

    now = now or datetime.now(timezone.utc)
    client = client or default_client()
    current = (client.node(node_name).extra or {}).get(extra.KEY)
    section: dict[str, Any] = dict(current) if isinstance(current, dict) else {
        "v": extra.VERSION, "alerts": []}
    raw = section.get("alerts")
    alerts = [a for a in raw if isinstance(a, dict)] if isinstance(raw, list) else []
    mine = [a for a in alerts if a.get("fault") == DETECTOR_ERROR and a.get("detector") == "check"]
    first = now
    if mine:
        try:
            first = datetime.fromisoformat(str(mine[0].get("first_seen")))
        except ValueError:
            pass
    crash = Alert(node=node_name, fault=DETECTOR_ERROR, severity=Severity.WARNING,
                  summary=f"the node check itself failed: {error}"[:300], first_seen=first,
                  last_seen=now, detector="check",
                  evidence=(Evidence(source="slurm-heal check", text=error[:2000],
                                     at=now.isoformat(),
                                     data={"detector": "check", "status": "crashed"}),))
    section["alerts"] = [a for a in alerts if a not in mine] + [extra.alert_to_json(crash)]
    client.set_extra(node_name, extra.KEY, section)
    _said_changed(state_dir)
    return f"reported in {node_name}'s Extra as {DETECTOR_ERROR} (detector check)"


def _said_changed(state_dir: str | None) -> None:
    """Extra no longer says what the state says we last wrote (issue 43 writes only on a
    change): the next run that completes writes its own alerts, so the crash's alert goes
    with it, never only at the heartbeat. Best effort: the state may be what broke."""
    try:
        if state_dir is None:
            from slurm_heal.checks import config

            state_dir = config.load_config(None).state_path()
        with state.locked(state_dir, timeout=2.0):
            st, _existed = state.load(state_dir, paths.boot_id())
            pub = st.get("published")
            if isinstance(pub, dict):
                pub["said"] = ""
                state.save(state_dir, st)
    except Exception:  # noqa: BLE001 - the crash is reported already; this only hastens
        pass
