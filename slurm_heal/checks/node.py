"""Node problems (SPEC D4): read-only mounts and service restart loops.

``parse_*``/``evaluate_*`` are pure; ``gather_*`` do the I/O.
"""

from __future__ import annotations

import os
from datetime import datetime

from slurm_heal.checks import paths, proc
from slurm_heal.errors import CheckError
from slurm_heal.frozen import dataclass
from slurm_heal.types import Evidence, Finding, Severity

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from typing import Any


class Unsupported(Exception):
    """The hardware or tool a detector needs is absent: reported, never a fault."""


# ------------------------------------------------------------------ read-only mounts

@dataclass(frozen=True, slots=True)
class Mount:
    device: str
    mountpoint: str
    fstype: str
    options: tuple[str, ...]
    line: str

    @property
    def read_only(self) -> bool:
        return "ro" in self.options


def _unescape(field: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as octal (\040 ...).
    if "\\" not in field:
        return field
    return field.encode("latin-1").decode("unicode_escape").encode("latin-1").decode(
        "utf-8", "replace")


def parse_mounts(text: str) -> dict[str, Mount]:
    """Mount point -> mount; the last mount on a point wins (it hides the others)."""
    out: dict[str, Mount] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        point = _unescape(parts[1])
        out[point] = Mount(_unescape(parts[0]), point, parts[2],
                           tuple(parts[3].split(",")), line)
    return out


def evaluate_mounts(mounts: dict[str, Mount], rw: tuple[str, ...], node: str,
                    source: str = "/proc/mounts") -> list[Finding]:
    """A finding for every mount that should be read-write but is read-only.

    A configured mount point that is not mounted is not this detector's business.
    """
    out = []
    for point in rw:
        m = mounts.get(point)
        if m is None or not m.read_only:
            continue
        out.append(Finding(
            fault="fs.readonly", severity=Severity.CRITICAL,
            summary=f"{point} ({m.device}, {m.fstype}) is mounted read-only but should be writable",
            detector="mounts", node=node,
            evidence=(Evidence(source=source, text=m.line,
                               data={"mountpoint": point, "device": m.device}),)))
    return out


# ------------------------------------------------------------------ GPU count (D2)

def count_gpus(root_path: str) -> int:
    """GPUs the NVIDIA driver has bound (entries of /proc/driver/nvidia/gpus); 0 when
    the driver is not loaded, which on a GPU node is itself the fault."""
    try:
        return len(os.listdir(root_path))
    except OSError:
        return 0


def in_set(pattern: str, name: str) -> bool:
    """Whether ``name`` is in a Slurm host list (``a,b`` or ``gpu[01-04]``)."""
    if "[" not in pattern:
        return name in pattern.split(",")
    from ClusterShell.NodeSet import NodeSet  # only for bracketed host lists

    return name in NodeSet(pattern)


def _expand_count(pattern: str) -> int:
    if "[" not in pattern:
        return len([p for p in pattern.split(",") if p])
    from ClusterShell.NodeSet import NodeSet

    return len(NodeSet(pattern))


def gres_gpus(text: str, node: str) -> int | None:
    """GPUs Slurm's gres.conf gives ``node`` (``Name=gpu`` lines: ``File=`` devices or
    ``Count=``; lines without ``NodeName=`` apply to every node). None when gres.conf
    does not say (no gpu line for the node, or ``AutoDetect`` without files)."""
    total: int | None = None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kv = {}
        for part in line.split():
            key, sep, value = part.partition("=")
            if sep:
                kv[key.lower()] = value
        if kv.get("name", "").lower() != "gpu":
            continue
        if "nodename" in kv and not in_set(kv["nodename"], node):
            continue
        if "file" in kv:
            n = _expand_count(kv["file"])
        elif kv.get("count", "").isdigit() and len(kv["count"]) <= 6:
            n = int(kv["count"])
        else:
            continue
        total = (total or 0) + n
    return total


def evaluate_gpu_count(visible: int, expected: int, node: str) -> list[Finding]:
    """SPEC D2: fewer GPUs visible than the node is configured to have."""
    if expected <= 0 or visible >= expected:
        return []
    return [Finding(
        fault="gpu.missing", severity=Severity.CRITICAL,
        summary=f"{visible} of {expected} GPUs are visible to the driver",
        detector="gpus", node=node,
        evidence=(Evidence(source="/proc/driver/nvidia/gpus",
                           text=f"visible={visible} expected={expected}",
                           data={"visible": visible, "expected": expected}),))]


# ------------------------------------------------------------------ restart loops

def parse_systemctl_show(text: str) -> dict[str, int]:
    """``systemctl show -p Id,LoadState,NRestarts U...`` -> unit -> NRestarts.

    Units systemd does not know (LoadState=not-found) are left out.
    """
    out: dict[str, int] = {}
    for block in text.strip().split("\n\n"):
        props: dict[str, str] = {}
        for line in block.splitlines():
            key, _, value = line.partition("=")
            props[key.strip()] = value.strip()
        unit = props.get("Id", "")
        if not unit or props.get("LoadState", "loaded") == "not-found":
            continue
        if props.get("NRestarts", "").isdigit():
            out[unit] = int(props["NRestarts"])
    return out


# SPEC D12: the NVLink fabric's services, checked where a site enabled them (a GB200
# compute tray may have nvidia-fabricmanager installed and disabled: its NVSwitches are
# managed off the node, so an installed, disabled unit says nothing).
FABRIC_UNITS = {"nvidia-fabricmanager.service": "fabric.manager.down",
                "nvidia-imex.service": "fabric.imex.down"}


def parse_unit_states(text: str) -> dict[str, tuple[str, str]]:
    """``systemctl show -p Id,LoadState,ActiveState,UnitFileState`` -> unit -> (ActiveState,
    UnitFileState), for the units systemd knows."""
    out: dict[str, tuple[str, str]] = {}
    for block in text.strip().split("\n\n"):
        props = dict(line.partition("=")[::2] for line in block.splitlines())
        unit = props.get("Id", "").strip()
        if unit and props.get("LoadState", "loaded").strip() != "not-found":
            out[unit] = (props.get("ActiveState", "").strip(),
                         props.get("UnitFileState", "").strip())
    return out


def evaluate_fabric_units(states: dict[str, tuple[str, str]], node: str,
                          now: datetime) -> list[Finding]:
    """SPEC D12 (pure): an enabled fabric manager or IMEX unit that is not active."""
    out = []
    for unit, fault in FABRIC_UNITS.items():
        active, enabled = states.get(unit, ("", ""))
        if enabled == "enabled" and active and active not in ("active", "reloading",
                                                               "activating"):
            out.append(Finding(
                fault=fault, severity=Severity.CRITICAL,
                summary=f"{unit} is enabled but {active}: the GPUs' NVLink fabric "
                        "(its NVLink domain) cannot work without it",
                detector="services", node=node,
                evidence=(Evidence(source="systemctl",
                                   text=f"{unit} ActiveState={active} UnitFileState={enabled}",
                                   at=now.isoformat(),
                                   data={"unit": unit, "active_state": active}),)))
    return out


def gather_restarts(units: tuple[str, ...], timeout: float) -> dict[str, int]:
    """NRestarts of each unit; Unsupported where there is no running systemd."""
    return gather_units(units, timeout)[0]


def gather_units(units: tuple[str, ...], timeout: float) -> tuple[dict[str, int],
                                                                  dict[str, tuple[str, str]]]:
    """NRestarts of each unit, and the fabric units' states (D12), in one systemctl
    call; Unsupported where there is no running systemd."""
    # sd_booted(): systemd is PID 1 exactly when this directory exists. Checking it
    # first saves a process start on nodes without systemd (containers).
    if not os.path.isdir(paths.host_path("/run/systemd/system")):
        raise Unsupported("systemd is not running on this node")
    if proc.which("systemctl") is None:
        raise Unsupported("systemctl not found on PATH")
    names = [u if "." in u else u + ".service" for u in units]
    names += [u for u in FABRIC_UNITS if u not in names]
    res = proc.run(["systemctl", "show", "-p", "Id", "-p", "LoadState", "-p", "NRestarts",
                    "-p", "ActiveState", "-p", "UnitFileState", "--", *names], timeout)
    if res.returncode != 0:
        err = res.stderr.strip()
        if "not been booted with systemd" in err or "Failed to connect to bus" in err:
            raise Unsupported("systemd is not running on this node")
        raise CheckError(f"systemctl show failed (exit {res.returncode}): {err[:200]}")
    fabric = {u: st for u, st in parse_unit_states(res.stdout).items() if u in FABRIC_UNITS}
    counts = {u: n for u, n in parse_systemctl_show(res.stdout).items()
              if u not in FABRIC_UNITS or u in units}
    return counts, fabric


def evaluate_restarts(history: dict[str, list[list[float]]], counts: dict[str, int],
                      now: datetime, window: float, max_restarts: int,
                      node: str) -> tuple[list[Finding], dict[str, list[list[float]]]]:
    """Restart loops from NRestarts samples over time (pure).

    ``history`` (kept in the state file) holds ``[epoch, NRestarts]`` samples per unit.
    A unit restarting more than ``max_restarts`` times within ``window`` seconds is a
    loop. A counter that went down (unit reset) starts the history afresh.
    """
    t = now.timestamp()
    new_hist: dict[str, list[list[float]]] = {}
    out: list[Finding] = []
    for unit, count in counts.items():
        samples = [s for s in history.get(unit, []) if len(s) == 2]
        if samples and samples[-1][1] > count:
            samples = []
        # keep the newest sample older than the window as the baseline
        inside = [s for s in samples if t - s[0] <= window]
        older = [s for s in samples if t - s[0] > window]
        kept = older[-1:] + inside + [[t, float(count)]]
        new_hist[unit] = kept[-50:]
        baseline_samples = inside[:1] + older[-1:]
        if not baseline_samples:
            continue
        baseline = min(s[1] for s in baseline_samples)
        restarts = int(count - baseline)
        if restarts > max_restarts:
            out.append(Finding(
                fault="service.restart_loop", severity=Severity.WARNING,
                summary=f"{unit} restarted {restarts} times in the last "
                        f"{int(window // 60)} minutes",
                detector="services", node=node,
                evidence=(Evidence(source="systemctl", text=f"{unit} NRestarts={count}",
                                   at=now.isoformat(),
                                   data={"unit": unit, "restarts": restarts,
                                         "window_s": window}),)))
    return out, new_hist


def history_json(raw: Any) -> dict[str, list[list[float]]]:
    """The restart history from the state file, ignoring anything malformed."""
    if not isinstance(raw, dict):
        return {}
    return {str(k): [list(map(float, s)) for s in v if isinstance(s, list) and len(s) == 2]
            for k, v in raw.items() if isinstance(v, list)}
