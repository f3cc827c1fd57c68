"""Our own maintenance reservations, as the node check and our Prolog tell them (SPEC S8,
E6, V1, V4).

The controller lifts its drain of a node to run one of our maintenance jobs there (the
GPU reset, the post-repair gate, the validation of a vacated machine), each in a
reservation of its own that keeps every other job off the node. While such a reservation
holds the node, the node check publishes what it finds but never drains the node (the
job's result decides), and our Prolog and Epilog let the job through.

A reservation is ours only when all of these hold, none of which a user can forge:

* its name starts with one of our prefixes (``[check] maintenance_prefixes``: the
  GPU reset's ``slurm-heal-reset-`` and the defaults of ``[gate]`` and ``[validation]``
  ``reservation_prefix``; a site that changes those lists its own here);
* it has the ``MAINT`` flag;
* every user it admits is root, the cluster's SlurmUser or one named in
  ``[check] maintenance_users`` (the ``[validation] user`` where a site sets one), and
  no user is excluded by ``-name`` (which would admit everyone else).

Only an operator or an administrator can create a reservation in Slurm at all; a user
can name a job anything, so a job's name is never looked at. A site's own reservation
(a maintenance window, a reservation for a team) is none of ours: a person who resumes a
node in it is a person's hand like any other (S8).

``parse_reservations`` and ``ours`` are pure; ``holding`` asks ``scontrol`` once.
"""

from __future__ import annotations

import os

from slurm_heal.checks import proc
from slurm_heal.frozen import dataclass

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

# The prefixes of the controller's defaults (config.RESET_RESERVATION_PREFIX, the
# defaults of gate.reservation_prefix and validation.reservation_prefix; a unit test
# holds them together without importing the controller's config here).
DEFAULT_PREFIXES = ("slurm-heal-reset-", "slurm-heal-gate-", "slurm-heal-validate-")
# How long `scontrol show reservation` may take (it is asked only in the rare case).
TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class Reservation:
    name: str
    nodes: str  # Slurm's host list, e.g. "gpu[01-02]"
    flags: frozenset[str]
    users: tuple[str, ...]
    state: str = ""

    def holds(self, node: str) -> bool:
        from slurm_heal.checks.node import in_set

        return bool(self.nodes) and self.nodes != "(null)" and in_set(self.nodes, node)


def parse_reservations(text: str) -> list[Reservation]:
    """``scontrol show reservation -o`` (one reservation a line) -> reservations (pure).
    "No reservations in the system" and lines without a name give none."""
    out = []
    for line in text.splitlines():
        fields: dict[str, str] = {}
        for word in line.split():
            key, sep, value = word.partition("=")
            if sep and key not in fields:
                fields[key] = value
        name = fields.get("ReservationName", "")
        if not name:
            continue
        users = fields.get("Users", "")
        out.append(Reservation(
            name=name, nodes=fields.get("Nodes", ""),
            flags=frozenset(f.strip().upper() for f in fields.get("Flags", "").split(",")
                            if f.strip()),
            users=tuple(u for u in users.split(",") if u and users != "(null)"),
            state=fields.get("State", "")))
    return out


def ours(res: Reservation, prefixes: tuple[str, ...], trusted: frozenset[str]) -> bool:
    """Whether ``res`` is one of our maintenance reservations (the module's rules)."""
    return (any(res.name.startswith(p) for p in prefixes if p)
            and "MAINT" in res.flags
            and bool(res.users)
            and all(u in trusted for u in res.users))


def slurm_user(env: Mapping[str, str] | None = None) -> str:
    """The cluster's SlurmUser from slurm.conf ($SLURM_CONF, else /etc/slurm/slurm.conf);
    Slurm's default (root) when the file does not set it or cannot be read."""
    env = env if env is not None else os.environ
    path = env.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for raw in fh:
                line = raw.split("#", 1)[0].strip()
                key, sep, value = line.partition("=")
                if sep and key.strip().lower() == "slurmuser":
                    return value.strip().split("(", 1)[0] or "root"
    except OSError:
        pass
    return "root"


def trusted_users(configured: tuple[str, ...]) -> frozenset[str]:
    """Who may be the only users of our reservations: root, SlurmUser, the configured."""
    return frozenset({"root", slurm_user(), *configured})


class Pending:
    """`scontrol -o show reservation` started ahead (the node agent's path from a kernel
    record to the drain: it runs while the node itself is read); ``result()`` waits for
    it, ``cancel()`` kills it when the answer is not needed."""

    def __init__(self) -> None:
        import subprocess

        self.argv = ["scontrol", "-o", "show", "reservation"]
        try:
            self.child: Any = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
        except OSError:
            self.child = None

    def result(self) -> proc.Result | None:
        """Its answer (None: it could not start; CheckError past the timeout)."""
        if self.child is None:
            return None
        out, err, timed_out = proc.finish(self.child, TIMEOUT)
        if timed_out:
            raise proc.ToolTimeout(self.argv, TIMEOUT)
        return proc.Result(tuple(self.argv), self.child.returncode, out, err)

    def cancel(self) -> None:
        if self.child is not None and self.child.poll() is None:
            proc.finish(self.child, 0)
        elif self.child is not None:
            self.child.communicate()


def read(name: str = "", pending: Pending | None = None) -> list[Reservation]:
    """Every reservation (or the one ``name``) as ``scontrol`` shows it now; [] when
    there are none. CheckError when scontrol cannot be run or fails."""
    from slurm_heal.errors import CheckError

    argv = ["scontrol", "-o", "show", "reservation"] + ([name] if name else [])
    res = pending.result() if pending is not None and not name else None
    if res is None:
        res = proc.run(argv, TIMEOUT)
    if res.returncode != 0:
        if name and "not found" in (res.stderr + res.stdout).lower():
            return []
        raise CheckError(f"scontrol show reservation failed (exit {res.returncode}): "
                         f"{res.stderr.strip()[:200]}")
    return parse_reservations(res.stdout)


def holding(node: str, prefixes: tuple[str, ...], trusted: frozenset[str],
            pending: Pending | None = None) -> str:
    """The name of our maintenance reservation that holds ``node`` now, or "" (none,
    or only reservations that are not ours). An active one wins over one to come."""
    found = [r for r in read(pending=pending) if r.holds(node) and ours(r, prefixes, trusted)]
    found.sort(key=lambda r: r.state != "ACTIVE")
    return found[0].name if found else ""


def job_is_ours(env: Mapping[str, str], prefixes: tuple[str, ...],
                trusted: frozenset[str], node: str) -> str:
    """Prolog/Epilog (SPEC S8): the reservation name when the job slurmd runs them for
    is one of our maintenance jobs: submitted by a trusted user (SLURM_JOB_USER, or
    SLURM_JOB_UID 0), in a reservation (SLURM_JOB_RESERVATION, set by slurmd) that is
    ours and holds this node. "" otherwise (and for every job outside a reservation,
    without asking Slurm anything)."""
    name = env.get("SLURM_JOB_RESERVATION", "")
    if not name or not any(name.startswith(p) for p in prefixes if p):
        return ""
    user = env.get("SLURM_JOB_USER", "")
    if user not in trusted and env.get("SLURM_JOB_UID") != "0":  # root by uid
        return ""
    found = [r for r in read(name) if r.name == name]
    if found and ours(found[0], prefixes, trusted) and found[0].holds(node):
        return name
    return ""
