"""ISO-8601 times as slurm-heal reads them, the same on every Python it declares (issue 38).

`datetime.fromisoformat` reads a trailing ``Z`` (UTC) from Python 3.11 on; 3.10 reads only
what `datetime.isoformat` writes and refuses ``2026-01-02T03:04:05Z``. pydantic writes a
UTC time with ``Z`` (the store, the ledger, the API's JSON), and so do other programs (a
script provider, a monitor), so a time slurm-heal reads goes through `parse`. Light on
purpose: the node check imports it.
"""

from __future__ import annotations

from datetime import datetime


def parse(text: str) -> datetime:
    """``datetime.fromisoformat(text)``, reading a trailing ``Z`` as UTC on 3.10 too;
    ValueError for anything else it cannot read."""
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    return datetime.fromisoformat(text)
