"""Incidents in the store (SPEC S7): ``State.data["incidents"]``, a list of `Incident`
objects as JSON. How they are read, written (bounded) and joined when two plans write
them (SPEC S6); the rules that open and end them are policy/incidents.py's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from slurm_heal.models import Incident

INCIDENTS_KEY = "incidents"  # in State.data
KEEP_RESOLVED = 200  # ended incidents kept in the store (the decisions log keeps the rest)


def load(raw: Any) -> dict[str, Incident]:
    """The stored incidents by id; an entry that does not validate is skipped (a newer
    build's, or damaged: never a reason to stop deciding)."""
    out: dict[str, Incident] = {}
    if not isinstance(raw, list):
        return out
    for item in raw:
        try:
            inc = Incident.model_validate(item)
        except ValidationError:
            continue
        out[inc.id] = inc
    return out


def unreadable(raw: Any) -> list[str]:
    """Why each stored entry that `load` skips cannot be read (issue 34 item 6: `slurm-heal
    incidents` reports them instead of dropping them without a word)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        return [f"the store's {INCIDENTS_KEY!r} is a {type(raw).__name__}, not a list"]
    out = []
    for n, item in enumerate(raw):
        try:
            Incident.model_validate(item)
        except ValidationError as exc:
            ident = item.get("id") if isinstance(item, dict) else None
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first.get("loc", ())) or "the entry"
            out.append(f"entry {n}" + (f" ({str(ident)[:60]})" if ident else "")
                       + f": {where}: {first.get('msg', 'invalid')}"
                       + (f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1
                          else ""))
    return out


def aside(raw: Any) -> list[Any]:
    """The stored entries `load` cannot read (at most KEEP_RESOLVED): kept in the store as
    they are, for a person (issue 37, SPEC O6: reported, never dropped without a word)."""
    if not isinstance(raw, list):
        return []
    out = []
    for item in raw:
        try:
            Incident.model_validate(item)
        except ValidationError:
            out.append(item)
    return out[-KEEP_RESOLVED:]


def dump(incidents: Iterable[Incident], kept: Iterable[Any] = ()) -> list[Any]:
    """Open incidents and the newest KEEP_RESOLVED ended ones, oldest first, as JSON;
    then ``kept``: entries that cannot be read, as they were (`aside`)."""
    items = list(incidents)
    ended = sorted((i for i in items if not i.open), key=lambda i: (i.resolved or i.updated,
                                                                    i.id))
    keep = {i.id for i in ended[-KEEP_RESOLVED:]} | {i.id for i in items if i.open}
    out: list[Any] = [i.model_dump(mode="json") for i in sorted(
        items, key=lambda i: (i.opened, i.id)) if i.id in keep]
    return out + list(kept)


def merge(stored: Any, planned: Any) -> list[Any]:
    """What the store keeps when a plan writes incidents (SPEC S6): every incident either
    side has; for one id an ended one wins over an open one, else the later update."""
    have = load(stored)
    for inc in load(planned).values():
        old = have.get(inc.id)
        if old is None or (old.open and not inc.open) or (
                old.open == inc.open and inc.updated >= old.updated):
            have[inc.id] = inc
    kept = aside(stored)
    kept += [i for i in aside(planned) if i not in kept]
    return dump(have.values(), kept)
