"""The lemon ledger (SPEC E7): what each machine went through, across renames, re-images
and migrates.

A *machine* is the hardware under a node (SPEC vocabulary). Its identity is the one the
engine counts E1/E3 by (`policy.facts.host_of`): the machine id a migrate wrote
(``slurm_heal_host.host``), else the one the node check published from the GPU serials
(placeholder serials are no identity, D11) or Slurm's InstanceId, else the node name.
How an identity follows a machine (docs/rules.md, E7):

* **rename**: the GPU serials (or the instance id) do not change with the node's name:
  the machine is the same, and the ledger adds the new name to the names it has had.
  A node whose only identity is its name starts a new ledger under the new name.
* **rebuild (re-image)**: the hardware stays, so do its serials and the cloud instance.
  Until the re-imaged node's check publishes its identity again the node has only its
  name; the ledger keeps the machine a name was last seen on, so that gap is counted
  on the machine, not on a new one named like the node.
* **migrate**: the *job slot* moves to other hardware. The remediation (and every one
  before it) stays on the old machine's ledger; the node is then on a new machine (the
  provider's ``slurm_heal_host`` mark, or new serials), which starts its own ledger.

The ledger is a small JSON document (``machines.json``) in the state directory beside
the store, written atomically under its own lock (`fsio`), bounded (names, recent
remediations and faults per machine; machines not seen for `FORGET_AFTER` leave it and
go to the audit archive, ``audit.jsonl``, as ``{"archived_at": ..., "machine": {...}}``
lines). It is derived: a state directory without one (an older slurm-heal) starts a
ledger from the remediations the store still holds.

`observe` is pure (no I/O, ``now`` passed in); `LedgerFile` reads and writes it;
`LedgerObserver` runs beside the daemon's cycle (like the metrics).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal, NoReturn

from pydantic import ConfigDict, Field, ValidationError

from slurm_heal import extra as extra_mod
from slurm_heal import fsio, jsonsafe
from slurm_heal.durations import format_duration
from slurm_heal.errors import StoreError
from slurm_heal.models import Phase, Record, Remediation
from slurm_heal.policy.facts import acted_at, ended_at, host_of
from slurm_heal.types import Action, NodeInfo

log = logging.getLogger(__name__)

LEDGER_FILE = "machines.json"
AUDIT_ARCHIVE = "audit.jsonl"  # the store's audit archive (store.AUDIT_ARCHIVE)
VERSION = 1
MAX_NAMES = 16  # names a machine has had, newest kept
MAX_RECENT = 64  # remediations kept one by one per machine (counts keep them all)
MAX_FAULTS = 64  # distinct faults counted per machine
MAX_ALERT_KEYS = 64  # alert instances remembered per machine (one count per instance)
MAX_MACHINES = 250_000
FORGET_AFTER = timedelta(days=400)  # not seen this long: archived and dropped
# A machine's ``last_seen`` (and a name's) moves in steps of this much: a healthy
# cluster's ledger is rewritten once a day, not every cycle (days in service are days).
SEEN_EVERY = timedelta(days=1)
# Every node is looked at once per this much (the sweep): a new machine or a rename is in
# the ledger within the hour; in between only the nodes a cycle decided about.
SWEEP_EVERY = timedelta(hours=1)

Kind = Literal["gpu_serials", "instance_id", "provider", "node_name"]


class _Stored(Record):
    # Fields a newer slurm-heal added are kept and written back (like the store).
    model_config = ConfigDict(frozen=True, extra="allow")


class NameSeen(_Stored):
    """One name a machine had, and when it was first and last seen under it."""

    name: str
    first: datetime
    last: datetime


class FaultSeen(_Stored):
    """One fault on a machine: how many alert instances, first and last seen."""

    count: int = 0
    first: datetime
    last: datetime


class Event(_Stored):
    """One finished remediation of a machine."""

    remediation: str
    node: str
    fault: str
    action: Action
    outcome: str  # the terminal phase: done, failed, cancelled, withdrawn, denied
    ended: datetime
    acted: datetime | None = None  # when its action was sent (None: it never acted)


class Machine(_Stored):
    """One machine's ledger (SPEC E7)."""

    id: str
    kind: Kind = "node_name"
    gpu_serials: tuple[str, ...] = ()
    instance_id: str = ""
    first_seen: datetime
    last_seen: datetime
    names: tuple[NameSeen, ...] = ()  # oldest first, at most MAX_NAMES
    faults: dict[str, FaultSeen] = Field(default_factory=dict)
    remediations: dict[str, dict[str, int]] = Field(default_factory=dict)  # action -> outcome -> n
    recent: tuple[Event, ...] = ()  # oldest first, at most MAX_RECENT
    alert_keys: tuple[str, ...] = ()
    moved_off: str = ""  # a migrate moved this node off the machine: "node at time"

    @property
    def name(self) -> str:
        """The name it was last seen under."""
        return self.names[-1].name if self.names else self.id

    def days_in_service(self, now: datetime | None = None) -> float:
        """Days from first seen to last seen (to ``now`` while it is still seen)."""
        end = self.last_seen if now is None else max(self.last_seen, now)
        return round(max((end - self.first_seen).total_seconds(), 0) / 86400, 1)

    def acted_within(self, now: datetime, window: timedelta) -> int:
        """Remediations whose action ran within ``window`` before ``now`` (E7's count)."""
        since = now - window
        return sum(1 for e in self.recent if e.acted is not None and e.acted >= since)

    @property
    def acted_total(self) -> int:
        return sum(n for action, outs in self.remediations.items()
                   for out, n in outs.items() if out in _ACTED_OUTCOMES)

    @property
    def faults_total(self) -> int:
        return sum(f.count for f in self.faults.values())


