"""Cause domains (SPEC S7, issue 37): which shared components can cause which fault
classes, and where a lone fault waits for others.

A domain kind (``incidents.domains``: ``leaf``, ``nvlink``, ``rack``, ``cohort``) names
the groups of ``incidents.related`` it can cause and the component kinds that are such a
domain: Slurm's tree switches and feature leaves are network leaves; ``topology/block``
blocks and the GPUs' ClusterUUID + CliqueId (published by the node check, D12) are NVLink
domains; ``rack=`` features are racks; the driver version, VBIOS and image the node check
publishes are a cohort. The components come from the view's topology (Slurm's or a
file's), else the nodes' features, plus what the node check published.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from slurm_heal.components import Shared, WithPublished
from slurm_heal.models import Remediation
from slurm_heal.topology import Component, from_features

if TYPE_CHECKING:
    from slurm_heal.config import FaultGroup
    from slurm_heal.config import Incidents as IncidentsConf
    from slurm_heal.models import Incident
    from slurm_heal.policy.working import WorkingSet


def topology_of(ws: WorkingSet) -> Shared | None:
    """The components this call decides with: the view's topology (Slurm's or a file's),
    else the nodes' features (topology.source auto or features), with the domains the
    node check publishes; None when there is none."""
    if ws.topology_read:
        return ws.topology
    ws.topology_read = True
    conf = ws.policy.topology
    topo = ws.view.topology
    if conf.source == "none":
        topo = None
    elif (topo is None or topo.problem) and conf.source in ("auto", "features") \
            and conf.feature_prefixes:
        found = from_features(ws.view.nodes, conf.feature_prefixes)
        if found:
            topo = found
    members = _published(ws)
    ws.topology = WithPublished(topo, members, lambda n: published_keys(
        ws.check_of(n).domains)) if members else topo
    return ws.topology


def published_keys(said: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The domains a node's published ``domains`` put it in (issue 37, D12): its NVLink
    domain (ClusterUUID/CliqueId) and its cohort (driver version, VBIOS, image)."""
    if not said:
        return ()
    d = dict(said)
    out = [("nvlink", d["nvlink"])] if "nvlink" in d else []
    cohort = ",".join(f"{k}={d[k]}" for k in ("driver", "vbios", "image") if k in d)
    return (*out, ("cohort", cohort)) if cohort else tuple(out)


def _published(ws: WorkingSet) -> dict[tuple[str, str], list[str]]:
    """Each published domain's nodes: one pass, grouped by what each node said (a few
    distinct values for 100,000 nodes), the keys made once per distinct value."""
    said: dict[str, list[str]] = {}  # by CheckData.domains_key: a string, its hash kept
    first: dict[str, tuple[tuple[str, str], ...]] = {}
    get = said.get
    for name, data in ws.check_data.items():
        k = data.domains_key
        if k:
            got = get(k)
            if got is None:
                said[k] = [name]
                first[k] = data.domains
            else:
                got.append(name)
    if not said:
        return {}
    # (The check data is the snapshot's nodes': WorkingSet builds it from them.)
    members: dict[tuple[str, str], list[str]] = {}
    for k, names in said.items():
        for key in published_keys(first[k]):
            got = members.get(key)
            if got is None:
                members[key] = list(names)
            else:
                got.extend(names)
    return members  # each made a frozenset once asked for (`WithPublished`)


def components(ws: WorkingSet, node: str) -> tuple[Component, ...]:
    """The physical components ``node`` is under, smallest first: those the blast radius
    counts per (a cohort is no place, issue 37)."""
    topo = topology_of(ws)
    if not topo:
        return ()
    pol = ws.policy.incidents
    out = []
    for c in topo.of(node):
        dom = pol.domains.get(pol.domain_of_component(c.kind) or "")
        if dom is None or dom.blast_radius:
            out.append(c)
    return tuple(out)


def domain_words(ws: WorkingSet, c: Component) -> str:
    """What a component is as a cause domain, in words."""
    return DOMAIN_WORDS.get(ws.policy.incidents.domain_of_component(c.kind) or "", c.kind)


def a_(what: str) -> str:
    """``what`` with its article ("an NVLink domain", "a rack")."""
    return ("an " if what[:1].lower() in "aeiou" or what.startswith("NVLink") else "a ") + what


DOMAIN_WORDS = {"leaf": "network leaf switch", "nvlink": "NVLink domain", "rack": "rack",
                "cohort": "driver/firmware/image cohort"}


def qualifies(ws: WorkingSet, nodes: int, size: int) -> bool:
    """Whether ``nodes`` of a domain of ``size`` nodes are enough for an incident
    (incidents.min_nodes, or min_percent % of them, never fewer than two)."""
    pol = ws.policy.incidents
    return nodes >= 2 and (nodes >= pol.min_nodes or nodes * 100 >= pol.min_percent * size)


def causes(ws: WorkingSet, group: FaultGroup) -> tuple[str | None, frozenset[str] | None]:
    """The component kinds that can cause a group's faults (issue 37): its domains'; a
    group no domain names (a site's own) is counted over every component as before
    (None), except the cohorts."""
    pol = ws.policy.incidents
    doms = pol.domains_of(group)
    if not doms:
        return None, None
    return doms[0], frozenset(k for d in doms for k in pol.domains[d].components)


def settle_until(ws: WorkingSet, rem: Remediation) -> tuple[datetime, Component] | None:
    """When a related fault's remediation may start (``incidents.settle`` after its
    alert was first seen), and the domain it waits on; None when it need not wait.

    Issue 37: only a fault a domain of a settling kind can cause waits, and only where
    the node is under such a domain that could still form an incident (as many nodes as
    incidents.min_nodes, or min_percent % of them, never fewer than two): a GPU-local
    fault, or a node alone under its switch, never waits."""
    pol = ws.policy.incidents
    if not pol.enabled or rem.origin != "alert":
        return None
    fault = rem.data.evidence_fault or rem.fault
    kinds: set[str] = set()
    anywhere = False
    for group in pol.groups_of(fault):
        doms = pol.domains_of(group)
        if not doms:
            anywhere = True
        kinds.update(k for d in doms if pol.domains[d].settle
                     for k in pol.domains[d].components)
    if not kinds and not anywhere:
        return None
    topo = topology_of(ws)
    comps = [c for c in (topo.of(rem.node) if topo else ())
             if (c.kind in kinds or (anywhere and pol.domain_of_component(c.kind) != "cohort"))
             and qualifies(ws, len(c.nodes), len(c.nodes))]
    if not comps:
        return None
    seen = [a.first_seen for a in ws.active(rem.node, fault)]
    if not seen:
        return None
    until = min(seen) + pol.settle
    return (until, comps[0]) if ws.now < until else None


def group_words(pol: IncidentsConf, inc: Incident, key: str | None = None) -> str:
    """How an incident's sentences name one of its groups (``key``, default its first:
    `FaultGroup.words`): the group of the faults it carries whose stored key is that one,
    compared whole (issue 33: a stored key is never split back); the key itself if the
    policy no longer has that group."""
    key = inc.group if key is None else key
    for a in inc.alerts:
        for group in pol.groups_of(a.fault):
            if group.key == key:
                return group.words
    return key


def faults_words(pol: IncidentsConf, inc: Incident) -> str:
    """How an incident's sentences name all its groups (`group_words`)."""
    return ", ".join(group_words(pol, inc, g) for g in inc.all_groups)
