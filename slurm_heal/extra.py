"""The node's ``Extra`` field as the evidence channel (SPEC I2, D7).

Slurm's ``Extra`` holds arbitrary text; slurm-heal keeps a JSON object there and owns
exactly one key of it, ``slurm_heal``. Other keys (a site's own tooling) are kept as
they are. Layout of our key::

    {"slurm_heal": {"v": 1, "checked_at": "2026-01-05T00:00:00+00:00", "heartbeat_s": 1800,
                    "alerts": [{"fault": "gpu.xid.79", "severity": "critical",
                                "summary": "...", "detector": "kernel_log",
                                "first_seen": "...", "last_seen": "...",
                                "evidence": [{"source": "kmsg", "text": "...", "at": "..."}]}],
                    "host": "gpus-0123456789abcdef",      # when the GPU serials are known
                    "machine": {"gpu_serials": ["1654922001234", ...]}}}

Evidence is trimmed (text length, count per alert) so the field stays small; the full
record stays in the node check's own state file.

The node check rewrites our key only when what it says changes (`slurm_heal.checks.runner.said`), and otherwise
at most every ``heartbeat_s`` seconds (SPEC O1, issue 43): ``checked_at`` is the time of
the last write, so a node's check is stale when ``checked_at`` is older than its own
``heartbeat_s`` plus the controller's slack (slurm_heal.readmodel.overview).

Reading it back (`read_check_data`) is the edge where data from Slurm becomes trusted:
anyone who may run ``scontrol update`` can write Extra, so every field of our keys is
checked for its type. A node whose data is wrong gets a ``problem`` naming the field
(``slurm_heal.alerts[0].evidence: expected a list, got int``) and no alerts; the
engine records it as a ``check.data_unreadable`` alert and treats the node as one
whose check data cannot be read. It never raises: one node's Extra never stops a cycle.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from slurm_heal import isotime, jsonsafe
from slurm_heal.errors import SlurmError
from slurm_heal.nvml import NVML_ERROR_STRINGS
from slurm_heal.types import Alert, Evidence, Severity

KEY = "slurm_heal"
# The machine identity under the node: written by whatever moves a node to other
# hardware (a migrate), as {"host": "...", "previous": "..."}. A key of its own, because
# the node check rewrites KEY on every run and must not lose it.
HOST_KEY = "slurm_heal_host"
VERSION = 1
MAX_EVIDENCE = 3
MAX_TEXT = 400
# A time published by the node check may run ahead of the controller's clock by clock
# skew, not by more: a later one is broken data (and year 9999 would overflow the
# engine's arithmetic).
MAX_AHEAD = timedelta(days=1)
EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
# CheckCache: a read that took the time as a default is valid at no time of its own.
_STALE = datetime.max.replace(tzinfo=timezone.utc)
# The record-only fault a node with unreadable check data gets (catalog.toml).
UNREADABLE = "check.data_unreadable"


# Return Extra as a dict when it is a JSON object, else None. Written in jsonsafe, so
# NodeInfo (slurm_heal.types, which this module imports) parses with it too (issue 26).
parse_extra = jsonsafe.parse_extra


def _ts(value: datetime) -> str:
    return value.astimezone(timezone.utc).isoformat()


def alert_to_json(alert: Alert) -> dict[str, Any]:
    ev = []
    for e in alert.evidence[:MAX_EVIDENCE]:
        j = e.to_json()
        j["text"] = j["text"][:MAX_TEXT]
        ev.append(j)
    return {
        "fault": alert.fault,
        "severity": alert.severity.value,
        "summary": alert.summary,
        "detector": alert.detector,
        "first_seen": _ts(alert.first_seen),
        "last_seen": _ts(alert.last_seen),
        "evidence": ev,
    }


# What tools print where a GPU has no readable serial (SPEC D11): nvidia-smi on AWS A10G
# / T4 ("0000000000000"), consumer and vGPU cards ("N/A", "[N/A]" in CSV), rocm-smi ("0",
# "N/A"), amd-smi ("N/A"). Compared without case, brackets and blanks.
PLACEHOLDER_SERIALS = frozenset({
    "", "n/a", "na", "none", "null", "nil", "unknown", "not supported", "notsupported",
    "not available", "unavailable", "unknown error", "insufficient permissions",
    "no permission", "gpu is lost", "default string", "to be filled by o.e.m.", "-",
    "err!", "error",
})
# NVML's own error strings, which nvidia-smi prints in place of a value it cannot read
# ("[GPU requires reset]", "[Unknown Error]", "N/A (GPU is lost)", ...): the same on every
# broken machine, so never an identity (SPEC D11, E1, E7). One list: slurm_heal.nvml.

# NVML's "value not available" (NVML_VALUE_NOT_AVAILABLE: an unsigned -1) as a number.
_NOT_AVAILABLE_NUMBERS = frozenset({"-1", "65535", "4294967295", "18446744073709551615"})
# What a serial of any vendor looks like: letters, digits and "-", "_", "." (NVIDIA's
# 13 digits, AMD's "PCB046982-0071" or hex, a board's "1652923017935"), 2 to 64 long.
_SERIAL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")


def is_placeholder_serial(serial: str) -> bool:
    """Whether ``serial`` is no identity (SPEC D11): a tool's stand-in for "no serial"
    (all zeros or all F of any length, ``0x`` + all F, ``N/A``, ``[N/A]``,
    ``[Not Supported]``, empty, ``0``, NVML's "not available" -1 as a number), one of
    NVML's error strings however nvidia-smi wraps it (``[GPU requires reset]``,
    ``N/A (GPU is lost)``, ``ERR!``), DCGM's ``<<<NOT_SUPPORTED>>>``, or anything that
    is not in a serial's form
    (letters, digits, ``-_.``; 2-64 characters). Such a value is the same on every
    broken machine, so it identifies none."""
    raw = " ".join(serial.split())
    text = raw.strip("[]()<>\"' ").lower()
    if text in PLACEHOLDER_SERIALS or text in NVML_ERROR_STRINGS:
        return True
    if text.replace("_", " ") in PLACEHOLDER_SERIALS:
        return True  # DCGM's "<<<NOT_SUPPORTED>>>" (dcgmi diag -j of DCGM 4.x)
    if text.startswith("n/a") and text[3:].strip(" ()[]") in NVML_ERROR_STRINGS:
        return True  # "N/A (GPU is lost)"
    if text in _NOT_AVAILABLE_NUMBERS:
        return True
    bare = text.replace("-", "").replace(" ", "").replace(":", "")
    if bare.startswith("0x"):
        bare = bare[2:]
    if bare == "" or set(bare) <= {"0"} or set(bare) <= {"f"}:
        return True
    # The form is read on the value as written: a wrapper stripped above (``[N/A]``) names
    # a placeholder, never a serial, so what is left of a half-wrapped ``01[`` is no serial.
    form = raw.lower()
    return not (2 <= len(form) <= 64 and set(form) <= _SERIAL_CHARS)


def machine_identity(gpu_serials: list[str], instance_id: str = "") -> dict[str, Any] | None:
    """What identifies the hardware under a node for escalation (SPEC E1, E3), so a node
    re-imaged onto the same bad machine is still recognised: ``host`` is derived from
    the GPU serials (the hardware) when known, else Slurm's ``InstanceId`` (23.11+).
    None when neither is known (the node name stays the identity).

    SPEC D11: a placeholder serial (`is_placeholder_serial`) is no identity: two machines
    printing ``0000000000000`` are not one machine. When placeholders were set aside the
    result says so (``placeholder_serials``) and names what identifies the machine
    instead (``identity``: ``instance_id``, else ``node_name`` with no ``host``)."""
    import hashlib

    seen = {s.strip() for s in gpu_serials}
    serials = sorted(s for s in seen if not is_placeholder_serial(s))
    placeholders = sorted(s for s in seen if is_placeholder_serial(s))
    out: dict[str, Any] = {}
    if serials:
        digest = hashlib.sha256(",".join(serials).encode()).hexdigest()[:16]
        out = {"host": f"gpus-{digest}", "gpu_serials": serials}
    if instance_id:
        out.setdefault("host", f"instance-{instance_id}")
        out["instance_id"] = instance_id
    if placeholders and not serials:
        out["identity"] = "instance_id" if instance_id else "node_name"
        out["placeholder_serials"] = placeholders
    return out or None


def our_section(alerts: list[Alert], checked_at: datetime,
                machine: dict[str, Any] | None = None,
                acknowledged: list[Alert] | None = None,
                heartbeat: float | None = None,
                domains: dict[str, str] | None = None,
                drained: bool = False) -> dict[str, Any]:
    """Our key's value for a set of active alerts. ``machine`` (`machine_identity`) adds
    ``host`` (read by the controller as the machine identity) and ``machine``.
    ``acknowledged`` (SPEC S8): alerts a person's resume acknowledged, published under
    their own key for people to see; the controller acts only on ``alerts`` (it reads
    ``acknowledged`` to tell a person's resume from a fault that cleared).
    ``heartbeat`` (SPEC O1): the most seconds until the check writes again while nothing
    changes (``heartbeat_s``; the controller's staleness threshold follows it).
    ``drained`` (SPEC S8): the check's own drain of the node took effect and holds (only
    ever written after the drain): a node in service again under it was resumed by
    someone, although the controller may never have seen it drained."""
    out: dict[str, Any] = {"v": VERSION, "checked_at": _ts(checked_at),
                           "alerts": [alert_to_json(a) for a in alerts]}
    if heartbeat is not None:
        out["heartbeat_s"] = int(heartbeat) if float(heartbeat).is_integer() else heartbeat
    if acknowledged:
        out["acknowledged"] = [alert_to_json(a) for a in acknowledged]
    if drained:  # SPEC S8: the check's own drain holds the node (written after it)
        out["drained"] = True
    if domains:  # SPEC S7, D12: the cause domains the node is in (issue 37)
        out["domains"] = {k: v for k, v in domains.items() if k in DOMAIN_KEYS and v}
    if machine:
        if machine.get("host"):
            out["host"] = machine["host"]
        out["machine"] = {k: v for k, v in machine.items() if k != "host"}
    return out


@dataclass(frozen=True, slots=True)
class CheckData:
    """What the node check published in a node's Extra, validated (SPEC I2, D7)."""

    alerts: tuple[Alert, ...] = ()
    checked_at: datetime | None = None  # when the node check last published
    # SPEC S8: faults a person's resume acknowledged (shown to people; never acted on)
    acknowledged: tuple[Alert, ...] = ()
    host: str | None = None  # machine identity: ``slurm_heal_host.host``, else ``slurm_heal.host``
    problem: str | None = None  # the first field that is wrong; None when all is well
    # SPEC S7, D12 (issue 37): the cause domains the node check found the node in, as
    # (key, value) pairs of ``slurm_heal.domains``: "nvlink" (the GPUs' ClusterUUID and
    # CliqueId), "driver", "vbios", "image" (its cohort).
    domains: tuple[tuple[str, str], ...] = ()
    # The same as one string (its hash kept): what 100,000 nodes are grouped by each cycle.
    domains_key: str = ""
    # SPEC S8: the check says its own drain holds the node (written after the drain).
    drained: bool = False


class _Bad(Exception):
    """A field of our keys has the wrong type or value (message: field: why)."""


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "a number", float: "a number", type(None): "null"}.get(type(value),
                                                                        type(value).__name__)


