"""Host connectivity (SPEC D6): configured peers and endpoints reached by TCP connect.

``[network] endpoints = ["slurmctld:6817", "10.0.0.5:2049", ...]`` (management, storage,
the controller, peers). Each is tried with a short timeout, all at once (threads), so
the detector costs one timeout at most. One that stays unreachable for at least
``unreachable_for`` seconds (kept across runs in the state file) is ``host.unreachable``;
a blip shorter than that is not.
"""

from __future__ import annotations

import socket
import threading
from datetime import datetime

from slurm_heal.checks.config import NetworkConfig
from slurm_heal.checks.config import split_endpoint as split_endpoint
from slurm_heal.checks.node import Unsupported
from slurm_heal.checks.state import detector_state
from slurm_heal.types import Evidence, Finding, Severity

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from typing import Any

    from slurm_heal.checks.config import CheckConfig


def probe(endpoints: tuple[str, ...], timeout: float) -> dict[str, str]:
    """endpoint -> "" when a TCP connection was made, else the error (I/O)."""
    results: dict[str, str] = {}

    def one(ep: str) -> None:
        host, port = split_endpoint(ep)
        # An ASCII host goes as bytes: a str is encoded with the IDNA codec first, which
        # imports encodings.idna, stringprep and unicodedata (~4 ms a run, issue 26).
        addr: str | bytes = host.encode("ascii") if host.isascii() else host
        try:
            with socket.create_connection((addr, port), timeout=timeout):  # type: ignore[arg-type]
                results[ep] = ""
        except OSError as exc:
            results[ep] = str(exc) or type(exc).__name__

    threads = [threading.Thread(target=one, args=(ep,), daemon=True) for ep in endpoints]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout + 1.0)
    for ep in endpoints:
        results.setdefault(ep, f"no answer within {timeout:g}s")
    return results


def evaluate(results: dict[str, str], since: dict[str, float], now: datetime,
             unreachable_for: float, node: str) -> tuple[list[Finding], dict[str, float]]:
    """Probe results + since-when each endpoint has failed -> findings (pure)."""
    t = now.timestamp()
    out: list[Finding] = []
    new: dict[str, float] = {}
    for ep, error in sorted(results.items()):
        if not error:
            continue
        first = since.get(ep, t)
        new[ep] = first
        if t - first >= unreachable_for:
            out.append(Finding(
                fault="host.unreachable", severity=Severity.CRITICAL,
                summary=f"{ep} unreachable for {int(t - first)} s: {error}",
                detector="network", node=node,
                evidence=(Evidence(source="tcp-connect", text=f"connect {ep}: {error}",
                                   at=now.isoformat(),
                                   data={"endpoint": ep, "error": error,
                                         "since": datetime.fromtimestamp(
                                             first, now.tzinfo).isoformat()}),)))
    return out, new


class Network:
    """SPEC D6: configured peers and endpoints reached by TCP connect (imported, and
    `socket` with it, only where endpoints are configured: `slurm_heal.checks.present`)."""

    name = "network"
    settings = NetworkConfig
    modes = NetworkConfig().modes

    def gather(self, cfg: CheckConfig, st: dict[str, Any], node: str,
               now: datetime) -> dict[str, str]:
        nc = cfg.network
        if not nc.endpoints:
            raise Unsupported("no endpoints configured ([network] endpoints)")
        return probe(nc.endpoints, nc.connect_timeout)

    def evaluate(self, cfg: CheckConfig, st: dict[str, Any], node: str, now: datetime,
                 seen: dict[str, str]) -> tuple[list[Finding], dict[str, Any]]:
        _, since = detector_state(st, "network_state")
        found, new = evaluate(seen, since, now, cfg.network.unreachable_for, node)
        return found, {"network_state": {"counters": {}, "since": new}}


DETECTOR = Network()
