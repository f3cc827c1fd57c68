"""SPEC S7: the components nodes share, read from real `scontrol show topology` output
(captured from the lab on Slurm 22.05 and 25.11, tests/data/real/SOURCES.md), from node
features, and from a topology.conf file; a malformed one is an error naming the line,
and the controller's reader goes on without a topology."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_heal.config import policy_from_dict
from slurm_heal.errors import SlurmError, TopologyError
from slurm_heal.topology import TopologyReader, from_features, parse_topology
from slurm_heal.types import ClusterView, NodeInfo

DATA = Path(__file__).resolve().parents[1] / "data"
REAL = DATA / "real" / "slurm"
T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)


def nodes(a: int, b: int) -> frozenset[str]:
    return frozenset(f"gpu{i:02d}" for i in range(a, b + 1))


@pytest.mark.parametrize("version", ["22.05", "25.11"])
def test_real_tree_topology_gives_the_leaf_switches_not_the_spine(version: str) -> None:
    topo = parse_topology((REAL / f"lab-scontrol-show-topology-tree-{version}.txt").read_text())
    assert [(c.id, c.nodes) for c in topo.components] == [
        ("switch:leaf1", nodes(1, 4)), ("switch:leaf2", nodes(5, 6))]
    assert [c.id for c in topo.of("gpu03")] == ["switch:leaf1"]
    assert topo.of("gpu99") == ()


def test_real_block_topology_of_slurm_25_11_gives_each_block() -> None:
    topo = parse_topology((REAL / "lab-scontrol-show-topology-block-25.11.txt").read_text())
    assert [(c.id, c.nodes) for c in topo.components] == [
        ("block:nvl1", nodes(1, 4)), ("block:nvl2", nodes(5, 8))]


def test_topology_conf_syntax_reads_the_same_with_comments_and_blocksizes() -> None:
    text = ("# site file\nswitchname=leaf1 nodes=gpu[01-02]  # lower case keys\n"
            "SwitchName=top Switches=leaf1\nBlockName=b1 Nodes=gpu[03-04]\nBlockSizes=2\n")
    topo = parse_topology(text, source="topology.conf")
    assert [c.id for c in topo.components] == ["switch:leaf1", "block:b1"]


@pytest.mark.parametrize(("name", "words"), [
    ("bad-token.conf", "line 3: 'Nodes' is not key=value"),
    ("no-children.conf", "line 2: switch 'leaf2' has neither Nodes= nor Switches="),
])
def test_a_malformed_topology_names_the_line(name: str, words: str) -> None:
    path = DATA / "topology" / name
    with pytest.raises(TopologyError, match=words.replace("[", r"\[")) as exc:
        parse_topology(path.read_text(), source=str(path))
    assert str(path) in str(exc.value)


def test_a_name_given_twice_and_a_bad_host_list_are_errors_naming_the_line() -> None:
    with pytest.raises(TopologyError, match="line 2: switch 'a' is named twice"):
        parse_topology("SwitchName=a Nodes=n1\nSwitchName=a Nodes=n2\n")
    with pytest.raises(TopologyError, match="line 1: .*not a Slurm host list"):
        parse_topology("SwitchName=a Nodes=gpu[1-x]\n")


def test_node_features_with_the_configured_prefixes_are_components() -> None:
    ns = [NodeInfo(name="gpu01", states=frozenset({"IDLE"}), features=("rack=r1", "leaf=l1")),
          NodeInfo(name="gpu02", states=frozenset({"IDLE"}), features=("rack=r1", "lab")),
          NodeInfo(name="gpu03", states=frozenset({"IDLE"}), features=("rack=",))]
    topo = from_features(ns, ("rack=", "leaf="))
    assert [(c.id, sorted(c.nodes)) for c in topo.components] == [
        ("leaf:l1", ["gpu01"]), ("rack:r1", ["gpu01", "gpu02"])]
    assert [c.id for c in topo.of("gpu01")] == ["leaf:l1", "rack:r1"]  # smallest first


class _Slurm:
    """A backend that answers `show_topology` the way the cli backend does."""

    def __init__(self, text: str = "", error: str = "") -> None:
        self.text, self.error, self.calls = text, error, 0

    def show_topology(self) -> str:
        self.calls += 1
        if self.error:
            raise SlurmError(self.error)
        return self.text


def test_the_reader_asks_slurm_once_per_refresh() -> None:
    slurm = _Slurm((REAL / "lab-scontrol-show-topology-tree-22.05.txt").read_text())
    reader = TopologyReader(slurm)
    conf = policy_from_dict({"topology": {"refresh": "10m"}}).topology
    view = reader.attach(ClusterView(nodes=()), conf, T0)
    assert view.topology is not None and len(view.topology.components) == 2
    reader.attach(ClusterView(nodes=()), conf, T0 + timedelta(minutes=9))
    assert slurm.calls == 1
    reader.attach(ClusterView(nodes=()), conf, T0 + timedelta(minutes=10))
    assert slurm.calls == 2


def test_no_topology_plugin_is_no_topology_not_an_error() -> None:
    # What 22.05 says without a TopologyPlugin (captured on the lab): exit 0, on stderr.
    reader = TopologyReader(_Slurm("", error="scontrol: error: No topology information "
                                          "available"))
    conf = policy_from_dict({}).topology
    topo = reader.read(conf, T0)  # auto: then the nodes' features (none here)
    assert topo is not None and not topo and topo.source == "features" and not topo.problem


def test_without_slurm_topology_the_reader_takes_node_features_once_per_refresh() -> None:
    ns = (NodeInfo(name="gpu01", states=frozenset({"IDLE"}), features=("rack=r1",)),)
    reader = TopologyReader(None)  # a backend without scontrol show topology
    conf = policy_from_dict({}).topology
    view = reader.attach(ClusterView(nodes=ns), conf, T0)
    assert view.topology is not None and [c.id for c in view.topology.components] == ["rack:r1"]
    moved = (NodeInfo(name="gpu01", states=frozenset({"IDLE"}), features=("rack=r2",)),)
    same = reader.attach(ClusterView(nodes=moved), conf, T0 + timedelta(minutes=5))
    assert same.topology is view.topology  # kept until topology.refresh
    later = reader.attach(ClusterView(nodes=moved), conf, T0 + timedelta(minutes=10))
    assert later.topology is not None and later.topology.components[0].id == "rack:r2"


def test_a_malformed_topology_leaves_the_cycle_without_one_and_says_why(tmp_path: Path) -> None:
    bad = tmp_path / "topology.conf"
    bad.write_text("SwitchName=leaf1 Nodes gpu01\n")
    conf = policy_from_dict({"topology": {"source": "file", "file": str(bad)}}).topology
    topo = TopologyReader(None).read(conf, T0)
    assert topo is not None and not topo and "line 1" in topo.problem
    assert str(bad) in topo.problem


def test_policy_check_warns_about_a_bad_topology_file_and_a_glob_that_relates_nothing(
        tmp_path: Path) -> None:
    from slurm_heal.configcheck import check_config

    bad = DATA / "topology" / "bad-token.conf"
    conf = tmp_path / "heal.toml"
    conf.write_text(f'[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\n'
                    f'[topology]\nfile = "{bad}"\n'
                    '[incidents.related]\nib = ["ib.link_down"]\npdu = ["power.pdu_lost"]\n')
    report = check_config(conf, build_provider=False)
    assert any(f"topology.file: {bad} line 3: 'Nodes' is not key=value" in w
               for w in report.warnings), report.warnings
    assert any("incidents.related.pdu: 'power.pdu_lost' matches no fault" in w
               for w in report.warnings), report.warnings
