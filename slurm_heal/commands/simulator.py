"""`slurm-heal provider-simulator` (old name `simulator`): the provider simulator in the foreground (for the lab, the
demo and manual tests). See slurm_heal/providers/simulator.py and docs/providers.md."""

from __future__ import annotations

import click

from slurm_heal.commands.jsonmode import emit_line, json_option


@click.command("provider-simulator")
@click.option("--port", type=click.IntRange(0, 65535), required=True,
              help="Port to listen on (0: any free port; the real one is printed).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--lab-dir", type=click.Path(file_okay=False), default=None,
              help="The Slurm lab's directory: actions really reboot its nodes.")
@click.option("--scratch-root", type=click.Path(file_okay=False), default=None,
              help="Rebuild wipes SCRATCH_ROOT/NODE (local data is lost, SPEC L2).")
@click.option("--slurm-conf", type=click.Path(dir_okay=False), default=None,
              help="slurm.conf of the lab (default: $SLURM_CONF), for migrate's Extra.")
@click.option("--duration", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Seconds an operation takes at least.")
@click.option("--token-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Require this bearer token on /v1 (file holds the token).")
@json_option(help="The first line is one JSON object {\"event\": \"listening\", \"url\": "
                  "...}; warnings and errors are JSON too (docs/cli.md).")
def simulator(port: int, host: str, lab_dir: str | None, scratch_root: str | None,
              slurm_conf: str | None, duration: float, token_file: str | None,
              as_json: bool) -> None:
    """Run the provider simulator: our http provider API, the Nova/Keystone subset,
    injectable faults (POST /_sim/faults) and per-key execution counts (GET /_sim/stats).
    """
    from pathlib import Path

    from slurm_heal.errors import ConfigError
    from slurm_heal.providers.simulator import ActionHook, LabHook, SimulatorServer, lab_script

    def warn(warning: str) -> None:
        if as_json:
            emit_line({"warning": warning}, err=True)
        else:
            click.echo(f"simulator: {warning}", err=True)

    hook: ActionHook | None = None
    if lab_dir is not None:
        try:  # not a lab: refused now, not at the first reboot (issue 36 item 8)
            lab_script(Path(lab_dir))
        except ConfigError as exc:
            raise ConfigError(str(exc), key="--lab-dir") from None
        slurm = None
        try:  # migrate records the new host in Extra when a Slurm client is available
            from slurm_heal.slurm import make_client

            slurm = make_client(slurm_conf=slurm_conf)
        except Exception as exc:  # noqa: BLE001 - the simulator still works without it
            warn(f"no Slurm client ({exc}); migrate will not set Extra")
        hook = LabHook(lab_dir, scratch_root=scratch_root, slurm=slurm)
    else:
        warn("no --lab-dir: every action succeeds and touches nothing (no node is "
             "rebooted, rebuilt or moved); give --lab-dir DIR to act on a Slurm lab")
    token = Path(token_file).read_text().strip() if token_file else None
    server = SimulatorServer(host=host, port=port, on_action=hook, duration=duration,
                             token=token)
    # The first line is machine-readable: scripts start us with --port 0 and read it.
    if as_json:
        emit_line({"event": "listening", "url": server.url})
    else:
        click.echo(f"slurm-heal simulator listening on {server.url}", err=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
