"""TLS and basic auth for ``/metrics``, from a web config file as Prometheus' exporters take
it (the exporter-toolkit's ``--web.config.file``; issue 38).

The ``[metrics]`` section names it (``web_config = "/etc/slurm-heal/metrics-web.yml"``; a
relative path is read beside the config file)::

    tls_server_config:
      cert_file: /etc/slurm-heal/metrics.crt
      key_file: /etc/slurm-heal/metrics.key
      # client certificates (mutual TLS), optional:
      client_auth_type: RequireAndVerifyClientCert   # or VerifyClientCertIfGiven, NoClientCert
      client_ca_file: /etc/slurm-heal/prometheus-ca.crt
      min_version: TLS12                               # the default; TLS13 allowed
    basic_auth_users:
      prometheus: $2y$10$...   # a bcrypt hash: `htpasswd -nBC 10 "" | tr -d ':\\n'`

The keys and values are the exporter-toolkit's; a key it has that is not served here
(``http_server_config``, ``cipher_suites``, ``RequestClientCert``...) is refused by name,
never ignored: an operator who asked for it must not believe it is in force. Passwords are
bcrypt hashes only, as there (the ``bcrypt`` package checks them; a right password is
remembered for the process, by its SHA-256, so a scrape every 15 s does not pay bcrypt's
cost each time).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_heal.errors import ConfigError

# The exporter-toolkit's client_auth_type values this server gives (Python's ssl cannot
# ask for a certificate without verifying it: RequestClientCert, RequireAnyClientCert).
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
            "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version",
            "max_version"}
TOP_KEYS = {"tls_server_config", "basic_auth_users"}


@dataclass(frozen=True)
class WebConfig:
    """What the file asks for: a TLS context (None: plain HTTP) and the users."""

    source: str = ""
    tls: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)  # name -> bcrypt hash


def _refuse_unknown(table: dict[str, Any], known: set[str], where: str, source: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{source}: {where}{', '.join(unknown)} is not served by slurm-heal "
                          f"(known: {', '.join(sorted(known))})")


def _file(value: Any, key: str, source: str, base: Path) -> Path:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{source}: tls_server_config.{key} must be a file path")
    path = Path(value) if Path(value).is_absolute() else base / value
    if not path.is_file():
        raise ConfigError(f"{source}: tls_server_config.{key}: {path} is not a readable file")
    return path


def _tls(table: Any, source: str, base: Path) -> ssl.SSLContext | None:
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: tls_server_config must be a mapping")
    _refuse_unknown(table, TLS_KEYS, "tls_server_config.", source)
    if "cert_file" not in table or "key_file" not in table:
        raise ConfigError(f"{source}: tls_server_config needs cert_file and key_file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert = _file(table["cert_file"], "cert_file", source, base)
    key = _file(table["key_file"], "key_file", source, base)
    try:
        ctx.load_cert_chain(str(cert), str(key))
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"{source}: tls_server_config: {cert} with {key} cannot be "
                          f"loaded: {exc}") from exc
    auth = table.get("client_auth_type", "NoClientCert")
    if auth not in CLIENT_AUTH:
        raise ConfigError(f"{source}: tls_server_config.client_auth_type {auth!r}: use one of "
                          f"{', '.join(CLIENT_AUTH)}")
    ctx.verify_mode = CLIENT_AUTH[auth]
    if "client_ca_file" in table:
        ca = _file(table["client_ca_file"], "client_ca_file", source, base)
        try:
            ctx.load_verify_locations(cafile=str(ca))
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"{source}: tls_server_config.client_ca_file {ca}: {exc}") \
                from exc
    elif auth != "NoClientCert":
        raise ConfigError(f"{source}: tls_server_config.client_auth_type {auth} needs "
                          "client_ca_file (the CA that signs Prometheus' certificate)")
    for bound, default in (("min_version", "TLS12"), ("max_version", None)):
        name = table.get(bound, default)
        if name is None:
            continue
        if name not in VERSIONS:
            raise ConfigError(f"{source}: tls_server_config.{bound} {name!r}: use one of "
                              f"{', '.join(VERSIONS)}")
        setattr(ctx, bound, VERSIONS[name])
    return ctx


def _users(table: Any, source: str) -> dict[str, bytes]:
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: basic_auth_users must map user names to bcrypt hashes")
    out: dict[str, bytes] = {}
    for name, hashed in table.items():
        if not isinstance(name, str) or not name or ":" in name:
            raise ConfigError(f"{source}: basic_auth_users: {name!r} is not a user name")
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            raise ConfigError(f"{source}: basic_auth_users.{name}: the password must be a "
                              "bcrypt hash ($2y$..., e.g. from `htpasswd -nBC 10 \"\" | tr -d "
                              "':\\n'`), never the password itself")
        out[name] = hashed.encode()
    if out:
        try:
            import bcrypt  # noqa: F401  (the controller extra has it)
        except ImportError as exc:
            raise ConfigError(f"{source}: basic_auth_users needs the bcrypt package: pip "
                              "install 'slurm-heal[controller]'") from exc
    return out


def load(path: Path | str) -> WebConfig:
    """The web config file at ``path``; ConfigError naming the key for what it refuses."""
    import yaml

    path = Path(path)
    source = str(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the metrics web config: "
                          f"{exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not YAML: {exc}") from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: a web config is a mapping (tls_server_config, "
                          "basic_auth_users)")
    _refuse_unknown(raw, TOP_KEYS, "", source)
    return WebConfig(source=source, tls=_tls(raw.get("tls_server_config"), source, path.parent),
                     users=_users(raw.get("basic_auth_users"), source))


class BasicAuth:
    """A WSGI app behind basic auth: 401 with a challenge unless a user of ``users`` sent
    the password of its bcrypt hash."""

    def __init__(self, app: Callable[..., Iterable[bytes]], users: dict[str, bytes],
                 realm: str = "slurm-heal metrics") -> None:
        self.app = app
        self.users = users
        self.realm = realm
        self._good: set[tuple[str, bytes]] = set()  # (user, sha256(password)) checked right
        self._lock = threading.Lock()

    def allowed(self, header: str) -> bool:
        import bcrypt

        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, sep, password = base64.b64decode(value.strip(), validate=True) \
                .decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        if not sep or hashed is None:
            return False
        digest = hashlib.sha256(hashed + b"\0" + password.encode()).digest()
        with self._lock:
            if any(u == user and hmac.compare_digest(d, digest) for u, d in self._good):
                return True
        try:
            ok = bcrypt.checkpw(password.encode(), hashed)
        except ValueError:  # a hash bcrypt cannot read
            return False
        if ok:
            with self._lock:
                self._good.add((user, digest))
        return bool(ok)

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        if self.allowed(str(environ.get("HTTP_AUTHORIZATION", ""))):
            return self.app(environ, start_response)
        start_response("401 Unauthorized", [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("WWW-Authenticate", f'Basic realm="{self.realm}", charset="UTF-8"')])
        return [b"Unauthorized\n"]
