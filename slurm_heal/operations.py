"""What the admin CLI and the HTTP API (`slurm-heal serve`) show and do, in one place
(SPEC I4, O5, Q1, P2, P4).

Both front ends call these functions, so a person's word reaches the controller the same
way whichever one they use: a write is a `models.Command` put into the store's inbox
(`queue`), refused when no controller reads that store; a read returns the JSON shapes
the CLI's ``--json`` prints. Nothing here decides or acts: the daemon consumes the inbox
at its next cycle, under the same checks as everything else (SPEC Q4, S3-S5).

No click here: the CLI maps `HealError` to exit statuses (`slurm_heal.cli`), the API to
problem objects (`slurm_heal.api.app`).
"""

from __future__ import annotations

import dataclasses
import importlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from slurm_heal.errors import HealError, NotFound, SlurmError
from slurm_heal.location import Location, slurm_conf_path
from slurm_heal.models import Command, Decision, Remediation, State
from slurm_heal.readmodel import incidents as incident_views
from slurm_heal.readmodel.incidents import IncidentView
from slurm_heal.slurm.base import SlurmClient
from slurm_heal.types import Action, Alert

Channel = Literal["cli", "api", "console", "slack"]  # where a person decided (O7, P4)
CommandKind = Literal["approve", "deny", "cancel", "request", "reset_breaker", "pause",
                      "unpause", "validate", "close_incident"]
# What a person may ask for by request (SPEC Q2: remove is queued for the record and
# refused by the controller; slurm-heal never removes a node).
REQUEST_ACTIONS = (Action.REBOOT, Action.REBUILD, Action.MIGRATE, Action.REMOVE)


def now() -> datetime:
    return datetime.now(timezone.utc)


# --------------------------------------------------------------------------- writes


def new_command(kind: CommandKind, by: str, *, node: str | None = None,
                remediation: str | None = None, action: Action | None = None,
                detector: str | None = None, request_id: str | None = None,
                reason: str = "", command_id: str | None = None,
                at: datetime | None = None, level: int | None = None,
                incident: str | None = None, channel: Channel | None = None,
                generation: str | None = None) -> Command:
    """An inbox command. ``command_id`` is given by callers that must never make two of
    the same (the API derives it from the idempotency key); otherwise a fresh one."""
    return Command(id=command_id or f"c-{uuid.uuid4().hex[:12]}", at=at or now(), kind=kind,
                   by=by, node=node, remediation=remediation, action=action,
                   detector=detector, request_id=request_id, reason=reason, level=level,
                   incident=incident, channel=channel, generation=generation)


def request_problem(action: Action, reason: str, detector: str | None,
                    request_id: str | None, names: dict[str, str] | None = None) -> str | None:
    """Why a person's request is malformed (a message for them), or None (SPEC Q2, Q3).

    ``names`` says how the front end calls the fields (the CLI: ``--id``, ``--detector``,
    ``--reason``). The tokens themselves are checked by `reasons.format_request`
    (ReasonError names the bad one)."""
    from slurm_heal.reasons import format_request

    n = {"id": "id", "detector": "detector", "reason": "reason", **(names or {})}
    if action not in REQUEST_ACTIONS:
        return (f"{action.value} cannot be requested; ask for one of "
                + ", ".join(a.value for a in REQUEST_ACTIONS))
    if action is Action.REMOVE and (detector or request_id):
        return ("remove is only ever done by a person: a request naming a detector cannot "
                "ask for it (SPEC Q2)")
    if request_id and not detector:
        return f"{n['id']} needs {n['detector']}: together they deduplicate (SPEC Q3)"
    if not reason.strip():
        return f"{n['reason']} must say why"
    format_request(action, detector, request_id)  # ReasonError names the bad token
    return None


def queue(loc: Location, cmd: Command, *, force: bool = False) -> Command:
    """Put ``cmd`` into the inbox of the store at ``loc``; return it as stored.

    Refused (`location.NoController`) when no controller reads that store, unless
    ``force``. approve/deny/cancel are resolved to the open remediation they name
    (`store.Store.add_command`: NotFound when there is none). A command whose id is
    already in the inbox is not added twice.
    """
    from slurm_heal.store import Store

    if not force:
        loc.check_writable()
    stored: Command = Store(loc.state_dir).add_command(cmd)
    return stored


