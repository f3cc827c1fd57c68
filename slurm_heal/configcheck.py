"""Check the whole file the daemon reads, the way the daemon reads it (SPEC I4, P2, S1).

`check_config` is what ``slurm-heal policy check`` runs, what the daemon runs at start,
and what it runs again on ``SIGHUP`` before taking a new file: the policy knobs, the
``[controller]`` section, the ``[provider]`` section (required) with a dry construction
of the provider (no action is ever sent; an embedded simulator is started and stopped
again, state goes to a throw-away directory). A file that passes here is a file the
daemon takes.

Some mistakes are valid TOML and valid types but match nothing, and silently do nothing:
a typo'd fault glob (``gpu.xdi.119``) disables the approval rule it is in. Those are
warnings: fault globs (approval rules, persistence keys) that match no fault of the
catalog, and host lists and pools that match no node of the cluster (when Slurm answers).
"""

from __future__ import annotations

import fnmatch
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_heal.config import Policy, load_policy
from slurm_heal.errors import ConfigError, HealError, ProviderError
from slurm_heal.types import Action

if TYPE_CHECKING:
    from slurm_heal.controller import ControllerSettings
    from slurm_heal.sections import NotifySettings
    from slurm_heal.siteconf import SitePlan
    from slurm_heal.slurm.base import SlurmClient

SEVERITIES = ("critical", "warning", "info")
# Fault ids that are not in the catalog but that rules may name: a request's fault.
NON_CATALOG_FAULTS = ("request",)
_XID = re.compile(r"^gpu\.xid\.\d+$")  # any Xid is a fault, listed in the catalog or not


@dataclass
class ConfigReport:
    """A file the daemon would take, and what in it matches nothing."""

    file: str
    policy: Policy
    settings: ControllerSettings
    provider_type: str
    warnings: list[str] = field(default_factory=list)
    cluster_checked: bool = False


class _NoSlurm:
    """Handed to a provider built dry: building one must not talk to Slurm."""

    def __getattr__(self, name: str) -> Any:
        raise ConfigError(f"the provider asked Slurm ({name}) while being built")


def _fault_glob_matches(glob: str, fault_ids: list[str]) -> bool:
    if glob in NON_CATALOG_FAULTS or _XID.match(glob):
        return True
    return any(fnmatch.fnmatchcase(f, glob) for f in (*fault_ids, *NON_CATALOG_FAULTS))


def _check_sources(policy: Policy, source: str, fault_ids: list[str],
                   report: ConfigReport) -> None:
    """SPEC D13: a mapping whose fault matches no fault of the catalog maps alerts to
    something no rule knows (a typo?): said, not refused (a site's own fault is allowed;
    its severity decides)."""
    from slurm_heal.sources.settings import template_shape

    for i, rule in enumerate(policy.sources.alertmanager.map):
        if not _fault_glob_matches(template_shape(rule.fault), fault_ids):
            report.warnings.append(
                f"{source}: sources.alertmanager.map[{i}].fault: {rule.fault!r} matches no "
                "fault of the catalog: its alerts have no catalog action and are only "
                "recorded (a typo? ids look like gpu.xid.79, gpu.ecc.dbe; see "
                "slurm_heal/catalog.toml)")
    for check, fault in policy.sources.nhc.map.items():
        if not _fault_glob_matches(fault, fault_ids):
            report.warnings.append(
                f"{source}: sources.nhc.map.{check}: {fault!r} matches no fault of the "
                "catalog: NHC's drains for it are never remediated (a typo?)")


def dry_provider(section: dict[str, Any], source: str) -> str:
    """Build the ``[provider]`` the daemon would build, then close it; its type.

    ConfigError names the file and the key; a provider that fails to build raises
    ProviderError (exit 4).
    """
    return _dry_build(section, source)[0]