# Outcomes that follow an action that ran (a withdrawn or denied one never acted).
_ACTED_OUTCOMES = frozenset({Phase.DONE.value, Phase.FAILED.value})


class Ledger(_Stored):
    """The whole ledger document."""

    v: int = VERSION
    counted_through: datetime | None = None  # remediations ended up to here are counted
    swept_at: datetime | None = None  # the last look at every node
    machines: dict[str, Machine] = Field(default_factory=dict)
    names: dict[str, str] = Field(default_factory=dict)  # node name -> machine last under it


# ---------------------------------------------------------------------------- identity


def identity(node: NodeInfo, known: Mapping[str, str] | None = None) -> tuple[str, Kind]:
    """The machine under ``node`` and what identifies it. ``known``: node name -> the
    machine it was last seen on: a node that has only its name (a re-imaged node whose
    check has not published its identity yet) is still on that machine."""
    host = host_of(node, node.name)
    if host == node.name:
        return (known or {}).get(node.name, host), "node_name"
    moved = node.extra.get(extra_mod.HOST_KEY) if isinstance(node.extra, dict) else None
    if isinstance(moved, dict) and moved.get("host") == host:
        return host, "provider"
    return host, _kind_of(host, node.name)


def _kind_of(host: str, node: str) -> Kind:
    if host.startswith("gpus-"):
        return "gpu_serials"
    if host.startswith("instance-"):
        return "instance_id"
    return "node_name" if host == node else "provider"


def _machine_facts(node: NodeInfo) -> dict[str, Any]:
    ours = (node.extra or {}).get(extra_mod.KEY) if isinstance(node.extra, dict) else None
    machine = ours.get("machine") if isinstance(ours, dict) else None
    out: dict[str, Any] = {}
    if isinstance(machine, dict):
        serials = machine.get("gpu_serials")
        if isinstance(serials, list) and all(isinstance(s, str) for s in serials):
            out["gpu_serials"] = tuple(serials)
    if node.instance_id:
        out["instance_id"] = node.instance_id
    return out


# ---------------------------------------------------------------------------- the fold


