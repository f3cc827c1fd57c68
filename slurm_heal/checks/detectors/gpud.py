"""gpud's health states (SPEC D13): where leptonai/gpud runs on the node, its local API
(``GET /v1/states``: per component, states with ``health``, ``reason`` and
``suggested_actions``) is read, and each Unhealthy (or Degraded) state of a component the
table maps becomes a finding with gpud's state unchanged as its evidence (D7): its
reason, error and suggested repair.

The built-in table (`COMPONENTS`) maps gpud's components to the catalog's faults;
``[gpud] map = ["component=fault", ...]`` adds or overrides entries. gpud's Xid component
names the Xid in its reason ("XID 74 (NVLINK Error) detected on ..."): it is the
catalog's ``gpu.xid.<code>``. A state gpud says needs no action
(``IGNORE_NO_ACTION_REQUIRED``) and a component no entry maps are not findings.

gpud serves its API over TLS with its own self-signed certificate on localhost; the
detector does not verify it unless ``verify_tls`` (the answer never leaves the node).
"""

from __future__ import annotations

import json
import re
from datetime import datetime

from slurm_heal.checks.config import GpudConfig
from slurm_heal.checks.node import Unsupported
from slurm_heal.errors import CatalogError
from slurm_heal.types import Evidence, Finding, Severity

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from typing import Any

    from slurm_heal.checks.config import CheckConfig

NAME = "gpud"
XID_COMPONENT = "accelerator-nvidia-error-xid"
# gpud component -> the catalog's fault (gpud's names, components/ of its repository).
COMPONENTS = {
    XID_COMPONENT: "gpu.xid.unknown",  # the Xid from the reason, when it names one
    "accelerator-nvidia-error-sxid": "nvswitch.sxid.fatal",
    "accelerator-nvidia-ecc": "gpu.ecc.dbe",
    "accelerator-nvidia-remapped-rows": "gpu.row_remap.failure",
    "accelerator-nvidia-nvlink": "gpu.nvlink.down",
    "accelerator-nvidia-infiniband": "ib.link_down",
    "accelerator-nvidia-hw-slowdown": "gpu.thermal",
    "accelerator-nvidia-temperature": "gpu.thermal",
}
_XID = re.compile(r"\bXID\s+(\d+)\b", re.IGNORECASE)
NO_ACTION = "IGNORE_NO_ACTION_REQUIRED"
BAD = ("Unhealthy", "Degraded")


def table(cfg: GpudConfig) -> dict[str, str]:
    """The built-in table with ``[gpud] map``'s entries over it."""
    out = dict(COMPONENTS)
    for pair in cfg.map:
        component, _, fault = pair.partition("=")
        out[component.strip()] = fault.strip()
    return out


def fetch(cfg: GpudConfig) -> Any:
    """gpud's ``/v1/states`` as parsed JSON (I/O). Unsupported when gpud does not
    answer (it is not running here)."""
    import ssl
    import urllib.error
    import urllib.request

    url = cfg.url.rstrip("/") + "/v1/states"
    context = None
    if url.startswith("https://"):
        context = ssl.create_default_context()
        if not cfg.verify_tls:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(url, headers={"Accept": "application/json",
                                               "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=cfg.connect_timeout,
                                    context=context) as resp:
            body = resp.read(8 * 1024 * 1024)
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"gpud answered {url} with HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise Unsupported(f"gpud does not answer at {cfg.url} ({reason})") from None
    try:
        return json.loads(body)
    except ValueError as exc:
        raise RuntimeError(f"gpud's {url} is not JSON: {exc}") from None


def _severity(health: str, actions: list[str], fault: str) -> Severity:
    if health == "Degraded" or "CHECK_USER_APP_AND_GPU" in actions:
        return Severity.WARNING
    from slurm_heal import catalog

    try:
        return catalog.load().get(fault).severity
    except CatalogError:  # a site's own fault: gpud said Unhealthy
        return Severity.CRITICAL


def evaluate(states: Any, cfg: GpudConfig, node: str, now: datetime) -> list[Finding]:
    """gpud's answer -> findings (pure). A shape that is not gpud's is an error."""
    if not isinstance(states, list):
        raise RuntimeError("gpud's /v1/states is not a list of components")
    mapped = table(cfg)
    out: list[Finding] = []
    for comp in states:
        if not isinstance(comp, dict) or not isinstance(comp.get("states"), list):
            raise RuntimeError(f"gpud's /v1/states has an entry that is not a component "
                               f"with states: {str(comp)[:120]}")
        name = str(comp.get("component", ""))
        fault = mapped.get(name)
        if fault is None:
            continue
        for st in comp["states"]:
            if not isinstance(st, dict) or st.get("health") not in BAD:
                continue
            suggested = st.get("suggested_actions") or {}
            actions = [str(a) for a in (suggested.get("repair_actions") or [])]
            if NO_ACTION in actions:
                continue
            reason = str(st.get("reason") or "")
            this = fault
            if name == XID_COMPONENT:
                m = _XID.search(reason)
                if m:
                    this = f"gpu.xid.{int(m.group(1))}"
            why = reason or str(st.get("error") or st.get("health"))
            repair = f"; gpud suggests {', '.join(actions)}" if actions else ""
            out.append(Finding(
                fault=this, severity=_severity(str(st.get("health")), actions, this),
                summary=f"gpud {name}: {why}{repair}", detector=NAME, node=node,
                evidence=(Evidence(source="gpud", text=why,
                                   at=st.get("time") if isinstance(st.get("time"), str)
                                   else now.isoformat(),
                                   data={"component": name, "state": st,
                                         "repair_actions": actions}),)))
    return out


class Gpud:
    """SPEC D13: gpud's health states (only where something listens on its port:
    `slurm_heal.checks.present.gpud`)."""

    name = NAME
    settings = GpudConfig
    modes = GpudConfig().modes

    def gather(self, cfg: CheckConfig, st: dict[str, Any], node: str, now: datetime) -> Any:
        return fetch(cfg.gpud)

    def evaluate(self, cfg: CheckConfig, st: dict[str, Any], node: str, now: datetime,
                 seen: Any) -> tuple[list[Finding], dict[str, Any]]:
        return evaluate(seen, cfg.gpud, node, now), {}


DETECTOR = Gpud()
