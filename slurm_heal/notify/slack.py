"""Approval requests in Slack with Approve / Deny buttons (SPEC O7, issue 40).

An approval event becomes a Block Kit message: what waits (the node, the fault, the
action), the rule that asks a person (P2), what the fault means and NVIDIA's own advice
for an Xid (the catalog's resolution buckets), the evidence as the node check published
it (D7, cut to what a message holds), the buttons, and the signed console link (O7).
The button's value names the remediation, its node and its proposal's generation: a
press decides that proposal or nothing (`slurm_heal.api.slack`).

Sent with slack-sdk's `WebClient` (``chat.postMessage``; ``chat.update`` once a person
decided) at ``[notify.slack] base_url`` (Slack's Web API; a test's server on 127.0.0.1).
Like every delivery, a failure is retried by the queue and never reaches a cycle.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from slurm_heal.errors import ConfigError, HealError
from slurm_heal.notify.events import Event
from slurm_heal.sections import SlackSettings

log = logging.getLogger("slurm_heal.notify")

ACTIONS_BLOCK = "slurm-heal:decide"
NOTE_BLOCK = "slurm-heal:note"
MAX_TEXT = 2900  # a section's text holds 3,000 characters


def read_token(path: Path, what: str = "the Slack bot token") -> str:
    """A secret from a file (stripped); ConfigError naming the key when unreadable."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc}", key="notify.slack") from None
    if not text:
        raise ConfigError(f"{path} is empty: it must hold {what}", key="notify.slack")
    return text


def _cut(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[:limit - 20] + "\n... (cut)"


def _advice(fault: str | None) -> tuple[str, str]:
    """(what the fault means, NVIDIA's advice) from the catalog; "" for what it lacks."""
    if not fault:
        return "", ""
    from slurm_heal import catalog

    try:
        f = catalog.load().get(fault)
    except HealError:
        return "", ""
    nvidia = ""
    if f.bucket:
        nvidia = f"{f.mnemonic or fault}: immediate action {f.bucket}" + (
            f", then {f.investigatory}" if f.investigatory else "")
    return f.explanation, nvidia


def button_value(event: Event) -> str:
    """What a button carries back: the remediation, its node and the proposal's
    generation (SPEC O7: a press decides that proposal or nothing)."""
    return json.dumps({"r": event.remediation, "n": event.node, "g": event.generation},
                      separators=(",", ":"))


def approval_blocks(event: Event) -> list[dict[str, Any]]:
    """The Block Kit message of an approval event."""
    from slurm_heal.readmodel import rulewords

    meaning, nvidia = _advice(event.fault)
    lines = [f"*{event.node}*: `{event.fault}` waits for a person's approval."]
    if event.rule:
        lines.append(f"*Rule:* `{event.rule}`: {rulewords.short(event.rule)}")
    if meaning:
        lines.append(f"*What it means:* {meaning}")
    if nvidia:
        lines.append(f"*NVIDIA's advice:* {nvidia}")
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(event.title, 150)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _cut("\n".join(lines))}},
    ]
    if event.evidence:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _cut(
            "*Evidence* (as the node check published it):\n```"
            + json.dumps(list(event.evidence), indent=1) + "```")}})
    elements: list[dict[str, Any]] = [
        {"type": "button", "action_id": "approve", "style": "primary",
         "text": {"type": "plain_text", "text": "Approve"}, "value": button_value(event)},
        {"type": "button", "action_id": "deny", "style": "danger",
         "text": {"type": "plain_text", "text": "Deny"}, "value": button_value(event),
         "confirm": {"title": {"type": "plain_text", "text": "Deny?"},
                     "text": {"type": "plain_text", "text": f"Deny {event.title}?"},
                     "confirm": {"type": "plain_text", "text": "Deny"},
                     "deny": {"type": "plain_text", "text": "Keep waiting"}}},
    ]
    if event.link:
        elements.append({"type": "button", "action_id": "open",
                         "text": {"type": "plain_text", "text": "Open in the console"},
                         "url": event.link})
    blocks.append({"type": "actions", "block_id": ACTIONS_BLOCK, "elements": elements})
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": (
        f"remediation `{event.remediation}` · proposal `{event.generation}` · "
        "slurm-heal (SPEC P2, O7)")}]})
    return blocks


def with_note(blocks: list[dict[str, Any]], note: str, *,
              decided: bool) -> list[dict[str, Any]]:
    """The message's blocks with ``note`` in place of an earlier note; without the
    buttons once ``decided`` (the outcome, who decided)."""
    out = [b for b in blocks if b.get("block_id") != NOTE_BLOCK
           and not (decided and b.get("block_id") == ACTIONS_BLOCK)]
    out.append({"type": "section", "block_id": NOTE_BLOCK,
                "text": {"type": "mrkdwn", "text": _cut(note)}})
    return out


class Slack:
    """The Slack Web API, as slurm-heal uses it (slack-sdk's WebClient)."""

    def __init__(self, settings: SlackSettings, token: str | None = None) -> None:
        from slack_sdk import WebClient

        self.settings = settings
        self.client = WebClient(token=token or read_token(settings.token_file),
                                base_url=settings.base_url, timeout=int(settings.timeout))

    def wants(self, event: Event) -> bool:
        kinds = self.settings.kinds
        return ("*" in kinds or event.kind in kinds) and (
            event.kind != "approval" or bool(event.remediation))

    def send(self, event: Event) -> bool:
        """Post ``event`` (an approval with its buttons; anything else as text)."""
        from slack_sdk.errors import SlackApiError

        blocks = approval_blocks(event) if event.kind == "approval" else None
        text = f"slurm-heal: {event.title}" if blocks else _cut(
            f"slurm-heal: {event.title}\n{event.body()}", 3900)
        try:
            answer = self.client.chat_postMessage(channel=self.settings.channel, text=text,
                                                  blocks=blocks)
        except SlackApiError as exc:
            log.warning("Slack refused %s: %s", event.id, exc.response.get("error"))
            return False
        except OSError as exc:  # URLError, a timeout: the queue retries
            log.warning("Slack not reached for %s: %s", event.id, exc)
            return False
        return bool(answer.get("ok"))

    def update(self, channel: str, ts: str, text: str,
               blocks: list[dict[str, Any]]) -> bool:
        """Replace a message (the outcome of a press); False when Slack refused it."""
        from slack_sdk.errors import SlackApiError

        try:
            answer = self.client.chat_update(channel=channel, ts=ts, text=text,
                                             blocks=blocks)
        except (SlackApiError, OSError) as exc:
            log.warning("Slack did not update the message %s in %s: %s", ts, channel, exc)
            return False
        return bool(answer.get("ok"))