class _Fold:
    """One `observe` call: the machines it changed, copied on write."""

    def __init__(self, ledger: Ledger, now: datetime) -> None:
        self.old = ledger
        self.now = now
        # the ledger's own maps until the first change (a quiet cycle copies nothing)
        self.machines = ledger.machines
        self.names = ledger.names
        self.changed = False

    def _own(self) -> None:
        if not self.changed:
            self.machines = dict(self.machines)
            self.names = dict(self.names)
            self.changed = True

    def get(self, mid: str, kind: Kind) -> Machine:
        m = self.machines.get(mid)
        if m is None:
            m = Machine(id=mid, kind=kind, first_seen=self.now, last_seen=self.now)
            self.put(m)
        return m

    def put(self, m: Machine) -> None:
        self._own()
        self.machines[m.id] = m

    def seen(self, node: NodeInfo, mid: str, kind: Kind) -> None:
        m = self.get(mid, kind)
        upd: dict[str, Any] = {}
        facts = _machine_facts(node)
        for key, value in facts.items():
            if getattr(m, key) != value:
                upd[key] = value
        if kind != "node_name" and m.kind != kind:
            upd["kind"] = kind
        if self.now - m.last_seen >= SEEN_EVERY:
            upd["last_seen"] = self.now
        names = list(m.names)
        if not names or names[-1].name != node.name:
            if m.moved_off:
                upd["moved_off"] = ""  # back in service under another node
            names.append(NameSeen(name=node.name, first=self.now, last=self.now))
            upd["names"] = tuple(names[-MAX_NAMES:])
            if kind != "node_name":
                # a machine is under one name at a time: its old names (renamed away) are
                # no longer on it, whatever comes to carry them next
                for old in m.names:
                    if old.name != node.name and self.names.get(old.name) == mid:
                        self._own()
                        del self.names[old.name]
        elif self.now - names[-1].last >= SEEN_EVERY:
            names[-1] = names[-1].model_copy(update={"last": self.now})
            upd["names"] = tuple(names)
        if upd:
            self.put(m.model_copy(update=upd))
        if self.names.get(node.name) != mid:
            self._own()
            self.names[node.name] = mid

    def alerts(self, node: NodeInfo, mid: str, kind: Kind) -> None:
        data = extra_mod.read_check_data(node.name, node.extra, self.now)
        if not data.alerts:
            return
        m = self.get(mid, kind)
        faults, keys = dict(m.faults), m.alert_keys
        for a in data.alerts:
            m = m.model_copy(update={"faults": faults, "alert_keys": keys})
            faults, keys = _count_fault(m, a.fault, a.first_seen, a.last_seen)
        if keys != self.machines[mid].alert_keys:
            self.put(m.model_copy(update={"faults": faults, "alert_keys": keys}))

    def remediation(self, r: Remediation, end: datetime) -> None:
        mid = r.host or self.names.get(r.node) or r.node
        m = self.get(mid, _kind_of(mid, r.node))
        if any(e.remediation == r.id for e in m.recent):
            return  # counted already (a clock that went back, a second look)
        counts = {a: dict(o) for a, o in m.remediations.items()}
        by = counts.setdefault(r.action.value, {})
        by[r.phase.value] = by.get(r.phase.value, 0) + 1
        ev = Event(remediation=r.id, node=r.node, fault=r.fault, action=r.action,
                   outcome=r.phase.value, ended=end, acted=acted_at(r))
        upd: dict[str, Any] = {"remediations": counts,
                               "recent": (*m.recent, ev)[-MAX_RECENT:]}
        if r.fault not in NOT_FAULTS:
            # the alert instance it was for, counted once whether the ledger saw the
            # alert itself (between sweeps it may not) or only the remediation
            first = r.alert_first_seen or r.created
            faults, keys = _count_fault(m, r.fault, first, end)
            if keys != m.alert_keys:
                upd.update(faults=faults, alert_keys=keys)
        if not m.names:
            upd["names"] = (NameSeen(name=r.node, first=r.created, last=end),)
            upd["first_seen"] = min(m.first_seen, r.created)
        self._own()
        if r.node not in self.names:
            self.names[r.node] = mid  # a store's history, before the node was seen
        if r.action is Action.MIGRATE and r.phase is Phase.DONE:
            # SPEC E7: the node now runs on other hardware; this machine keeps its ledger
            upd["moved_off"] = f"{r.node} at {end.isoformat()}"
            if self.names.get(r.node) == mid:
                del self.names[r.node]
        self.put(m.model_copy(update=upd))

    def bound(self) -> list[Machine]:
        """Drop machines not seen for FORGET_AFTER, then the longest unseen over
        MAX_MACHINES; return them (for the audit archive)."""
        gone = [m for m in self.machines.values() if self.now - m.last_seen > FORGET_AFTER]
        if len(self.machines) - len(gone) > MAX_MACHINES:
            out = {m.id for m in gone}
            rest = sorted((m for m in self.machines.values() if m.id not in out),
                          key=lambda m: (m.last_seen, m.id))
            gone += rest[:len(self.machines) - len(gone) - MAX_MACHINES]
        if gone:
            self._own()
        for m in gone:
            del self.machines[m.id]
        if gone:
            ids = {m.id for m in gone}
            self.names = {n: mid for n, mid in self.names.items() if mid not in ids}
        return gone


