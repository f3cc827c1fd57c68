"""The fleet map's model (issue 42, SPEC O5, O6, S7, E7): `readmodel.fleetmap.build` on
hand-made node lines and a hand-made topology: each node's state (first match wins), the
grouping by the smallest component (by partition where none), the tiles at scale with
their counts and worst state, a group opened node by node, a large group cut in runs, an
open incident outlining its domain, and the links keeping the filters. The page itself:
tests/unit/test_console_map_pages.py; in a browser: tests/browser/test_console_map.py.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from slurm_heal.components import Component, Topology
from slurm_heal.readmodel import fleetmap
from slurm_heal.readmodel.fleetmap import build, map_state
from slurm_heal.readmodel.incidents import IncidentView
from slurm_heal.readmodel.overview import NodeLine

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=timezone.utc)


def _line(name: str, category: str = "healthy", **kw: Any) -> NodeLine:
    return NodeLine(name=name, category=category, states=kw.pop("states", ("IDLE",)), **kw)


def _incident(component: str, nodes: tuple[str, ...], state: str = "open") -> IncidentView:
    kind, name = component.split(":", 1)
    return IncidentView(id=f"i-{name}", component=component, kind=kind, name=name,
                        faults=("gpu.xid.79",), nodes=nodes, hosts="", size=4, state=state,
                        opened=NOW, why="Xid 79 on 3 nodes", close="slurm-heal incident close")


@pytest.mark.parametrize(("line", "held", "lemons", "want"), [
    (_line("a"), (), (), "healthy"),
    (_line("a", "alerting", alerts=("gpu.xid.79",)), (), (), "alerting"),
    (_line("a", "cordoned"), (), (), "cordoned"),
    (_line("a", "remediating", remediation="r1", phase="proposed"), (), (), "rem_start"),
    (_line("a", "remediating", remediation="r1", phase="approved"), (), (), "rem_start"),
    (_line("a", "remediating", remediation="r1", phase="draining"), (), (), "rem_drain"),
    (_line("a", "remediating", remediation="r1", phase="acting"), (), (), "rem_act"),
    (_line("a", "remediating", remediation="r1", phase="returning"), (), (), "rem_return"),
    # a held remediation is held, whatever its phase (O6)
    (_line("a", "remediating", remediation="r1", phase="approved"), {"r1"}, (), "held"),
    # a lemon's node with nothing open: lemon; with an open remediation: that first
    (_line("a", "alerting", alerts=("x",)), (), {"a"}, "lemon"),
    (_line("a", "remediating", remediation="r1", phase="acting"), (), {"a"}, "rem_act"),
    # someone else's drain and a hand-over come before everything
    (_line("a", "drained_by_others", remediation="r1", phase="acting"), (), {"a"}, "others"),
    (_line("a", "handed_to_person"), (), {"a"}, "handed"),
])
def test_a_nodes_state_on_the_map_first_match_wins(
        line: NodeLine, held: set[str], lemons: set[str], want: str) -> None:
    assert map_state(line, held, lemons) == want


def _topology() -> Topology:
    return Topology(source="scontrol show topology", components=(
        Component("switch", "leaf1", frozenset({"g01", "g02", "g03", "g04"})),
        # a block inside the switch: its nodes are drawn under the block (the smallest)
        Component("block", "nvl1", frozenset({"g03", "g04"})),
        Component("rack", "r10", frozenset({"c01", "c02"})),
        Component("rack", "r9", frozenset({"c03"})),
    ))


LINES = [_line("g01"), _line("g02", "alerting", alerts=("gpu.xid.79",)), _line("g03"),
         _line("g04", "remediating", remediation="r-4", phase="acting"), _line("c01"),
         _line("c02", "drained_by_others"), _line("c03"), _line("x01"), _line("x02")]
POOLS = {"g01": "gpu", "g02": "gpu", "g03": "gpu", "g04": "gpu", "c01": "cpu", "c02": "cpu",
         "c03": "cpu", "x01": "cpu", "x02": "debug"}


def test_nodes_are_grouped_by_their_smallest_component_then_by_partition() -> None:
    m = build(LINES, POOLS, _topology())
    assert not m.aggregated and not m.sections
    assert [(g.id, [c.name for c in g.cells]) for g in m.groups] == [
        ("switch:leaf1", ["g01", "g02"]), ("block:nvl1", ["g03", "g04"]),
        ("rack:r9", ["c03"]), ("rack:r10", ["c01", "c02"]),  # r9 before r10
        ("pool:cpu", ["x01"]), ("pool:debug", ["x02"])]
    assert dict(m.counts) == {**{s: 0 for s in fleetmap.STATES}, "healthy": 6,
                              "alerting": 1, "rem_act": 1, "others": 1}
    assert m.total == 9
    cell = {c.name: c for g in m.groups for c in g.cells}
    assert cell["g04"].state == "rem_act"
    assert cell["g04"].title.startswith("g04: remediating: acting (acting, r-4)")
    assert cell["g02"].title.startswith("g02: alerting; alerts: gpu.xid.79")
    # cells on a grid, one row of COLS
    assert (cell["g01"].x, cell["g02"].x) == (0, fleetmap.CELL + fleetmap.GAP)


def test_without_a_topology_every_node_is_under_its_partition() -> None:
    m = build(LINES, POOLS, None)
    assert [g.id for g in m.groups] == ["pool:cpu", "pool:debug", "pool:gpu"]
    assert m.source == "partitions (no topology)"


def test_above_the_threshold_each_group_is_a_tile_with_its_counts_and_worst_state() -> None:
    m = build(LINES, POOLS, _topology(), max_cells=4, params="?state=attention")
    assert m.aggregated and not m.groups
    tiles = {t.id: t for s in m.sections for t in s.tiles}
    assert [s.kind for s in m.sections] == ["switch", "block", "rack", "pool"]
    assert tiles["switch:leaf1"].counts == (("alerting", 1), ("healthy", 1))
    assert tiles["switch:leaf1"].worst == "alerting"
    assert tiles["block:nvl1"].worst == "rem_act"
    assert tiles["rack:r10"].worst == "others"
    assert tiles["pool:cpu"].worst == "healthy" and tiles["pool:cpu"].bars == ()
    assert "2 nodes (g01–g02): 1 alerting, 1 healthy" in tiles["switch:leaf1"].title
    # the tile's link opens its group and keeps the filters
    assert tiles["block:nvl1"].href == "/?state=attention&map=block%3Anvl1#fleet-map"
    assert build(LINES, POOLS, None, max_cells=4).sections[0].tiles[0].href == \
        "/?map=pool%3Acpu#fleet-map"
    # the bar under a tile: one segment per state other than healthy, by its share
    assert tiles["rack:r10"].bars == (("others", 0, 31),)


def test_a_tile_opens_its_group_node_by_node_and_a_bad_group_is_said() -> None:
    m = build(LINES, POOLS, _topology(), max_cells=4, expand="rack:r10", params="?")
    assert m.expanded == "rack:r10" and [g.id for g in m.groups] == ["rack:r10"]
    assert [c.name for c in m.groups[0].cells] == ["c01", "c02"]
    assert m.groups[0].collapse == "/?#fleet-map"
    assert sum(len(s.tiles) for s in m.sections) == 6  # the tiles stay, the group too
    bad = build(LINES, POOLS, _topology(), max_cells=4, expand="rack:nope")
    assert bad.expanded == "" and not bad.groups
    assert "map='rack:nope' names no group" in bad.problem


def test_a_group_larger_than_a_run_is_cut_into_runs_by_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleetmap, "CHUNK", 3)
    lines = [_line(f"n{i:02d}") for i in range(1, 8)]
    m = build(lines, {ln.name: "cpu" for ln in lines}, None)
    assert [(g.id, g.label, g.size) for g in m.groups] == [
        ("pool:cpu#1", "partition cpu (n01–n03)", 3),
        ("pool:cpu#2", "partition cpu (n04–n06)", 3),
        ("pool:cpu#3", "partition cpu (n07–n07)", 1)]
    m = build(lines, {ln.name: "cpu" for ln in lines}, None, max_cells=2, expand="pool:cpu#2")
    assert [c.name for c in m.groups[0].cells] == ["n04", "n05", "n06"]


def test_an_open_incident_outlines_its_domain_an_ended_one_does_not() -> None:
    topo = _topology()
    # on the switch: its block's nodes are in its domain too
    m = build(LINES, POOLS, topo, incidents=(
        _incident("switch:leaf1", ("g01", "g02")),
        _incident("rack:r10", ("c01",), state="resolved")))
    groups = {g.id: g for g in m.groups}
    assert groups["switch:leaf1"].incident == "i-leaf1"  # the component itself: a frame
    assert groups["block:nvl1"].incident == ""
    cells = {c.name: c for g in m.groups for c in g.cells}
    assert {n for n, c in cells.items() if c.incident} == {"g01", "g02", "g03", "g04"}
    assert "in the domain of incident i-leaf1" in cells["g03"].title
    assert m.incidents == ("i-leaf1 on switch leaf1",)
    tiles = {t.id: t for s in build(LINES, POOLS, topo, max_cells=1, incidents=(
        _incident("switch:leaf1", ("g01",)),)).sections for t in s.tiles}
    assert tiles["switch:leaf1"].incident == tiles["block:nvl1"].incident == "i-leaf1"
    assert tiles["rack:r10"].incident == ""
    assert "INCIDENT i-leaf1" in tiles["block:nvl1"].title
    # an incident on a component the topology does not know: its own nodes
    m = build(LINES, POOLS, None, incidents=(_incident("rack:r77", ("x01",)),))
    assert [c.name for g in m.groups for c in g.cells if c.incident] == ["x01"]


def test_a_lemons_node_says_so_whatever_its_state() -> None:
    m = build([_line("g01", "alerting", alerts=("gpu.xid.79",)),
               _line("g02", "remediating", remediation="r-2", phase="acting")],
              {}, None, lemons={"g01", "g02"})
    cells = {c.name: c for c in m.groups[0].cells}
    assert cells["g01"].state == "lemon"
    assert cells["g02"].state == "rem_act" and "lemon machine (E7)" in cells["g02"].title
