"""The overview's host lists (SPEC O1, I4; issue 42): `readmodel.overview.fold` writes
exactly what ClusterShell's NodeSet writes when the names are added one by one, for any
mix of prefixes, number widths, zero padding, duplicates and order (hypothesis).

`fold` hands the runs of ``prefix + number`` names to NodeSet in one string (10,000
names a store change on serve); names of another shape go name by name as before.
"""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from slurm_heal.readmodel.overview import fold

PREFIXES = ["n", "gpu", "GPU", "node-", "rack-a", "x_", "a-b", "c1n", "gpu-1-", "dgx", ""]


def nodeset_name_by_name(names: list[str]) -> str:
    from ClusterShell.NodeSet import NodeSet

    ns = NodeSet()
    for n in names:
        ns.update(n)
    return str(ns)


@st.composite
def hostname(draw: st.DrawFn) -> str:
    prefix = draw(st.sampled_from(PREFIXES))
    value = draw(st.integers(min_value=0, max_value=draw(st.sampled_from([9, 12, 130, 10**6]))))
    width = draw(st.sampled_from([0, 1, 2, 3, 5, 7]))
    suffix = draw(st.sampled_from(["", "", "", "-ib", "a"]))
    name = f"{prefix}{value:0{width}d}{suffix}" if width else f"{prefix}{value}{suffix}"
    return name if name[0].isalpha() else f"h{name}"


@given(st.lists(hostname(), max_size=60))
@example(["n00001", "n00002", "n00004", "n1", "n01", "n001", "n10", "n9"])
@example([f"n{i:05d}" for i in range(1, 2000) if i % 500])
@example(["gpu9", "gpu10", "gpu010", "gpu0", "gpu00", "login", "c1n2", "c1n3"])
def test_fold_is_nodesets_folding_name_by_name(names: list[str]) -> None:
    assert fold(names) == nodeset_name_by_name(names)
    assert fold(reversed(names)) == nodeset_name_by_name(names)


def test_fold_of_nothing_is_empty() -> None:
    assert fold([]) == "" == nodeset_name_by_name([])
