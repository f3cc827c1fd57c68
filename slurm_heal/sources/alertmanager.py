"""Alertmanager's webhook message (version 4) → `stored.SourceAlert`s, by the policy's
``[[sources.alertmanager.map]]`` rules (SPEC D13, D7, Q3, L4).

Pure: no I/O and no clock (``now`` is passed). The message is validated at the edge
(`Webhook`): a version other than 4 is refused, fields Alertmanager adds later
(``notification_reason``, ...) are kept. Each alert is kept whole as its evidence; the
first rule whose matchers hold names the node(s), the fault and the severity. An alert
no rule maps, or whose node label is missing, is kept with a problem that says so and
leads to nothing: slurm-heal never guesses a node or a fault.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from slurm_heal import catalog as catalog_mod
from slurm_heal.config import node_names
from slurm_heal.errors import CatalogError
from slurm_heal.sources.settings import FAULT_ID, TEMPLATE, AlertmanagerMap, AlertmanagerSource
from slurm_heal.sources.stored import SourceAlert
from slurm_heal.types import Severity

SOURCE = "alertmanager"
MAX_ALERTS = 1000  # alerts in one message (Alertmanager's max_alerts is 0 = all by default)
ZERO_TIME = datetime(1, 1, 1, tzinfo=timezone.utc)  # Go's zero time: "no end yet"
_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^:\[\]]+):\d{1,5}$")


class WebhookAlert(BaseModel):
    """One alert of the message, as Alertmanager sends it."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: datetime  # noqa: N815 (Alertmanager's names)
    endsAt: datetime | None = None  # noqa: N815
    generatorURL: str = ""  # noqa: N815
    fingerprint: str = Field(min_length=1, max_length=128)

    @field_validator("startsAt", "endsAt")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("needs a time zone (RFC 3339)")
        return value


class Webhook(BaseModel):
    """The webhook message (https://prometheus.io/docs/alerting/latest/configuration/
    #webhook_config), version 4."""

    model_config = ConfigDict(extra="allow", frozen=True)

    version: Literal["4"]
    status: Literal["firing", "resolved"]
    receiver: str = ""
    groupKey: str = ""  # noqa: N815
    truncatedAlerts: int = 0  # noqa: N815
    externalURL: str = ""  # noqa: N815
    alerts: list[WebhookAlert] = Field(max_length=MAX_ALERTS)


def node_of(value: str, strip_domain: bool) -> list[str]:
    """The Slurm node name(s) a label value names: ``host:port`` loses its port, a host
    list (``gpu[01-04]``) is expanded, ``strip_domain`` keeps the first DNS label.
    ValueError when the value names nothing usable."""
    value = value.strip()
    m = _PORT.match(value)
    if m:
        value = m.group(1).strip("[]")
    if not value:
        raise ValueError("it is empty")
    names = sorted(node_names(value)) if any(c in value for c in "[],") else [value]
    out = []
    for name in names:
        if strip_domain and not _is_ip(name):
            name = name.split(".", 1)[0]
        if not name or any(c.isspace() for c in name):
            raise ValueError(f"{name!r} is not a node name")
        out.append(name)
    return out


def _is_ip(name: str) -> bool:
    return bool(re.match(r"^\d{1,3}(\.\d{1,3}){3}$", name)) or ":" in name


def matches(rule: AlertmanagerMap, labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in rule.match.items()):
        return False
    return all(rx.fullmatch(labels.get(k, "")) for k, rx in rule.regexes().items())


def render_fault(template: str, alert: WebhookAlert) -> str:
    """The fault id ``template`` names for ``alert``; ValueError naming what is missing."""
    def one(m: re.Match[str]) -> str:
        where = alert.labels if m.group(1) == "labels" else alert.annotations
        value = where.get(m.group(2))
        if value is None:
            raise ValueError(f"the alert has no {m.group(1)[:-1]} {m.group(2)!r}")
        return value.strip()

    fault = TEMPLATE.sub(one, template)
    if not FAULT_ID.match(fault):
        raise ValueError(f"{fault!r} (from {template!r}) is not a fault id")
    return fault


def _severity(rule: AlertmanagerMap, fault: str, cat: catalog_mod.Catalog) -> Severity:
    if rule.severity is not None:
        return Severity(rule.severity)
    try:
        return cat.get(fault).severity
    except CatalogError:
        return Severity.WARNING


def _summary(alert: WebhookAlert) -> str:
    a = alert.annotations
    text = a.get("summary") or a.get("description") or a.get("message") or ""
    name = alert.labels.get("alertname", "")
    return f"{name}: {text}" if name and text else (text or name or alert.fingerprint)


def from_webhook(raw: dict[str, Any], conf: AlertmanagerSource, now: datetime,
                 cat: catalog_mod.Catalog | None = None) -> list[SourceAlert]:
    """Each alert of the message ``raw`` (parsed JSON) as the store keeps it: mapped by
    the first matching rule (one per node its node label names), or with the problem
    that stops it. The alert's JSON object is its payload, unchanged (D7).
    pydantic's ValidationError when the message is not a version 4 webhook message."""
    cat = cat if cat is not None else catalog_mod.load()
    msg = Webhook.model_validate(raw)
    out: list[SourceAlert] = []
    for alert, payload in zip(msg.alerts, raw["alerts"], strict=True):
        ends = alert.endsAt if alert.endsAt is not None and alert.endsAt > ZERO_TIME else None
        base = SourceAlert(source=SOURCE, id=alert.fingerprint, status=alert.status,
                           summary=_summary(alert), starts_at=alert.startsAt,
                           ends_at=ends if alert.status == "resolved" else None,
                           received=now, updated=now, payload=payload)
        found = next(((i, r) for i, r in enumerate(conf.map)
                      if matches(r, alert.labels)), None)
        if found is None:
            out.append(base.model_copy(update={"problem": "no [[sources.alertmanager.map]] "
                                               "rule matches its labels: recorded only"}))
            continue
        i, rule = found
        where = f"sources.alertmanager.map[{i}]"
        label = next((name for name in rule.node_label if alert.labels.get(name)), None)
        try:
            fault = render_fault(rule.fault, alert)
            if label is None:
                raise ValueError(f"none of its labels {', '.join(rule.node_label)} names a "
                                 "node")
            nodes = node_of(alert.labels[label], rule.strip_domain)
        except ValueError as exc:
            out.append(base.model_copy(update={"rule": where, "problem": f"{where}: {exc}: "
                                               "recorded only, no node is guessed"}))
            continue
        sev = _severity(rule, fault, cat)
        for node in nodes:
            out.append(base.model_copy(update={"node": node, "fault": fault,
                                               "severity": sev, "rule": where}))
    return out


def explain(a: SourceAlert) -> dict[str, Any]:
    """One stored alert as the receiver answers it and `alerts` shows it."""
    return {"source": a.source, "id": a.id, "node": a.node or None,
            "fault": a.fault or None, "severity": a.severity.value, "status": a.status,
            "rule": a.rule or None, "problem": a.problem or None, "summary": a.summary,
            "starts_at": a.starts_at.isoformat(),
            "generator_url": a.payload.get("generatorURL") or None}
