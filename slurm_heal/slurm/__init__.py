"""The Slurm port (SPEC I3): `SlurmClient` and its backends.

`make_client()` picks the backend: pyslurm where ``import pyslurm`` works against the
installed libslurm, the Slurm commands (`cli`) everywhere else. Both behave the same.
"""

from __future__ import annotations

from slurm_heal.errors import ConfigError
from slurm_heal.slurm.base import SlurmClient

BACKENDS = ("auto", "cli", "pyslurm")


def make_client(backend: str = "auto", slurm_conf: str | None = None,
                timeout: float = 20.0) -> SlurmClient:
    """A SlurmClient for the cluster named by ``slurm_conf`` (default: $SLURM_CONF or
    Slurm's own default). ``backend``: "auto", "cli" or "pyslurm"."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown Slurm backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if backend in ("auto", "pyslurm"):
        from slurm_heal.slurm.pyslurm_backend import PyslurmSlurm, pyslurm_usable

        problem = pyslurm_usable()
        if problem is None:
            return PyslurmSlurm(slurm_conf=slurm_conf, timeout=timeout)
        if backend == "pyslurm":
            raise ConfigError(f"Slurm backend pyslurm is not usable here: {problem}")
    from slurm_heal.slurm.cli import CliSlurm

    return CliSlurm(slurm_conf=slurm_conf, timeout=timeout)


__all__ = ["BACKENDS", "SlurmClient", "make_client"]
