"""Typed decoding of the whole-cluster reads (issue 26): only the fields slurm-heal uses.

`sinfo --json` (22.05), `scontrol --json show node` (23.02+), slurmrestd's ``/nodes`` and
``/jobs`` and `squeue --json` are decoded straight into the structs below with msgspec:
every other field of Slurm's records is skipped while decoding, never built as Python
objects, and nothing walks the document afterwards.

- The types are the union of what Slurm 21.08 .. 26.05 prints (tests/data/real/slurm):
  a state as ``"idle"`` plus ``state_flags`` (v0.0.37/38) or a list (data_parser), times
  and numbers as epoch integers or ``{"set", "infinite", "number"}`` objects, features
  and partitions as a comma list or a JSON list.
- Depth: msgspec counts its own recursion, also while it skips an unknown field, so a
  hostile document nested 100,000 levels deep is a RecursionError here; but its limit
  follows the interpreter (the C stack's from 3.12: 3.13 read 2,000 levels that 3.11
  refused), so a decoded document is held to `slurm_heal.jsonsafe.MAX_DEPTH` as well,
  counted on the text (`jsonsafe.nesting_exceeds`, issue 38). The records kept are flat,
  so nothing downstream meets the nesting.
- Anything of another shape (a wrong type, a node that is not an object, an ``errors``
  entry) is not decoded here: `decode` answers None and the caller reads the document
  with the generic reader, which names the node and the field (SPEC I6) exactly as
  before. So this module only ever speeds up what the generic reader accepts.

Imported only by the whole-cluster reads: msgspec's import (typing_extensions, inspect,
socket, ~20 ms) stays off the node check's path.
"""

from __future__ import annotations

from typing import Any

import msgspec

from slurm_heal import jsonsafe


class Number(msgspec.Struct):
    """The data_parser (23.02+) number object."""

    number: int | float
    set: bool = True
    infinite: bool = False


Time = int | float | Number | None
Names = list[str] | str | None


class Node(msgspec.Struct):
    name: str
    state: str | list[str] | None = None
    state_flags: list[str] | None = None
    reason: str | None = None
    reason_set_by_user: str | None = None
    reason_changed_at: Time = None
    extra: str | None = None
    partitions: Names = None
    features: Names = None
    boot_time: Time = None
    slurmd_start_time: Time = None
    address: str | None = None
    hostname: str | None = None
    instance_id: str | None = None


class Job(msgspec.Struct):
    # UNSET: a record without a job id (skipped, as by the generic reader); null is a
    # shape of its own (the generic reader names it).
    job_id: int | Number | msgspec.UnsetType = msgspec.UNSET
    user_name: str | None = None
    user_id: int | Number | msgspec.UnsetType = msgspec.UNSET
    job_state: str | list[str] | msgspec.UnsetType = msgspec.UNSET
    nodes: str | None = None
    name: str | None = None
    start_time: Time = None
    end_time: Time = None
    time_limit: int | Number | None = None


class Nodes(msgspec.Struct):
    # UNSET: the document has no "nodes" key (23.02+'s `sinfo --json`): the generic
    # reader says so, naming the keys it has.
    nodes: list[Node] | None | msgspec.UnsetType = msgspec.UNSET
    errors: msgspec.Raw = msgspec.Raw()  # kept as its text: read only when not empty


class Jobs(msgspec.Struct):
    jobs: list[Job] | None = None
    errors: msgspec.Raw = msgspec.Raw()  # kept as its text: read only when not empty


UNSET = msgspec.UNSET
_NODES = msgspec.json.Decoder(Nodes)
_JOBS = msgspec.json.Decoder(Jobs)
_NO_ERRORS = (b"", b"[]", b"null")


class TooDeep(ValueError):
    """The document nests past the decoder's recursion limit."""


def plain(value: Any) -> Any:
    """A `Number` as the plain value (None when unset or infinite); anything else as is."""
    if isinstance(value, Number):
        return None if not value.set or value.infinite else value.number
    return value


def _decode(decoder: msgspec.json.Decoder[Any], text: str | bytes | bytearray) -> Any:
    try:
        doc = decoder.decode(text)
    except RecursionError:
        raise TooDeep("JSON nested deeper than the decoder's recursion limit") from None
    except msgspec.DecodeError:  # malformed, or a shape of its own: the generic reader says
        return None
    # msgspec's own limit follows the interpreter (3.13 read 2,000 levels that 3.11
    # refused, issue 38): the same limit as the generic reader's, on every Python.
    if jsonsafe.nesting_exceeds(text):
        raise TooDeep(f"JSON nested too deeply (more than {jsonsafe.MAX_DEPTH} levels)")
    return doc


def _clean(errors: msgspec.Raw) -> bool:
    return b"".join(bytes(errors).split()) in _NO_ERRORS  # Slurm prints "[\n  ]"


def decode_nodes(text: str | bytes | bytearray) -> list[Node] | None:
    """The node records of a document with a ``nodes`` list; None when the document is
    not one this module reads (errors, no node list, another shape). `TooDeep` on
    hostile nesting."""
    doc = _decode(_NODES, text)
    if doc is None or not _clean(doc.errors) or doc.nodes is msgspec.UNSET:
        return None
    return doc.nodes or []


def decode_jobs(text: str | bytes | bytearray) -> list[Job] | None:
    """The job records of `squeue --json` / slurmrestd ``/jobs``; None as above."""
    doc = _decode(_JOBS, text)
    if doc is None or not _clean(doc.errors):
        return None
    return doc.jobs or []
