"""The fleet map on the console's overview (issue 42, SPEC O5, O6, S7, E7): every node a
cell on the topology slurm-heal already reads (leaf switches, NVLink blocks, racks; by
partition where a node is under none), coloured *and* marked by a glyph for what it
needs, an open incident outlining its domain.

Pure: it reads the lines `readmodel.overview.gather` classified, the topology
(`slurm_heal.components.Topology`, or None), the incidents shown, the remediations that
are held and the lemon machines' node names, and returns a `FleetMap` the template draws
as server-rendered SVG (geometry computed here, so the template only writes elements).

A node's map state (first match wins; `STATES` is also the order of the legend and of
the "worst" state a tile shows):

* ``handed``: handed to a person (E1), still out of service;
* ``others``: drained or DOWN for someone else's reason (D5), or a malformed request;
* ``held``: an open remediation a limit, an incident, a missing approval or missing
  evidence holds (O6, P2, S7);
* ``rem_act`` / ``rem_drain`` / ``rem_start`` / ``rem_return``: an open remediation in
  its action, cordoned/draining/waiting for jobs, proposed/approved, or returning;
* ``lemon``: the machine under it is a lemon (E7: its automatic work is held);
* ``cordoned``: drained with our marker, no open remediation yet;
* ``alerting``: in service with alerts (or drained by a request no alert explains);
* ``healthy``: the rest.

At scale (more than `MAX_CELLS` nodes on the map), each group is one *tile* with its
counts by state; ``?map=<group id>`` expands that group node by node (a link on the
tile). A group larger than `CHUNK` nodes (a partition of 5,000) is cut into runs of
`CHUNK` by name, so an expanded group never has more than `CHUNK` cells. A 10,000-node
overview stays under 200 KB (tests/browser/test_console_map.py measures it).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

from slurm_heal.components import Topology
from slurm_heal.readmodel.incidents import IncidentView
from slurm_heal.readmodel.overview import NodeLine

MAX_CELLS = 600  # more nodes than this on the map: one tile per group, expandable
CHUNK = 256  # a group of more nodes is cut into runs of this many (by name)
COLS = 40  # cells per row of an expanded group
CELL, GAP = 18, 3  # a cell's side and the gap between cells (px); a glyph is 14 px
TILE_W, TILE_H, TILE_GAP, TILE_COLS = 62, 34, 4, 15

STATES = ("handed", "others", "held", "rem_act", "rem_drain", "rem_start", "rem_return",
          "lemon", "cordoned", "alerting", "healthy")
LABELS = {
    "handed": "handed to a person",
    "others": "drained by someone else",
    "held": "remediation held",
    "rem_act": "remediating: acting",
    "rem_drain": "remediating: cordoned or draining",
    "rem_start": "remediating: proposed or approved",
    "rem_return": "remediating: returning",
    "lemon": "lemon machine (E7)",
    "cordoned": "cordoned by the node check",
    "alerting": "alerting",
    "healthy": "healthy",
}
PHASE_STATE = {"proposed": "rem_start", "approved": "rem_start", "cordoned": "rem_drain",
               "waiting": "rem_drain", "draining": "rem_drain", "acting": "rem_act",
               "returning": "rem_return"}
KIND_ORDER = {"switch": 0, "block": 1, "rack": 2, "leaf": 3}
POOL = "pool"  # the kind of a group made of a partition (no component names the node)


@dataclass(frozen=True)
class Cell:
    name: str
    state: str
    title: str  # the node's one-line state (the cell's <title>: hover and focus)
    x: int
    y: int
    incident: str = ""  # the open incident whose domain the node is in


@dataclass(frozen=True)
class Tile:
    """A group drawn as one tile: its counts by state (at scale)."""

    id: str
    label: str
    short: str  # the text inside the tile
    size: int
    worst: str
    counts: tuple[tuple[str, int], ...]  # non-zero, in `STATES` order
    title: str
    href: str  # expands the group
    x: int
    y: int
    bars: tuple[tuple[str, int, int], ...] = ()  # (state, x, width) of the bar under it
    incident: str = ""


@dataclass(frozen=True)
class Group:
    """A component (or a partition, or a run of either) drawn node by node."""

    id: str
    kind: str
    label: str
    size: int
    counts: tuple[tuple[str, int], ...]
    cells: tuple[Cell, ...]
    width: int
    height: int
    incident: str = ""  # an open incident on this very component: its outline
    collapse: str = ""  # the link back to the tiles (when expanded from them)


@dataclass(frozen=True)
class TileSection:
    kind: str
    tiles: tuple[Tile, ...]
    width: int
    height: int


@dataclass(frozen=True)
class FleetMap:
    total: int  # nodes on the map (those the filters keep)
    source: str  # where the grouping came from, in words
    aggregated: bool
    counts: tuple[tuple[str, int], ...]  # every state, in `STATES` order
    groups: tuple[Group, ...] = ()  # drawn node by node
    sections: tuple[TileSection, ...] = ()  # tiles, one section per kind
    expanded: str = ""  # the group ?map= asked for
    problem: str = ""  # ?map= names no group, the topology could not be read, ...
    incidents: tuple[str, ...] = ()  # open incidents shown, "i-... on switch leaf1"
    labels: Mapping[str, str] = field(default_factory=lambda: dict(LABELS))


def map_state(line: NodeLine, held: Collection[str], lemons: Collection[str]) -> str:
    """A node's state on the map (the module's docstring says the order)."""
    if line.category == "handed_to_person":
        return "handed"
    if line.category == "drained_by_others":
        return "others"
    if line.remediation:
        if line.remediation in held:
            return "held"
        return PHASE_STATE.get(line.phase or "", "rem_start")
    if line.name in lemons:
        return "lemon"
    if line.category == "cordoned":
        return "cordoned"
    if line.category == "alerting":
        return "alerting"
    return "healthy"


def one_line(line: NodeLine, state: str, lemon: bool, incident: str) -> str:
    """The node's state in one line (a cell's title)."""
    out = f"{line.name}: {LABELS[state]}"
    if line.remediation:
        out += f" ({line.phase}, {line.remediation})"
    if line.alerts:
        out += f"; alerts: {', '.join(line.alerts[:4])}" + (" ..." if len(line.alerts) > 4
                                                             else "")
    if lemon and state != "lemon":
        out += "; lemon machine (E7)"
    if line.check_erroring:
        out += "; node check erroring"
    elif line.check_stale:
        out += "; node check stale"
    if incident:
        out += f"; in the domain of incident {incident}"
    if line.states:
        out += f"; Slurm {'+'.join(line.states)}"
    return out


def _natural(name: str) -> tuple[tuple[int, int | str], ...]:
    """``r2`` before ``r10``."""
    import re

    return tuple((0, int(p)) if p.isdigit() else (1, p)
                 for p in re.split(r"(\d+)", name) if p)


def _counts(states: Iterable[str]) -> tuple[tuple[str, int], ...]:
    got: dict[str, int] = {}
    for s in states:
        got[s] = got.get(s, 0) + 1
    return tuple((s, got[s]) for s in STATES if got.get(s))


def _members(lines: Sequence[NodeLine], pools: Mapping[str, str], topology: Topology | None
             ) -> dict[tuple[str, str], list[str]]:
    """Each node under its smallest component (the most specific domain), else its
    partition; names in order."""
    groups: dict[tuple[str, str], list[str]] = {}
    for ln in lines:
        comps = topology.of(ln.name) if topology is not None else ()
        key = (comps[0].kind, comps[0].name) if comps else (POOL, pools.get(ln.name) or "none")
        groups.setdefault(key, []).append(ln.name)
    return groups


def _chunks(kind: str, name: str, names: list[str]) -> list[tuple[str, str, list[str]]]:
    """(id, label, names) of a group (names in Slurm's order, by name), cut into runs of
    `CHUNK` when larger."""
    base = f"{kind}:{name}"
    label = f"{'partition' if kind == POOL else kind} {name}"
    if len(names) <= CHUNK:
        return [(base, label, names)]
    out = []
    for k in range(0, len(names), CHUNK):
        run = names[k:k + CHUNK]
        out.append((f"{base}#{k // CHUNK + 1}", f"{label} ({run[0]}–{run[-1]})", run))
    return out


def _href(params: str, group: str) -> str:
    """The overview's link with ``map`` set (``params``: the query without it, "?..." )."""
    sep = "" if params in ("", "?") else "&"
    return f"/{params or '?'}{sep}map={quote(group, safe='')}#fleet-map"


def build(lines: Sequence[NodeLine], pools: Mapping[str, str], topology: Topology | None,
          *, incidents: Sequence[IncidentView] = (), held: Collection[str] = (),
          lemons: Collection[str] = (), expand: str = "", params: str = "?",
          max_cells: int = MAX_CELLS) -> FleetMap:
    """The map of ``lines`` (the nodes the filters keep). ``pools``: each node's first
    partition; ``held``: the open remediations held (ids); ``lemons``: node names on a
    lemon machine; ``expand``: the group ``?map=`` names; ``params``: the overview's
    query string without ``map`` (the links keep the filters)."""
    by_name = {ln.name: ln for ln in lines}
    state = {ln.name: map_state(ln, held, lemons) for ln in lines}
    # S7: an open incident outlines its domain: every node of its component (as the
    # topology says; the incident's own nodes when the topology does not know it)
    in_incident: dict[str, str] = {}
    open_comps: dict[str, str] = {}
    shown = []
    for inc in incidents:
        if inc.state != "open":
            continue
        comp = topology.get(inc.component) if topology is not None else None
        for n in (comp.nodes if comp is not None else inc.nodes):
            in_incident.setdefault(n, inc.id)
        open_comps[inc.component] = inc.id
        shown.append(f"{inc.id} on {inc.kind} {inc.name}")
    members = _members(lines, pools, topology)
    ordered = sorted(members.items(), key=lambda kv: (
        1 if kv[0][0] == POOL else 0, KIND_ORDER.get(kv[0][0], 9), kv[0][0],
        _natural(kv[0][1])))
    chunks = [(kind, c) for (kind, name), names in ordered
              for c in _chunks(kind, name, names)]
    aggregated = len(lines) > max_cells
    problem = ""
    if expand and not any(c[0] == expand for _k, c in chunks):
        problem = (f"map={expand[:80]!r} names no group on this map (a component such as "
                   "rack:r12, or a run of one, rack:r12#2); the tiles are shown")
    source = ("partitions (no topology)" if topology is None or not topology
              else f"{'node features' if topology.source == 'features' else topology.source}"
              ", partitions where a node is under no component")
    groups: list[Group] = []
    tiles: dict[str, list[Tile]] = {}
    for kind, (gid, label, names) in chunks:
        counts = _counts(state[n] for n in names)
        on_comp = open_comps.get(gid.split("#", 1)[0], "")
        if not aggregated or gid == expand:
            cells = tuple(
                Cell(name=n, state=state[n], x=(i % COLS) * (CELL + GAP),
                     y=(i // COLS) * (CELL + GAP), incident=in_incident.get(n, ""),
                     title=one_line(by_name[n], state[n], n in lemons,
                                    in_incident.get(n, "")))
                for i, n in enumerate(names))
            rows = -(-len(names) // COLS)
            groups.append(Group(
                id=gid, kind=kind, label=label, size=len(names), counts=counts, cells=cells,
                width=min(len(names), COLS) * (CELL + GAP) + 4,
                height=rows * (CELL + GAP) + 4, incident=on_comp,
                collapse=f"/{params}#fleet-map" if aggregated else ""))
            if not aggregated:
                continue
        worst = counts[0][0] if counts else "healthy"
        inc_any = on_comp or next((in_incident[n] for n in names if n in in_incident), "")
        said = ", ".join(f"{k} {LABELS[s]}" for s, k in counts)
        span = f"{names[0]}–{names[-1]}" if len(names) > 1 else names[0]
        title = (f"{label}: {len(names)} node{'s' if len(names) != 1 else ''} "
                 f"({span}): {said}" + (f"; INCIDENT {inc_any}" if inc_any else "")
                 + "; open it node by node")
        bars, x = [], 0
        for s, k in counts:
            if s == "healthy":
                continue
            w = max(3, round(TILE_W * k / len(names)))
            bars.append((s, x, min(w, TILE_W - x)))
            x += w
            if x >= TILE_W:
                break
        section = tiles.setdefault(kind, [])
        i = len(section)
        name = gid.split(":", 1)[1]
        section.append(Tile(
            id=gid, label=label, short=name if len(name) <= 10 else name[:9] + "…",
            size=len(names), worst=worst, counts=counts, title=title,
            href=_href(params, gid), x=(i % TILE_COLS) * (TILE_W + TILE_GAP),
            y=(i // TILE_COLS) * (TILE_H + TILE_GAP), bars=tuple(bars), incident=inc_any))
    sections = tuple(
        TileSection(kind=kind, tiles=tuple(ts),
                    width=min(len(ts), TILE_COLS) * (TILE_W + TILE_GAP) + 4,
                    height=-(-len(ts) // TILE_COLS) * (TILE_H + TILE_GAP) + 4)
        for kind, ts in tiles.items())
    every = dict(_counts(state.values()))
    return FleetMap(total=len(lines), source=source, aggregated=aggregated,
                    counts=tuple((s, every.get(s, 0)) for s in STATES),
                    groups=tuple(groups), sections=sections,
                    expanded=expand if any(g.id == expand for g in groups) else "",
                    problem=problem, incidents=tuple(shown))
