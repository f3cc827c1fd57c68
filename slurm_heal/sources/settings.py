"""The ``[sources]`` section of the policy (SPEC D13): how the site's own alerts map to
faults.

``[[sources.alertmanager.map]]`` rules are tried in order; the first whose matchers all
hold maps the alert::

    [[sources.alertmanager.map]]
    match = { alertname = "GpuXidError" }        # label = value, all must hold
    match_re = { err_code = "[0-9]+" }           # label ~ regular expression (whole value)
    node_label = ["Hostname", "instance"]        # the first present names the node(s)
    fault = "gpu.xid.{{ labels.err_code }}"      # fixed, or {{ labels.X }} / {{ annotations.X }}
    severity = "critical"                        # optional: else the catalog's

``instance`` style values lose their ``:port``; a value may be a Slurm host list
(``gpu[01-04]``, ClusterShell NodeSet), giving one alert per node; ``strip_domain``
keeps the first DNS label only.

``[sources.nhc]`` maps NHC's own drain reasons (``NHC: check_hw_ib: ...``) to faults,
by NHC check name, when ``enabled`` (off by default: an NHC drain stays someone else's,
SPEC D5).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Literal

from pydantic import Field, field_validator, model_validator

from slurm_heal.sections import Duration, Section

# A fault id (reasons.py's grammar) and the one template form a fault may hold.
FAULT_ID = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$")
TEMPLATE = re.compile(r"\{\{\s*(labels|annotations)\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NHC_CHECK = re.compile(r"^check_[a-z0-9_]+$")
Severity = Literal["info", "warning", "critical"]


_Section = Section  # the one section base (house style 13): frozen, no unknown keys

def template_shape(fault: str) -> str:
    """``fault`` with each ``{{ ... }}`` as ``*`` (a glob over fault ids)."""
    return TEMPLATE.sub("*", fault)


class AlertmanagerMap(_Section):
    """One mapping rule: label matchers → node, fault, severity."""

    match: dict[str, str] = Field(default_factory=dict)
    match_re: dict[str, str] = Field(default_factory=dict)
    node_label: tuple[str, ...] = ("Hostname", "instance", "node", "nodename", "host")
    fault: str
    severity: Severity | None = None
    strip_domain: bool = True

    @field_validator("node_label", mode="before")
    @classmethod
    def _one_or_more(cls, value: object) -> object:
        return (value,) if isinstance(value, str) else value

    @field_validator("node_label")
    @classmethod
    def _labels(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("names no label: give the label that holds the node's name "
                             "(Hostname, instance, ...)")
        for name in value:
            if not LABEL_NAME.match(name):
                raise ValueError(f"{name!r} is not a Prometheus label name")
        return value

    @field_validator("match", "match_re")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not LABEL_NAME.match(name):
                raise ValueError(f"{name!r} is not a Prometheus label name")
        return value

    @field_validator("match_re")
    @classmethod
    def _regexes(cls, value: dict[str, str]) -> dict[str, str]:
        for name, pattern in value.items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{name}: {pattern!r} is not a regular expression "
                                 f"({exc})") from None
        return value

    @field_validator("fault")
    @classmethod
    def _fault(cls, value: str) -> str:
        rest = TEMPLATE.sub("x", value)
        if "{{" in rest or "}}" in rest:
            raise ValueError(f"{value!r}: a template may only say {{{{ labels.NAME }}}} or "
                             "{{ annotations.NAME }}")
        if not FAULT_ID.match(rest):
            raise ValueError(f"{value!r} is not a fault id (like gpu.xid.79, or "
                             "gpu.xid.{{ labels.err_code }})")
        return value

    def regexes(self) -> dict[str, re.Pattern[str]]:
        return {k: re.compile(v) for k, v in self.match_re.items()}


class AlertmanagerSource(_Section):
    """``[sources.alertmanager]``: the receiver's mapping rules."""

    map: tuple[AlertmanagerMap, ...] = ()
    # Resolved alerts are kept this long (shown, then forgotten); firing ones until resolved.
    keep_resolved_hours: int = Field(default=24, ge=1, le=24 * 14)
    # A firing alert Alertmanager has not sent again for this long is no longer taken as
    # active (a resolved notification that never came): set it above the route's
    # repeat_interval (the shipped route: 4h).
    stale_after: Duration = timedelta(hours=24)


class NhcSource(_Section):
    """``[sources.nhc]``: NHC's own drains, remediated when enabled (opt-in)."""

    enabled: bool = False
    # NHC check name (check_hw_ib) → fault id of the catalog.
    map: dict[str, str] = Field(default_factory=dict)
    severity: Severity | None = None  # else the catalog's

    @field_validator("map")
    @classmethod
    def _checks(cls, value: dict[str, str]) -> dict[str, str]:
        for check, fault in value.items():
            if not NHC_CHECK.match(check):
                raise ValueError(f"{check!r} is not an NHC check name (check_hw_ib, "
                                 "check_fs_mount, ...)")
            if not FAULT_ID.match(fault):
                raise ValueError(f"{check}: {fault!r} is not a fault id")
        return value

    @model_validator(mode="after")
    def _something_mapped(self) -> NhcSource:
        if self.enabled and not self.map:
            raise ValueError("enabled maps no NHC check: add map = { check_hw_ib = "
                             "\"ib.link_down\", ... }")
        return self


class Sources(_Section):
    """``[sources]``: the site's own monitors (SPEC D13)."""

    alertmanager: AlertmanagerSource = AlertmanagerSource()
    nhc: NhcSource = NhcSource()