def _dry_build(section: dict[str, Any], source: str) -> tuple[str, frozenset[Action]]:
    """`dry_provider`, and the actions the built provider says it can carry out."""
    from slurm_heal.providers import make_provider

    if not section:
        raise ConfigError("missing: the daemon needs a [provider] with a type (http, exec, "
                          "slurm, openstack, aws, gcp, azure, oci, redfish, simulator; "
                          "docs/providers.md)", file=source,
                          key="provider")
    with tempfile.TemporaryDirectory(prefix="slurm-heal-check-") as tmp:
        try:
            provider = make_provider(section, slurm=_NoSlurm(), state_dir=Path(tmp))
        except ConfigError as exc:
            raise ConfigError(str(exc), file=source) from None
        except ProviderError:
            raise
        except HealError as exc:
            raise ProviderError(f"{source}: provider: {exc}") from None
        can = frozenset(a for a in Action if a is not Action.NONE and provider.supports(a))
        close = getattr(provider, "close", None)
        if callable(close):
            close()
    return str(section.get("type")), can


def check_config(path: str | Path, slurm: SlurmClient | None = None, *,
                 build_provider: bool = True) -> ConfigReport:
    """Check ``path`` as the daemon reads it; ConfigError (exit 2) for what it refuses.

    With ``slurm`` (a client that answers), host lists and pools are checked against the
    cluster's nodes too.
    """
    from slurm_heal import catalog
    from slurm_heal.config import node_names
    from slurm_heal.controller import controller_settings

    source = str(path)
    policy = load_policy(path)
    settings = controller_settings(policy.controller, source=source)
    from slurm_heal.metrics import metrics_settings, web_config
    from slurm_heal.notify import notify_settings

    notify = notify_settings(policy.notify, source)  # SPEC O3: a bad URL or kind: exit 2
    # SPEC O4; its TLS files and users (issue 38): a bad one is exit 2 before the start
    web_config(metrics_settings(policy.metrics, source), source)
    from slurm_heal.validation.suite import validation_from
    from slurm_heal.validation.tickets import sinks_from

    # SPEC V1-V3: the suites, the flow's knobs and the ticket sinks: a typo is exit 2
    sinks_from(validation_from(policy.validation, source).tickets, source)
    can: frozenset[Action] | None = None
    if build_provider:
        kind, can = _dry_build(dict(policy.provider.table), source)
    else:
        kind = str(policy.provider.kind)
    report = ConfigReport(file=source, policy=policy, settings=settings, provider_type=kind)
    _check_slack_twice(notify, source, report)
    # Issue 22: a state_dir the daemon cannot use is exit 5 here too, never "OK".
    from slurm_heal.location import ENV_STATE_DIR, usable_state_dir

    state_dir = os.environ.get(ENV_STATE_DIR) or settings.state_dir
    if state_dir:
        usable_state_dir(Path(state_dir), create=False)
    if policy.api:  # `slurm-heal serve`'s section: checked here too, so a typo shows early
        from slurm_heal.api.settings import api_settings

        api_settings(policy.api, source=source)

    _check_links(policy, source, report)

    fault_ids = sorted(catalog.load().faults)
    for i, rule in enumerate(policy.approvals.rules):
        if rule.fault is not None and not _fault_glob_matches(rule.fault, fault_ids):
            report.warnings.append(
                f"{source}: approvals.rules[{i}].fault: {rule.fault!r} matches no fault of "
                f"the catalog: this rule never applies (a typo? ids look like gpu.xid.119, "
                "gpu.ecc.dbe; see slurm_heal/catalog.toml)")
    for key in policy.safety.persistence:
        if key not in SEVERITIES and not _fault_glob_matches(key, fault_ids):
            report.warnings.append(
                f"{source}: safety.persistence.{key}: matches no fault of the catalog nor a "
                "severity (critical, warning, info): it never applies")
    _check_sources(policy, source, fault_ids, report)
    _check_topology(policy, source, fault_ids, report)
    if can is not None and policy.mode != "recommend_only":
        _check_auto_actions(policy, source, kind, can, report)
    if policy.escalation.gpu_reset and not policy.validation.results_dir:
        # SPEC E6: the reset job's result is read back by the controller
        report.warnings.append(
            f"{source}: escalation.gpu_reset is on and [validation] results_dir is unset: "
            "the reset job writes its result under the controller's state_dir/validation/"
            "reset on the node; that directory must be shared with the nodes (set "
            "results_dir to a shared path)")

    if slurm is not None:
        try:
            nodes = slurm.nodes()
        except HealError as exc:
            report.warnings.append(f"Slurm did not answer ({exc}): host lists and pools "
                                   "were not checked against the cluster")
            return report
        report.cluster_checked = True
        names = {n.name for n in nodes}
        pools = {policy.pool_of(n.partitions, n.features) for n in nodes}
        for i, rule in enumerate(policy.approvals.rules):
            if rule.nodes is not None and not (node_names(rule.nodes) & names):
                report.warnings.append(
                    f"{source}: approvals.rules[{i}].nodes: {rule.nodes!r} matches no node "
                    "of the cluster: this rule never applies")
            for pool in rule.pools or ():
                if pool not in pools:
                    report.warnings.append(
                        f"{source}: approvals.rules[{i}].pools: {pool!r} is no pool of the "
                        f"cluster (pools by {policy.pools.by}: {', '.join(sorted(pools))})")
    return report


