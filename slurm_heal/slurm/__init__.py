"""The Slurm port (SPEC I3): `SlurmClient` and its backends.

`make_client()` picks the backend: ``cli`` (the Slurm commands), ``pyslurm`` (libslurm
through pyslurm), ``rest`` (slurmrestd with a JWT) or ``auto``: pyslurm when it is
installed and its libslurm's version is the running slurmctld's, the commands
everywhere else (on 26.05 always: pyslurm has no 26.05 release, so a pyslurm 25.11 is
passed over there, run live). All behave the same (the contract tests run each on the
real lab).
"""

from __future__ import annotations

import importlib.util
import logging
import os

from slurm_heal.errors import ConfigError
from slurm_heal.slurm.base import SlurmClient

BACKENDS = ("auto", "cli", "pyslurm", "rest")
log = logging.getLogger("slurm_heal.slurm")


def make_client(backend: str = "auto", slurm_conf: str | None = None,
                timeout: float = 20.0, rest_url: str | None = None,
                rest_token_file: str | None = None) -> SlurmClient:
    """A SlurmClient for the cluster named by ``slurm_conf`` (default: $SLURM_CONF or
    Slurm's own default). ``backend``: "auto", "cli", "pyslurm" or "rest" (slurmrestd at
    ``rest_url``, token in ``rest_token_file``; default $SLURM_HEAL_REST_URL and
    $SLURM_HEAL_REST_TOKEN_FILE)."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown Slurm backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if backend == "rest":
        from slurm_heal.slurm.rest import RestSlurm

        return RestSlurm(url=rest_url or os.environ.get("SLURM_HEAL_REST_URL", ""),
                         token_file=rest_token_file
                         or os.environ.get("SLURM_HEAL_REST_TOKEN_FILE", ""),
                         timeout=timeout, slurm_conf=slurm_conf)
    if backend == "pyslurm":
        from slurm_heal.slurm.pyslurm_backend import PyslurmSlurm

        return PyslurmSlurm(slurm_conf=slurm_conf, timeout=timeout)
    if backend == "auto" and importlib.util.find_spec("pyslurm") is not None:
        from slurm_heal.slurm.pyslurm_backend import PyslurmSlurm, pyslurm_matches

        problem = pyslurm_matches(slurm_conf, timeout=timeout)
        if problem is None:
            return PyslurmSlurm(slurm_conf=slurm_conf, timeout=timeout)
        log.info("Slurm backend auto: using the Slurm commands, not pyslurm (%s)", problem)
    from slurm_heal.slurm.cli import CliSlurm

    return CliSlurm(slurm_conf=slurm_conf, timeout=timeout)


__all__ = ["BACKENDS", "SlurmClient", "make_client"]
