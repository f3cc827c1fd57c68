"""One error tree for slurm-heal (house style 10).

    HealError                      base of everything we raise on purpose
    ├── ConfigError                a policy/config file is malformed (names file, key, why)
    ├── CatalogError               the fault catalog data is inconsistent
    ├── ReasonError                a reason string (request channel) does not parse
    ├── ScenarioError              a `simulate` scenario is malformed
    ├── StoreError                 the JSON state store cannot be used
    │   ├── StoreCorrupt           unreadable/corrupt: moved aside, engine fails closed
    │   └── StoreLocked            another process holds the lock past the timeout
    ├── SlurmError                 a Slurm command/API failed (command, exit status, stderr)
    │   └── SlurmUnreachable       no controller answers
    ├── ProviderError              a cloud/bare-metal provider failed
    │   ├── ProviderRefused        the provider cannot do this action (e.g. slurm: rebuild)
    │   └── ProviderTimeout        a call or an operation ran past its deadline
    ├── CheckError                 a node-side detector could not run
    ├── TicketError                a hardware ticket could not be filed (sink, why)
    ├── TopologyError              the cluster's topology cannot be read (names the line)
    ├── ValidationFlowError        a step of a machine's validation could not be done
    └── NotFound                   a node/remediation named by the operator does not exist

Only the CLI entry points turn these into exit codes (`EXIT_CODES`, below); library
code raises, never exits.
"""

from __future__ import annotations

from collections.abc import Sequence


class HealError(Exception):
    """Base class of every error slurm-heal raises on purpose."""


class ConfigError(HealError):
    """A configuration/policy file is invalid.

    The message names the file, the key and why, e.g.
    ``policy.toml: waiting.max_wait: 30h is more than the 24h allowed (SPEC P3)``.
    """

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None):
        self.file = file
        self.key = key
        where = ": ".join(p for p in (file, key) if p)
        super().__init__(f"{where}: {message}" if where else message)


def not_toml(exc: ValueError, text: str, file: str | None) -> ConfigError:
    """The ConfigError for TOML that cannot be read (issue 34 item 6): tomllib's own words,
    or, for an integer of more digits than Python converts (its ValueError names no
    place), the line and the key that hold it."""
    if type(exc).__name__ != "TOMLDecodeError":
        for n, line in enumerate(text.splitlines(), 1):
            key, eq, value = line.partition("=")
            if eq and sum(c.isdigit() for c in value) > 4300:
                return ConfigError(f"line {n}: the number is {len(value.strip())} characters "
                                   "long: no setting takes a value that large",
                                   file=file, key=key.strip()[:80] or None)
    return ConfigError(f"not valid TOML: {str(exc)[:300]}", file=file)


class CatalogError(HealError):
    """The fault catalog data file is inconsistent."""


class ReasonError(HealError):
    """A Slurm node reason string could not be parsed (e.g. a malformed request)."""


class ScenarioError(HealError):
    """A simulation scenario is malformed."""


class StoreError(HealError):
    """The state store cannot be read or written."""


class StoreCorrupt(StoreError):
    """The store file is corrupt; it was set aside and the engine fails closed."""


class StoreLocked(StoreError):
    """Another process holds the store lock longer than we are willing to wait."""


class SlurmError(HealError):
    """A Slurm command failed. Carries the argv, exit status and stderr, and Slurm's own
    error number where the backend has one (``errno``: slurm/slurm_errno.h, e.g. 2018
    ESLURM_INVALID_NODE_NAME; pyslurm's RPCError carries it)."""

    def __init__(
        self,
        message: str,
        *,
        command: Sequence[str] = (),
        returncode: int | None = None,
        stderr: str = "",
        errno: int | None = None,
    ):
        self.command = list(command)
        self.returncode = returncode
        self.stderr = stderr
        self.errno = errno
        detail = message
        if self.command:
            detail += f" (command: {' '.join(self.command)}"
            if returncode is not None:
                detail += f", exit {returncode}"
            detail += ")"
        if stderr.strip():
            detail += f": {stderr.strip()}"
        super().__init__(detail)


class SlurmUnreachable(SlurmError):
    """No Slurm controller could be reached."""


class ProviderError(HealError):
    """A provider (cloud/bare-metal API) call failed."""


class ProviderRefused(ProviderError):
    """The provider does not support the action asked for."""


class ProviderTimeout(ProviderError):
    """A provider call or operation did not finish in time."""


class CheckError(HealError):
    """A node-side detector could not run."""


class ValidationFlowError(HealError):
    """A step of a machine's validation could not be done (SPEC V1, V2); the validation's
    record says which and why."""


class NotFound(HealError):
    """The node or remediation named does not exist."""


class TopologyError(HealError):
    """The cluster's topology (Slurm's, a file) cannot be read: names the line (SPEC S7)."""


class TicketError(HealError):
    """A ticket sink could not file a hardware ticket (SPEC V2); names the sink and why."""


# The CLI maps errors to exit codes here and nowhere else.
# 0 ok, 1 findings/unhealthy (command specific), 2 bad input, 3 Slurm, 4 provider,
# 5 store, 6 not found, 10 any other HealError.
EXIT_CODES: tuple[tuple[type[HealError], int], ...] = (
    (ConfigError, 2),
    (ReasonError, 2),
    (ScenarioError, 2),
    (CatalogError, 2),
    (TopologyError, 2),
    (SlurmError, 3),
    (ProviderError, 4),
    (StoreError, 5),
    (NotFound, 6),
    (HealError, 10),
)


def exit_code_for(error: HealError) -> int:
    """Return the process exit status the CLI uses for ``error``."""
    for cls, code in EXIT_CODES:
        if isinstance(error, cls):
            return code
    return 10