def _check_auto_actions(policy: Policy, source: str, kind: str, can: frozenset[Action],
                        report: ConfigReport) -> None:
    """SPEC P2, issue 36 item 9: an auto-approved fault whose catalog action the provider
    cannot carry out (the ``slurm`` provider only reboots; Xid 79's action is migrate)
    would be approved and fail at once, every time. Said loudly, one warning per rule and
    action, with the faults it concerns and what to write instead."""
    from slurm_heal import catalog

    hit: dict[tuple[str, Action], list[str]] = {}
    for fault in catalog.load().faults.values():
        if fault.action is Action.NONE or fault.record_only or fault.action in can:
            continue
        # a node no host list names and no pool: what every node gets unless a rule
        # scoped to nodes or pools says otherwise; those scoped rules are checked too
        decided = [policy.approvals.decide(fault.id, fault.action, "", None)]
        decided += [(r.mode, f"P2:approvals[{i}]") for i, r in enumerate(policy.approvals.rules)
                    if (r.nodes is not None or r.pools is not None) and r.mode == "auto"
                    and r.model_copy(update={"nodes": None, "pools": None}).matches(
                        fault.id, fault.action, "", None)]
        for mode, rid in decided:
            if mode == "auto":
                hit.setdefault((rid, fault.action), []).append(fault.id)
    for (rid, action), faults in sorted(hit.items(), key=lambda kv: (kv[0][0], kv[0][1].value)):
        shown = ", ".join(faults[:6]) + (f" and {len(faults) - 6} more" if len(faults) > 6 else "")
        # the rule that outranks this one: its own matchers plus the action (P2)
        matchers = []
        if rid != "P2:default":
            rule = policy.approvals.rules[int(rid.split("[")[1].rstrip("]"))]
            if rule.fault is not None:
                matchers.append(f'fault = "{rule.fault}"')
            if rule.nodes is not None:
                matchers.append(f'nodes = "{rule.nodes}"')
            if rule.pools is not None:
                matchers.append("pools = [" + ", ".join(f'"{p}"' for p in rule.pools) + "]")
        matchers += [f'action = "{action.value}"', 'mode = "manual"']
        report.warnings.append(
            f"{source}: {rid} auto-approves {action.value} ({shown}: their catalog action), "
            f"which the {kind} provider cannot carry out (it can: "
            f"{', '.join(sorted(a.value for a in can)) or 'nothing'}): each would be approved "
            f"and fail at once. Add a rule {{{', '.join(matchers)}}} (a person decides) or "
            "use a provider that can (docs/providers.md)")


