"""`slurm_heal.frozen`: the node side's value classes behave as the stdlib's frozen
slotted dataclasses do (issue 26: the node check without `dataclasses`), and the
stdlib's own helpers still work on them."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from slurm_heal import frozen
from slurm_heal.types import Alert, Evidence, Finding, NodeInfo, Severity


@frozen.dataclass(frozen=True, slots=True)
class Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()
    meta: dict[str, int] = frozen.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class StdPoint:
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()
    meta: dict[str, int] = dataclasses.field(default_factory=dict)


@frozen.dataclass(frozen=True)
class Key:
    a: int
    b: tuple[str, ...] = ()


@frozen.dataclass(slots=True)
class Counter:
    items: list[int] = frozen.field(default_factory=list)
    n: int = 0


def test_a_frozen_record_reads_compares_and_prints_like_the_stdlib_one() -> None:
    ours, std = Point(1, 2, ("a",)), StdPoint(1, 2, ("a",))
    assert repr(ours) == repr(std).replace("StdPoint", "Point")
    assert ours == Point(1, 2, ("a",)) and ours != Point(1, 3, ("a",))
    assert ours != std  # another class is never equal, as with the stdlib
    assert Point.__match_args__ == StdPoint.__match_args__
    assert not hasattr(ours, "__dict__") and Point.__slots__ == ("x", "y", "tags", "meta")
    assert Point(1).meta == {} and Point(1).meta is not Point(1).meta  # a fresh default


def test_a_frozen_record_refuses_assignment_and_hashes_by_value() -> None:
    p = Point(1, 2)
    with pytest.raises(frozen.FrozenInstanceError):
        p.x = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.y  # type: ignore[misc]
    q = Point(1, 2, meta={})
    assert {Key(1, ("t",)): 1}[Key(1, ("t",))] == 1 and hash(Key(1)) == hash(Key(1))
    with pytest.raises(TypeError):
        hash(q)  # a dict field is unhashable, as with the stdlib
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'x'"):
        Point()  # type: ignore[call-arg]


def test_a_mutable_record_assigns_and_is_not_hashable() -> None:
    c = Counter()
    c.n += 1
    c.items.append(3)
    assert c == Counter([3], 1) and Counter().items == []
    with pytest.raises(TypeError):
        hash(c)


def test_replace_pickle_and_copy_keep_every_field() -> None:
    p = Point(1, 2, ("a",), {"k": 1})
    assert frozen.replace(p, y=9) == Point(1, 9, ("a",), {"k": 1})
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        frozen.replace(p, z=1)
    assert pickle.loads(pickle.dumps(p)) == p
    assert copy.deepcopy(p) == p and copy.copy(p) == p
    c = Counter([1], 2)
    assert pickle.loads(pickle.dumps(c)) == c


def test_the_stdlib_helpers_work_on_them() -> None:
    """Code outside the node check keeps using dataclasses.replace/asdict/fields on the
    shared value types (slurm_heal.types)."""
    p = Point(1, 2)
    assert dataclasses.is_dataclass(p)
    assert [f.name for f in dataclasses.fields(p)] == ["x", "y", "tags", "meta"]
    assert dataclasses.asdict(p) == {"x": 1, "y": 2, "tags": (), "meta": {}}
    assert dataclasses.replace(p, x=7) == Point(7, 2)
    n = NodeInfo(name="n1", states=frozenset({"IDLE"}))
    assert dataclasses.replace(n, reason="r").reason == "r"
    e = Evidence(source="kmsg", text="x")
    f = Finding(fault="gpu.xid.79", severity=Severity.CRITICAL, summary="s",
                detector="kernel_log", node="n1", evidence=(e,))
    assert dataclasses.asdict(f)["evidence"] == ({"source": "kmsg", "text": "x", "at": None,
                                                  "data": {}},)
    assert Alert.__match_args__[:2] == ("node", "fault")


def test_fields_of_gives_the_defaults_of_ours_and_of_a_stdlib_dataclass() -> None:
    want = (("x", frozen.MISSING), ("y", 0), ("tags", ()), ("meta", {}))
    assert frozen.fields_of(Point) == want
    assert frozen.fields_of(StdPoint) == want


def test_what_it_does_not_write_is_refused_with_its_name() -> None:
    with pytest.raises(TypeError, match="order"):
        @frozen.dataclass(order=True)  # type: ignore[call-overload]
        class Ordered:
            x: int
    with pytest.raises(TypeError, match="non-default argument 'b' follows default"):
        @frozen.dataclass(frozen=True)
        class Bad:
            a: int = 1
            b: int  # type: ignore[misc]


def test_first_instances_made_by_many_threads_at_once_are_all_whole() -> None:
    """The generated __init__ is written on the first instance; threads racing to make
    it (the node check's detectors run in threads) all get whole instances."""
    import threading

    @frozen.dataclass(frozen=True, slots=True)
    class Reading:
        index: int
        name: str = "gpu"

    out: list[Reading] = []
    barrier = threading.Barrier(8)

    def make(i: int) -> None:
        barrier.wait()
        out.append(Reading(i))

    threads = [threading.Thread(target=make, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.index for r in out) == list(range(8))
    assert all(r.name == "gpu" for r in out)


def test_a_subclass_of_a_record_is_a_record_of_both_fields() -> None:
    @frozen.dataclass(frozen=True, slots=True)
    class Base:
        a: int
        b: int = 2

    @frozen.dataclass(frozen=True, slots=True)
    class Child(Base):
        c: int = 3

    assert Child(1) == Child(1, 2, 3) and repr(Child(1)).endswith(".Child(a=1, b=2, c=3)")
    assert Base(1) == Base(1, 2) and Child.__match_args__ == ("a", "b", "c")


@frozen.dataclass(frozen=True, slots=True)
class Pair:
    a: int
    b: str = ""


def test_a_maker_makes_the_record_the_constructor_makes() -> None:
    """Issue 35 (a fault storm makes two records a line): `frozen.maker` is a positional
    constructor at half the cost; what it makes is the class's own instance, frozen,
    equal, hashed, printed, pickled and replaced as one the constructor made."""
    make = frozen.maker(Point)
    made = make(3, 4, ("a",), {"k": 1})
    want = Point(3, 4, ("a",), {"k": 1})
    assert type(made) is Point and isinstance(made, Point)
    assert made == want and repr(made) == repr(want)
    assert pickle.loads(pickle.dumps(made)) == want
    assert frozen.replace(made, y=5) == Point(3, 5, ("a",), {"k": 1})
    with pytest.raises(frozen.FrozenInstanceError):
        made.x = 9  # type: ignore[misc]
    with pytest.raises(TypeError):
        make(1, 2)  # every field, in order
    pair = frozen.maker(Pair)(1, "a")
    assert pair == Pair(1, "a") and hash(pair) == hash(Pair(1, "a")) and {pair} == {Pair(1, "a")}
    line = frozen.maker(Evidence)("kernel_log", "NVRM: Xid 79", "2026-01-05T12:00:00", {})
    assert line == Evidence(source="kernel_log", text="NVRM: Xid 79",
                            at="2026-01-05T12:00:00", data={})


def test_a_maker_is_refused_for_a_class_it_cannot_make() -> None:
    @frozen.dataclass(frozen=True)
    class NoSlots:
        x: int

    @frozen.dataclass(frozen=True, slots=True)
    class Checked:
        x: int

        def __post_init__(self) -> None:
            raise AssertionError

    for cls in (NoSlots, Checked, StdPoint):
        with pytest.raises(TypeError):
            frozen.maker(cls)
