"""The pass/fail criteria of each kind of validation step (SPEC V3).

A step's ``criteria`` table in the policy file is checked against its kind's model here
when the file is loaded (`check`), so a typo (``min_busbw = 300``) or a wrong type
(``min_bw_gbps = "fast"``) is refused at start with the key named, not found when a
machine is being tested. The judges (`validation.judges`) read the same models; a low
module (pydantic only) beside `suitesteps`, whose steps check their criteria with it.

Types are strict: a number is a TOML number, never a string; lists are TOML arrays.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Gbps = float  # gigabits per second (10^9 bit/s), as IB rates are written
DCGM_STATUSES = ("Pass", "Fail", "Warn", "Skip")


class _Criteria(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class DcgmCriteria(_Criteria):
    """``dcgmi diag -r N -j``: which result statuses fail the machine."""

    fail_on: list[str] = Field(default_factory=lambda: ["Fail"])
    warn_is_fail: bool = False  # a "Warn" result fails too (same as fail_on += ["Warn"])
    require_tests: list[str] = Field(default_factory=list)  # must have run (not skipped)
    ignore_tests: list[str] = Field(default_factory=list)  # results of these are not judged

    @model_validator(mode="after")
    def _statuses(self) -> DcgmCriteria:
        bad = [s for s in self.fail_on if s not in DCGM_STATUSES]
        if bad:
            raise ValueError(f"fail_on: {bad[0]!r} is not a DCGM result status "
                             f"({', '.join(DCGM_STATUSES)})")
        return self

    def failing(self) -> set[str]:
        return set(self.fail_on) | ({"Warn"} if self.warn_is_fail else set())


class AmdCriteria(_Criteria):
    """``amd-smi metric --ecc --json``: the most ECC errors a GPU may show."""

    max_uncorrectable: int = Field(default=0, ge=0)
    max_correctable: int | None = Field(default=None, ge=0)
    max_deferred: int | None = Field(default=None, ge=0)


class NcclCriteria(_Criteria):
    """nccl-tests ``all_reduce_perf``: bus bandwidth (GB/s, as the tool prints it).

    ``min_busbw_gbps`` is held against the busbw of the largest message size (the lower
    of out-of-place and in-place); ``min_avg_busbw_gbps`` against the "# Avg bus
    bandwidth" line; ``expected_by_model`` maps a GPU model substring ("H100") to the
    minimum busbw at the largest size for that model, the first key found in the
    tool's "# Using devices" lines wins. Wrong results are always a failure.
    """

    min_busbw_gbps: float | None = Field(default=None, gt=0)
    min_avg_busbw_gbps: float | None = Field(default=None, gt=0)
    expected_by_model: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _some(self) -> NcclCriteria:
        if (self.min_busbw_gbps is None and self.min_avg_busbw_gbps is None
                and not self.expected_by_model):
            raise ValueError("a nccl step needs min_busbw_gbps, min_avg_busbw_gbps or "
                             "expected_by_model")
        for model, value in self.expected_by_model.items():
            if value <= 0:
                raise ValueError(f"expected_by_model.{model}: must be more than 0")
        return self


class IbCriteria(_Criteria):
    """``ib_write_bw`` bandwidth and/or the ports' state (``ibstat`` or sysfs lines).

    ``min_bw_gbps`` is held against "BW average" of the largest message size, in Gb/s
    (a table in MB/sec is converted). Port criteria apply to every port the output
    lists whose link layer is in ``link_layers`` (or only to ``devices`` when given).
    """

    min_bw_gbps: float | None = Field(default=None, gt=0)
    port_state: str = "ACTIVE"
    min_rate_gbps: float | None = Field(default=None, gt=0)
    min_active_ports: int | None = Field(default=None, ge=1)
    devices: list[str] = Field(default_factory=list)
    link_layers: list[str] = Field(default_factory=lambda: ["InfiniBand"])

    def wants_ports(self) -> bool:
        return (self.min_rate_gbps is not None or self.min_active_ports is not None
                or bool(self.devices))

    @model_validator(mode="after")
    def _some(self) -> IbCriteria:
        if self.min_bw_gbps is None and not self.wants_ports():
            raise ValueError("an ib step needs min_bw_gbps, or port criteria "
                             "(min_rate_gbps, min_active_ports, devices)")
        return self


class FioCriteria(_Criteria):
    """``fio --output-format=json``: summed over the jobs; MiB/s and IOPS."""

    min_read_mibps: float | None = Field(default=None, gt=0)
    min_write_mibps: float | None = Field(default=None, gt=0)
    min_read_iops: float | None = Field(default=None, gt=0)
    min_write_iops: float | None = Field(default=None, gt=0)
    # unified_rw_reporting: fio prints one "mixed" figure for reads and writes.
    min_mixed_mibps: float | None = Field(default=None, gt=0)
    min_mixed_iops: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _some(self) -> FioCriteria:
        if all(v is None for v in (self.min_read_mibps, self.min_write_mibps,
                                   self.min_read_iops, self.min_write_iops,
                                   self.min_mixed_mibps, self.min_mixed_iops)):
            raise ValueError("a fio step needs at least one of min_read_mibps, "
                             "min_write_mibps, min_read_iops, min_write_iops, "
                             "min_mixed_mibps, min_mixed_iops")
        return self


class MountsCriteria(_Criteria):
    """``findmnt -J``: these mount points are mounted (``rw``/``ro``: with that option)."""

    mounts: list[str] = Field(min_length=1)
    rw: list[str] = Field(default_factory=list)
    ro: list[str] = Field(default_factory=list)


class CommandCriteria(_Criteria):
    """A plain command: exit status 0 passes; it takes no criteria."""


MODELS: dict[str, type[_Criteria]] = {
    "dcgm": DcgmCriteria, "amd": AmdCriteria, "nccl": NcclCriteria, "ib": IbCriteria,
    "fio": FioCriteria, "mounts": MountsCriteria, "command": CommandCriteria,
}


def parse(kind: str, criteria: dict[str, Any]) -> Any:
    """The criteria model of ``kind`` (raises ValueError naming the key)."""
    model = MODELS[kind]
    try:
        return model.model_validate(criteria)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            known = ", ".join(model.model_fields) or "none"
            msg = f"unknown criterion for a {kind} step (known: {known})"
        elif err["type"] == "missing":
            msg = "is required"
        raise ValueError(f"{key}: {msg}" if key else msg) from None