def _check_topology(policy: Policy, source: str, fault_ids: list[str],
                    report: ConfigReport) -> None:
    """SPEC S7: related-fault globs that match nothing, and a topology file that cannot be
    read (a warning, not a refusal: the daemon runs without a topology, saying why)."""
    for group, globs in policy.incidents.related.items():
        for glob in globs:
            if not _fault_glob_matches(glob, fault_ids):
                report.warnings.append(
                    f"{source}: incidents.related.{group}: {glob!r} matches no fault of the "
                    "catalog: it relates nothing")
    # Issue 37: a component kind no cause domain names counts no fault class of a domain.
    named = {k for d in policy.incidents.domains.values() for k in d.components}
    for prefix in policy.topology.feature_prefixes:
        kind = prefix.rstrip("=:")
        if kind not in named:
            report.warnings.append(
                f"{source}: topology.feature_prefixes: {prefix!r} names components of kind "
                f"{kind!r}, which no incidents.domains.*.components lists: only the blast "
                "radius and groups no domain names count over them")
    if policy.topology.file and policy.topology.source in ("auto", "file"):
        from slurm_heal.errors import TopologyError
        from slurm_heal.topology import parse_topology

        path = Path(policy.topology.file)
        try:
            parse_topology(path.read_text(encoding="utf-8"), source=str(path))
        except (OSError, UnicodeDecodeError) as exc:
            report.warnings.append(f"{source}: topology.file: {path} cannot be read ({exc}): "
                                   "the daemon runs without a topology until it can")
        except TopologyError as exc:
            report.warnings.append(f"{source}: topology.file: {exc}: the daemon runs "
                                   "without a topology until it is fixed")


def site_fit(report: ConfigReport) -> SitePlan:
    """SPEC I7: the slurm.conf lines slurm-heal needs against the live configuration
    (``scontrol show config`` with the config's slurm.conf), for the glue of this
    installation's prefix; the ``slurm`` provider's reboot timeout against ResumeTimeout.
    Its warnings are added to the report's when Slurm answered (when it did not, the
    cluster part is reported as not checked, as for host lists)."""
    import sys

    from slurm_heal.install import DEFAULT_PREFIX
    from slurm_heal.location import slurm_conf_path
    from slurm_heal.siteconf import plan, read_live, reboot_timeout_of

    here = Path(sys.prefix)
    prefix = here if (here / "libexec" / "slurm-heal-healthcheck").exists() else DEFAULT_PREFIX
    try:
        conf: Path | None = slurm_conf_path(report.settings.slurm_conf)
    except HealError:
        conf = None
    live, source = read_live(conf)
    timeout, why = reboot_timeout_of(report.policy.provider, report.file)
    fit = plan(live, prefix, source=source, reboot_timeout=timeout, reboot_source=why)
    if fit.live:
        report.warnings.extend(fit.warnings)
    return fit


# Settings read once at start: a change to them on SIGHUP is logged and needs a restart.
RESTART_KEYS = ("state_dir", "slurm_backend", "slurm_conf", "heartbeat", "notify_file")


