"""Our cordon marker fits Slurm's reason and is cut at a whole word (issue 25 item 9)."""

from __future__ import annotations

from slurm_heal import reasons

SUMMARY = ("the GPU at PCI 0000:9b:00 reported Xid 119, process python3: Timeout after 6s of "
           "waiting for RPC response from GPU4 GSP! Expected function 76 (GSP_RM_CONTROL) "
           "(0x20801813 0x4c).")


def test_a_long_marker_is_cut_at_a_whole_word_and_says_so() -> None:
    marker = reasons.format_marker("gpu.xid.119", by="check", text=SUMMARY)
    assert len(marker) <= reasons.MAX_REASON
    assert marker.endswith(" ...")
    kept = marker[:-len(" ...")].split()
    assert set(kept) <= set(f"heal: gpu.xid.119 by=check {SUMMARY}".split())  # whole words
    parsed = reasons.parse_marker(marker)
    assert (parsed.fault, parsed.by) == ("gpu.xid.119", "check")


def test_a_marker_that_fits_is_kept_whole() -> None:
    marker = reasons.format_marker("gpu.xid.79", remediation="r-1", by="controller",
                                   text="GPU  fell\n off the bus")
    assert marker == "heal: gpu.xid.79 rem=r-1 by=controller GPU fell off the bus"


def test_one_word_longer_than_the_room_leaves_only_the_marker() -> None:
    marker = reasons.format_marker("gpu.xid.79", by="check", text="x" * 500)
    assert marker == "heal: gpu.xid.79 by=check ..."
