"""Who is asking (SPEC O5, P4): named bearer tokens from a file, or a trusted reverse
proxy's user header. Roles: ``viewer`` (reads) and ``operator`` (reads and writes).

The token file is TOML, one ``[[token]]`` per person or robot::

    [[token]]
    name = "alice"            # what the audit record says: "approved by alice"
    role = "operator"         # or "viewer"
    sha256 = "9f86d081..."    # hex SHA-256 of the token (`slurm-heal api-token` writes it)
    # token = "..."           # or the token itself (then the file must not be readable
    #                           by others)

Tokens are compared in constant time (`hmac.compare_digest` on their SHA-256, against
every entry, without stopping at a match) and never logged. The file is read again when
it changes, so a revoked token stops working without a restart. A file anyone may write,
or one with plain tokens that anyone may read, is refused.

A proxy's user header is believed only from the configured proxy addresses, and only
with the proxy's secret (``proxy_secret_header``, compared in constant time: issue 22);
from anyone else, or without it, it is ignored (and said once in the log).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
import stat
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_heal.api.settings import NAME, ApiSettings, Role
from slurm_heal.errors import ConfigError, not_toml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

log = logging.getLogger("slurm_heal.api")

ROLES: tuple[Role, ...] = ("viewer", "operator")
MIN_TOKEN_LEN = 16


@dataclass(frozen=True)
class Principal:
    """A person (or robot) the API knows, with the role they act in."""

    name: str
    role: Role
    via: str  # "token" or "proxy"

    @property
    def operator(self) -> bool:
        return self.role == "operator"


@dataclass(frozen=True)
class TokenEntry:
    name: str
    role: Role
    digest: bytes  # SHA-256 of the token


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def parse_tokens(text: str, source: str) -> tuple[TokenEntry, ...]:
    """The entries of a token file; ConfigError names the file, the entry and why."""
    try:
        doc = tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or an int of over 4,300 digits (issue 34)
        raise not_toml(exc, text, source) from None
    unknown = set(doc) - {"token"}
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(sorted(unknown))}: the file holds "
                          "[[token]] entries only", file=source)
    raw = doc.get("token", [])
    if not isinstance(raw, list):
        raise ConfigError("token must be an array of tables ([[token]])", file=source)
    out: list[TokenEntry] = []
    names: set[str] = set()
    for i, item in enumerate(raw):
        key = f"token[{i}]"
        if not isinstance(item, dict):
            raise ConfigError("not a table", file=source, key=key)
        extra = set(item) - {"name", "role", "sha256", "token"}
        if extra:
            raise ConfigError(f"unknown key(s) {', '.join(sorted(extra))}", file=source, key=key)
        name, role = item.get("name"), item.get("role")
        if not isinstance(name, str) or not NAME.match(name):
            raise ConfigError("name must be letters, digits, . _ @ + - (at most 64)",
                              file=source, key=f"{key}.name")
        if name in names:
            raise ConfigError(f"{name!r} is named twice", file=source, key=f"{key}.name")
        names.add(name)
        if role not in ROLES:
            raise ConfigError(f"role must be one of {', '.join(ROLES)}, not {role!r}",
                              file=source, key=f"{key}.role")
        sha, plain = item.get("sha256"), item.get("token")
        if (sha is None) == (plain is None):
            raise ConfigError("give exactly one of sha256 or token", file=source, key=key)
        if plain is not None:
            if not isinstance(plain, str) or len(plain) < MIN_TOKEN_LEN:
                raise ConfigError(f"a token must be at least {MIN_TOKEN_LEN} characters",
                                  file=source, key=f"{key}.token")
            value = digest(plain)
        else:
            try:
                value = bytes.fromhex(sha) if isinstance(sha, str) else b""
            except ValueError:
                value = b""
            if len(value) != 32:
                raise ConfigError("sha256 must be 64 hex digits", file=source,
                                  key=f"{key}.sha256")
        out.append(TokenEntry(name=name, role=role, digest=value))
    return tuple(out)


class TokenFile:
    """The token file, read again whenever it changes (mtime, size, inode)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._sig: tuple[int, int, int] | None = None
        self._entries: tuple[TokenEntry, ...] = ()
        self.load()

    def load(self) -> tuple[TokenEntry, ...]:
        """The entries; ConfigError when the file is missing, unsafe or malformed."""
        try:
            st = self.path.stat()
        except OSError as exc:
            raise ConfigError(f"cannot read the token file: {exc.strerror}",
                              file=str(self.path)) from None
        sig = (st.st_mtime_ns, st.st_size, st.st_ino)
        with self._lock:
            if sig == self._sig:
                return self._entries
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise ConfigError(f"others may write it (mode {stat.S_IMODE(st.st_mode):o}): "
                                  "anyone could make themselves an operator; chmod go-w",
                                  file=str(self.path))
            try:
                text = self.path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read the token file: {exc}",
                                  file=str(self.path)) from None
            entries = parse_tokens(text, str(self.path))
            if st.st_mode & stat.S_IROTH and "token" in _plain_keys(text):
                raise ConfigError(f"it holds plain tokens and anyone may read it (mode "
                                  f"{stat.S_IMODE(st.st_mode):o}); chmod o-r or store sha256 "
                                  "instead", file=str(self.path))
            if self._sig is not None:
                log.info("token file %s changed: %d token(s) now", self.path, len(entries))
            self._sig, self._entries = sig, entries
            return entries

    def entries(self) -> tuple[TokenEntry, ...]:
        """The entries now; none while the file is broken (nobody gets in until a person
        fixes it: failing closed)."""
        try:
            return self.load()
        except ConfigError as exc:
            log.error("%s; every token is refused until it is fixed", exc)
            return ()

    def check(self, token: str) -> Principal | None:
        """The principal a presented token belongs to, or None. Constant time: every
        entry is compared, whether an earlier one matched or not."""
        entries = self.entries()
        presented = digest(token)
        found: TokenEntry | None = None
        for entry in entries:
            if hmac.compare_digest(presented, entry.digest) and found is None:
                found = entry
        return Principal(found.name, found.role, "token") if found is not None else None