# Faults that name Slurm's state or the request channel, not the machine (policy.facts).
NOT_FAULTS = frozenset({"request", "request.malformed"})


def _count_fault(m: Machine, fault: str, first: datetime,
                 last: datetime) -> tuple[dict[str, FaultSeen], tuple[str, ...]]:
    """``m``'s faults and alert keys with one alert instance (fault, first seen) added,
    unless it was counted already."""
    key = f"{fault}@{first.isoformat()}"
    if key in m.alert_keys:
        return m.faults, m.alert_keys
    faults = dict(m.faults)
    was = faults.get(fault)
    if was is None:
        if len(faults) >= MAX_FAULTS:
            return m.faults, m.alert_keys
        faults[fault] = FaultSeen(count=1, first=first, last=last)
    else:
        faults[fault] = was.model_copy(update={"count": was.count + 1,
                                               "first": min(was.first, first),
                                               "last": max(was.last, last)})
    return faults, (*m.alert_keys, key)[-MAX_ALERT_KEYS:]


def _has_alerts(node: NodeInfo) -> bool:
    ours = node.extra.get(extra_mod.KEY) if isinstance(node.extra, dict) else None
    return isinstance(ours, dict) and bool(ours.get("alerts"))


@dataclass(frozen=True, slots=True)
class Observed:
    """What `observe` returns: the new ledger, whether it changed, and the machines it
    dropped (for the audit archive)."""

    ledger: Ledger
    changed: bool
    dropped: tuple[Machine, ...] = ()


def observe(ledger: Ledger, nodes: Iterable[NodeInfo], remediations: Iterable[Remediation],
            now: datetime, *, touched: Iterable[str] | None = None) -> Observed:
    """Fold one cycle into the ledger (pure). Every node is looked at once per
    `SWEEP_EVERY` (the sweep); in between only the nodes named in ``touched`` (those the
    cycle decided something about: an alert's first cycle always leaves a record, P1,
    S1 or D8, so its fault is counted then). Each remediation is counted
    once, when it has ended (``counted_through``); a ledger that has counted nothing yet
    counts every ended remediation it is given (an older store's history)."""
    f = _Fold(ledger, now)
    sweep = ledger.swept_at is None or now - ledger.swept_at >= SWEEP_EVERY
    wanted = None if sweep or touched is None else set(touched)
    since = ledger.counted_through
    for r in remediations:
        if not r.phase.terminal:
            continue
        end = ended_at(r) or r.updated
        if (since is None or end > since) and end <= now:
            f.remediation(r, end)
    for node in (() if wanted is not None and not wanted else nodes):
        if wanted is not None and node.name not in wanted:
            continue
        mid, kind = identity(node, f.names)
        f.seen(node, mid, kind)
        if _has_alerts(node):
            f.alerts(node, mid, kind)
    dropped = f.bound() if sweep else []  # a look at every machine: hourly, not per cycle
    if not f.changed:
        # nothing new: the file stays unwritten (a sweep is remembered in memory only);
        # the next cycle looks from the same ``counted_through`` again
        return Observed(ledger.model_copy(update={"swept_at": now}) if sweep else ledger,
                        False)
    upd: dict[str, Any] = {"machines": f.machines, "names": f.names, "counted_through": now}
    if sweep:
        upd["swept_at"] = now
    return Observed(ledger.model_copy(update=upd), True, tuple(dropped))


