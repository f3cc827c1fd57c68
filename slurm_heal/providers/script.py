"""The `exec` provider: the operator's own scripts, one per action (like Slurm's
RebootProgram).

Each script runs as ``argv = [script, NODE, ACTION, KEY]`` with the environment
``SLURM_HEAL_NODE``, ``SLURM_HEAL_ACTION`` and ``SLURM_HEAL_KEY`` set, no shell, and a
timeout after which its whole process group is killed. Exit 0 means succeeded,
anything else failed; the tail of its output is kept in `Operation.detail` (and so in
the audit record). A script runs synchronously: the operation is finished when
`submit` returns.

Idempotency (SPEC S6): every key is recorded (intent before the script starts, outcome
after) in a small JSON file in the state directory; the same key never runs a script
twice. A key whose script was started but whose outcome was never recorded (the
controller died meanwhile) is reported ``failed`` with a note, never re-run: a person
must check what the script did.

A second controller replica on another host may share the state directory (S6). It
cannot see the first host's processes, so a key recorded ``running`` by another host
stays ``running`` until the script timeout (plus a short grace for the kill and the
outcome write) has passed since it was submitted; only then is it ``failed``
("interrupted or lost; check the node"). On the same host the recorded pid decides.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from slurm_heal import isotime
from slurm_heal.errors import ProviderError, ProviderRefused
from slurm_heal.providerconf import EXEC_ACTIONS as EXEC_ACTIONS
from slurm_heal.providerconf import ExecSettings as ExecSettings
from slurm_heal.providers._proc import run
from slurm_heal.providers._records import (
    KeyRecords,
    RecordedOperations,
    operation,
    require_key,
)
from slurm_heal.providers.base import Operation
from slurm_heal.types import Action

# After the timeout the runner kills the script's process group and writes the outcome;
# a replica on another host waits this much longer before calling the run lost.
OTHER_HOST_GRACE = timedelta(seconds=30)



class ExecProvider(RecordedOperations):
    """Runs the configured script for each action."""

    name = "exec"

    def __init__(self, scripts: Mapping[Action, str | os.PathLike[str]], *,
                 state_dir: str | os.PathLike[str] | None = None, timeout: float = 600.0,
                 env: Mapping[str, str] | None = None):
        self.scripts = {a: Path(p) for a, p in scripts.items()}
        self.timeout = timeout
        self.env = dict(env or {})
        self.records = KeyRecords(Path(state_dir) / "exec-provider.json"
                                  if state_dir is not None else None)

    def supports(self, action: Action) -> bool:
        """True for actions that have a script configured."""
        return action in self.scripts

    def submit(self, node: str, action: Action, key: str) -> Operation:
        """Run the script for ``action`` (once per ``key``) and return the finished operation."""
        script = self.scripts.get(action)
        if script is None:
            raise ProviderRefused(
                f"exec provider: no script configured for {action.value!r} "
                f"(configured: {', '.join(sorted(a.value for a in self.scripts)) or 'none'})")
        require_key(key)
        with self.records.locked() as records:
            seen = records.get(key)
            if seen is None:
                records[key] = {"id": "exec-" + uuid.uuid4().hex[:12], "node": node,
                                "action": action.value, "status": "running",
                                "detail": f"{script} started",
                                "pid": os.getpid(), "hostname": socket.gethostname(),
                                "submitted": datetime.now(timezone.utc).isoformat()}
        if seen is not None:
            op = self.status(key)
            assert op is not None
            return self._check_same(op, node, action)
        rec = self.records.get(key)
        assert rec is not None
        argv = [str(script), node, action.value, key]
        env = dict(self.env, SLURM_HEAL_NODE=node, SLURM_HEAL_ACTION=action.value,
                   SLURM_HEAL_KEY=key)
        try:
            result = run(argv, timeout=self.timeout, env=env)
        except OSError as exc:
            status, detail = "failed", f"cannot run {script}: {exc}"
        else:
            if result.timed_out:
                status = "failed"
                detail = (f"{script} ran past {self.timeout:g}s and was killed "
                          f"(process group)\n{result.output}")
            elif result.returncode == 0:
                status, detail = "succeeded", result.output
            else:
                status, detail = "failed", f"{script} exited {result.returncode}\n{result.output}"
        rec.update(status=status, detail=detail.strip(),
                   finished=datetime.now(timezone.utc).isoformat())
        self.records.put(key, rec)
        return operation(key, rec)

    def _advance(self, key: str, rec: dict[str, Any]) -> Operation:
        """A script run on record without its outcome (``status``: what the script run
        for ``key`` did; None when no script ran for it)."""
        op = operation(key, rec)
        host = rec.get("hostname")
        if host != socket.gethostname():
            # Another replica's run (shared state dir, S6): its process is not visible
            # from here. It is running until it could no longer be.
            submitted = _when(rec.get("submitted"))
            if submitted is not None and datetime.now(timezone.utc) < (
                    submitted + timedelta(seconds=self.timeout) + OTHER_HOST_GRACE):
                return op
            return Operation(id=op.id, key=key, node=op.node, action=op.action,
                             status="failed",
                             detail=op.detail + f"; started on {host or 'another host'} "
                                                f"and no outcome was recorded within the "
                                                f"script timeout ({self.timeout:g}s): "
                                                "interrupted or lost; check the node, the "
                                                "script is not run again for this key")
        if not _runner_alive(rec):
            # Scripts run synchronously: "running" on record whose runner is gone means
            # the run was interrupted (the controller died). Re-running could act twice.
            return Operation(id=op.id, key=key, node=op.node, action=op.action,
                             status="failed",
                             detail=op.detail + "; interrupted before its outcome was "
                                                "recorded: check the node, the script is "
                                                "not run again for this key")
        return op

    @staticmethod
    def _check_same(op: Operation, node: str, action: Action) -> Operation:
        if op.node != node or op.action != action:
            raise ProviderError(f"idempotency key {op.key!r} was used for {op.action.value} "
                                f"on {op.node}, not {action.value} on {node}")
        return op



def _when(value: Any) -> datetime | None:
    """A recorded ISO time as an aware datetime; None when absent or unreadable."""
    try:
        when = isotime.parse(str(value))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _runner_alive(rec: Mapping[str, Any]) -> bool:
    """Whether the process that started the script (recorded pid) still runs here."""
    pid = rec.get("pid")
    if not isinstance(pid, int) or rec.get("hostname") != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

