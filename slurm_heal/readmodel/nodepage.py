"""The console's node list at scale (issue 25 item 8, SPEC O5, O6, D5): the nodes that
need attention first, filtered by state, pool, fault and host list (ClusterShell NodeSet
syntax, ``gpu[0001-0100,0200]``), one page at a time, with the links to the others.

Pure: it reads the classified lines `readmodel.overview.gather` made (one pass over the
cluster) and builds each shown node's full status (`nodes.node_status`) for the page only,
so a page of a 10,000-node cluster costs one classification and 50 rows.

Filters (query parameters, each optional, combined with AND):

* ``state``: a category (``healthy``, ``alerting``, ``cordoned``, ``remediating``,
  ``handed_to_person``, ``drained_by_others``), ``attention`` (every node that needs a
  look), or a Slurm state flag (``IDLE``, ``DRAIN``, ``DOWN``, ...);
* ``pool``: a Slurm partition the node is in;
* ``fault``: an alert's fault id, or its first dotted parts (``gpu.xid`` matches
  ``gpu.xid.79``);
* ``hosts``: a host list in NodeSet syntax;
* ``page`` (from 1) and ``per`` (rows per page, 1 to ``MAX_PER``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from slurm_heal import reasons
from slurm_heal.errors import ConfigError
from slurm_heal.readmodel.overview import CATEGORIES, NodeLine
from slurm_heal.types import NodeInfo

PER = 50
MAX_PER = 500
FILTERS = ("state", "pool", "fault", "hosts")

# Attention order (lower first). A node drained under a request or DOWN/drained for any
# reason is out of service and needs a look even when no category says so (O6).
RANK = {"handed_to_person": 0, "drained_by_others": 1, "remediating": 2, "cordoned": 3,
        "alerting": 4}
OUT_OF_SERVICE, ERRORING, STALE, HEALTHY = 1, 5, 7, 8
ATTENTION_BELOW = STALE  # ranks below this need attention; a stale check alone is listed after


@dataclass(frozen=True)
class NodeQuery:
    state: str = ""
    pool: str = ""
    fault: str = ""
    hosts: str = ""
    page: int = 1
    per: int = PER
    map: str = ""  # the fleet map's group shown node by node (issue 42, readmodel.fleetmap)

    def params(self, **changes: Any) -> str:
        """This query as a query string (``?state=alerting&page=2``), defaults left out."""
        q = replace(self, **changes)
        pairs = [(k, v) for k, v in asdict(q).items()
                 if v not in ("", None) and not (k == "page" and v == 1)
                 and not (k == "per" and v == PER)]
        return "?" + urlencode(pairs) if pairs else "?"


def parse_query(args: Mapping[str, str]) -> NodeQuery:
    """The query from a request's parameters; a clear error naming the bad one."""
    def number(name: str, default: int, high: int) -> int:
        raw = (args.get(name) or "").strip()
        if not raw:
            return default
        if not raw.isdigit() or not 1 <= int(raw) <= high:
            raise ConfigError(f"{name} must be a whole number from 1 to {high}, "
                              f"not {raw[:40]!r}")
        return int(raw)

    text = {k: (args.get(k) or "").strip()[:2000] for k in FILTERS}
    if text["hosts"]:
        from ClusterShell.NodeSet import NodeSet, NodeSetParseError

        try:
            NodeSet(text["hosts"])
        except (NodeSetParseError, ValueError) as exc:
            raise ConfigError(f"hosts {text['hosts'][:80]!r} is not a host list "
                              f"(NodeSet syntax, e.g. gpu[01-08,12]): {exc}") from None
    group = (args.get("map") or "").strip()
    if len(group) > 300 or any(not c.isprintable() for c in group):
        raise ConfigError(f"map must name a group of the fleet map (rack:r12), not "
                          f"{group[:40]!r}")
    return NodeQuery(page=number("page", 1, 1_000_000), per=number("per", PER, MAX_PER),
                     map=group, **text)


def _category(line: NodeLine, node: NodeInfo) -> str:
    """The line's category as the page ranks and filters it: a node drained by a request
    with no alert in Extra (``alerting`` with the alert ``request`` in `status`'s count,
    as `alerts` lists it) is out of service here, before any alerting node."""
    if (line.category == "alerting" and line.alerts == ("request",)
            and (node.drained or node.down) and reasons.is_request(node.reason or "")):
        return ""
    return line.category


def rank(line: NodeLine, node: NodeInfo) -> int:
    category = _category(line, node)
    if category in RANK:
        return RANK[category]
    if node.drained or node.down:
        return OUT_OF_SERVICE  # e.g. drained under a heal-request (Q1), no alert behind it
    if line.check_erroring:
        return ERRORING
    if line.check_stale:
        return STALE
    return HEALTHY


