"""Signed links to the decision a person is asked for (SPEC O7, issue 40).

Every notification that needs a person carries a link to the console's page for its
remediation (or its node, for an incident) there, at ``[api] public_url``. The link
carries a short-lived token: ``<payload>.<mac>``, both base64url, the payload the
remediation id, its node, its action, the proposal's generation
(`models.Remediation.generation`) and an expiry, the MAC an HMAC-SHA256 of the payload
with a key only the daemon and serve read (``[api] link_secret_file``, else the state
directory's ``link-secret``). Verified in constant time (`hmac.compare_digest`).

A link never decides: its GET only shows the page (the console's login and roles apply),
and the page says in words when the link is about another proposal than the one there
now (older, escalated, decided, another node) or has expired; then it offers nothing to
press. A decision made from a valid link carries the generation the person saw, and the
engine refuses it if the proposal changed meanwhile (`policy.requests`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import stat
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import quote

from slurm_heal import fsio
from slurm_heal.errors import ConfigError
from slurm_heal.models import Phase, Remediation

SECRET_FILE = "link-secret"  # in the state directory, when [api] names none
MIN_SECRET = 32  # characters of a secret file


@dataclass(frozen=True)
class Claims:
    """What a link's token says (all of it signed)."""

    remediation: str
    node: str
    action: str
    generation: str
    expires: int  # UNIX seconds

    def payload(self) -> bytes:
        return json.dumps({"r": self.remediation, "n": self.node, "a": self.action,
                           "g": self.generation, "e": self.expires},
                          separators=(",", ":"), sort_keys=True).encode()


def secret_path(configured: Path | None, state_dir: Path) -> Path:
    return configured if configured is not None else state_dir / SECRET_FILE


def read_secret(path: Path) -> bytes:
    """The key in ``path``; ConfigError (what to do) when it is missing, readable by
    others or too short."""
    try:
        st = path.stat()
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the link secret {path}: {exc}",
                          key="api.link_secret_file") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path}: others may read or write it (mode "
                          f"{stat.S_IMODE(st.st_mode):o}); chmod 600 it",
                          key="api.link_secret_file")
    if len(text) < MIN_SECRET:
        raise ConfigError(f"{path}: a link secret must have at least {MIN_SECRET} "
                          "characters (`openssl rand -hex 32`)", key="api.link_secret_file")
    return text.encode()


def ensure_secret(path: Path) -> bytes:
    """The key in ``path``, made first (random, mode 0600, written atomically) when there
    is no file: the daemon's first link makes the state directory's own."""
    if not path.exists():
        try:
            fsio.atomic_write(path, secrets.token_hex(32) + "\n", 0o600)
        except OSError as exc:
            raise ConfigError(f"cannot write the link secret {path}: {exc}",
                              key="api.link_secret_file") from None
    return read_secret(path)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(secret: bytes, claims: Claims) -> str:
    payload = claims.payload()
    mac = hmac.new(secret, payload, hashlib.sha256).digest()
    return f"{_b64(payload)}.{_b64(mac)}"


def claims_for(rem: Remediation, now: datetime, ttl: timedelta) -> Claims:
    return Claims(remediation=rem.id, node=rem.node, action=rem.action.value,
                  generation=rem.generation, expires=int((now + ttl).timestamp()))


def verify(secret: bytes, token: str, now: datetime) -> Claims | str:
    """The claims of a token this key signed and that has not expired, or why not (words
    for the person who followed the link)."""
    head, dot, tail = token.partition(".")
    if not dot or len(token) > 1024:
        return "this link's token is malformed (cut short by the mail or chat program?)"
    try:
        payload, mac = _unb64(head), _unb64(tail)
    except ValueError:
        return "this link's token is malformed (cut short by the mail or chat program?)"
    good = hmac.new(secret, payload, hashlib.sha256).digest()
    if not hmac.compare_digest(good, mac):
        return ("this link was not signed by this slurm-heal (or its key has changed since): "
                "it decides nothing")
    try:
        doc = json.loads(payload)
        claims = Claims(remediation=str(doc["r"]), node=str(doc["n"]), action=str(doc["a"]),
                        generation=str(doc["g"]), expires=int(doc["e"]))
    except (ValueError, KeyError, TypeError):
        return "this link's token is malformed"
    if now.timestamp() > claims.expires:
        ended = datetime.fromtimestamp(claims.expires, timezone.utc)
        return (f"this link expired at {ended:%Y-%m-%d %H:%M:%S}Z: links are short-lived "
                "(SPEC O7); decide from this page's current state")
    return claims


def stale(claims: Claims, rem: Remediation) -> str | None:
    """Why a valid link no longer decides ``rem`` (words), or None when it does: the
    remediation is still the proposal the link was sent for and waits for a person."""
    if claims.remediation != rem.id:
        return f"this link is for {claims.remediation}, not {rem.id}"
    if claims.node != rem.node:
        return (f"this link is for node {claims.node}, but {rem.id} is on {rem.node}: "
                "it decides nothing")
    if rem.phase.terminal or rem.phase is not Phase.PROPOSED:
        who = f" by {rem.approved_by}" if rem.approved_by else ""
        return (f"already decided: {rem.id} is {rem.phase.value}{who} since the link was "
                "sent; the link decides nothing")
    if claims.action != rem.action.value or claims.generation != rem.generation:
        return (f"this link is for an older proposal ({claims.action} of {claims.node}); "
                f"{rem.id} is now a proposal to {rem.action.value}: decide that one from "
                "this page")
    if not rem.data.approval_pending:
        return f"{rem.id} does not wait for a person's approval now"
    return None


def url(public_url: str, path: str, token: str | None = None) -> str:
    """``public_url`` + ``path`` (quoted), with the token as ``?link=``."""
    out = public_url.rstrip("/") + quote(path, safe="/")
    return f"{out}?link={token}" if token else out