def _plain_keys(text: str) -> set[str]:
    doc: dict[str, Any] = tomllib.loads(text)
    return {k for item in doc.get("token", []) if isinstance(item, dict) for k in item}


def add_token(path: Path, name: str, role: Role) -> str:
    """Make a token for ``name``, append its SHA-256 to the token file (created 0600)
    and return the token (shown once, stored nowhere)."""
    if not NAME.match(name):
        raise ConfigError(f"{name!r} is not a name (letters, digits, . _ @ + -, at most 64)")
    if role not in ROLES:
        raise ConfigError(f"role must be one of {', '.join(ROLES)}")
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    if any(e.name == name for e in parse_tokens(existing, str(path))):
        raise ConfigError(f"{name!r} already has a token; remove its entry first",
                          file=str(path))
    token = new_token()
    entry = (f'\n[[token]]\nname = "{name}"\nrole = "{role}"\n'
             f'sha256 = "{digest(token).hex()}"\n')
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        fh.write(entry)
    return token


def read_proxy_secret(path: Path) -> bytes:
    """The SHA-256 of the proxy's secret in ``path`` (issue 22). Refused (ConfigError):
    a file others may read or write, or a secret shorter than 16 characters."""
    try:
        st = os.stat(path)
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the proxy secret {path}: {exc}",
                          key="api.proxy_secret_file") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path}: others may read or write it (mode "
                          f"{stat.S_IMODE(st.st_mode):o}); chmod 600 it",
                          key="api.proxy_secret_file")
    if len(text) < 16:
        raise ConfigError(f"{path}: the proxy secret must have at least 16 characters",
                          key="api.proxy_secret_file")
    return hashlib.sha256(text.encode()).digest()


class Authenticator:
    """Finds the principal of a request: a trusted proxy's user header, else a bearer
    token (API) or a console session (app.py)."""

    def __init__(self, settings: ApiSettings) -> None:
        self.settings = settings
        self.tokens = TokenFile(settings.tokens) if settings.tokens is not None else None
        self._proxies = settings.proxies()
        self._warned: set[str] = set()
        self._secret = (read_proxy_secret(settings.proxy_secret_file)
                        if settings.proxy_secret_file is not None else None)

    def trusted_proxy(self, remote: str | None) -> bool:
        if not remote or not self._proxies:
            return False
        try:
            addr = ipaddress.ip_address(remote)
        except ValueError:
            return False
        return any(addr in net for net in self._proxies)

    def from_proxy(self, remote: str | None, headers: Any) -> Principal | None:
        """The proxy's user, when the request comes from a trusted proxy and names one
        this server lets in; None otherwise (the header from anyone else is ignored)."""
        user = headers.get(self.settings.proxy_user_header)
        if not user:
            return None
        if not self.trusted_proxy(remote):
            if remote not in self._warned:
                self._warned.add(str(remote))
                log.warning("ignored the %s header from %s: not a trusted proxy "
                            "([api] trusted_proxies)", self.settings.proxy_user_header, remote)
            return None
        sent = headers.get(self.settings.proxy_secret_header) or ""
        if self._secret is None or not hmac.compare_digest(
                hashlib.sha256(sent.encode()).digest(), self._secret):
            if f"secret:{remote}" not in self._warned:
                self._warned.add(f"secret:{remote}")
                log.warning("ignored the %s header from %s: without the proxy's secret "
                            "(%s)", self.settings.proxy_user_header, remote,
                            self.settings.proxy_secret_header)
            return None
        if not NAME.match(user):
            return None
        role = self.settings.proxy_users.get(user, self.settings.proxy_default_role)
        if role == "none":
            return None
        return Principal(user, role, "proxy")

    def from_token(self, token: str) -> Principal | None:
        if self.tokens is None or not token:
            return None
        return self.tokens.check(token)

    def from_bearer(self, authorization: str | None) -> Principal | None:
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self.from_token(token.strip())
