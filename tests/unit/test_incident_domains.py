"""SPEC S7 as amended, O6 (issue 37): a fault class is counted only over the kind of
domain that can cause it (network leaf, NVLink domain, rack, driver cohort); a lone fault
waits only where such a domain could still form an incident; incidents have bounds.
Pure decide() calls over a ClusterView, applied through the real JSON store."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from slurm_heal.config import FaultGroup, policy_from_dict
from slurm_heal.errors import ConfigError
from slurm_heal.incidentstore import INCIDENTS_KEY
from slurm_heal.models import Phase, Plan
from slurm_heal.topology import parse_topology
from tests.unit.test_incidents import NAMES, T0, World, ib, kinds, pol

# gpu01-04 under leaf1, gpu05 alone under leaf2 (the rest of the nodes under no switch).
LONE = parse_topology("SwitchName=leaf1 Nodes=gpu[01-04]\nSwitchName=leaf2 Nodes=gpu05\n")
# Two NVL domains as the node check publishes them: ClusterUUID/CliqueId.
NVL_A = "c3e2a7f0-1b6d-4c38-9a11-5d0e4f7b2a61/32766"
NVL_B = "c3e2a7f0-1b6d-4c38-9a11-5d0e4f7b2a61/32767"
PUBLISHED = {n: {"nvlink": NVL_A if i < 4 else NVL_B, "driver": "570.124.06"}
             for i, n in enumerate(NAMES)}


def test_two_xid_119_under_one_leaf_are_two_remediations_no_incident_no_wait(
        tmp_path: Path) -> None:
    """A leaf switch causes no GSP timeout: no incident on the leaf, and no settle wait
    (a GPU-local fault is never delayed)."""
    w = World(tmp_path, published={n: {"driver": "570.124.06"} for n in NAMES})
    w.alerts = {n: [ib(n, fault="gpu.xid.119")] for n in ("gpu01", "gpu02")}
    plan = w.cycle(T0)
    assert ("cordon", "gpu01") in kinds(plan)  # at once: no settle wait
    assert not any("incidents.settle" in r.why for r in plan.records)
    assert w.incidents() == []


def test_a_lone_node_under_its_switch_never_waits_the_settle_time(tmp_path: Path) -> None:
    """leaf2 has one node: no incident can form there, so its IB fault goes on at once;
    a node of leaf1 (4 nodes) waits."""
    w = World(tmp_path, topology=LONE)
    w.alerts = {"gpu05": [ib("gpu05")]}
    plan = w.cycle(T0)
    assert kinds(plan) == [("cordon", "gpu05")]
    w2 = World(tmp_path / "b", topology=LONE)
    w2.alerts = {"gpu01": [ib("gpu01")]}
    held = w2.cycle(T0)
    assert kinds(held) == [] and held.next_wake == T0 + timedelta(minutes=5)
    why = next(r.why for r in held.records if r.rule == "S7")
    assert "a network leaf switch can cause" in why and "switch leaf1 (4 nodes)" in why


def test_nvlink_fabric_loss_is_one_incident_on_the_published_nvlink_domain(
        tmp_path: Path) -> None:
    """GPUs of one NVLink domain share ClusterUUID + CliqueId (published by the node check):
    fabric faults on its nodes are one incident on the domain, not on a leaf."""
    w = World(tmp_path, published=PUBLISHED)
    for n in ("gpu01", "gpu02", "gpu03", "gpu04"):
        w.alerts[n] = [ib(n, fault="gpu.fabric.failed")]
    plan = w.cycle(T0)
    [inc] = w.incidents()
    assert (inc.component, inc.kind, inc.domain, inc.size) == (
        f"nvlink:{NVL_A}", "nvlink", "nvlink", 4)
    assert "an NVLink domain can cause nvlink" in inc.why
    [note] = [e for e in plan.effects if e.kind == "notify"]
    assert "gpu01, gpu02, gpu03, gpu04" in note.why  # the domain's nodes, once
    assert [k for k, _ in kinds(plan)] == ["notify"]


def test_ib_faults_under_an_nvlink_block_are_not_an_nvlink_incident(tmp_path: Path) -> None:
    topo = parse_topology("BlockName=nvl1 Nodes=gpu[01-04]\n")
    w = World(tmp_path, topology=topo)
    for n in ("gpu01", "gpu02", "gpu03"):
        w.alerts[n] = [ib(n)]
    w.cycle(T0 + timedelta(minutes=6))
    assert w.incidents() == []


def test_off_the_bus_on_several_nodes_of_a_rack_is_one_rack_incident(tmp_path: Path) -> None:
    """Power: GPUs off the bus on many nodes of one rack point to the rack (a feature
    ``rack=r7``), never to the leaf switch they share too."""
    w = World(tmp_path, topology=None, features={
        n: ("rack=r7" if i < 4 else "rack=r8", "leaf=l1") for i, n in enumerate(NAMES)})
    for n in ("gpu01", "gpu02", "gpu03"):
        w.alerts[n] = [ib(n, fault="gpu.off_bus")]
    w.cycle(T0)
    [inc] = w.incidents()
    assert (inc.component, inc.domain, inc.group) == ("rack:r7", "rack", "power")
    assert "a rack can cause power" in inc.why


def test_an_incident_that_no_longer_qualifies_releases_its_held_remediations(
        tmp_path: Path) -> None:
    """O6: fewer nodes keep the alerts than an incident opens for: it ends and the rest
    go on by their own rules (no open incident with one node, forever)."""
    w = World(tmp_path)
    for n in ("gpu01", "gpu02", "gpu03"):
        w.alerts[n] = [ib(n)]
    w.cycle(T0)
    del w.alerts["gpu02"], w.alerts["gpu03"]
    # Alerts clear node by node as a switch comes back: the last one is not released at
    # once, but once it stayed alone for incidents.settle (5m).
    short = w.cycle(T0 + timedelta(minutes=20))
    [inc] = w.incidents()
    assert inc.open and inc.short_since == T0 + timedelta(minutes=20)
    assert kinds(short) == [] and short.next_wake == T0 + timedelta(minutes=25)
    plan = w.cycle(T0 + timedelta(minutes=25))
    [inc] = w.incidents()
    assert (inc.state, inc.ended) == ("resolved", "released")
    assert "remain on 1 of the 4 nodes (gpu01) since" in inc.resolution
    assert ("cordon", "gpu01") in kinds(plan)  # gpu01's own remediation goes on
    from slurm_heal.readmodel.incidents import view

    words = view(w.store.load(), inc).words
    assert "on switch leaf1 (network leaf switch)" in words
    assert "too few of its nodes kept the alerts" in words


def test_an_incident_past_max_age_is_handed_to_a_person_with_one_notice(
        tmp_path: Path) -> None:
    w = World(tmp_path, policy=pol(incidents={"max_age": "2h"}))
    for n in ("gpu01", "gpu02", "gpu03"):
        w.alerts[n] = [ib(n)]
    w.cycle(T0)
    assert kinds(w.cycle(T0 + timedelta(hours=1))) == []
    before = w.store.load()
    plan = w.cycle(T0 + timedelta(hours=2))
    [inc] = w.incidents()
    assert (inc.state, inc.ended) == ("resolved", "aged")
    from slurm_heal.notify.events import cycle_events

    [event] = [e for e in cycle_events(before, w.store.load(), plan, plan.effects, w.alerts,
                                       T0 + timedelta(hours=2)) if e.kind != "outcome"]
    assert event.kind == "person" and "handed to a person" in event.text
    assert "incidents.max_age = 2h" in inc.resolution
    assert [k for k, _ in kinds(plan)] == ["notify"]  # one notice, no cordon
    assert {w.phase(n) for n in ("gpu01", "gpu02", "gpu03")} == {Phase.CANCELLED}
    later = w.cycle(T0 + timedelta(hours=3))  # nothing automatic on them after it
    assert not [k for k in kinds(later) if k[0] == "cordon"]


def test_one_open_incident_per_domain_new_groups_join_it(tmp_path: Path) -> None:
    """A flood of faults of other classes under one leaf joins the open incident (one
    per component and domain kind), and a lone different fault joins nothing."""
    w = World(tmp_path)
    for n in ("gpu01", "gpu02", "gpu03"):
        w.alerts[n] = [ib(n)]
    w.cycle(T0)
    for n in ("gpu01", "gpu02", "gpu04"):
        w.alerts[n] = [*w.alerts.get(n, []),
                       ib(n, T0 + timedelta(minutes=1), fault="host.unreachable")]
    w.cycle(T0 + timedelta(minutes=1))
    [inc] = w.incidents()
    assert inc.groups == ("ib", "unreachable")
    assert inc.nodes == ("gpu01", "gpu02", "gpu03", "gpu04")


def test_unreadable_incident_entries_are_reported_and_kept(tmp_path: Path) -> None:
    w = World(tmp_path)
    bad = {"id": "i-bad", "component": "switch:leaf1"}  # no kind, no times
    w.store.apply(Plan(data={INCIDENTS_KEY: [bad]}), T0)
    for n in ("gpu01", "gpu02", "gpu03"):
        w.alerts[n] = [ib(n)]
    plan = w.cycle(T0)
    said = [r.why for r in plan.records if "cannot be read" in r.why]
    assert said and "entry 0 (i-bad)" in said[0]
    assert bad in w.store.load().data[INCIDENTS_KEY]  # kept as it was
    again = w.cycle(T0 + timedelta(minutes=1))
    assert not [r for r in again.records if "cannot be read" in r.why]  # said once


def test_blast_radius_per_nvlink_domain_and_none_per_cohort(tmp_path: Path) -> None:
    w = World(tmp_path, topology=None, policy=pol(incidents={"enabled": False}),
              published=PUBLISHED)
    w.alerts = {n: [ib(n, fault="gpu.xid.48")] for n in ("gpu01", "gpu02", "gpu05")}
    plan = w.cycle(T0)
    # gpu01 and gpu02 share NVLink domain A: one at a time; gpu05 (domain B) goes on; all
    # share one driver cohort, which is no place and limits nothing.
    assert sorted(k for k in kinds(plan) if k[0] == "cordon") == [
        ("cordon", "gpu01"), ("cordon", "gpu05")]
    assert any(f"nvlink {NVL_A}" in r.why and "topology.blast_radius" in r.why
               for r in plan.records if r.node == "gpu02")


def test_a_domain_naming_an_unknown_group_is_refused_with_the_key_named() -> None:
    with pytest.raises(ConfigError, match="domains.rack.faults names 'pdu'"):
        policy_from_dict({"incidents": {"domains": {"rack": {"faults": ["pdu"]}}}})
    conf = policy_from_dict({"incidents": {"domains": {"cohort": {"faults": []}}}})
    assert conf.incidents.domains_of(FaultGroup("xid", "gpu.xid.119")) == ()
    assert conf.incidents.domains["leaf"].components == ("switch", "leaf")  # kept


def test_policy_check_is_quiet_on_the_default_domains_and_names_an_unknown_kind(
        tmp_path: Path) -> None:
    from slurm_heal.configcheck import check_config

    conf = tmp_path / "heal.toml"
    conf.write_text('[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\n')
    quiet = check_config(conf, build_provider=False)
    assert not [w for w in quiet.warnings if "incidents" in w or "feature_prefixes" in w]
    conf.write_text('[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\n'
                    '[topology]\nfeature_prefixes = ["rack=", "su="]\n')
    report = check_config(conf, build_provider=False)
    assert any("'su=' names components of kind 'su'" in w for w in report.warnings)


def test_a_flood_of_distinct_xids_on_one_cohort_is_one_incident_not_thirty(
        tmp_path: Path) -> None:
    """O6 (issue 37): 30 distinct Xid codes on the same 3 nodes of one driver cohort open
    one incident on the cohort (each code joins it), and the store stays small."""
    w = World(tmp_path, published={n: {"driver": "570.124.06"} for n in NAMES})
    codes = [13, 31, 43, 45, 48, 56, 57, 58, 61, 62, 63, 64, 68, 69, 73, 74, 79, 92, 94,
             95, 109, 119, 120, 121, 123, 136, 140, 143, 154, 155][:30]
    for n in ("gpu01", "gpu02", "gpu05"):
        w.alerts[n] = [ib(n, fault=f"gpu.xid.{c}") for c in codes]
    w.cycle(T0)
    incs = w.incidents()
    cohort = [i for i in incs if i.domain == "cohort"]
    assert len(cohort) == 1 and len(cohort[0].groups) == 30
    # Xid 74/155 are the NVLink domain's, 79 a rack's: no such domain here, no incident.
    assert [i.domain for i in incs] == ["cohort"]


def test_a_short_incident_that_qualifies_again_stays_open(tmp_path: Path) -> None:
    """O6: the grace is for alerts clearing node by node; when the nodes show the alert
    again (the leaf flaps), the incident qualifies again and keeps holding them."""
    w = World(tmp_path)
    for n in ("gpu01", "gpu02", "gpu03"):
        w.alerts[n] = [ib(n)]
    w.cycle(T0)
    gone = w.alerts.pop("gpu02"), w.alerts.pop("gpu03")
    w.cycle(T0 + timedelta(minutes=10))
    assert w.incidents()[0].short_since is not None
    w.alerts["gpu02"], w.alerts["gpu03"] = gone
    plan = w.cycle(T0 + timedelta(minutes=12))
    [inc] = w.incidents()
    assert inc.open and inc.short_since is None
    w.cycle(T0 + timedelta(minutes=30))
    assert w.incidents()[0].open and not [k for k in kinds(plan) if k[0] == "cordon"]
