"""The `slurm-heal` command line (SPEC I4).

Subcommands live in `slurm_heal/commands/<name>.py`, each exposing a click command
named like the module, and are imported lazily: `slurm-heal check` runs on every node
every few minutes and must not pay for the controller's imports.

Errors: library code raises `HealError` subclasses; this is the one place that turns
them into a message on stderr and an exit status (`errors.EXIT_CODES`).

A node install (``pip install slurm-heal``: the check, the agent, install-node) has none of
the controller's dependencies (issue 38); a command that needs one says which extra to
install (`needs_extra`), at import or when it runs, instead of a traceback.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from slurm_heal import __version__
from slurm_heal.errors import ConfigError, HealError, exit_code_for

# name -> "module:attribute". Order is the order of `--help`.
COMMANDS: dict[str, str] = {
    "demo": "slurm_heal.commands.demo:demo",
    "status": "slurm_heal.commands.status:status",
    "check": "slurm_heal.commands.check:check",
    "agent": "slurm_heal.commands.agent:agent",
    "daemon": "slurm_heal.commands.daemon:daemon",
    "simulate": "slurm_heal.commands.simulate:simulate",
    "plan": "slurm_heal.commands.plan:plan",
    "alerts": "slurm_heal.commands.admin:alerts",
    "remediations": "slurm_heal.commands.admin:remediations",
    "approve": "slurm_heal.commands.admin:approve",
    "deny": "slurm_heal.commands.admin:deny",
    "request": "slurm_heal.commands.admin:request",
    "cancel": "slurm_heal.commands.admin:cancel",
    "validate": "slurm_heal.commands.admin:validate",
    "history": "slurm_heal.commands.admin:history",
    "explain": "slurm_heal.commands.admin:explain",
    "machines": "slurm_heal.commands.machines:machines",
    "breaker": "slurm_heal.commands.admin:breaker",
    "reset-breaker": "slurm_heal.commands.admin:reset_breaker",
    "pause": "slurm_heal.commands.admin:pause",
    "unpause": "slurm_heal.commands.admin:unpause",
    "policy": "slurm_heal.commands.admin:policy",
    "incidents": "slurm_heal.commands.incidents:incidents",
    "incident": "slurm_heal.commands.incidents:incident",
    "serve": "slurm_heal.commands.serve:serve",
    "api-token": "slurm_heal.commands.serve:api_token",
    "provider-simulator": "slurm_heal.commands.simulator:simulator",
    "install-node": "slurm_heal.commands.install:install_node",
    "install-controller": "slurm_heal.commands.install:install_controller",
}

# Old spellings, kept for one release (docs/cli.md "Grammar"): not listed in --help; using
# one says the new name on stderr.
ALIASES: dict[str, str] = {"simulator": "provider-simulator"}


# The top-level modules of the `controller` extra (pyproject.toml) and of what they pull
# in: a command missing one of these runs on a node install.
CONTROLLER_MODULES = frozenset({
    "pydantic", "pydantic_core", "annotated_types", "typing_extensions", "requests",
    "urllib3", "certifi", "charset_normalizer", "idna", "msgspec", "prometheus_client",
    "apprise", "werkzeug", "jinja2", "markupsafe", "cheroot", "jaraco", "more_itertools",
})
CONTROLLER_EXTRA = "controller"


def needs_extra(exc: ModuleNotFoundError, command: str) -> ConfigError | None:
    """The error for ``command`` run where ``exc``'s module is one of the controller
    extra's: it names the extra and how to add it. None for any other missing module."""
    top = (exc.name or "").partition(".")[0]
    if top not in CONTROLLER_MODULES:
        return None
    return ConfigError(
        f"`slurm-heal {command}` is a controller command and this is a node install (no "
        f"module named {top!r}): install the controller's dependencies with "
        f"pip install 'slurm-heal[{CONTROLLER_EXTRA}]' (from a wheel: "
        f"pip install 'slurm_heal-VERSION-py3-none-any.whl[{CONTROLLER_EXTRA}]')")


def _stand_in(name: str, error: ConfigError) -> click.Command:
    """What `--help` lists and what runs for a command whose module needs the controller
    extra: any arguments, then `error`."""
    def fail() -> None:
        raise error

    return click.Command(name, callback=fail, add_help_option=False,
                         short_help=f"(needs slurm-heal[{CONTROLLER_EXTRA}])",
                         help=str(error),
                         context_settings={"ignore_unknown_options": True,
                                           "allow_extra_args": True})


def _load(name: str) -> click.Command | None:
    module_name, _, attr = COMMANDS[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:  # not written yet: hide it rather than crash
            return None
        error = needs_extra(exc, name)
        if error is not None:
            return _stand_in(name, error)
        raise
    command = getattr(module, attr, None)
    return command if isinstance(command, click.Command) else None


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when it is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [n for n in COMMANDS if _load(n) is not None]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in ALIASES:
            if not ctx.meta.get("slurm_heal.json"):
                click.echo(f"slurm-heal: `{cmd_name}` is now `{ALIASES[cmd_name]}`; the old "
                           "name goes in the next release", err=True)
            cmd_name = ALIASES[cmd_name]
        if cmd_name not in COMMANDS:
            return None
        ctx.meta["slurm_heal.command"] = cmd_name
        return _load(cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        if "--json" in ctx.args:  # before parsing: an unknown option is a JSON error too
            ctx.meta["slurm_heal.json"] = True
        try:
            return super().invoke(ctx)
        except HealError as exc:
            _fail(ctx, str(exc), type(exc).__name__, exit_code_for(exc))
        except ModuleNotFoundError as exc:  # imported when it ran (a lazy import)
            error = needs_extra(exc, ctx.meta.get("slurm_heal.command", "this command"))
            if error is None:
                raise
            _fail(ctx, str(error), type(error).__name__, exit_code_for(error))
        except click.UsageError as exc:  # bad input: exit 2, as JSON under --json
            if not ctx.meta.get("slurm_heal.json"):
                raise
            _fail(ctx, exc.format_message(), "UsageError", exc.exit_code)


def _fail(ctx: click.Context, message: str, kind: str, code: int) -> None:
    """The one place an error becomes output and an exit status: one line on stderr, or
    with --json one JSON object on stdout (``{"error": {...}}``) so scripts can parse it."""
    if ctx.meta.get("slurm_heal.json"):
        import json

        out: dict[str, Any] = {"error": {"message": message, "kind": kind, "exit": code}}
        loc = ctx.meta.get("slurm_heal.location")
        if loc is not None:  # which store the command was using (slurm_heal.location)
            out["store"] = loc.as_json()
        click.echo(json.dumps(out))
    else:
        click.echo(f"slurm-heal: error: {message}", err=True)
    ctx.exit(code)


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="slurm-heal")
def cli() -> None:
    """slurm-heal: Slurm-native automatic remediation for GPU clusters."""


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="slurm-heal")


if __name__ == "__main__":  # pragma: no cover
    main()