def _want(value: Any, kind: type, where: str, what: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise _Bad(f"{where}: expected {what}, got {_kind(value)}")
    return value


class _Ctx:
    """What a read is checked against: ``now`` (None: a read that does not depend on the
    time; see `CheckCache`), and what such a read learns: the latest time it saw and
    whether it needed ``now`` (an alert without ``first_seen`` takes it)."""

    __slots__ = ("now", "latest", "uses_now")

    def __init__(self, now: datetime | None) -> None:
        self.now = now
        self.latest: datetime | None = None
        self.uses_now = False

    def default(self) -> datetime:
        if self.now is None:
            self.uses_now = True
            return EARLIEST
        return self.now


def _time(value: Any, where: str, ctx: _Ctx) -> datetime:
    _want(value, str, where, "an ISO-8601 time with a time zone")
    try:
        parsed = isotime.parse(value)
    except ValueError:
        raise _Bad(f"{where}: {value[:40]!r} is not an ISO-8601 time") from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise _Bad(f"{where}: {value[:40]!r} has no time zone")
    if parsed < EARLIEST:
        raise _Bad(f"{where}: {value[:40]!r} is before 1970")
    now = ctx.now
    if now is None:
        if ctx.latest is None or parsed > ctx.latest:
            ctx.latest = parsed
        return parsed
    ref = now if now.tzinfo is not None else now.replace(tzinfo=timezone.utc)
    if parsed - ref > MAX_AHEAD:
        raise _Bad(f"{where}: {value[:40]!r} is in the future")
    return parsed


def _evidence(raw: Any, where: str) -> Evidence:
    _want(raw, dict, where, "an object")
    source = _want(raw.get("source", ""), str, f"{where}.source", "a string")
    text = _want(raw.get("text", ""), str, f"{where}.text", "a string")
    at = raw.get("at")
    if at is not None:
        _want(at, str, f"{where}.at", "a string")
    data = raw.get("data")
    if data is None:
        data = {}
    _want(data, dict, f"{where}.data", "an object")
    return Evidence(source=source, text=text, at=at, data=dict(data))


def _alert(node: str, raw: Any, where: str, ctx: _Ctx) -> Alert:
    _want(raw, dict, where, "an object")
    fault = _want(raw.get("fault"), str, f"{where}.fault", "a fault id (a string)")
    if not fault:
        raise _Bad(f"{where}.fault: empty")
    sev = _want(raw.get("severity", "warning"), str, f"{where}.severity", "a string")
    try:
        severity = Severity(sev)
    except ValueError:
        raise _Bad(f"{where}.severity: {sev[:40]!r} is not info, warning or critical") from None
    summary = _want(raw.get("summary", ""), str, f"{where}.summary", "a string")
    detector = _want(raw.get("detector", ""), str, f"{where}.detector", "a string")
    first = _time(raw["first_seen"], f"{where}.first_seen", ctx) \
        if raw.get("first_seen") is not None else ctx.default()
    last = _time(raw["last_seen"], f"{where}.last_seen", ctx) \
        if raw.get("last_seen") is not None else first
    evidence = raw.get("evidence")
    if evidence is None:
        evidence = []
    _want(evidence, list, f"{where}.evidence", "a list")
    return Alert(node=node, fault=fault, severity=severity, summary=summary,
                 detector=detector, first_seen=first, last_seen=last,
                 evidence=tuple(_evidence(e, f"{where}.evidence[{i}]")
                                for i, e in enumerate(evidence)))


DOMAIN_KEYS = ("nvlink", "driver", "vbios", "image")  # what `domains` may say
MAX_DOMAIN = 120  # characters of one domain's value


def _domains(raw: Any) -> tuple[tuple[str, str], ...]:
    """``slurm_heal.domains``: an object of known keys to short strings (issue 37)."""
    if raw is None:
        return ()
    _want(raw, dict, f"{KEY}.domains", "an object")
    out = []
    for k in DOMAIN_KEYS:
        v = raw.get(k)
        if v is None or v == "":
            continue
        _want(v, str, f"{KEY}.domains.{k}", "a string")
        if len(v) > MAX_DOMAIN:
            raise _Bad(f"{KEY}.domains.{k}: longer than {MAX_DOMAIN} characters")
        out.append((k, v))
    return tuple(out)


def _read(node: str, extra: dict[str, Any], ctx: _Ctx) -> CheckData:
    host: str | None = None
    moved = extra.get(HOST_KEY)
    if moved is not None:
        _want(moved, dict, HOST_KEY, "an object")
        if moved.get("host") is not None:
            host = _want(moved["host"], str, f"{HOST_KEY}.host", "a string") or None
    ours = extra.get(KEY)
    if ours is None:
        return CheckData(host=host)
    _want(ours, dict, KEY, "an object")
    if ours.get("v") is not None:
        _want(ours["v"], int, f"{KEY}.v", "a version number")
    if host is None and ours.get("host") is not None:
        host = _want(ours["host"], str, f"{KEY}.host", "a string") or None
    checked = _time(ours["checked_at"], f"{KEY}.checked_at", ctx) \
        if ours.get("checked_at") is not None else None
    alerts = ours.get("alerts")
    if alerts is None:
        alerts = []
    _want(alerts, list, f"{KEY}.alerts", "a list")
    acked = ours.get("acknowledged")
    if acked is None:
        acked = []
    _want(acked, list, f"{KEY}.acknowledged", "a list")
    domains = _domains(ours.get("domains"))
    drained = ours.get("drained", False)
    _want(drained, bool, f"{KEY}.drained", "a boolean")
    return CheckData(drained=drained, alerts=tuple(_alert(node, a, f"{KEY}.alerts[{i}]", ctx)
                                  for i, a in enumerate(alerts)),
                     checked_at=checked, host=host, domains=domains,
                     domains_key="\x1f".join(f"{k}={v}" for k, v in domains),
                     acknowledged=tuple(_alert(node, a, f"{KEY}.acknowledged[{i}]", ctx)
                                        for i, a in enumerate(acked)))


def read_check_data(node: str, extra: dict[str, Any] | None, now: datetime) -> CheckData:
    """Our keys of a node's Extra, validated; never raises.

    Extra that is not a JSON object (``None``: someone else's text) or has none of our
    keys is no data, not bad data. A field of ours with the wrong type or value gives a
    CheckData with ``problem`` naming it and nothing else: the node's check data cannot
    be read (an alert of a bad entry is not trusted more than the rest of the entry).
    """
    return _checked(node, extra, _Ctx(now))


def _checked(node: str, extra: dict[str, Any] | None, ctx: _Ctx) -> CheckData:
    if not extra:
        return CheckData()
    if not isinstance(extra, dict):
        return CheckData(problem=f"Extra: expected an object, got {_kind(extra)}")
    try:
        return _read(node, extra, ctx)
    except _Bad as exc:
        return CheckData(problem=str(exc))
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # Anything the checks above did not foresee is still this node's bad data.
        return CheckData(problem=f"{KEY}: unreadable ({exc.__class__.__name__}: "
                                 f"{str(exc)[:120]})")


class CheckMap(dict[str, CheckData]):
    """Each node's CheckData by node name; ``flagged``: the nodes whose data has alerts
    or a problem (all the others have nothing for the rules to look at)."""

    flagged: tuple[str, ...] = ()


class CheckCache:
    """Each node's check data, validated once per change of its Extra (SPEC I2; issue 20).

    Kept by whoever reads the cluster cycle after cycle (the controller, simulate): a
    node whose Extra text is the one of the last cycle gets the CheckData read then,
    so a cycle validates the nodes whose check published something new, not the whole
    cluster. The text is the key (``extra_raw``); a node built without it (simulate,
    tests) is keyed by its parsed ``extra`` object. The result is the one
    `read_check_data` gives at ``now``: data whose validity depends on the time (a time
    more than MAX_AHEAD ahead, an alert without ``first_seen``) is read again each time.
    ``parses`` counts the validations done (what the work-counting test holds to the
    changed nodes).
    """

    def __init__(self) -> None:
        # node -> (raw text, parsed Extra, CheckData, valid from): the CheckData holds
        # at any now at or after "valid from" (FOREVER_STALE: read again every time).
        self._seen: dict[str, tuple[str, object, CheckData, datetime]] = {}
        self.parses = 0
        # The last snapshot: (names, text keys, result, names repeat?, valid-from times
        # of the time-dependent reads, the parsed Extra objects the keys name).
        self._last: tuple[list[str], list[object], CheckMap, bool, list[Any]] | None = None
        # From when on every kept read holds (the latest "valid from" of them; only
        # ever later than the truth, which sends a snapshot the per-node path).
        self._valid_from = EARLIEST

    def _parse(self, node: str, raw: str,
               extra: dict[str, Any] | None) -> tuple[str, object, CheckData, datetime]:
        ctx = _Ctx(None)
        data = _checked(node, extra, ctx)
        self.parses += 1
        valid_from = _STALE if ctx.uses_now else (
            ctx.latest - MAX_AHEAD if ctx.latest is not None else EARLIEST)
        hit = (raw, extra if not raw else None, data, valid_from)  # the text is the key
        self._seen[node] = hit
        if valid_from > self._valid_from:
            self._valid_from = valid_from
        return hit

    def read(self, node: str, raw: str, extra: dict[str, Any] | None,
             now: datetime) -> CheckData:
        return self._read(node, raw, lambda: extra, now)

    def _read(self, node: str, raw: str, extra_of: Callable[[], dict[str, Any] | None],
              now: datetime) -> CheckData:
        hit = self._seen.get(node)
        if hit is None or hit[0] != raw or (not raw and hit[1] is not extra_of()):
            hit = self._parse(node, raw, extra_of())
        ref = now if now.tzinfo is not None else now.replace(tzinfo=timezone.utc)
        if ref < hit[3]:
            return read_check_data(node, extra_of(), now)  # rare: depends on the time
        return hit[2]

    def _read_node(self, n: Any, now: datetime) -> CheckData:
        """`read` of one record of a snapshot. Its Extra text, parsed here when it
        changed, is not kept on the record (`NodeInfo.peek_extra`; issue 26: 100k parsed
        dicts held by the snapshot were 85 MB); a record without text is keyed by its
        ``extra`` object, as before."""
        raw = n.extra_raw
        peek = getattr(n, "peek_extra", None) if raw else None
        return self._read(n.name, raw, peek if peek is not None else lambda: n.extra, now)

    def read_view(self, nodes: Sequence[Any], now: datetime) -> CheckMap:
        """Every node's CheckData (``nodes``: NodeInfo-like, with name, extra_raw,
        extra); nodes no longer present are forgotten.

        A snapshot of the same nodes as the last one is compared with it text by text
        (list comparisons, not a loop in Python): when no text changed, the last
        result is handed out again, and otherwise only the nodes whose text changed
        are read."""
        ref = now if now.tzinfo is not None else now.replace(tzinfo=timezone.utc)
        names = [n.name for n in nodes]
        keys = [n.extra_raw or id(n.extra) for n in nodes]
        last = self._last
        if last is not None and not last[3] and self._valid_from <= ref and last[0] == names:
            _, old_keys, out, _, _ = last
            if keys == old_keys:
                return out
            changed = [i for i, (k, o) in enumerate(zip(keys, old_keys, strict=True)) if k != o]
            if len(changed) * 8 < len(names):  # a few: the rest stays as it was
                kept = dict.fromkeys(out.flagged)
                out = CheckMap(out)
                for i in changed:
                    n = nodes[i]
                    data = self._read_node(n, now)
                    out[n.name] = data
                    if data.alerts or data.problem:
                        kept[n.name] = None
                    else:
                        kept.pop(n.name, None)
                out.flagged = tuple(kept)
                self._remember(names, keys, out, nodes, ref)
                return out
        out = CheckMap()
        flagged = []
        for n in nodes:
            data = self._read_node(n, now)
            out[n.name] = data
            if data.alerts or data.problem:
                flagged.append(n.name)
        out.flagged = tuple(flagged)
        if len(self._seen) > len(out):
            self._seen = {k: v for k, v in self._seen.items() if k in out}
        self._valid_from = max((hit[3] for hit in self._seen.values()), default=EARLIEST)
        self._remember(names, keys, out, nodes, ref)
        return out

    def _remember(self, names: list[str], keys: list[object], out: CheckMap,
                  nodes: Sequence[Any], ref: datetime) -> None:
        # Kept with the result: whether it may be handed out again (not when a name
        # appears twice, nor when a read in it depended on the time), and the parsed
        # Extra objects (so the id of one, used as a key, is not handed out to another
        # while it is compared against).
        again = len(out) == len(names) and self._valid_from <= ref
        self._last = (names, keys, out, not again, [n.extra for n in nodes if not n.extra_raw])


def alerts_from_extra(node: str, extra: dict[str, Any] | None, now: datetime) -> list[Alert]:
    """The active alerts the node side published in Extra; none when it cannot be read
    (see `read_check_data`, which also says why)."""
    return list(read_check_data(node, extra, now).alerts)


def with_key(current_raw: str, key: str, value: Any | None) -> str:
    """The new Extra text: ``current_raw`` with top-level ``key`` set to ``value`` (or
    removed when None), every other key kept. Used by the Slurm backends' set_extra.

    Non-JSON text in Extra belongs to someone else and is never overwritten: SlurmError.
    """
    current = parse_extra(current_raw)
    if current is None:
        raise SlurmError(
            "node Extra holds non-JSON text that slurm-heal does not own; "
            f"refusing to overwrite it: {current_raw[:80]!r}"
        )
    new = dict(current)
    if value is None:
        new.pop(key, None)
    else:
        new[key] = value
    return json.dumps(new, separators=(",", ":"), sort_keys=True) if new else ""
