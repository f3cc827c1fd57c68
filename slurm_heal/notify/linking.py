"""The link every notification that needs a person carries (SPEC O7, issue 40): made
when the event is queued, from the state the cycle left, so that it names the proposal
the message is about (`slurm_heal.links`).

An approval, a lemon's or a hand-over's notice about a remediation links to that
remediation's page with a signed token (the page offers approve/deny while the proposal
is the one the message was about); an incident's links to its node's page; the breaker's
to the controls page. Nothing here can fail a cycle: a key that cannot be read or written
is logged once, and the message goes out with a plain link (the page still needs a
login, and decisions are made there).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

from slurm_heal import links
from slurm_heal.errors import ConfigError
from slurm_heal.models import State
from slurm_heal.notify.events import NEEDS_PERSON, Event

log = logging.getLogger("slurm_heal.notify")


class Linker:
    """Adds the console link to the events that need a person."""

    def __init__(self, public_url: str, secret_file: Path, ttl: timedelta,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.public_url = public_url
        self.secret_file = secret_file
        self.ttl = ttl
        self.clock = clock
        self._secret: bytes | None = None
        self._warned = False

    def secret(self) -> bytes | None:
        if self._secret is None:
            try:
                self._secret = links.ensure_secret(self.secret_file)
            except ConfigError as exc:
                if not self._warned:
                    self._warned = True
                    log.error("notification links go out unsigned (no approve/deny from "
                              "them): %s", exc)
                return None
        return self._secret

    def __call__(self, event: Event, state: State) -> Event:
        if event.kind not in NEEDS_PERSON or event.link:
            return event
        rem = state.get(event.remediation) if event.remediation else None
        if rem is not None:
            secret = self.secret()
            token = (links.sign(secret, links.claims_for(rem, self.clock(), self.ttl))
                     if secret is not None and not rem.phase.terminal else None)
            link = links.url(self.public_url, f"/remediations/{rem.id}", token)
        elif event.kind == "breaker":
            link = links.url(self.public_url, "/controls")
        elif event.node:
            link = links.url(self.public_url, f"/nodes/{event.node}")
        else:
            link = links.url(self.public_url, "/")
        return event.model_copy(update={"link": link})