def _matches(q: NodeQuery, line: NodeLine, node: NodeInfo, r: int,
             hosts: frozenset[str] | None) -> bool:
    if hosts is not None and node.name not in hosts:
        return False
    if q.pool and q.pool not in node.partitions:
        return False
    if q.fault and not any(f == q.fault or f.startswith(q.fault.rstrip(".") + ".")
                           for f in line.alerts):
        return False
    if q.state:
        s = q.state.lower()
        if s == "attention":
            return r < ATTENTION_BELOW
        if s in CATEGORIES:
            return _category(line, node) == s
        return q.state.upper() in node.states
    return True


def selected(q: NodeQuery, infos: Sequence[NodeInfo], lines: Sequence[NodeLine]
             ) -> list[tuple[NodeInfo, NodeLine]]:
    """The nodes the query's filters keep (state, pool, fault, hosts; not the paging),
    in Slurm's order: what the fleet map draws (issue 42)."""
    by_name = {ln.name: ln for ln in lines}
    hosts: frozenset[str] | None = None
    if q.hosts:
        from ClusterShell.NodeSet import NodeSet

        hosts = frozenset(NodeSet(q.hosts))
    out = []
    for node in infos:
        line = by_name.get(node.name)
        if line is not None and _matches(q, line, node, rank(line, node), hosts):
            out.append((node, line))
    return out


def page(q: NodeQuery, infos: Sequence[NodeInfo], lines: Sequence[NodeLine],
         now: datetime) -> dict[str, Any]:
    """One page of nodes, attention first then by name, and what the page's controls need:
    the counts, the pools and categories to choose from, the links (``?...``)."""
    return page_and_selected(q, infos, lines, now)[0]


def page_and_selected(q: NodeQuery, infos: Sequence[NodeInfo], lines: Sequence[NodeLine],
                      now: datetime) -> tuple[dict[str, Any], list[tuple[NodeInfo, NodeLine]]]:
    """`page` and `selected` in one pass over the nodes (the overview with its fleet map
    asks both: issue 42)."""
    from slurm_heal.nodealerts import node_alerts
    from slurm_heal.readmodel.nodes import node_status

    by_name = {ln.name: ln for ln in lines}
    hosts: frozenset[str] | None = None
    if q.hosts:
        from ClusterShell.NodeSet import NodeSet

        hosts = frozenset(NodeSet(q.hosts))
    ranked = []
    attention = attention_total = 0
    pools: set[str] = set()
    for node in infos:
        line = by_name.get(node.name)
        if line is None:
            continue
        pools.update(node.partitions)
        r = rank(line, node)
        attention_total += r < ATTENTION_BELOW
        if _matches(q, line, node, r, hosts):
            ranked.append((r, node.name, node, line))
            attention += r < ATTENTION_BELOW
    kept = [(node, line) for _r, _n, node, line in ranked]  # in Slurm's order
    ranked.sort(key=lambda t: (t[0], t[1]))
    matched = len(ranked)
    pages = max(1, -(-matched // q.per))
    current = min(q.page, pages)
    rows = []
    for r, _name, node, line in ranked[(current - 1) * q.per: current * q.per]:
        row = node_status(node, now)
        # the Alerts column is what `alerts` lists for the node (also a drain no alert in
        # Extra explains), so it agrees with the overview's "N with alerts" (issue 36)
        row["alerts"] = [{"fault": a.fault, "severity": a.severity.value, "summary": a.summary,
                          "detector": a.detector} for a in node_alerts(node, now)]
        request = bool(node.reason and reasons.is_request(node.reason))
        needs = _category(line, node) or line.category
        if r == OUT_OF_SERVICE and _category(line, node) not in RANK:
            needs = "drained by a request" if request else "out of service"
        row.update(category=line.category, needs=needs, attention=r < ATTENTION_BELOW,
                   check_stale=line.check_stale, check_erroring=line.check_erroring,
                   remediation=line.remediation, phase=line.phase,
                   request=request)
        rows.append(row)
    return {
        "query": {k: v for k, v in asdict(q).items()},
        "filtered": any(getattr(q, k) for k in FILTERS),
        "total": len(by_name), "matched": matched, "attention": attention,
        "attention_total": attention_total,
        "page": current, "pages": pages, "per": q.per,
        "first": (current - 1) * q.per + 1 if rows else 0,
        "last": (current - 1) * q.per + len(rows),
        "nodes": rows,
        "pools": sorted(pools), "categories": list(CATEGORIES),
        "links": {
            "first": q.params(page=1) if current > 1 else None,
            "prev": q.params(page=current - 1) if current > 1 else None,
            "next": q.params(page=current + 1) if current < pages else None,
            "last": q.params(page=pages) if current < pages else None,
            "clear": NodeQuery(per=q.per).params(),
        },
    }, kept
