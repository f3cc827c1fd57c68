"""Light, frozen value types shared by the node side and the controller side.

These are frozen slotted value classes (`slurm_heal.frozen`, the stdlib dataclass
without its import cost) on purpose: the node check imports them on every run and
must start fast (pydantic alone costs ~50 ms of import time). Controller-side state
(remediations, the store, the policy) lives in `models.py` as pydantic models.
"""

from __future__ import annotations

import enum
from datetime import datetime

from slurm_heal.frozen import dataclass, field

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from typing import Any

    from slurm_heal.components import Topology


class Severity(str, enum.Enum):
    """How bad a fault is (SPEC vocabulary)."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return {"info": 0, "warning": 1, "critical": 2}[self.value]


class Action(str, enum.Enum):
    """What a remediation does to a node (SPEC vocabulary, L2, E4, E6)."""

    REBOOT = "reboot"
    REBUILD = "rebuild"
    MIGRATE = "migrate"
    POWER_CYCLE = "power_cycle"  # preview, off unless enabled (E4)
    RESET_GPU = "reset_gpu"  # preview, off unless enabled (E6): a Slurm job on the node
    REMOVE = "remove"  # only ever by a person (Q2)
    NONE = "none"  # record only, routed to support (D8)


# Actions a request (CLI, API, reason string) may ask for (SPEC Q2).
REQUESTABLE_ACTIONS = frozenset({Action.REBOOT, Action.REBUILD, Action.MIGRATE})
# The slurm provider's default reboot timeout in seconds (its ``timeout`` setting):
# read by its table (providerconf.py) and by `install-node`, which has no pydantic.
SLURM_REBOOT_TIMEOUT = 1800.0


@dataclass(frozen=True, slots=True)
class Evidence:
    """Machine-readable proof of a fault (SPEC D7): a log line, counters, output."""

    source: str  # e.g. "kmsg", "/proc/mounts", "nvidia-smi", "systemctl"
    text: str = ""  # the raw line / output excerpt
    at: str | None = None  # ISO-8601 time the evidence was produced, when known
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "text": self.text}
        if self.at is not None:
            out["at"] = self.at
        if self.data:
            out["data"] = dict(self.data)
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Evidence:
        return cls(
            source=str(raw.get("source", "")),
            text=str(raw.get("text", "")),
            at=raw.get("at"),
            data=dict(raw.get("data") or {}),
        )


@dataclass(frozen=True, slots=True)
class Finding:
    """One fault seen by a node-side detector in one run."""

    fault: str  # catalog id, e.g. "gpu.xid.79"
    severity: Severity
    summary: str  # plain language
    detector: str  # e.g. "kernel_log"
    node: str
    evidence: tuple[Evidence, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "severity": self.severity.value,
            "summary": self.summary,
            "evidence": [e.to_json() for e in self.evidence],
            "detector": self.detector,
            "node": self.node,
        }


@dataclass(frozen=True, slots=True)
class Alert:
    """A fault seen on one node over time (SPEC vocabulary, D7).

    The node side publishes active alerts in the node's ``Extra`` field (I2), under the
    key ``slurm_heal`` (see `slurm_heal.extra`); the controller reads them from there.
    """

    node: str
    fault: str
    severity: Severity
    summary: str
    first_seen: datetime
    last_seen: datetime
    evidence: tuple[Evidence, ...] = ()
    detector: str = ""
    cleared: datetime | None = None

    @property
    def active(self) -> bool:
        return self.cleared is None


class _Unread:
    """`UNREAD`'s type."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNREAD"


# NodeInfo(extra=UNREAD): Extra is kept as its text (extra_raw) and parsed on the first
# read of ``extra`` (issue 26: at 100k nodes the parsed dicts were 857 B a node, 85 MB,
# though the controller's check cache reads a node's Extra once per change of its text).
UNREAD: Any = _Unread()


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One Slurm node as a backend reports it (SPEC I3: both backends fill this).

    ``extra=UNREAD`` (what the backends pass): ``extra`` is parsed from ``extra_raw`` when
    first read, and kept; `peek_extra` gives it without keeping it."""

    name: str
    states: frozenset[str]  # upper-case flags, e.g. {"IDLE", "DRAIN"}
    reason: str = ""
    reason_user: str = ""
    reason_time: datetime | None = None
    extra_raw: str = ""  # the Extra field as Slurm holds it
    extra: dict[str, Any] | None = None  # Extra parsed as JSON, when it is a JSON object
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    boot_time: datetime | None = None
    slurmd_start_time: datetime | None = None
    address: str = ""
    hostname: str = ""
    instance_id: str = ""  # Slurm 23.11+ InstanceId (cloud instance), "" when unset

    def peek_extra(self) -> dict[str, Any] | None:
        """``extra``, without keeping the parsed object on the record when it was not
        read yet (a reader that keeps what it derives, like the check cache)."""
        value = _EXTRA_SLOT.__get__(self, NodeInfo)
        if value is UNREAD:
            from slurm_heal import jsonsafe

            return jsonsafe.parse_extra(self.extra_raw)
        return value  # type: ignore[no-any-return]

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.states

    @property
    def down(self) -> bool:
        return "DOWN" in self.states


class _LazyExtra:
    """NodeInfo's ``extra`` slot, parsed from ``extra_raw`` on the first read when the
    record was made with ``extra=UNREAD``. Reads and writes go to the dataclass's own
    slot (kept below), so the constructor, equality, repr and dataclasses.replace see a
    plain field."""

    def __get__(self, obj: NodeInfo | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = _EXTRA_SLOT.__get__(obj, NodeInfo)
        if value is UNREAD:
            from slurm_heal import jsonsafe

            value = jsonsafe.parse_extra(obj.extra_raw)
            _EXTRA_SLOT.__set__(obj, value)
        return value

    def __set__(self, obj: NodeInfo, value: Any) -> None:
        _EXTRA_SLOT.__set__(obj, value)


_EXTRA_SLOT: Any = NodeInfo.__dict__["extra"]
setattr(NodeInfo, "extra", _LazyExtra())  # noqa: B010 - the slot's own descriptor, wrapped


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job allocated on one or more nodes."""

    job_id: int
    user: str
    state: str  # e.g. RUNNING, PENDING, COMPLETING
    nodes: tuple[str, ...]
    name: str = ""
    # when it started; for a pending job, Slurm's expected start once a scheduler has
    # planned it (None before)
    start_time: datetime | None = None
    end_time: datetime | None = None  # expected end (start + time limit) while running
    time_limit_minutes: int | None = None


@dataclass(frozen=True, slots=True)
class ClusterView:
    """A snapshot of the cluster, read once per controller cycle."""

    nodes: tuple[NodeInfo, ...]
    jobs: tuple[JobInfo, ...] = ()
    # SPEC S7: the components nodes share, when the controller read Slurm's topology or a
    # file (slurm_heal.topology); None: decide() reads node features, or there is none.
    topology: Topology | None = None

    def node(self, name: str) -> NodeInfo | None:
        for n in self.nodes:
            if n.name == name:
                return n
        return None

    def jobs_on(self, name: str) -> tuple[JobInfo, ...]:
        return tuple(j for j in self.jobs if name in j.nodes)