# ---------------------------------------------------------------------------- reading


def worst_first(ledger: Ledger, now: datetime, window: timedelta) -> list[Machine]:
    """The machines, worst first: most remediations acted within ``window``, then most
    acted in all, then most faults seen, then by id."""
    return sorted(ledger.machines.values(), key=lambda m: (
        -m.acted_within(now, window), -m.acted_total, -m.faults_total, m.id))


def of_node(ledger: Ledger, node: str) -> Machine | None:
    """The machine a node was last seen on."""
    mid = ledger.names.get(node)
    return ledger.machines.get(mid) if mid else None


def summary(m: Machine, now: datetime, window: timedelta) -> str:
    """One line of a machine's ledger, for a notification or a ticket."""
    names = ", ".join(n.name for n in m.names) or m.id
    acts = "; ".join(f"{a} {o} {n}" for a, outs in sorted(m.remediations.items())
                     for o, n in sorted(outs.items())) or "no remediations"
    faults = ", ".join(f"{k} x{v.count}" for k, v in sorted(
        m.faults.items(), key=lambda kv: (-kv[1].count, kv[0]))) or "no faults"
    return (f"machine {m.id} ({m.kind}; names: {names}; {m.days_in_service(now)} days in "
            f"service): {m.acted_within(now, window)} remediation(s) acted within "
            f"{format_duration(window)}; remediations: {acts}; faults: {faults}")


def machine_json(m: Machine, now: datetime, window: timedelta) -> dict[str, Any]:
    """A machine as the CLI (``--json``), the API and the console show it."""
    return {
        "id": m.id, "kind": m.kind, "name": m.name,
        "names": [n.model_dump(mode="json") for n in m.names],
        "gpu_serials": list(m.gpu_serials), "instance_id": m.instance_id,
        "first_seen": m.first_seen.isoformat(), "last_seen": m.last_seen.isoformat(),
        "days_in_service": m.days_in_service(now),
        "acted_in_window": m.acted_within(now, window), "window": format_duration(window),
        "acted_total": m.acted_total, "faults_total": m.faults_total,
        "faults": {k: v.model_dump(mode="json") for k, v in sorted(m.faults.items())},
        "remediations": {a: dict(sorted(o.items())) for a, o in sorted(m.remediations.items())},
        "recent": [e.model_dump(mode="json") for e in reversed(m.recent)],
        "moved_off": m.moved_off,
    }


# ---------------------------------------------------------------------------- the file


