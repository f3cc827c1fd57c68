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
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import click

from slurm_heal.commands.admin import state_options
from slurm_heal.commands.jsonmode import journal_option, json_option, setup_logging

log = logging.getLogger("slurm_heal.api")


def _settings(loc: Any, overrides: dict[str, Any]) -> Any:
    from slurm_heal.api.settings import api_settings
    from slurm_heal.config import load_policy

    section: dict[str, Any] = {}
    source, base = "serve options", None
    if loc.config is not None:
        api = load_policy(loc.config).api  # typed (issue 21): the keys the file set
        section = api.model_dump(exclude_unset=True) if api is not None else {}
        source, base = str(loc.config), Path(loc.config).resolve().parent
    section.update({k: v for k, v in overrides.items() if v not in (None, ())})
    return api_settings(section, source=source, base=base)


@click.command()
@click.option("--bind", default=None, metavar="HOST:PORT",
              help="Where to listen (default: [api] bind, else 127.0.0.1:8250; port 0 picks "
                   "a free one). Anything but loopback needs TLS.")
@click.option("--tokens", type=click.Path(dir_okay=False), default=None,
              help="The token file (default: [api] tokens).")
@click.option("--tls-cert", type=click.Path(dir_okay=False), default=None,
              help="Serve HTTPS with this certificate (PEM), with --tls-key.")
@click.option("--tls-key", type=click.Path(dir_okay=False), default=None,
              help="The certificate's private key (PEM).")
@click.option("--trusted-proxy", "trusted_proxies", multiple=True, metavar="ADDR",
              help="A reverse proxy (address or network) whose user header is believed "
                   "(repeatable; default: [api] trusted_proxies); needs --proxy-secret-file.")
@click.option("--proxy-secret-file", type=click.Path(dir_okay=False), default=None,
              help="The secret a trusted proxy adds to every request (default: [api] "
                   "proxy_secret_file).")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
@journal_option
@state_options
@json_option(help="Log JSON lines on stderr (the listening line: {\"event\": \"listening\", "
                  "\"url\": ...}); an error is one JSON object on stdout (docs/cli.md).")
def serve(bind: str | None, tokens: str | None, tls_cert: str | None, tls_key: str | None,
          trusted_proxies: tuple[str, ...], proxy_secret_file: str | None, log_level: str,
          journal: bool | None, state_dir: str | None, config: str | None,
          as_json: bool) -> None:
    """Serve the HTTP API and the web console (SPEC O5).

    JSON endpoints under /api/v1 (OpenAPI at /api/v1/openapi.json) for everything the
    admin CLI shows and does, and the console at / for people: overview, approvals with
    evidence, nodes, remediations, breaker and pause. Writes go into the store's inbox
    exactly as the CLI's do; the daemon acts on them. Nothing here decides or acts.
    """
    from slurm_heal.api.app import ApiApp
    from slurm_heal.api.settings import check_listen
    from slurm_heal.errors import ConfigError
    from slurm_heal.location import locate

    setup_logging(log_level, as_json, journal)
    loc = locate(state_dir, config)
    absolute = {k: str(Path(v).resolve()) for k, v in
                (("tokens", tokens), ("tls_cert", tls_cert), ("tls_key", tls_key),
                 ("proxy_secret_file", proxy_secret_file)) if v}
    settings = _settings(loc, {"bind": bind, "trusted_proxies": trusted_proxies, **absolute})
    check_listen(settings)
    app = ApiApp(settings, loc, policy_file=str(loc.config) if loc.config else None)
    if not loc.state_dir.is_dir():
        log.warning("store %s does not exist yet: pages are empty and writes are refused "
                    "until a controller runs on it", loc.describe())
    server = wsgi_server(settings, access_log(app))
    try:
        server.prepare()  # binds: a taken port is a clear error before anything else
    except OSError as exc:
        raise ConfigError(f"cannot listen on {settings.bind}: {exc.strerror or exc}",
                          key="api.bind") from None
    host, port = str(server.bind_addr[0]), server.bind_addr[1]
    scheme = "https" if settings.tls else "http"
    shown = f"[{host}]" if ":" in host else host
    log.info("listening on %s://%s:%s/ (API /api/v1, console /); store %s; %d threads, "
             "%gs timeout, %gs a request, %d connections a client; serve never decides or "
             "acts", scheme, shown, port, loc.describe(), settings.threads,
             settings.timeout.total_seconds(), settings.request_timeout.total_seconds(),
             settings.max_client_connections, extra={"fields": {
                 "event": "listening", "url": f"{scheme}://{shown}:{port}/",
                 "store": loc.as_json()}})

    def _stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        threading.Thread(target=server.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        server.serve()
    finally:
        server.stop()


def wsgi_server(settings: Any, app: Any) -> Any:
    """The production WSGI server (issue 22 item 7: cheroot, not Werkzeug's development
    server): a bounded pool of ``[api] threads`` workers that are given a request only
    once it is all there (issue 34 item 3: a client dripping its request holds no
    worker, api/server.py); ``[api] request_timeout`` ends a request not complete that
    long after its first byte, ``[api] timeout`` a connection that sends nothing (an idle
    keep-alive one too), ``[api] max_client_connections`` bounds one address's
    connections; TLS from ``tls_cert``/``tls_key`` as before."""
    from slurm_heal.api.server import Server
    from slurm_heal.errors import ConfigError

    server = Server((settings.host, settings.port), app, numthreads=settings.threads,
                    max=settings.threads, timeout=int(settings.timeout.total_seconds()),
                    server_name="slurm-heal", accepted_queue_size=settings.threads * 8,
                    accepted_queue_timeout=settings.timeout.total_seconds(),
                    request_timeout=settings.request_timeout.total_seconds(),
                    max_client_connections=settings.max_client_connections,
                    uncounted=tuple(settings.trusted_proxies),
                    # cheroot's defaults, a listen backlog of 5 and 10 kept-alive
                    # connections, made 100 clients wait in SYN retries and reconnect
                    # after every answer (issue 34 item 3)
                    request_queue_size=socket.SOMAXCONN)
    server.keep_alive_conn_limit = 1024
    if settings.tls:
        from cheroot.ssl.builtin import BuiltinSSLAdapter

        try:
            adapter = BuiltinSSLAdapter(str(settings.tls_cert), str(settings.tls_key))
            adapter.context.minimum_version = ssl.TLSVersion.TLSv1_2
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load the TLS certificate {settings.tls_cert} and key "
                              f"{settings.tls_key}: {exc}", key="api.tls_cert") from None
        server.ssl_adapter = adapter
    return server


def access_log(app: Any) -> Any:
    """One log line per request: who asked is not known here, the path without its query
    string; never a header (tokens live there)."""

    def logged(environ: dict[str, Any], start_response: Any) -> Any:
        status: list[str] = []
        # cheroot decodes PATH_INFO but leaves an encoded slash as %2F; the routes are
        # matched as Werkzeug's server gave them (decoded): a node name never holds one.
        path = environ.get("PATH_INFO", "")
        if "%2" in path:
            environ["PATH_INFO"] = path.replace("%2F", "/").replace("%2f", "/")

        def start(code: str, headers: Any, exc_info: Any = None) -> Any:
            status.append(code.split(" ", 1)[0])
            return start_response(code, headers, exc_info)

        try:
            return app(environ, start)
        finally:
            log.info("%s %s %s %s", environ.get("REMOTE_ADDR", "-"),
                     environ.get("REQUEST_METHOD", "-"), environ.get("PATH_INFO", "-"),
                     status[0] if status else "-")

    return logged


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

            path = api_settings(load_policy(cfg).api or {}, str(cfg),
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
