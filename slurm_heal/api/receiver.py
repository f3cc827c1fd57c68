"""``POST /api/v1/sources/alertmanager``: Alertmanager's webhook receiver (SPEC D13), and
``GET /api/v1/sources``: the site's alerts as stored.

The receiver never decides and never acts, like every write of `serve`: it validates
the message (version 4), maps each alert by the policy's ``[[sources.alertmanager.map]]``
rules (`sources.alertmanager`), asks Slurm whether each node exists (an alert for a node
Slurm does not know is kept with that problem and shown, never acted on or guessed), and
puts the alerts into the store (`store.Store.put_source_alerts`: one entry per
fingerprint and node, Q3). The daemon's next cycle reads them as alerts with their
payload as evidence (P1, D7); a resolved one withdraws what was not yet acted on (L4).

Alertmanager authenticates like any client: ``http_config.authorization`` with a token
of the server's token file (operator role), sent as ``Authorization: Bearer``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import ValidationError

from slurm_heal.errors import HealError, NotFound
from slurm_heal.location import Location
from slurm_heal.slurm.base import SlurmClient
from slurm_heal.sources import alertmanager
from slurm_heal.sources.settings import Sources
from slurm_heal.sources.stored import SOURCES_KEY, SourceAlert, load

log = logging.getLogger("slurm_heal.api")

MAX_SOURCE_BODY = 4 * 1024 * 1024  # a group of a thousand alerts with their labels


def receive(raw: Any, conf: Sources, loc: Location, slurm: Callable[[], SlurmClient],
            now: datetime | None = None) -> tuple[int, dict[str, Any]]:
    """Take one webhook message (parsed JSON); (HTTP status, answer). ValueError with
    the words for a 422 when the message is not Alertmanager's version 4."""
    from slurm_heal.store import Store

    now = now or datetime.now(timezone.utc)
    if not isinstance(raw, dict):
        raise ValueError("the body must be Alertmanager's webhook message (a JSON object)")
    try:
        got = alertmanager.from_webhook(raw, conf.alertmanager, now)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(body)"
        raise ValueError(f"not an Alertmanager webhook message (version 4): {where}: "
                         f"{err['msg']}" + (f" (+{exc.error_count() - 1} more)"
                                            if exc.error_count() > 1 else "")) from None
    got = [_known(a, slurm) for a in got]
    Store(loc.state_dir).put_source_alerts(
        got, now, timedelta(hours=conf.alertmanager.keep_resolved_hours))
    for a in got:
        log.info("alertmanager alert %s %s node=%s fault=%s%s", a.id, a.status,
                 a.node or "-", a.fault or "-", f" ({a.problem})" if a.problem else "")
    answer: dict[str, Any] = {
        "received": len(got),
        "mapped": sum(1 for a in got if a.node and a.fault and not a.problem),
        "alerts": [alertmanager.explain(a) for a in got]}
    truncated = raw.get("truncatedAlerts")
    if isinstance(truncated, int) and truncated > 0:
        # Alertmanager's max_alerts cut the group: those alerts never reach slurm-heal
        answer["warning"] = (f"Alertmanager left out {truncated} alert(s) of this group "
                             "(max_alerts): set max_alerts: 0 on the receiver")
        log.warning("alertmanager: %s", answer["warning"])
    return 200, answer


def _known(a: SourceAlert, slurm: Callable[[], SlurmClient]) -> SourceAlert:
    """An alert whose node Slurm does not know says so (never guessed); when Slurm does
    not answer, the daemon's snapshot decides (an unknown node's alert is never used)."""
    if not a.node or a.problem:
        return a
    try:
        slurm().node(a.node)
    except NotFound:
        return a.model_copy(update={"problem": f"Slurm does not know a node {a.node!r}: "
                                    "recorded and shown, never acted on (check the "
                                    f"rule's node_label; {a.rule})"})
    except HealError as exc:
        log.warning("could not check node %s with Slurm (%s); kept", a.node, exc)
    return a


def listing(state_data: dict[str, Any]) -> dict[str, Any]:
    """``GET /api/v1/sources``: each stored alert of the site's monitors, newest first."""
    items = sorted(load(state_data.get(SOURCES_KEY)), key=lambda a: a.updated, reverse=True)
    return {"alerts": [{**alertmanager.explain(a), "received": a.received.isoformat(),
                        "updated": a.updated.isoformat(), "payload": a.payload}
                       for a in items]}
