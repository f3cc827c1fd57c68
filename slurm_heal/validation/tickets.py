"""Hardware tickets for machines that clearly failed validation (SPEC V2).

A ticket carries the node, the machine's identity (serials, instance id, host), the fault
history and escalation path, the suite's results and its logs. Sinks (``[[validation.
tickets]]`` in the policy file): ``directory`` (one JSON ticket plus a tar of the logs).
"""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from slurm_heal.errors import ConfigError
from slurm_heal.validation.suite import SuiteResult


class Ticket(BaseModel):
    """One hardware ticket: what failed, on which machine, with the evidence."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str  # stable: the validation's id, so a re-filed ticket is the same ticket
    node: str
    identity: dict[str, str] = Field(default_factory=dict)  # serials, instance_id, host
    summary: str
    faults: tuple[dict[str, Any], ...] = ()  # the fault history (newest last)
    escalation: tuple[str, ...] = ()  # the actions taken before, in order
    results: SuiteResult
    created: str


class DirectorySink(BaseModel):
    """``{kind = "directory", path = "/var/lib/slurm-heal/tickets"}``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["directory"] = "directory"
    path: str

    def file(self, ticket: Ticket, logs: Path) -> str:
        """Write ``<id>.json`` and ``<id>.logs.tar.gz``; returns the ticket's path."""
        root = Path(self.path)
        root.mkdir(parents=True, exist_ok=True)
        archive = root / f"{ticket.id}.logs.tar.gz"
        tmp = root / f".{ticket.id}.logs.tmp"
        with tarfile.open(tmp, "w:gz") as tar:
            if logs.is_dir():
                tar.add(logs, arcname=ticket.id)
        os.replace(tmp, archive)
        doc = root / f"{ticket.id}.json"
        tmp = root / f".{ticket.id}.json.tmp"
        tmp.write_text(json.dumps({**ticket.model_dump(mode="json"),
                                   "logs": archive.name}, indent=1) + "\n")
        os.replace(tmp, doc)
        return str(doc)


Sink = DirectorySink


def sinks_from(items: tuple[dict[str, Any], ...] | list[dict[str, Any]],
               source: str = "<dict>") -> list[Sink]:
    """Validate ``[[validation.tickets]]``. Raises ConfigError naming the entry."""
    out: list[Sink] = []
    for i, item in enumerate(items):
        kind = item.get("kind") if isinstance(item, dict) else None
        cls = {"directory": DirectorySink}.get(str(kind))
        if cls is None:
            raise ConfigError(f"unknown ticket sink kind {kind!r} (known: directory)",
                              file=source, key=f"validation.tickets[{i}].kind")
        try:
            out.append(cls.model_validate(item))
        except ValidationError as exc:
            err = exc.errors()[0]
            key = f"validation.tickets[{i}]." + ".".join(str(p) for p in err["loc"])
            raise ConfigError(str(err["msg"]), file=source, key=key) from None
    return out
