"""A cluster's shared components as values (SPEC S7): a `Component` (a leaf switch, an
NVLink block, a rack) and the `Topology` that says which of them each node is under.

Pure values in a low module, so that the cluster view (`slurm_heal.types.ClusterView`)
carries a topology without importing the reader and the parser above the config
(`slurm_heal.topology`, which re-exports both; issue 33, the layer table in
tests/unit/test_import_layers.py).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Component:
    """One shared component: a leaf switch, a block, a rack (SPEC S7)."""

    kind: str  # "switch", "block", or a feature prefix's name ("rack", "leaf")
    name: str
    nodes: frozenset[str]

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.name}"

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name}"


@dataclass(frozen=True, slots=True)
class Topology:
    """The components of a cluster, and which of them each node is under."""

    source: str  # where it was read: "scontrol show topology", "features", a file's path
    components: tuple[Component, ...] = ()
    # Why the configured topology could not be read (the cycle goes on without one).
    problem: str = ""
    _by_node: dict[str, tuple[Component, ...]] = field(default_factory=dict, repr=False,
                                                       compare=False)

    def __post_init__(self) -> None:
        # Smallest component first (the most specific cause): the components are added
        # to each node's tuple in that order, so no node needs a sort of its own.
        by: dict[str, tuple[Component, ...]] = {}
        for c in sorted(self.components, key=lambda c: (len(c.nodes), c.id)):
            one = (c,)
            for n in c.nodes:
                got = by.get(n)
                by[n] = one if got is None else got + one
        object.__setattr__(self, "_by_node", by)

    def of(self, node: str) -> tuple[Component, ...]:
        """The components ``node`` is under, smallest first (none: not in the topology)."""
        return self._by_node.get(node, ())

    def get(self, component_id: str) -> Component | None:
        return next((c for c in self.components if c.id == component_id), None)

    def __bool__(self) -> bool:
        return bool(self.components)


class Shared(Protocol):
    """What the incident rules read of the components (a `Topology`, or one with the
    domains the node check publishes: `WithPublished`)."""

    @property
    def source(self) -> str: ...

    @property
    def problem(self) -> str: ...

    def of(self, node: str) -> tuple[Component, ...]: ...

    def __bool__(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class WithPublished:
    """A topology plus the domains the node check publishes (SPEC S7, D12; issue 37): an
    NVLink domain per ClusterUUID/CliqueId, a cohort per driver. Its components are made
    on first use, for the nodes asked about: at 100,000 nodes an index of every node's
    published domains would cost a good part of a second each cycle."""

    base: Topology | None
    members: Mapping[tuple[str, str], Collection[str]]  # (kind, name) -> its nodes
    keys_of: Callable[[str], tuple[tuple[str, str], ...]]  # a node's (kind, name) keys
    _made: dict[tuple[str, str], Component] = field(default_factory=dict, repr=False,
                                                   compare=False)

    @property
    def source(self) -> str:
        return self.base.source if self.base else "node check"

    @property
    def problem(self) -> str:
        return self.base.problem if self.base else ""

    def _component(self, key: tuple[str, str]) -> Component:
        got = self._made.get(key)
        if got is None:
            got = self._made[key] = Component(key[0], key[1], frozenset(self.members[key]))
        return got

    def of(self, node: str) -> tuple[Component, ...]:
        """The components ``node`` is under, smallest first."""
        base = self.base.of(node) if self.base else ()
        own = tuple(self._component(k) for k in self.keys_of(node) if k in self.members)
        if not own:
            return base
        return tuple(sorted(base + own, key=lambda c: (len(c.nodes), c.id)))

    def __bool__(self) -> bool:
        return bool(self.base) or bool(self.members)