class LedgerFile:
    """``machines.json`` in the state directory: atomic writes under a lock (`fsio`)."""

    def __init__(self, state_dir: Path | str, lock_timeout: float = 10.0) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / LEDGER_FILE
        self.lock = self.dir / (LEDGER_FILE + ".lock")
        self.archive = self.dir / AUDIT_ARCHIVE
        self.lock_timeout = lock_timeout
        self._cache: tuple[tuple[int, int, int] | None, Ledger] | None = None

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def load(self) -> Ledger:
        """The ledger; an empty one when there is none yet. A newer major version or a
        document that cannot be read is a StoreError naming the file (never replaced).
        The daemon's own last write is not read back (the file is unchanged since)."""
        stamp = self._stamp()
        if stamp is not None and self._cache is not None and self._cache[0] == stamp:
            return self._cache[1]
        ledger = self._read()
        self._cache = (stamp, ledger) if stamp is not None else None
        return ledger

    def _read(self) -> Ledger:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return Ledger()
        except OSError as exc:
            raise StoreError(f"cannot read the machine ledger {self.path}: {exc}") from exc
        try:
            # pydantic's own parser: a 100k-machine ledger loads in a fraction of what
            # json + model_validate take (docs/machines.md has the figures)
            led = Ledger.model_validate_json(raw)
        except ValidationError as exc:
            self._refuse(raw, exc)
        if led.v > VERSION:
            raise StoreError(f"the machine ledger {self.path} has version {led.v}; this "
                             f"slurm-heal reads up to {VERSION}: upgrade it")
        return led

    def _refuse(self, raw: bytes, exc: ValidationError) -> NoReturn:
        """The clearest words for a ledger that does not load."""
        try:
            data = jsonsafe.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as bad:
            raise StoreError(f"the machine ledger {self.path} is not JSON ({bad}); move it "
                             "aside and slurm-heal builds a new one from the store") from exc
        if not isinstance(data, dict):
            raise StoreError(f"the machine ledger {self.path} is not a JSON object") from exc
        if isinstance(data.get("v"), int) and data["v"] > VERSION:
            raise StoreError(f"the machine ledger {self.path} has version {data['v']}; this "
                             f"slurm-heal reads up to {VERSION}: upgrade it") from exc
        err = exc.errors()[0]
        raise StoreError(f"the machine ledger {self.path} cannot be read: "
                         f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from exc

    def update(self, nodes: Iterable[NodeInfo], remediations: Iterable[Remediation],
               now: datetime, touched: Iterable[str] | None = None) -> Ledger:
        """Fold a cycle in and write the ledger when it changed (dropped machines are
        first appended to the audit archive). The first fold also reads the remediations
        of the audit archive."""
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            with fsio.locked(self.lock, self.lock_timeout):
                led = self.load()
                if led.counted_through is None:
                    # a first ledger (an older slurm-heal's state dir): the history the
                    # store's retention moved to the audit archive counts too
                    from slurm_heal.store import archived

                    remediations = [*archived(self.archive), *remediations]
                out = observe(led, nodes, remediations, now, touched=touched)
                if out.dropped:
                    self._archive(out.dropped, now)
                if out.changed:
                    fsio.atomic_write(self.path, out.ledger.model_dump_json())
                    self._cache = (self._stamp(), out.ledger)
                elif self._cache is not None and self._cache[0] == self._stamp():
                    self._cache = (self._cache[0], out.ledger)  # the sweep's time
                return out.ledger
        except fsio.LockTimeout as exc:
            raise StoreError(f"the machine ledger {self.path} is locked by {exc.holder}") from exc
        except OSError as exc:
            raise StoreError(f"cannot write the machine ledger {self.path}: {exc}") from exc

    def _archive(self, machines: Iterable[Machine], now: datetime) -> None:
        lines = b"".join(json.dumps({"archived_at": now.isoformat(),
                                     "machine": m.model_dump(mode="json")},
                                    separators=(",", ":")).encode("utf-8") + b"\n"
                         for m in machines)
        with self.archive.open("ab") as fh:
            fh.write(lines)
            fh.flush()
            os.fsync(fh.fileno())


def archived_machines(path: Path | str) -> list[Machine]:
    """The machines an audit archive holds (the last line of each id wins)."""
    out: dict[str, Machine] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        try:
            m = Machine.model_validate(json.loads(line)["machine"])
        except (ValueError, KeyError, TypeError, ValidationError):
            continue
        out.pop(m.id, None)
        out[m.id] = m
    return list(out.values())


class LedgerObserver:
    """Beside the daemon's cycle (`controller.CycleFacts`): folds what the cycle saw into
    the ledger. A failure is logged; it never fails the cycle (like every observer)."""

    def __init__(self, state_dir: Path | str) -> None:
        self.file = LedgerFile(state_dir)

    def __call__(self, facts: Any) -> None:
        touched = {r.node for r in facts.plan.updates} | {d.node for d in facts.plan.records}
        try:
            self.file.update(facts.view.nodes, facts.after.remediations,
                             _utc(facts.at), touched)
        except StoreError as exc:
            log.error("machine ledger not updated this cycle: %s", exc)


def _utc(now: datetime) -> datetime:
    return now.replace(tzinfo=timezone.utc) if now.tzinfo is None else now
