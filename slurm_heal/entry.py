"""The ``slurm-heal`` console script: `slurm-heal check` before click loads.

``slurm-heal check`` runs on every node at every HealthCheckInterval and in every job's
prolog and epilog (the glue calls the console script), so it goes straight to the
check's own entry point (`slurm_heal.checks.fastcli`, no click, no pydantic: ~20 ms less,
issue 26). Every other command, and ``slurm-heal --help``, is the click application
(`slurm_heal.cli`), where ``check`` is listed and works the same way.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["check"]:
        try:
            from slurm_heal.checks import fastcli
        except Exception:  # a broken install is no fault of the node (SPEC I1): exit 11
            import traceback

            traceback.print_exc()
            sys.exit(11)
        sys.exit(fastcli.main(args[1:]))
    from slurm_heal import cli

    cli.main(args)
