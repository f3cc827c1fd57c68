"""A Slurm host list given on the command line (``--node 'gpu[01-04]'``): expanded once,
here, and a typo in it is bad input (exit 2, JSON under ``--json``) naming the host list,
never ClusterShell's traceback and never an empty answer (issue 36 item 6)."""

from __future__ import annotations

from collections.abc import Iterable

import click


def expand_hosts(specs: Iterable[str], option: str = "--node") -> list[str]:
    """The node names of ``specs`` (host lists; ``all`` is left out: the caller's word for
    every node), in order; click.UsageError naming the bad one (the CLI's error handler
    prints it, as JSON under --json)."""
    from ClusterShell.NodeSet import NodeSet, NodeSetException

    out: list[str] = []
    for spec in specs:
        if spec == "all":
            continue
        try:
            names = list(NodeSet(spec))
        except (NodeSetException, ValueError, IndexError) as exc:
            raise click.UsageError(f"{option} {spec!r} is not a host list ({exc}); write "
                                   "node names or a Slurm host list such as gpu[01-04]") from None
        if not names:
            raise click.UsageError(f"{option} {spec!r} names no node")
        out.extend(names)
    return out