def detector_drain_note(rem: Remediation | None, kind: str) -> str | None:
    """What a person must still do after denying or cancelling a detector's request: its
    ``heal-request:`` drain is not ours and is never undone by slurm-heal."""
    if kind in ("deny", "cancel") and rem is not None and rem.origin == "request":
        return (f"{rem.node} was drained by detector {rem.detector or '?'}'s heal-request "
                "reason, which slurm-heal never undoes (it is not ours): a person resumes "
                f"it: scontrol update nodename={rem.node} state=resume")
    return None


# --------------------------------------------------------------------------- Slurm


def slurm_client(controller: dict[str, Any], *, slurm_conf: str | None = None,
                 backend: str | None = None, timeout: float | None = None) -> SlurmClient:
    """A Slurm client for the slurm.conf and backend the daemon uses (``[controller]``
    section; ``slurm_conf``/``backend`` given on a command line win over it); a missing
    slurm.conf fails at once with one message. Every admin command (status, alerts,
    explain, ...) finds its Slurm here (issue 36 item 5)."""
    factory = getattr(importlib.import_module("slurm_heal.slurm"), "make_client", None)
    if factory is None:
        raise SlurmError("no Slurm backend is available in this installation")
    conf = (slurm_conf_path(slurm_conf, "--slurm-conf") if slurm_conf
            else slurm_conf_path(controller.get("slurm_conf")))
    kwargs: dict[str, Any] = {"slurm_conf": str(conf)}
    if backend and backend != "auto":
        kwargs["backend"] = backend
    elif controller.get("slurm_backend"):
        kwargs["backend"] = controller["slurm_backend"]
    if timeout is not None:
        kwargs["timeout"] = timeout
    for key in ("slurm_rest_url", "slurm_rest_token_file"):  # the rest backend (slurmrestd)
        if controller.get(key):
            kwargs[key.replace("slurm_rest_", "rest_")] = controller[key]
    made: SlurmClient = factory(**kwargs)
    return made


# --------------------------------------------------------------------------- reads


def rem_json(rem: Remediation) -> dict[str, Any]:
    """A remediation as the CLI's ``--json`` shows it: the whole record plus ``open``."""
    from slurm_heal.readmodel.words import held, provider_error, waiting_for_evidence

    out: dict[str, Any] = rem.model_dump(mode="json")
    out["open"] = not rem.phase.terminal
    out["waiting_for_evidence"] = waiting_for_evidence(rem)  # O6: "" when it does not
    h = held(rem)  # O6: what holds it now, until when, what lifts it (None: nothing)
    out["hold"] = h.model_dump(mode="json") if h is not None else None
    trouble = provider_error(rem)  # O6: the provider does not answer the act
    out["provider_error"] = None if trouble is None else {
        "error": trouble.last_error, "tries": trouble.errors,
        "at": trouble.last_error_at.isoformat() if trouble.last_error_at else None}
    return out


def alert_json(alert: Alert) -> dict[str, Any]:
    """An alert with its evidence unchanged (SPEC D7), the catalog's explanation and
    default action, and for an Xid NVIDIA's own advice."""
    from slurm_heal import catalog
    from slurm_heal.extra import alert_to_json

    out = alert_to_json(alert)
    out["node"] = alert.node
    try:
        fault = catalog.load().get(alert.fault)
        out["explanation"] = fault.explanation
        out["default_action"] = fault.action.value
        if fault.bucket:  # an Xid: NVIDIA's own advice next to ours
            out["nvidia"] = {"mnemonic": fault.mnemonic, "bucket": fault.bucket,
                             "investigatory": fault.investigatory}
    except HealError:
        out["explanation"] = "(not in the fault catalog)"
        out["default_action"] = None
    return out


