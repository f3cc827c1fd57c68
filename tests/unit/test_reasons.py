"""Reason-string grammar: our cordon marker and the request channel (SPEC I2, Q1, Q2)."""

import pytest

from slurm_heal import reasons
from slurm_heal.errors import ReasonError
from slurm_heal.types import Action


def test_request_from_a_detector_parses_action_detector_and_id() -> None:  # SPEC Q1
    r = reasons.parse_request("heal-request: reboot detector=ibmon id=4711 port 1 flapping")
    assert r.action is Action.REBOOT
    assert (r.detector, r.request_id, r.text) == ("ibmon", "4711", "port 1 flapping")


def test_request_keys_in_any_order_and_optional() -> None:
    r = reasons.parse_request("heal-request: migrate id=9 detector=x")
    assert (r.action, r.detector, r.request_id, r.text) == (Action.MIGRATE, "x", "9", "")
    assert reasons.parse_request("heal-request: rebuild").detector is None


def test_remove_parses_so_it_can_be_refused_by_name() -> None:  # SPEC Q2
    assert reasons.parse_request("heal-request: remove detector=d id=1").action is Action.REMOVE


@pytest.mark.parametrize(
    "bad, words",
    [
        ("heal-request:", "no action"),
        ("heal-request: explode detector=x", "unknown action 'explode'"),
        ("heal-request: reboot detecter=x id=1", "unknown key 'detecter'"),
        ("heal-request: reboot id=1 id=2", "given twice"),
        ("heal-request: reboot id=a;b", "not a token"),
        ("heal-request: none", "cannot be requested"),
    ],
)
def test_malformed_request_names_the_problem(bad: str, words: str) -> None:
    with pytest.raises(ReasonError, match=words):
        reasons.parse_request(bad)


def test_our_marker_round_trips_and_is_recognised() -> None:  # house style 2
    text = reasons.format_marker("gpu.xid.79", remediation="r-1", by="controller", text="reboot")
    assert reasons.is_ours(text) and not reasons.is_request(text)
    m = reasons.parse_marker(text)
    assert (m.fault, m.remediation, m.by, m.text) == ("gpu.xid.79", "r-1", "controller", "reboot")


def test_foreign_reason_is_not_ours() -> None:
    assert not reasons.is_ours("bad DIMM, ticket 1234")
    assert not reasons.is_ours("heal-request: reboot")
    with pytest.raises(ReasonError):
        reasons.parse_marker("Kill task failed")


def test_request_round_trip() -> None:
    text = reasons.format_request(Action.REBOOT, "ibmon", "4711", "flap")
    assert reasons.parse_request(text) == reasons.ReasonRequest(Action.REBOOT, "ibmon", "4711", "flap")


@pytest.mark.parametrize("reason, expected", [
    ("Node unexpectedly rebooted", True),
    ("Reboot ASAP", True),
    ("reboot requested", True),
    ("rebooted by hand, ticket 9", False),
    ("heal: gpu.xid.79 rem=r-1", False),
    ("", False),
    # Slurm appends its own texts with " : " (set_node_reason)
    ("Reboot ASAP : reboot issued", True),
    ("reboot requested : reboot issued : reboot complete", True),
    ("reboot timed out", True),
    # a person's reason that merely starts like Slurm's is theirs (issue 8, defect 2)
    ("Reboot pending: BIOS update (bob)", False),
    ("Reboot", False),
    ("reboot ASAP please -- alice", False),
    ("Node unexpectedly rebooted twice, ticket 4", False),
    ("bad DIMM : reboot issued", False),
])
def test_slurms_own_reboot_reasons_are_recognised(reason: str, expected: bool) -> None:
    """SPEC L5, house style 2: after our reboot Slurm may replace our marker with its own
    reason; only Slurm's exact texts count, never a reason that starts with "Reboot"."""
    assert reasons.is_slurm_reboot(reason) is expected


@pytest.mark.parametrize("reason, expected", [
    # 22.05.8 and 25.11.7 alike: Slurm appends its texts to our marker and keeps them
    ("heal: cordon rem=r-1 gpu.xid.79 : reboot issued", "heal: cordon rem=r-1 gpu.xid.79"),
    ("heal: gpu.xid.79 rem=r-1 : reboot issued : reboot timed out", "heal: gpu.xid.79 rem=r-1"),
    ("heal: gpu.xid.79 rem=r-1", "heal: gpu.xid.79 rem=r-1"),
    # only Slurm's own texts at the end, never a person's words
    ("heal: gpu.xid.79 : reboot issued : see ticket 7", "heal: gpu.xid.79 : reboot issued : see ticket 7"),
    ("heal: gpu.xid.79 reboot timed out twice", "heal: gpu.xid.79 reboot timed out twice"),
    ("reboot timed out", "reboot timed out"),
])
def test_the_reboot_texts_slurm_appends_are_taken_off_our_marker(reason: str,
                                                                 expected: str) -> None:
    """SPEC L5: the marker as we wrote it, for the next reboot of that node."""
    assert reasons.without_slurm_reboot_reasons(reason) == expected


def test_slurms_reboot_flags_are_recognised() -> None:
    """SPEC L5: REBOOT_REQUESTED / REBOOT_ISSUED say a reboot is pending or under way."""
    assert reasons.slurm_rebooting(frozenset({"DOWN", "REBOOT_ISSUED"}))
    assert reasons.slurm_rebooting(frozenset({"IDLE", "DRAIN", "REBOOT_REQUESTED"}))
    assert not reasons.slurm_rebooting(frozenset({"IDLE", "DRAIN"}))


# -- owner(): whose reason it is (house style 2, D5, Q1) -------------------------------
@pytest.mark.parametrize(("reason", "whose"), [
    (None, "none"), ("", "none"),
    ("heal: gpu.xid.79 rem=r-3f2a by=controller for reboot", "ours"),
    ("  heal: gpu.xid.79 by=check", "ours"),
    ("heal: not a fault id!", "ours"),  # ours, even when it does not parse
    ("heal: gpu.xid.79 rem=r-1 by=controller for reboot : reboot issued", "ours"),
    ("heal-request: reboot detector=ibmon id=4711", "request"),
    ("heal-request: explode", "request"),  # malformed: still the request channel (Q1)
    ("Node unexpectedly rebooted", "slurm"), ("Reboot ASAP", "slurm"),
    ("reboot issued : reboot complete", "slurm"),
    ("Reboot pending: BIOS update (bob)", "person"),  # issue 8: a person's, not Slurm's
    ("reboot issued : bob's BIOS update", "person"),
    ("NHC: heal: not ours", "person"), ("healing: memtest (carol)", "person"),
    ("   ", "person"),
])
def test_owner_says_whose_reason_it_is(reason: str | None, whose: str) -> None:
    assert reasons.owner(reason) == whose


def test_marker_of_parses_our_marker_and_nothing_else() -> None:
    """The marker is parsed, never substring-matched: the remediation is the ``rem=``
    key, not any ``rem=...`` text somewhere in the reason."""
    m = reasons.marker_of(reasons.format_marker("gpu.xid.48", "r-2", "controller",
                                                "moved here from rem=r-1"))
    assert m is not None and (m.fault, m.remediation, m.by) == ("gpu.xid.48", "r-2",
                                                                "controller")
    assert m.text == "moved here from rem=r-1"
    assert reasons.marker_of("NHC: heal: gpu.xid.48 rem=r-1") is None  # not ours
    assert reasons.marker_of("heal-request: reboot") is None
    assert reasons.marker_of("heal: Not-A-Fault rem=r-1") is None  # ours, unparseable
    assert reasons.marker_of(None) is None
