"""The site's own alerts as decide() sees them (SPEC D13), beside the node check's:
Alertmanager's (stored by serve's receiver: a known node's, firing and mapped, with its
payload as evidence, P1/D7) and, when ``[sources.nhc]`` is enabled, NHC's drains of a
mapped check. Pure: a function of the store's state, the snapshot and the policy."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from slurm_heal import catalog as catalog_mod
from slurm_heal import reasons
from slurm_heal.config import Policy
from slurm_heal.models import State
from slurm_heal.policy.facts import PRE_ACT
from slurm_heal.sources import nhc
from slurm_heal.sources import stored as sources_stored
from slurm_heal.types import Alert, NodeInfo


def site_alerts(state: State, nodes: Mapping[str, NodeInfo], policy: Policy, now: datetime,
                catalog: catalog_mod.Catalog,
                out_of_service: Callable[[], Iterable[str]]) -> dict[str, list[Alert]]:
    """The active site alerts by node (``out_of_service``: the nodes with a reason or
    out of service, asked only when NHC's drains are mapped)."""
    site = sources_stored.alerts_of(state.data, nodes, now,
                                    policy.sources.alertmanager.stale_after)
    conf = policy.sources.nhc
    if not conf.enabled:
        return site
    for name in out_of_service():
        got = nhc.alert_of(nodes[name], conf, now, catalog)
        if got is not None:
            site.setdefault(name, []).append(got)
    # An NHC drain our cordon took over: its evidence stands until the action has run
    # (the reason is ours now; that is no cleared alert, L4).
    for rem in state.remediations:
        node = nodes.get(rem.node)
        if rem.detector != nhc.SOURCE or rem.phase not in PRE_ACT or node is None \
                or not (node.drained or node.down) or reasons.owner(node.reason) != "ours" \
                or rem.node in site:
            continue
        site[rem.node] = [nhc.carried(node, rem.fault, rem.severity,
                                      rem.alert_first_seen or rem.created, now)]
    return site