def alerts_of(client: SlurmClient, node: str | None,
              state: State | None = None) -> list[Alert]:
    """The node checks' alerts from Extra, plus D5: a node DOWN or drained for a reason
    slurm-heal did not set (what a Slurm exporter would show; never touched by us), and
    what else holds a node out of service (`slurm_heal.nodealerts.node_alerts`); with the
    store's ``state``, the site's own firing alerts too (SPEC D13: Alertmanager's, those
    for a node Slurm does not know or no rule maps included, with what stops them)."""
    from slurm_heal.nodealerts import node_alerts

    at = now()
    nodes = (client.node(node),) if node else client.nodes()
    out = [a for n in nodes for a in node_alerts(n, at)]
    if state is not None:
        out.extend(site_alerts(state, node))
    return out


def site_alerts(state: State, node: str | None = None) -> list[Alert]:
    """The site's monitors' firing alerts in the store (SPEC D13), each naming its
    source as its detector; one that leads to nothing says why in its summary."""
    from slurm_heal.sources.stored import SOURCES_KEY, load

    out = []
    for a in load(state.data.get(SOURCES_KEY)):
        if a.status != "firing" or (node is not None and a.node != node):
            continue
        alert = a.alert()
        if a.problem or not (a.node and a.fault):
            alert = dataclasses.replace(
                alert, node=a.node or "(no node)", fault=a.fault or "(unmapped)",
                summary=f"{a.summary} [{a.problem or 'not mapped'}]")
        out.append(alert)
    return out


def pause_json(state: State) -> dict[str, Any] | None:
    """Who paused or unpaused all automation last, when and why (SPEC O2)."""
    return state.pause.model_dump(mode="json") if state.pause is not None else None


@dataclass(frozen=True)
class Explained:
    """Why a node is where it is (house style 9): what `explain` shows."""

    node: str
    slurm: dict[str, Any]  # reachable, error, states, reason
    alerts: list[Alert]
    state: State
    open: list[Remediation]
    recent: list[Remediation]  # the last finished ones (at most 3)
    decisions: list[Decision]
    incidents: tuple[IncidentView, ...] = ()  # SPEC S7: the incidents the node is part of

    def as_json(self) -> dict[str, Any]:
        return {"node": self.node, "slurm": self.slurm,
                "alerts": [alert_json(a) for a in self.alerts],
                "open_remediations": [rem_json(r) for r in self.open],
                "recent_remediations": [rem_json(r) for r in self.recent],
                "decisions": [d.model_dump(mode="json") for d in self.decisions],
                "breaker": self.state.breaker.model_dump(mode="json"),
                "paused": self.state.paused, "pause": pause_json(self.state),
                "incidents": [i.model_dump(mode="json") for i in self.incidents]}


def explain(node: str, slurm: Callable[[], SlurmClient], load: Callable[[], State],
            last_decisions: int = 10) -> Explained:
    """Slurm's view of the node (degrading to the store alone when Slurm does not
    answer), its alerts, and the store's record. NotFound when neither knows it."""
    from slurm_heal.extra import read_check_data
    from slurm_heal.store import decisions

    slurm_info: dict[str, Any] = {"reachable": False, "error": None}
    found: list[Alert] = []
    try:
        client = slurm()
        info = client.node(node)
        slurm_info.update(reachable=True, states=sorted(info.states), reason=info.reason)
        # SPEC S8: faults a person's resume acknowledged (shown, never acted on)
        slurm_info["acknowledged"] = [a.fault for a in read_check_data(
            info.name, info.extra, now()).acknowledged]
        found = alerts_of(client, node)
    except HealError as exc:  # degrade: the store alone still explains a lot
        slurm_info["error"] = str(exc)
        unknown = isinstance(exc, NotFound)
    else:
        unknown = False
    state = load()
    found.extend(site_alerts(state, node))  # SPEC D13: the site's own monitors' alerts
    if unknown and not any(r.node == node for r in state.remediations):
        raise NotFound(f"Slurm does not know a node {node!r} and the store has no record of it")
    recent = sorted((r for r in state.remediations if r.node == node and r.phase.terminal),
                    key=lambda r: r.updated)[-3:]
    return Explained(node=node, slurm=slurm_info, alerts=found, state=state,
                     open=list(state.open_for(node)), recent=recent,
                     decisions=list(decisions(state, node))[-last_decisions:],
                     incidents=incident_views.of_node(state, node))
