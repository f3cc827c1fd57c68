"""`slurm-heal serve`: the HTTP API and the web console (SPEC O5), and `slurm-heal
api-token NAME`: a token for a person or a robot.

serve is a process of its own beside the daemon: it never decides and never acts. It
finds the store the way every admin command does (``--config``, ``--state-dir``,
``$SLURM_HEAL_STATE_DIR``, ...) and reads its settings from the config's ``[api]``
section; its options override them.
"""

from __future__ import annotations

import json
import logging
import signal
import ssl
import threading
from pathlib import Path
from typing import Any

import click

from slurm_heal.commands.admin import state_options
from slurm_heal.commands.jsonmode import json_option, setup_logging

log = logging.getLogger("slurm_heal.api")


def _settings(loc: Any, overrides: dict[str, Any]) -> Any:
    from slurm_heal.api.settings import api_settings
    from slurm_heal.config import load_policy

    section: dict[str, Any] = {}
    source, base = "serve options", None
    if loc.config is not None:
        section = dict(load_policy(loc.config).api)
        source, base = str(loc.config), Path(loc.config).resolve().parent
    section.update({k: v for k, v in overrides.items() if v not in (None, ())})
    return api_settings(section, source=source, base=base)


@click.command()
@click.option("--bind", default=None, metavar="HOST:PORT",
              help="Where to listen (default: [api] bind, else 127.0.0.1:8250; port 0 picks "
                   "a free one). Anything but loopback needs TLS or a trusted proxy.")
@click.option("--tokens", type=click.Path(dir_okay=False), default=None,
              help="The token file (default: [api] tokens).")
@click.option("--tls-cert", type=click.Path(dir_okay=False), default=None,
              help="Serve HTTPS with this certificate (PEM), with --tls-key.")
@click.option("--tls-key", type=click.Path(dir_okay=False), default=None,
              help="The certificate's private key (PEM).")
@click.option("--trusted-proxy", "trusted_proxies", multiple=True, metavar="ADDR",
              help="A reverse proxy (address or network) whose user header is believed "
                   "(repeatable; default: [api] trusted_proxies).")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
@state_options
@json_option(help="Log JSON lines on stderr (the listening line: {\"event\": \"listening\", "
                  "\"url\": ...}); an error is one JSON object on stdout (docs/cli.md).")
def serve(bind: str | None, tokens: str | None, tls_cert: str | None, tls_key: str | None,
          trusted_proxies: tuple[str, ...], log_level: str, state_dir: str | None,
          config: str | None, as_json: bool) -> None:
    """Serve the HTTP API and the web console (SPEC O5).

    JSON endpoints under /api/v1 (OpenAPI at /api/v1/openapi.json) for everything the
    admin CLI shows and does, and the console at / for people: overview, approvals with
    evidence, nodes, remediations, breaker and pause. Writes go into the store's inbox
    exactly as the CLI's do; the daemon acts on them. Nothing here decides or acts.
    """
    from werkzeug.serving import WSGIRequestHandler, make_server

    from slurm_heal.api.app import ApiApp
    from slurm_heal.api.settings import check_listen
    from slurm_heal.errors import ConfigError
    from slurm_heal.location import locate

    setup_logging(log_level, as_json)
    loc = locate(state_dir, config)
    absolute = {k: str(Path(v).resolve()) for k, v in
                (("tokens", tokens), ("tls_cert", tls_cert), ("tls_key", tls_key)) if v}
    settings = _settings(loc, {"bind": bind, "trusted_proxies": trusted_proxies, **absolute})
    check_listen(settings)
    context = None
    if settings.tls:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(str(settings.tls_cert), str(settings.tls_key))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load the TLS certificate {settings.tls_cert} and key "
                              f"{settings.tls_key}: {exc}", key="api.tls_cert") from None
    app = ApiApp(settings, loc, policy_file=str(loc.config) if loc.config else None)
    if not loc.state_dir.is_dir():
        log.warning("store %s does not exist yet: pages are empty and writes are refused "
                    "until a controller runs on it", loc.describe())

    class Handler(WSGIRequestHandler):
        """One log line per request: who asked is not known here, the path without its
        query string; never a header (tokens live there)."""

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            path = self.path.split("?", 1)[0]
            log.info("%s %s %s %s", self.address_string(), self.command, path, code)

    try:
        server = make_server(settings.host, settings.port, app, threaded=True,
                             request_handler=Handler, ssl_context=context)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {settings.bind}: {exc.strerror or exc}",
                          key="api.bind") from None
    host, port = str(server.server_address[0]), server.server_address[1]
    scheme = "https" if context else "http"
    shown = f"[{host}]" if ":" in host else host
    log.info("listening on %s://%s:%s/ (API /api/v1, console /); store %s; serve never "
             "decides or acts", scheme, shown, port, loc.describe(), extra={"fields": {
                 "event": "listening", "url": f"{scheme}://{shown}:{port}/",
                 "store": loc.as_json()}})

    def _stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        server.serve_forever()
    finally:
        server.server_close()


@click.command("api-token")
@click.argument("name")
@click.option("--role", type=click.Choice(["viewer", "operator"]), default="viewer",
              show_default=True, help="viewer: reads; operator: reads and writes.")
@click.option("--file", "token_file", type=click.Path(dir_okay=False), default=None,
              help="The token file serve reads (default: the config's [api] tokens).")
@click.option("--config", "config", type=click.Path(dir_okay=False), default=None,
              help="The config whose [api] tokens names the file.")
@json_option
def api_token(name: str, role: str, token_file: str | None, config: str | None,
              as_json: bool) -> None:
    """Make a token for NAME and add it to the token file (SPEC O5).

    The token is printed once and stored nowhere: the file keeps only its SHA-256. What
    NAME approves through the API or the console is recorded as NAME. serve reads the
    file again when it changes; remove an entry to revoke its token.
    """
    from slurm_heal.api.auth import add_token
    from slurm_heal.errors import ConfigError
    from slurm_heal.location import config_path

    path = Path(token_file) if token_file else None
    if path is None:
        cfg = config_path(config)
        if cfg is not None:
            from slurm_heal.api.settings import api_settings
            from slurm_heal.config import load_policy

            path = api_settings(dict(load_policy(cfg).api), str(cfg),
                                Path(cfg).resolve().parent).tokens
        if path is None:
            raise ConfigError("which token file? pass --file FILE (or set [api] tokens in "
                              "the config)")
    token = add_token(path, name, role)  # type: ignore[arg-type]
    if as_json:
        click.echo(json.dumps({"name": name, "role": role, "token": token, "file": str(path)}))
        return
    click.echo(token)
    click.echo(f"slurm-heal: added {name} ({role}) to {path}; the token above is shown once",
               err=True)
