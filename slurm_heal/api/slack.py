"""Slack's button presses (SPEC O7, issue 40): ``POST /api/v1/slack/interactions``, the
app's "Interactivity Request URL".

Every press is checked before anything is read from it: Slack's request signature
(``X-Slack-Signature`` over ``v0:{X-Slack-Request-Timestamp}:{raw body}`` with the app's
signing secret, compared in constant time by slack-sdk's `SignatureVerifier`, which also
refuses a timestamp more than five minutes away). Then the Slack member is mapped to a
console user (``[notify.slack] users``), whose role is the console's (the token file,
or ``[api] proxy_users``): anyone unmapped, unknown or a viewer is refused, and the
message says so. A press decides the proposal its message was about or nothing: a
remediation approved elsewhere, withdrawn, escalated or already decided is refused in
words (`slurm_heal.links.stale`). Two presses are one decision: the press's command id
comes from the message and the button (the API's idempotency keys), and a decision
already on its way to the controller is said, not repeated. The decision is queued as
the console's are, with channel ``slack`` (P4), and the message is updated (``chat.update``)
with the outcome and who decided.

It never decides itself: it writes the store's inbox, as every face of slurm-heal does.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from slurm_heal.api.auth import Principal
from slurm_heal.errors import ConfigError, HealError
from slurm_heal.sections import SlackSettings

if TYPE_CHECKING:
    from slurm_heal.api.app import ApiApp
    from slurm_heal.notify.slack import Slack

log = logging.getLogger("slurm_heal.api")

WINDOW_S = 5 * 60  # Slack's own advice: refuse a timestamp further away than this


@dataclass(frozen=True)
class Press:
    """One press of Approve or Deny, as Slack sent it."""

    user: str  # the Slack member id
    user_name: str
    action: str  # "approve" or "deny"
    remediation: str
    node: str
    generation: str
    channel: str  # where the message is
    ts: str  # the message's timestamp (its id in the channel)
    blocks: list[dict[str, Any]]


class Refused(Exception):
    """A press that decides nothing; its words go into the message."""

    def __init__(self, words: str, *, decided: bool = False) -> None:
        super().__init__(words)
        self.words = words
        self.decided = decided  # the proposal is over: the buttons go


def parse(body: bytes) -> Press | None:
    """The press in an interaction's form body; None for anything else (the console
    link button, another kind of interaction). ValueError when it is malformed."""
    form = parse_qs(body.decode("utf-8"), strict_parsing=False)
    raw = form.get("payload", [""])[0]
    doc = json.loads(raw)
    if not isinstance(doc, dict) or doc.get("type") != "block_actions":
        return None
    actions = doc.get("actions") or []
    if not actions or not isinstance(actions[0], dict):
        return None
    action = actions[0].get("action_id")
    if action not in ("approve", "deny"):
        return None
    value = json.loads(actions[0].get("value") or "{}")
    user = doc.get("user") or {}
    message = doc.get("message") or {}
    channel = (doc.get("channel") or {}).get("id") or (doc.get("container") or {}).get(
        "channel_id", "")
    ts = message.get("ts") or (doc.get("container") or {}).get("message_ts", "")
    if not isinstance(value, dict) or not value.get("r") or not user.get("id"):
        raise ValueError("the press names no remediation or no user")
    return Press(user=str(user["id"]), user_name=str(user.get("username") or user["id"]),
                 action=str(action), remediation=str(value["r"]), node=str(value.get("n")),
                 generation=str(value.get("g")), channel=str(channel), ts=str(ts),
                 blocks=list(message.get("blocks") or []))


class Interactions:
    """serve's side of Slack: the signature, the person, the decision, the message."""

    def __init__(self, app: ApiApp, settings: SlackSettings, *, slack: Slack | None = None,
                 clock: Any = None) -> None:
        from slack_sdk.signature import SignatureVerifier

        from slurm_heal.notify.slack import read_token

        self.app = app
        self.settings = settings
        if settings.signing_secret_file is None:
            raise ConfigError("[notify.slack] signing_secret_file is unset: a press cannot "
                              "be told from a forgery, so none is taken",
                              key="notify.slack.signing_secret_file")
        secret = read_token(settings.signing_secret_file, "the Slack signing secret")
        self.verifier = (SignatureVerifier(secret) if clock is None
                         else SignatureVerifier(secret, clock=clock))
        self._slack = slack
        # One press at a time is checked and queued: two people pressing at once make
        # one decision, the second told it is already on its way (SPEC O7).
        self._deciding = threading.Lock()

    def slack(self) -> Slack:
        if self._slack is None:
            from slurm_heal.notify.slack import Slack

            self._slack = Slack(self.settings)
        return self._slack

    def verified(self, body: bytes, timestamp: str | None, signature: str | None) -> bool:
        """Slack's signature over the raw body, within five minutes (constant time)."""
        if not timestamp or not signature or not timestamp.strip().isdigit():
            return False
        return bool(self.verifier.is_valid(body=body, timestamp=timestamp,
                                           signature=signature))

    def principal(self, press: Press) -> Principal:
        """The console user the Slack member acts as, with the console's role."""
        name = self.settings.users.get(press.user)
        if name is None:
            raise Refused(f"<@{press.user}> is not mapped to a console user ([notify.slack] "
                          "users): nothing was decided")
        role: Any = None
        tokens = self.app.auth.tokens
        if tokens is not None:
            role = next((e.role for e in tokens.entries() if e.name == name), None)
        if role is None:
            role = self.app.settings.proxy_users.get(name)
        if role is None:
            raise Refused(f"<@{press.user}> maps to {name}, whom the console does not know "
                          "(no token, no proxy user): nothing was decided")
        if role != "operator":
            raise Refused(f"<@{press.user}> ({name}) has the console's viewer role, which "
                          "may only look: an operator approves or denies. Nothing was "
                          "decided")
        return Principal(name, role, "slack")

    def check(self, press: Press) -> None:
        """SPEC O7: the press decides the proposal its message was about, or nothing."""
        from slurm_heal.links import Claims, stale

        rem = self.app.remediation_of(press.remediation)
        if rem is None:
            raise Refused(f"no remediation {press.remediation} any more: nothing was "
                          "decided", decided=True)
        claims = Claims(remediation=press.remediation, node=press.node, action=rem.action.value,
                        generation=press.generation, expires=0)
        why = stale(claims, rem)
        if why is not None:
            raise Refused(f"Refused: {why}", decided=True)
        state = self.app.src.state()
        for c in state.inbox:
            if c.remediation == rem.id and c.kind in ("approve", "deny"):
                raise Refused(f"{c.kind}d by {c.by}{c.via} already, on its way to the "
                              "controller: one decision is enough", decided=True)

    def handle(self, body: bytes) -> None:
        """One verified interaction: decide, then tell the message."""
        try:
            press = parse(body)
        except (ValueError, UnicodeDecodeError) as exc:
            log.warning("a Slack interaction could not be read: %s", exc)
            return
        if press is None:
            return
        try:
            who = self.principal(press)
            key = f"slack:{press.channel}:{press.ts}:{press.action}"
            with self._deciding:
                self.check(press)
                self.app.write(who, press.action,  # type: ignore[arg-type]
                               target=press.remediation,
                               reason=f"from Slack by <@{press.user}>",
                               idem_key=key[:200], fp=f"slack|{press.remediation}|"
                               f"{press.generation}|{press.action}", channel="slack",
                               generation=press.generation)
        except HealError as exc:  # the store moved on between the check and the write
            self.tell(press, f"Refused: {exc}. Nothing was decided.", decided=False)
            return
        except Refused as exc:
            log.info("Slack press by %s on %s refused: %s", press.user, press.remediation,
                     exc.words)
            self.tell(press, exc.words, decided=exc.decided)
            return
        at = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        word = "Approved" if press.action == "approve" else "Denied"
        log.info("Slack: %s %s by %s (%s)", word.lower(), press.remediation, who.name,
                 press.user)
        self.tell(press, f"*{word}* by {who.name} (<@{press.user}>) via Slack at {at}: the "
                  "controller acts on it at its next cycle.", decided=True)

    def tell(self, press: Press, words: str, *, decided: bool) -> None:
        from slurm_heal.notify.slack import with_note

        if not press.channel or not press.ts:
            return
        self.slack().update(press.channel, press.ts, text=words,
                            blocks=with_note(press.blocks, words, decided=decided))