@dataclass
class Reloader:
    """The daemon's SIGHUP: check the file again with `check_config`; a good one takes
    effect at the next cycle (policy, provider, interval), a bad one is refused and the
    old one kept, logged. Returns the interval for `run_forever`."""

    path: str
    controller: Any  # slurm_heal.controller.Controller
    settings: ControllerSettings
    provider_state_dir: Path | None = None
    log: Any = None

    def __call__(self) -> float | None:
        import logging

        from slurm_heal.providers import make_provider

        log = self.log or logging.getLogger("slurm_heal.daemon")
        try:
            report = check_config(self.path, self.controller.slurm)
            new_provider = None
            if report.policy.provider != self.controller.policy.provider:
                new_provider = make_provider(report.policy.provider.table,
                                             slurm=self.controller.slurm,
                                             state_dir=self.provider_state_dir)
        except HealError as exc:
            log.error("reload refused, the running config is kept: %s", exc)
            return None
        for key in RESTART_KEYS:
            if getattr(report.settings, key) != getattr(self.settings, key):
                log.warning("reload: controller.%s changed; it takes effect at the next "
                            "restart (still %s)", key, getattr(self.settings, key))
        for warning in report.warnings:
            log.warning("reload: %s", warning)
        self.controller.policy = report.policy
        if new_provider is not None:
            old, self.controller.provider = self.controller.provider, new_provider
            close = getattr(old, "close", None)
            if callable(close):
                close()
        log.info("reloaded %s: mode %s, provider %s, interval %ss; in effect from the next "
                 "cycle", self.path, report.policy.mode, report.provider_type,
                 report.settings.interval)
        return report.settings.interval


def _check_links(policy: Any, source: str, report: ConfigReport) -> None:
    """SPEC O7 (issue 40): notifications that need a person should link to the decision
    ([api] public_url); Slack's buttons need serve to check their signature and to know
    who presses them."""
    from slurm_heal.notify.events import NEEDS_PERSON

    notify = policy.notify
    kinds = [k for route in notify.all_routes() for k in route.kinds]
    if notify.slack is not None:
        kinds += notify.slack.kinds
    needs = sorted({k for k in NEEDS_PERSON if "*" in kinds or k in kinds})
    public = policy.api.public_url if policy.api is not None else None
    if needs and public is None:
        report.warnings.append(
            f"{source}: notify: {', '.join(needs)} notifications need a person, but [api] "
            "public_url is unset: they go out without a link to the console page where a "
            "person decides (SPEC O7); set public_url to the console's address as people's "
            "browsers reach it")
    slack = notify.slack
    if slack is not None and "approval" in (slack.kinds if "*" not in slack.kinds
                                           else NEEDS_PERSON):
        if slack.signing_secret_file is None:
            report.warnings.append(
                f"{source}: notify.slack.signing_secret_file is unset: serve cannot check "
                "a button press came from Slack, so every press is refused (SPEC O7)")
        if not slack.users:
            report.warnings.append(
                f"{source}: notify.slack.users is empty: no Slack user maps to a console "
                "user, so every press of Approve or Deny is refused (SPEC O7)")


def _slack_url(url: str) -> bool:
    """An Apprise URL that posts to Slack (``slack://``, or a Slack webhook's own URL)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url.strip())
    return parts.scheme.lower() == "slack" or (
        parts.scheme.lower() in ("http", "https") and
        (parts.hostname or "").lower() == "hooks.slack.com")


def _check_slack_twice(notify: NotifySettings, source: str, report: ConfigReport) -> None:
    """SPEC O3, O7: an Apprise route to Slack that takes the kinds ``[notify.slack]``
    posts as well sends each such event to Slack twice (an approval once as text, once
    with its buttons): a warning naming the route and the kinds both take."""
    if notify.slack is None:
        return
    slack_kinds = set(notify.slack.kinds)
    shortcut = 1 if notify.urls else 0
    for i, route in enumerate(notify.all_routes()):
        if not any(_slack_url(u) for u in route.urls):
            continue
        where = "notify.urls" if i < shortcut else f"notify.routes[{i - shortcut}]"
        kinds = set(route.kinds)
        both = (sorted(slack_kinds) if "*" in kinds else sorted(kinds) if "*" in slack_kinds
                else sorted(kinds & slack_kinds))
        if both:
            report.warnings.append(
                f"{source}: {where} posts to Slack through Apprise and [notify.slack] posts "
                f"too: each {', '.join(both)} event reaches Slack twice (an approval once "
                "as text, once with its buttons); leave those kinds out of the route's "
                "kinds, or drop one of the two")
