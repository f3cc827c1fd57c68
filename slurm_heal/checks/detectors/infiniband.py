"""InfiniBand ports (SPEC D6): /sys/class/infiniband/<device>/ports/<n>/.

* ``ib.link_down``: ``state`` not ACTIVE or ``phys_state`` not LinkUp, or fewer ports
  than ``[infiniband] ports`` (an adapter that vanished).
* ``ib.link_degraded``: ``rate`` below ``expected_rate`` (Gb/s), or an error counter
  (``counters/symbol_error``, ``link_downed``, ``link_error_recovery``,
  ``port_rcv_errors``, ...) growing faster than ``errors_per_min`` between runs. The
  lifetime value of a counter is never judged: a port that took 14 receive errors last
  year is healthy today.

Only ports whose ``link_layer`` is in ``link_layers`` (default InfiniBand) are checked,
so a RoCE bond on the same adapter family is left to the network checks.
``gather`` reads the tree (I/O); ``evaluate`` is pure.
"""

from __future__ import annotations

import os
from datetime import datetime

from slurm_heal.checks import paths
from slurm_heal.checks.config import IB_COUNTERS, InfinibandConfig
from slurm_heal.checks.node import Unsupported
from slurm_heal.checks.present import INFINIBAND_SYSFS as SYSFS
from slurm_heal.checks.state import detector_state, rate_per_minute
from slurm_heal.frozen import dataclass, field
from slurm_heal.types import Evidence, Finding, Severity

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from typing import Any

    from slurm_heal.checks.config import CheckConfig


@dataclass(frozen=True, slots=True)
class Port:
    device: str
    port: str
    state: str  # "4: ACTIVE"
    phys_state: str  # "5: LinkUp"
    rate: str  # "400 Gb/sec (4X NDR)"
    link_layer: str
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"

    @property
    def rate_gbps(self) -> float | None:
        try:
            return float(self.rate.split()[0])
        except (IndexError, ValueError):
            return None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def gather(base: str, counters: tuple[str, ...] = IB_COUNTERS) -> list[Port]:
    """Every port under ``base`` (the sysfs class dir, replay root applied)."""
    out = []
    for dev in sorted(os.listdir(base)):
        pdir = os.path.join(base, dev, "ports")
        try:
            ports = sorted(os.listdir(pdir))
        except OSError:
            continue
        for p in ports:
            d = os.path.join(pdir, p)
            vals = {}
            for c in counters:
                text = _read(os.path.join(d, "counters", c))
                if text.isdigit() and len(text) <= 20:
                    vals[c] = int(text)
            out.append(Port(dev, p, _read(os.path.join(d, "state")),
                            _read(os.path.join(d, "phys_state")), _read(os.path.join(d, "rate")),
                            _read(os.path.join(d, "link_layer")) or "InfiniBand", vals))
    return out


def _word(text: str) -> str:
    """``4: ACTIVE`` -> ``ACTIVE``."""
    return text.split(":", 1)[-1].strip()


def evaluate(ports: list[Port], counters: dict[str, list[float]], now: datetime, node: str,
             *, expected_rate: float = 0.0, expected_ports: int = 0,
             errors_per_min: float = 10.0,
             link_layers: tuple[str, ...] = ("InfiniBand",),
             source: str = SYSFS) -> tuple[list[Finding], dict[str, list[float]]]:
    """Ports + previous counter samples -> findings and the new samples (pure)."""
    t = now.timestamp()
    at = now.isoformat()
    out: list[Finding] = []
    new: dict[str, list[float]] = {}
    layers = {x.lower() for x in link_layers}
    checked = [p for p in ports if p.link_layer.lower() in layers]

    def add(fault: str, sev: Severity, summary: str, p: Port, **data: object) -> None:
        text = f"{p.name} state={p.state!r} phys_state={p.phys_state!r} rate={p.rate!r}"
        out.append(Finding(fault=fault, severity=sev, summary=summary, detector="infiniband",
                           node=node, evidence=(Evidence(
                               source=f"{source}/{p.device}/ports/{p.port}", text=text, at=at,
                               data={"device": p.device, "port": p.port, **data}),)))

    for p in checked:
        if _word(p.state).upper() != "ACTIVE" or _word(p.phys_state).lower() != "linkup":
            # The port's link_downed counter (one more each time its link went down):
            # a person's acknowledgement of this port down ends when it rises, a flap
            # between two runs included (SPEC S8, checks.runner.standing).
            downs = {"link_downed": p.counters["link_downed"]} \
                if "link_downed" in p.counters else {}
            add("ib.link_down", Severity.CRITICAL,
                f"InfiniBand port {p.name} is down (state {_word(p.state) or '?'}, "
                f"physical {_word(p.phys_state) or '?'})", p,
                state=p.state, phys_state=p.phys_state, **downs)
            continue
        gbps = p.rate_gbps
        if expected_rate > 0 and gbps is not None and gbps < expected_rate:
            add("ib.link_degraded", Severity.WARNING,
                f"InfiniBand port {p.name} runs at {p.rate} (expected {expected_rate:g} Gb/s)",
                p, rate_gbps=gbps, expected_gbps=expected_rate)
        for name, value in sorted(p.counters.items()):
            k = f"{p.name}:{name}"
            prev = counters.get(k)
            new[k] = [t, float(value)]
            r = rate_per_minute(prev, float(value), t)
            if r is not None and prev is not None and r > errors_per_min:
                add("ib.link_degraded", Severity.WARNING,
                    f"InfiniBand port {p.name} {name} grows {r:.1f}/min "
                    f"(threshold {errors_per_min:g})", p, counter_name=name, counter=value,
                    previous=int(prev[1]), per_minute=round(r, 2))
    if expected_ports > 0 and len(checked) < expected_ports:
        out.append(Finding(
            fault="ib.link_down", severity=Severity.CRITICAL,
            summary=f"{len(checked)} of {expected_ports} InfiniBand ports are present",
            detector="infiniband", node=node,
            evidence=(Evidence(source=source, at=at,
                               text=f"ports={','.join(p.name for p in checked) or 'none'}",
                               data={"present": len(checked), "expected": expected_ports}),)))
    return out, new


class InfiniBand:
    """SPEC D6: InfiniBand port state, rate and error counter rates (the runner runs it
    only where /sys/class/infiniband exists: `slurm_heal.checks.present.infiniband`)."""

    name = "infiniband"
    settings = InfinibandConfig
    modes = InfinibandConfig().modes

    def gather(self, cfg: CheckConfig, st: dict[str, Any], node: str,
               now: datetime) -> list[Port]:
        base = paths.host_path(SYSFS)
        if not os.path.isdir(base):
            raise Unsupported(f"{base} does not exist (no InfiniBand adapter)")
        return gather(base, cfg.infiniband.counters)

    def evaluate(self, cfg: CheckConfig, st: dict[str, Any], node: str, now: datetime,
                 seen: list[Port]) -> tuple[list[Finding], dict[str, Any]]:
        ic = cfg.infiniband
        counters, _ = detector_state(st, "infiniband_state")
        found, new = evaluate(seen, counters, now, node,
                              expected_rate=float(ic.expected_rate), expected_ports=ic.ports,
                              errors_per_min=ic.errors_per_min, link_layers=ic.link_layers)
        return found, {"infiniband_state": {"counters": new, "since": {}}}


DETECTOR = InfiniBand()
