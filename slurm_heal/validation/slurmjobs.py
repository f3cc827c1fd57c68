"""Reservations and jobs for the validation flow, through the Slurm commands (SPEC V1, I3).

``scontrol create/update/delete reservation``, ``sbatch``, ``squeue``, ``scancel``:
every call is an argv list with a timeout (house style 6), and each write is written so
that doing it again is harmless (the flow re-sends an effect whose outcome was never
recorded): a reservation that exists is not created again, a job is found again by its
name before another is submitted, deleting a reservation that is gone is done.

The commands are the same on 22.05 and 25.11 (checked live on both). Sites whose
controller talks to Slurm through pyslurm or slurmrestd still have these commands next
to slurmctld; this adapter uses them there too.
"""

from __future__ import annotations

import getpass
import re
from collections.abc import Sequence

from ClusterShell.NodeSet import NodeSet

from slurm_heal.errors import SlurmError
from slurm_heal.slurm.cli import CliSlurm
from slurm_heal.types import JobInfo

_GONE = ("not found", "Invalid job id", "Invalid reservation name",
         "Requested reservation is invalid",
         "Reservation request is invalid", "does not exist")
_KV = re.compile(r"(?:^|\s)([A-Za-z]+)=(\S*)")


class SlurmJobs:
    """What the validation flow asks of Slurm beyond the node port (`SlurmClient`)."""

    def __init__(self, slurm_conf: str | None = None, timeout: float = 20.0,
                 user: str | None = None) -> None:
        self._cli = CliSlurm(slurm_conf=slurm_conf, timeout=timeout)
        self.user = user or getpass.getuser()

    def _run(self, argv: Sequence[str], read: bool = False) -> str:
        return self._cli._run(argv, read=read).stdout

    # ---------------------------------------------------------------- reservations
    def reservations(self) -> dict[str, tuple[str, ...]]:
        """Every reservation: name -> its nodes (``scontrol show reservation -o``)."""
        out = self._run(["scontrol", "show", "reservation", "-o"], read=True)
        found: dict[str, tuple[str, ...]] = {}
        for line in out.splitlines():
            fields = {m.group(1): m.group(2) for m in _KV.finditer(line)}
            name = fields.get("ReservationName")
            if not name:
                continue  # "No reservations in the system"
            nodes = fields.get("Nodes", "")
            found[name] = tuple(NodeSet(nodes)) if nodes and nodes != "(null)" else ()
        return found

    def reserve(self, name: str, nodes: Sequence[str]) -> str:
        """Hold ``nodes`` in a maintenance reservation ``name`` (created once). Returns
        what was done, in words."""
        want = ",".join(nodes)
        have = self.reservations().get(name)
        if have is not None:
            if set(have) == set(nodes):
                return f"reservation {name} already holds {want}"
            self._run(["scontrol", "update", f"ReservationName={name}", f"Nodes={want}"])
            return f"reservation {name} now holds {want}"
        # MAINT: the nodes count as in maintenance (no accounting as idle); IGNORE_JOBS:
        # created even while a job still ends there. Users: only the validation job's
        # user may run in it. No end: the flow removes it when it is done.
        self._run(["scontrol", "create", "reservation", f"ReservationName={name}",
                   "StartTime=now", "Duration=infinite", "Flags=MAINT,IGNORE_JOBS",
                   f"Users={self.user}", f"Nodes={want}"])
        return f"reservation {name} created for {want} (Flags=MAINT,IGNORE_JOBS)"

    def unreserve(self, name: str) -> str:
        """Delete reservation ``name``; one already gone is fine."""
        try:
            self._run(["scontrol", "delete", f"ReservationName={name}"])
        except SlurmError as exc:
            if any(s in (exc.stderr or str(exc)) for s in _GONE):
                return f"reservation {name} was already gone"
            if name not in self.reservations():
                return f"reservation {name} was already gone"
            raise
        return f"reservation {name} removed"

    # ---------------------------------------------------------------- jobs
    def find_job(self, name: str, comment: str = "") -> JobInfo | None:
        """The newest job called ``name`` that Slurm still lists (any state), and with
        ``comment``, only one carrying it: a finished job of an earlier validation of the
        same node is still listed for MinJobAge and must never be taken for this one's."""
        out = self._run(["squeue", "-h", "-t", "all", "-n", name, "-u", self.user,
                         "-o", "%i|%T|%j|%N|%k"], read=True)
        jobs = [j for ln in out.splitlines()
                if (j := _job_line(ln)) is not None and j.name == name
                and (not comment or ln.rstrip().endswith("|" + comment))]
        return max(jobs, key=lambda j: j.job_id) if jobs else None

    def job(self, job_id: int) -> JobInfo | None:
        """The job, in any state Slurm still lists (MinJobAge); None once it is gone."""
        try:
            out = self._run(["squeue", "-h", "-t", "all", "-j", str(job_id),
                             "-o", "%i|%T|%j|%N"], read=True)
        except SlurmError as exc:
            if any(s in (exc.stderr or str(exc)) for s in _GONE):
                return None
            raise
        for line in out.splitlines():
            job = _job_line(line)
            if job is not None and job.job_id == job_id:
                return job
        return None

    def submit(self, *, name: str, reservation: str, nodes: Sequence[str], time_minutes: int,
               output: str, chdir: str, script: str, comment: str,
               partitions: Sequence[str] = ()) -> int:
        """``sbatch`` the job script (once: a job of that name still listed is reused).

        ``partitions``: the partitions that hold the job's nodes (`job_partitions`). Without
        ``--partition`` sbatch asks for the default partition, and a node outside it is
        refused ("Requested node configuration is not available", 22.05 to 26.05, issue 32
        item 4); with the node's partitions listed Slurm takes the first that holds it."""
        found = self.find_job(name, comment)
        if found is not None:
            return found.job_id
        where = [f"--partition={','.join(partitions)}"] if partitions else []
        out = self._run(["sbatch", "--parsable", f"--job-name={name}",
                         f"--reservation={reservation}", *where,
                         f"--nodelist={','.join(nodes)}",
                         f"--nodes={len(nodes)}", f"--time={time_minutes}",
                         f"--output={output}", f"--chdir={chdir}", f"--comment={comment}",
                         "--no-requeue", script])
        text = out.strip().split(";")[0]
        if not text.isdigit():
            raise SlurmError(f"sbatch printed no job id: {out.strip()[:200]!r}")
        return int(text)

    def cancel(self, job_id: int) -> str:
        try:
            self._run(["scancel", str(job_id)])
        except SlurmError as exc:
            if any(s in (exc.stderr or str(exc)) for s in _GONE):
                return f"job {job_id} was already gone"
            raise
        return f"job {job_id} cancelled"


def job_partitions(*of_nodes: Sequence[str]) -> tuple[str, ...]:
    """The partitions a job on these nodes is submitted to: those of the first node that
    every other node is in too (a validation's peer shares its pool), else the first
    node's own (Slurm then says which node it refuses); () when Slurm named none."""
    if not of_nodes:
        return ()
    first = tuple(of_nodes[0])
    shared = tuple(p for p in first if all(p in other for other in of_nodes[1:]))
    return shared or first


def _job_line(line: str) -> JobInfo | None:
    parts = line.strip().split("|")
    if len(parts) < 4 or not parts[0].isdigit():
        return None
    nodes = tuple(NodeSet(parts[3])) if parts[3] and parts[3] != "(null)" else ()
    return JobInfo(job_id=int(parts[0]), user="", state=parts[1].upper(), name=parts[2],
                   nodes=nodes)
