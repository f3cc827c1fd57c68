"""The components nodes share (SPEC S7): Slurm's switches and blocks, racks from node
features, or a file.

A *component* is something whose failure shows on every node under it: a leaf switch
(Slurm's ``topology/tree``), an NVLink block (``topology/block``, Slurm 23.11+), a rack
or a leaf named by a node feature (``rack=r12``). The incident rules (policy/incidents.py)
and the blast radius gate (policy/gates.py) read a `Topology`; they never read Slurm.

Sources, in the order ``topology.source = "auto"`` tries them:

- ``scontrol show topology``: one line per switch or block, e.g.
  ``SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=gpu[01-04]`` or
  ``BlockName=nvl1 BlockIndex=0 Nodes=gpu[01-04] BlockSize=4``;
- node features with a configured prefix (``rack=``, ``leaf=``, ``block=``);
- a file in topology.conf syntax (``SwitchName=leaf1 Nodes=gpu[01-04]``, ``BlockName=``).

Only leaf switches (those with nodes and no child switches) are components: an upper
switch's nodes are every node of the switches below it (Slurm prints them all), and
counting faults across a spine would join unrelated nodes into one incident.

`parse_topology` is pure (the tests feed it real ``scontrol`` output); a malformed line is
a `TopologyError` naming the line. `TopologyReader` is the controller's: it asks Slurm (or
reads the file) at most once per ``topology.refresh`` and never lets a bad topology stop a
cycle (the cycle goes on without one, and says why).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_heal.components import Component as Component  # their home (issue 33)
from slurm_heal.components import Topology as Topology
from slurm_heal.errors import HealError, TopologyError

if TYPE_CHECKING:
    from slurm_heal.config import TopologyConf
    from slurm_heal.types import ClusterView, NodeInfo

log = logging.getLogger("slurm_heal.topology")

# What Slurm says when no topology plugin is configured (22.05 and 25.11, on stderr).
NO_TOPOLOGY = ("no topology information available",
               "requested topology configuration is not available")
MAX_LINES = 100_000


def _expand(hostlist: str, where: str) -> frozenset[str]:
    from slurm_heal.config import node_names

    try:
        return node_names(hostlist)
    except ValueError as exc:
        raise TopologyError(f"{where}: {exc}") from None


def parse_topology(text: str, source: str = "scontrol show topology") -> Topology:
    """The components in ``scontrol show topology`` output or a topology.conf file.

    Keys are case-insensitive (as Slurm reads them); ``#`` starts a comment. Lines other
    than SwitchName= and BlockName= (``BlockSizes=``, ``TopologyParam=``) are skipped.
    TopologyError names the line for a token that is not ``key=value``, a switch or block
    with no nodes and no switches, a name given twice, or a malformed host list."""
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise TopologyError(f"{source}: {len(lines):,} lines, more than the {MAX_LINES:,} "
                            "a topology may have")
    comps: list[Component] = []
    seen: dict[str, int] = {}
    for no, raw in enumerate(lines, start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{source} line {no}"
        fields: dict[str, str] = {}
        for token in line.split():
            key, eq, value = token.partition("=")
            if not eq or not key:
                raise TopologyError(f"{where}: {token[:60]!r} is not key=value "
                                    f"(the line: {line[:120]!r})")
            fields[key.lower()] = value
        if "switchname" in fields:
            kind, name = "switch", fields["switchname"]
        elif "blockname" in fields:
            kind, name = "block", fields["blockname"]
        else:
            continue  # BlockSizes=, TopologyParam=, ...: nothing about components
        if not name:
            raise TopologyError(f"{where}: the {kind} has no name")
        nodes, switches = fields.get("nodes", ""), fields.get("switches", "")
        if not nodes and not switches:
            raise TopologyError(f"{where}: {kind} {name!r} has neither Nodes= nor Switches=")
        key = f"{kind}:{name}"
        if key in seen:
            raise TopologyError(f"{where}: {kind} {name!r} is named twice (first on line "
                                f"{seen[key]})")
        seen[key] = no
        if switches or not nodes:
            continue  # an upper switch: not a component (see the module's docstring)
        comps.append(Component(kind, name, _expand(nodes, where)))
    return Topology(source=source, components=tuple(comps))


def from_features(nodes: Iterable[NodeInfo], prefixes: Sequence[str]) -> Topology:
    """Components named by node features: ``rack=r12`` puts the node under rack r12.

    One pass, a slice and a set look-up per feature and prefix length (issue 20: a
    cycle's passes over 100,000 nodes must stay cheap)."""
    by_len: dict[int, dict[str, str]] = {}
    for p in prefixes:
        by_len.setdefault(len(p), {})[p] = p.rstrip("=:")
    lengths = sorted(by_len.items())
    members: dict[tuple[str, str], list[str]] = {}
    for n in nodes:
        for f in n.features:
            for k, kinds in lengths:
                kind = kinds.get(f[:k])
                if kind is not None and len(f) > k:
                    key = (kind, f[k:])
                    got = members.get(key)
                    if got is None:
                        members[key] = [n.name]
                    else:
                        got.append(n.name)
    return Topology(source="features", components=tuple(
        Component(kind, name, frozenset(ns)) for (kind, name), ns in sorted(members.items())))


def no_topology(text: str) -> bool:
    """Slurm's words for "no topology plugin is configured"."""
    low = text.lower()
    return any(w in low for w in NO_TOPOLOGY)


class TopologyReader:
    """The controller's topology: read from Slurm or the file at most once per
    ``topology.refresh``, attached to each cycle's view. A read that fails leaves the
    cycle without a topology and with the problem named (logged once per problem)."""

    def __init__(self, slurm: Any) -> None:
        self.slurm = slurm
        self._at: datetime | None = None
        self._conf: TopologyConf | None = None
        self._topology: Topology | None = None
        self._logged = ""

    def _read(self, conf: TopologyConf, nodes: Sequence[NodeInfo]) -> Topology | None:
        if conf.source in ("auto", "slurm"):
            show = getattr(self.slurm, "show_topology", None)  # the cli backend's
            if show is not None:
                try:
                    text = show()
                except HealError as exc:
                    if not no_topology(str(exc)):
                        raise TopologyError(f"scontrol show topology: {exc}") from None
                    text = ""
                if text.strip() and not no_topology(text):
                    return parse_topology(text)
            elif conf.source == "slurm":
                raise TopologyError("this Slurm backend cannot read Slurm's topology "
                                    "(only the cli backend runs scontrol show topology); "
                                    "set topology.source = \"features\" or \"file\"")
        if conf.source in ("auto", "file") and conf.file:
            path = Path(conf.file)
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise TopologyError(f"{path}: cannot read: {exc}") from None
            return parse_topology(text, source=str(path))
        if conf.source == "file":
            raise TopologyError("topology.source = \"file\" but topology.file is not set")
        # Node features, read here once per refresh (not in every cycle's decide(): at
        # 100,000 nodes the pass costs a good part of a second on a busy host).
        return from_features(nodes, conf.feature_prefixes) if conf.feature_prefixes else None

    def read(self, conf: TopologyConf, now: datetime,
             nodes: Sequence[NodeInfo] = ()) -> Topology | None:
        """The topology for a cycle at ``now`` (None: none at all); ``nodes`` are the
        snapshot's, for a topology from their features."""
        if conf.source == "none":
            return None
        if self._at is not None and conf == self._conf and now < self._at + conf.refresh:
            return self._topology
        self._at, self._conf = now, conf
        try:
            self._topology = self._read(conf, nodes)
            self._logged = ""
        except TopologyError as exc:
            if str(exc) != self._logged:
                log.error("topology not read, the cycle goes on without one: %s", exc)
                self._logged = str(exc)
            self._topology = Topology(source=conf.source, problem=str(exc))
        return self._topology

    def attach(self, view: ClusterView, conf: TopologyConf, now: datetime) -> ClusterView:
        """``view`` with the topology of this cycle (unchanged when there is none)."""
        topo = self.read(conf, now, view.nodes)
        return view if topo is None else replace(view, topology=topo)
