"""The JSON state store (SPEC I5, S6; ARCHITECTURE house style 5: boring and safe).

One JSON document (`models.State`) in a state directory next to slurmctld. The rules:

* **Versioned, forward-compatible.** The document carries ``schema_version`` (the
  major) and ``schema_minor``. A newer minor only adds fields: they are kept and written
  back unchanged (the stored models keep unknown fields). A newer major is refused
  (`StoreError`), never overwritten: an old binary must not clobber the state a newer
  one wrote.
* **Locked.** Every read-modify-write holds an exclusive ``fcntl.flock`` on a sibling
  ``<name>.lock`` file, waited for at most ``lock_timeout`` seconds (`StoreLocked`).
  Plain reads (`Store.load`) need no lock: writes replace the file atomically, so a
  reader sees either the old or the new document, never half of one.
* **Atomic.** A write goes to a temp file in the same directory, is fsynced, renamed over
  the document with ``os.replace`` and the directory is fsynced: a crash at any point
  leaves the old document or the new one.
* **Fail closed.** A corrupt or unreadable document is moved aside to
  ``<name>.corrupt-<UTC timestamp>`` and `StoreCorrupt` is raised. In its place the
  store writes a fresh document whose circuit breaker is open (SPEC S5), so automatic
  remediation stays stopped until a person has looked and runs
  ``slurm-heal reset-breaker``; manual remediations stay possible.
* **Idempotent** (SPEC S6, Q3). `Store.apply` creates a remediation only when neither its
  id nor (for an open one) its ``dedup_key`` is already there, and records an effect's
  intent (an `Attempt` with its idempotency key) before anyone acts on it: of two
  replicas applying the same plan, exactly one is told to execute each effect.
* **Written only when something changed.** `Store.apply` of a plan that changes
  nothing (the steady state of a healthy cluster) leaves the file alone: no rewrite, no
  fsync (issue 13).
* **A hot store and an audit archive** (issue 26). `Store.prune` drops what no rule can
  count any more: the daemon runs it (at most hourly) keeping terminal records for
  ``[controller] hot_retention`` (default 14 days, never less than the E1/E2 window,
  E3's evidence window or 14 days). What it drops is first appended to ``audit.jsonl``
  beside the store (JSON lines, one remediation each, fsynced), where the P4 record is
  kept for good and every reader of history finds it (`Store.load_history`). See
  docs/store.md.
* **Parsed once per change.** A Store returns the very same `State` for the same bytes
  it last read or wrote (issue 20: the engine's index of the records lives on).

The daemon's cycle (ARCHITECTURE "the flow")::

    state = store.load()
    plan = decide(view, state, now, policy, catalog=catalog)
    state, effects = store.apply(plan, now)          # intents persisted before acting
    for effect in effects:
        ... execute ...
        store.record_outcome(effect.remediation, effect.key, "ok", clock())
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal, NoReturn

from pydantic import ValidationError

from slurm_heal import fsio, jsonsafe
from slurm_heal.clock import Frame, moved, words
from slurm_heal.errors import NotFound, StoreCorrupt, StoreError, StoreLocked
from slurm_heal.incidentstore import INCIDENTS_KEY
from slurm_heal.incidentstore import merge as merge_incidents
from slurm_heal.models import (
    SCHEMA_MINOR,
    SCHEMA_VERSION,
    Attempt,
    Breaker,
    Command,
    Decision,
    Effect,
    Incident,
    Plan,
    Remediation,
    State,
    Step,
    ValidationRun,
    key_step,
)
from slurm_heal.sources.stored import SOURCES_KEY, SourceAlert
from slurm_heal.sources.stored import merge as merge_sources

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
AUDIT_ARCHIVE = "audit.jsonl"
# P4: the audit record of a closed remediation stays in the store this long by default
# (then it lives on in the audit archive).
DEFAULT_AUDIT_RETENTION = timedelta(days=90)
FALLBACK_STATE_DIR = Path("/var/lib/slurm-heal")
# E1/E2 count attempts of the last 7 days, E3 looks 10 days back for evidence: a
# terminal remediation older than 14 days can no longer change any decision.
DEFAULT_KEEP = timedelta(days=14)
# An operator command the engine has not consumed within a day is stale: approving a
# remediation a day after the person asked would surprise them more than dropping it.
DEFAULT_COMMAND_TTL = timedelta(days=1)
# Recent decision records kept for `slurm-heal explain` (state.data["decisions"]).
DECISIONS_KEY = "decisions"
RECOVERED_KEY = "store_recovered"
# Issue 34 item 5: the clock frame the stored times are on (slurm_heal.clock.Frame) and
# the last steps of the controller's clock that moved them.
CLOCK_KEY = "clock"
MAX_CLOCK_STEPS = 20
STORE_KEYS = frozenset({DECISIONS_KEY, RECOVERED_KEY, CLOCK_KEY, SOURCES_KEY})  # keys of State.data the store owns
MAX_DECISIONS = 500
# Output excerpts kept in an attempt's audit record; keeps the document small.
MAX_DETAIL = 4000
_SCONTROL_TIMEOUT = 10.0

OutcomeKind = Literal["ok", "failed", "running"]


def _utc(now: datetime) -> datetime:
    """``now`` as an aware UTC datetime (naive values are taken to be UTC)."""
    return now.replace(tzinfo=timezone.utc) if now.tzinfo is None else now.astimezone(timezone.utc)


# --------------------------------------------------------------------------- location


def _run(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> str:
    """Run ``argv`` (never a shell) and return stdout; kill its process group on timeout."""
    proc = subprocess.Popen(  # argv list, never a shell
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, env=env,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, argv, out, err)
    return out


_STATE_SAVE = re.compile(r"^\s*StateSaveLocation\s*=\s*(\S+)\s*$", re.MULTILINE)


def state_dir_from_config(text: str) -> Path | None:
    """The slurm-heal directory for the output of ``scontrol show config``.

    It is a ``slurm-heal`` directory beside (a sibling of) StateSaveLocation, so it
    lives on the same disk slurmctld trusts with its own state but is never mistaken
    for slurmctld's files.
    """
    m = _STATE_SAVE.search(text)
    if not m or m.group(1) in ("(null)", "none"):
        return None
    return Path(m.group(1)).parent / "slurm-heal"


def default_state_dir(slurm_conf: str | Path | None = None, *, timeout: float = _SCONTROL_TIMEOUT,
                      retries: int = 2) -> Path:
    """Where the store lives by default: ``slurm-heal`` beside slurmctld's StateSaveLocation.

    Asks ``scontrol show config`` (bounded: ``timeout`` seconds per try, ``retries``
    tries). When Slurm cannot be asked, falls back to ``/var/lib/slurm-heal`` and logs a
    warning that says so and how to choose another directory.
    """
    env = None
    if slurm_conf is not None:
        env = dict(os.environ, SLURM_CONF=str(slurm_conf))
    problem = "no answer"
    for attempt in range(max(1, retries)):
        try:
            found = state_dir_from_config(_run(["scontrol", "show", "config"], timeout, env))
        except FileNotFoundError:
            problem = "scontrol is not installed"
            break
        except OSError as exc:
            problem = f"cannot run scontrol: {exc}"
            break
        except subprocess.TimeoutExpired:
            problem = f"scontrol show config did not answer within {timeout:g}s"
        except subprocess.CalledProcessError as exc:
            problem = f"scontrol show config failed (exit {exc.returncode}): " \
                      f"{(exc.stderr or '').strip()[:200]}"
        else:
            if found is not None:
                return found
            problem = "scontrol show config has no StateSaveLocation"
            break
        if attempt + 1 < retries:
            time.sleep(0.5)
    fallback = fallback_state_dir()
    log.warning("state directory: %s; using %s (set --state-dir or SLURM_HEAL_STATE_DIR "
                "to choose another)", problem, fallback)
    return fallback


def fallback_state_dir() -> Path:
    """`FALLBACK_STATE_DIR` as used here (under ``$SLURM_HEAL_DEFAULT_ROOT`` when set)."""
    from slurm_heal.checks import paths

    return Path(paths.default(str(FALLBACK_STATE_DIR)))


# --------------------------------------------------------------------------- store


class Txn:
    """A read-modify-write under the store lock: set `state` to save it on exit."""

    def __init__(self, state: State) -> None:
        self.original = state
        self.state = state

    @property
    def changed(self) -> bool:
        return self.state is not self.original


class Store:
    """The JSON state store (SPEC I5).

    ``path`` is the state directory (the document is ``<dir>/state.json``) or, when it
    ends in ``.json``, the document itself. The lock is ``<document>.lock`` beside it.
    """

    def __init__(self, path: Path | str, lock_timeout: float = 10.0) -> None:
        p = Path(path)
        self.file = p if p.suffix == ".json" else p / STATE_FILE
        self.dir = self.file.parent
        self.lock_file = self.file.with_name(self.file.name + ".lock")
        self.archive_file = self.file.with_name(AUDIT_ARCHIVE)
        self.lock_timeout = lock_timeout
        # Issue 20: the document this Store last read or wrote, byte for byte, and its
        # state. A read that finds the same bytes returns that very State (the same
        # record objects), so the daemon's index of them (policy/records.py) is reused
        # from cycle to cycle instead of rebuilt; any other bytes are parsed afresh.
        # Keyed by the content, not the file's mtime/size: a write by another process
        # within the clock's granularity cannot be mistaken for no change.
        self._last: tuple[bytes, State] | None = None

    def __repr__(self) -> str:
        return f"Store({str(self.file)!r})"

    # ----------------------------------------------------------------- low level

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the exclusive lock; wait at most ``lock_timeout`` seconds."""
        with contextlib.ExitStack() as held:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
                held.enter_context(fsio.locked(self.lock_file, self.lock_timeout))
            except fsio.LockTimeout as exc:
                raise StoreLocked(
                    f"{self.lock_file}: another process holds the store lock "
                    f"(held by: {exc.holder}); gave up after {self.lock_timeout:g}s"
                ) from None
            except OSError as exc:
                raise StoreError(f"cannot open the store lock {self.lock_file}: {exc}") from exc
            yield

    def _parse(self, raw: bytes) -> State:
        """Decode the document; StoreCorrupt (not yet set aside) or StoreError on newer.
        The same bytes as last read or written give the same State object (issue 20)."""
        last = self._last
        if last is not None and last[0] == raw:
            return last[1]
        state = self._decode(raw)
        self._last = (raw, state)
        return state

    def _decode(self, raw: bytes) -> State:
        """The document parsed: a document that looks like one this build writes (its
        first key an integer ``schema_version`` it understands) is validated straight from
        its bytes (pydantic's own JSON parser, about twice as fast as ``json.loads`` and
        then validating the objects, issue 26); anything else, and anything that parse
        refuses, goes the careful way below, which names the problem."""
        m = _OURS.match(raw)
        if m is not None and int(m.group(1)) <= SCHEMA_VERSION:
            try:
                state = State.model_validate_json(raw)
            except ValidationError:
                pass  # not valid, or nested past the parser's limit: said below
            else:
                # The same major as the first key said (a repeated key wins in JSON), and
                # no free-form part nested deeper than the store allows (the parser's own
                # limit is 200 levels; the store's is jsonsafe.MAX_DEPTH).
                if state.schema_version == int(m.group(1)) and not _too_deep(state):
                    return state
        try:
            doc = jsonsafe.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:  # TooDeep is a ValueError
            raise StoreCorrupt(f"{self.file}: not valid JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise StoreCorrupt(f"{self.file}: the document is not a JSON object")
        version = doc.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise StoreCorrupt(f"{self.file}: schema_version is missing or invalid: {version!r}")
        if version > SCHEMA_VERSION:
            # Refuse, don't clobber: a newer slurm-heal wrote this (SPEC I5).
            raise StoreError(
                f"{self.file}: schema_version {version} is newer than this slurm-heal "
                f"understands ({SCHEMA_VERSION}); upgrade slurm-heal, the file is left as it is"
            )
        try:
            return State.model_validate(doc)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise StoreCorrupt(
                f"{self.file}: invalid document at {where or '(top)'}: {first['msg']} "
                f"({exc.error_count()} problem(s))"
            ) from exc

    def _read_raw(self) -> bytes | None:
        try:
            return self.file.read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError as exc:
            raise StoreError(f"{self.file} is a directory, not the store document") from exc
        except OSError as exc:
            raise StoreError(f"cannot read the store {self.file}: {exc}") from exc

    def _read_locked(self) -> State:
        """Read the document; the caller holds the lock. Corrupt → set aside + raise."""
        raw = self._read_raw()
        if raw is None:
            return State()
        try:
            return self._parse(raw)
        except StoreCorrupt as exc:
            self._set_aside(str(exc))

    def _set_aside(self, problem: str) -> NoReturn:
        """Move the corrupt document aside, leave a fail-closed document, raise StoreCorrupt."""
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        target = self.file.with_name(f"{self.file.name}.corrupt-{stamp}")
        n = 1
        while target.exists():
            target = self.file.with_name(f"{self.file.name}.corrupt-{stamp}-{n}")
            n += 1
        try:
            os.replace(self.file, target)
            fsio.fsync_dir(self.dir)
        except OSError as exc:
            raise StoreCorrupt(
                f"{problem}; moving it aside to {target.name} failed too ({exc}); "
                "nothing disruptive runs until a person repairs or removes the file"
            ) from exc
        why = (f"the state store was corrupt and was moved aside to {target.name}; "
               "automatic remediation is stopped until a person checks it and runs "
               "`slurm-heal reset-breaker`")
        now = datetime.now(timezone.utc)
        try:
            self._write(State(breaker=Breaker(open=True, opened_at=now, why=why),
                              data={RECOVERED_KEY: {"at": now.isoformat(),
                                                        "moved_to": target.name,
                                                        "problem": problem}}))
        except StoreError as exc:
            # The corrupt file is safe aside; without the fresh document the next load
            # starts empty, so say loudly that a person must look.
            log.error("%s; moved aside to %s; writing a fresh document failed: %s",
                      problem, target, exc)
            raise StoreCorrupt(f"{problem}; moved aside to {target}; writing a fresh "
                               f"document failed ({exc}); a person must check the disk and "
                               "run `slurm-heal reset-breaker`") from exc
        log.error("%s; moved aside to %s; automatic remediation stopped (breaker open)",
                  problem, target)
        raise StoreCorrupt(f"{problem}; moved aside to {target}; automatic remediation is "
                           "stopped (breaker open) until a person runs `slurm-heal reset-breaker`")

    def _write(self, state: State) -> None:
        """Atomically replace the document; the caller holds the lock."""
        if state.schema_minor < SCHEMA_MINOR:
            # What this build writes has this minor's fields (an older document read and
            # written back has them now too); a newer minor's number is kept.
            state = state.model_copy(update={"schema_minor": SCHEMA_MINOR})
        # Serialize first: a state that cannot be written touches nothing on disk.
        try:
            payload = state.model_dump_json(indent=1).encode("utf-8") + b"\n"
        except Exception as exc:  # pydantic's serialization errors have no common base
            raise StoreError(f"cannot serialize the state for {self.file}: {exc}") from exc
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            # Temp files left by a writer that was killed mid-write: we hold the lock, so
            # no live writer owns them.
            fsio.remove_stale_temps(self.file)
            # A full disk (ENOSPC), a file size limit (EFBIG), a read-only remount: the
            # old document is untouched and the temp file is gone.
            fsio.atomic_write(self.file, payload, 0o640)
        except OSError as exc:
            raise StoreError(f"cannot write the store {self.file}: {exc.strerror or exc}; "
                             "nothing was changed") from exc
        self._last = (payload, state)

    # ----------------------------------------------------------------- public API

    def load(self) -> State:
        """The current state; an empty State when there is no document yet.

        Raises StoreCorrupt (after setting the file aside) or StoreError (newer schema,
        unreadable file).
        """
        raw = self._read_raw()
        if raw is None:
            return State()
        try:
            return self._parse(raw)
        except StoreCorrupt:
            pass
        # Re-check under the lock before moving anything: a concurrent writer may have
        # replaced the file since, and only one process may set it aside.
        with self._locked():
            return self._read_locked()

    def load_history(self, *, node: str | None = None, host: str | None = None,
                     remediation: str | None = None) -> State:
        """The current state with the ended remediations retention moved to the audit
        archive put back in front of its own (oldest first): what the readers of history
        (``history``, ``explain``, ``remediations --all``, the API) show. With ``node``,
        ``host`` or ``remediation`` (an id), only the archived records that match every
        one given are read. For reading only: a state written back would return the
        archived records to the hot store. Raises as `load`.
        """
        state = self.load()
        old = archived(self.archive_file, node=node, host=host, remediation=remediation)
        if not old:
            return state
        hot = {r.id for r in state.remediations}
        back = tuple(r for r in old if r.id not in hot)
        return state.model_copy(update={"remediations": back + state.remediations}) \
            if back else state

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Txn]:
        """Hold the lock around a read-modify-write.

        ``txn.state`` is read fresh under the lock; assign ``txn.state = new`` to save
        it atomically when the block ends. An exception in the block writes nothing.
        """
        with self._locked():
            txn = Txn(self._read_locked())
            yield txn
            if txn.changed:
                self._write(txn.state)

    def apply(self, plan: Plan, now: datetime) -> tuple[State, tuple[Effect, ...]]:
        """Apply a plan under the lock and record intents; return what this caller executes.

        * New remediations are created idempotently (SPEC S6, Q3): not when a record with
          the same id exists, nor when an open record has the same ``dedup_key``.
        * Updated records replace the stored ones by id, keeping every attempt already
          recorded (another replica's intent is never forgotten). A terminal record is
          final: a stale update cannot reopen it, and that plan's effects for it are
          dropped.
        * Consumed inbox commands are dropped; the breaker, ``paused`` and the engine's
          ``data`` are set when the plan carries them (``data["decisions"]`` and
          ``data["store_recovered"]`` belong to the store and are kept).
        * Each effect with a remediation and a key gets an `Attempt` (the intent) before
          anyone acts. When that key is already recorded, someone else owns it and the
          effect is not returned: no action runs twice. ``poll`` effects only read, so they
          are returned without a new attempt. Effects for a remediation that is not in
          the store (a duplicate create that was dropped) are not returned.
        * Decision records are kept (bounded) for `slurm-heal explain`.
        """
        now = _utc(now)
        with self.transaction() as txn:
            state = txn.state
            records = list(state.remediations)
            index = {r.id: i for i, r in enumerate(records)}
            # Open records by dedup key, built once (a scan per new record made a cycle
            # that creates thousands quadratic in the store, issue 13).
            opened: dict[tuple[str, str, str, str], Remediation] = {}
            for r in records:
                if not r.phase.terminal:
                    opened.setdefault(r.dedup_key, r)  # the first, as a scan would find
            stale: set[str] = set()
            for rem in plan.updates:
                i = index.get(rem.id)
                if i is None:
                    dup = opened.get(rem.dedup_key)
                    if dup is not None:
                        log.info("node=%s remediation=%s not created: %s is already open for "
                                 "the same fault/request (S6)", rem.node, rem.id, dup.id)
                        continue
                    index[rem.id] = len(records)
                    records.append(rem)
                    if not rem.phase.terminal:
                        opened.setdefault(rem.dedup_key, rem)
                    continue
                stored = records[i]
                if stored.phase.terminal and not rem.phase.terminal:
                    # Decided before it saw the end (a person's cancel, another replica):
                    # neither the update nor its effects may run.
                    log.warning("node=%s remediation=%s stale update ignored: already %s",
                                rem.node, rem.id, stored.phase.value)
                    stale.add(rem.id)
                    continue
                records[i] = rem.model_copy(update={"attempts": _merge_attempts(
                    stored.attempts, rem.attempts)})

            execute: list[Effect] = []
            for effect in plan.effects:
                if effect.remediation is None:
                    execute.append(effect)
                    continue
                i = index.get(effect.remediation)
                if i is None or effect.remediation in stale:
                    continue
                rem = records[i]
                if effect.kind == "poll" or not effect.key:
                    execute.append(effect)
                    continue
                known = next((j for j, a in enumerate(rem.attempts) if a.key == effect.key),
                             None)
                if known is not None:
                    old = rem.attempts[known]
                    if not (effect.resend and old.outcome is None):
                        continue  # already recorded by us or another replica: never run twice
                    # Recorded, never finished (the controller stopped before it ran): the
                    # engine asked to send it again under the same key (issue 8).
                    again = old.model_copy(update={"started": now, "resent": old.resent + 1})
                    attempts = list(rem.attempts)
                    attempts[known] = again
                    records[i] = rem.model_copy(update={"attempts": tuple(attempts),
                                                        "updated": now})
                    execute.append(effect)
                    continue
                attempt = Attempt(key=effect.key, effect=effect.kind, action=effect.action,
                                  started=now, step=effect.step or key_step(effect.key))
                records[i] = rem.model_copy(update={"attempts": rem.attempts + (attempt,),
                                                    "updated": now})
                execute.append(effect)

            consumed = set(plan.consumed)
            data = state.data
            if plan.data is not None:
                # The engine's bookkeeping replaces its own keys; the keys the store owns
                # always come from the stored document (a plan may carry a stale copy).
                data = {k: v for k, v in plan.data.items() if k not in STORE_KEYS}
                data.update({k: v for k, v in state.data.items() if k in STORE_KEYS})
                if INCIDENTS_KEY in plan.data:  # SPEC S6/S7: two plans' incidents joined
                    data[INCIDENTS_KEY] = merge_incidents(state.data.get(INCIDENTS_KEY),
                                                          plan.data[INCIDENTS_KEY])
            if plan.records:
                data = dict(data)
                data[DECISIONS_KEY] = _keep_decisions(data.get(DECISIONS_KEY), plan.records)
            new = state.model_copy(update={
                "remediations": tuple(records),
                "inbox": tuple(c for c in state.inbox if c.id not in consumed),
                "breaker": plan.breaker if plan.breaker is not None else state.breaker,
                "paused": plan.paused if plan.paused is not None else state.paused,
                "pause": plan.pause if plan.pause is not None else state.pause,
                "data": data,
            })
            # Issue 13: a plan that changes nothing writes nothing (records that did not
            # change are the very same objects, so this comparison is cheap).
            if new != state:
                txn.state = new
        return new, tuple(execute)

    def record_outcome(self, remediation_id: str, key: str, outcome: OutcomeKind,
                       now: datetime, operation: str | None = None, detail: str = "",
                       sent: bool = True, by_person: bool = False) -> State:
        """Record what happened to the attempt ``key`` of a remediation; return the state.

        ``running`` means the provider accepted it and an operation is under way (the
        engine polls it); ``ok``/``failed`` finish the attempt. ``sent=False``: the step
        was not sent at all (``detail`` says why; `Attempt.sent`); ``by_person``: a person
        ended it (`Attempt.by_person`, SPEC S8). NotFound when the
        remediation or the attempt is not in the store.
        """
        if outcome not in ("ok", "failed", "running"):
            raise ValueError(f"outcome must be ok, failed or running, not {outcome!r}")
        def answered(a: Attempt) -> Attempt:
            return a.model_copy(update={
                "outcome": outcome, "errors": 0,  # an answer: the provider is reachable
                "sent": sent, "by_person": by_person,
                "finished": None if outcome == "running" else now,
                "operation": operation if operation is not None else a.operation,
                "detail": detail[-MAX_DETAIL:] if detail else a.detail,
            })

        now = _utc(now)
        return self._update_attempt(remediation_id, key, now, answered)

    def record_provider_error(self, remediation_id: str, key: str, error: str,
                              now: datetime) -> State:
        """O6: the provider did not answer the attempt ``key`` (it stays in flight): count
        the failed try and keep the error and its time. NotFound as record_outcome."""
        now = _utc(now)
        return self._update_attempt(remediation_id, key, now, lambda a: a.model_copy(update={
            "errors": a.errors + 1, "last_error": error[-MAX_DETAIL:], "last_error_at": now}))

    def _update_attempt(self, remediation_id: str, key: str, now: datetime,
                        change: Callable[[Attempt], Attempt]) -> State:
        """The attempt ``key`` of a remediation replaced by ``change(attempt)``, in one
        locked transaction; NotFound when the remediation or the attempt is not there."""
        with self.transaction() as txn:
            state = txn.state
            rem = state.get(remediation_id)
            if rem is None:
                raise NotFound(f"no remediation {remediation_id!r} in {self.file}")
            if not any(a.key == key for a in rem.attempts):
                raise NotFound(f"remediation {remediation_id} has no attempt with key {key!r}")
            attempts = tuple(change(a) if a.key == key else a for a in rem.attempts)
            new_rem = rem.model_copy(update={"attempts": attempts, "updated": now})
            txn.state = state.model_copy(update={"remediations": tuple(
                new_rem if r.id == remediation_id else r for r in state.remediations)})
        return txn.state

    def follow_clock(self, frame: Frame, now: datetime) -> tuple[State, timedelta | None]:
        """Put the stored times on the controller clock's ``frame`` (issue 34 item 5; SPEC
        P3, L5, S2): under the lock, when the store's recorded frame is of the same boot
        and stands elsewhere, the wall clock stepped (while the daemon ran, or while it
        was stopped): every time a wait or a window counts from moves by that step, in
        the one write that records the new frame, so a crash never moves them twice.
        Each open remediation's audit record (P4) says so. Another boot, or no frame
        recorded yet: the frame is recorded, nothing moves. Returns the state and the
        step (None when nothing moved)."""
        now = _utc(now)
        step: timedelta | None = None
        with self.transaction() as txn:
            state = txn.state
            stored = clock_frame(state)
            if stored == frame:
                return state, None
            data = dict(state.data)
            record: dict[str, Any] = frame.dump()
            if stored is not None and stored.boot == frame.boot:
                step = frame.zero - stored.zero
                state, data = _moved_state(state, step, now), _moved_data(data, step)
                old = state.data.get(CLOCK_KEY) or {}
                steps = old.get("steps") if isinstance(old, dict) else None
                record["steps"] = [*(steps if isinstance(steps, list) else []),
                                   {"at": now.isoformat(), "step": words(step),
                                    "seconds": step.total_seconds()}][-MAX_CLOCK_STEPS:]
            data[CLOCK_KEY] = record
            txn.state = state.model_copy(update={"data": data})
        return txn.state, step

    def add_command(self, cmd: Command) -> Command:
        """Put an operator's command in the inbox for the engine's next cycle.

        approve/deny/cancel must name an open remediation (by id) or a node that has
        one; a node is resolved to its remediation id (for approve/deny, the one waiting
        for approval). NotFound otherwise, and when a node has several candidates.
        Returns the command as stored. A command whose id is already in the inbox is
        not added twice.
        """
        with self.transaction() as txn:
            state = txn.state
            if any(c.id == cmd.id for c in state.inbox):
                return next(c for c in state.inbox if c.id == cmd.id)
            if cmd.kind in ("approve", "deny", "cancel"):
                rem = resolve_open(state, cmd.remediation or cmd.node or "",
                                   waiting_for_approval=cmd.kind != "cancel")
                cmd = cmd.model_copy(update={"remediation": rem.id, "node": rem.node})
            elif cmd.kind == "request" and (not cmd.node or cmd.action is None):
                raise NotFound("a request needs a node and an action")
            elif cmd.kind == "validate" and not cmd.node:
                raise NotFound("a validation needs a node (SPEC V1)")
            txn.state = state.model_copy(update={"inbox": state.inbox + (cmd,)})
        return cmd

    def put_source_alerts(self, alerts: Iterable[SourceAlert], now: datetime,
                          keep_resolved: timedelta) -> None:
        """SPEC D13, Q3: the site's alerts (``sources.stored``) into ``data["sources"]``
        in one locked write, one entry per alert and node (a second delivery updates
        it); resolved ones older than ``keep_resolved`` go. The key is the store's
        (`STORE_KEYS`): a plan never overwrites it."""
        now = _utc(now)
        with self.transaction() as txn:
            state = txn.state
            data = dict(state.data)
            data[SOURCES_KEY] = merge_sources(state.data.get(SOURCES_KEY), alerts, now,
                                              keep_resolved)
            if data != state.data:
                txn.state = state.model_copy(update={"data": data})

    def prune(self, now: datetime, keep: timedelta = DEFAULT_KEEP,
              command_ttl: timedelta = DEFAULT_COMMAND_TTL, archive: bool = False) -> State:
        """Retention: drop what no rule can count any more; return the new state.

        Terminal remediations last updated more than ``keep`` ago (default 14 days:
        E1/E2 count 7 days, E3 looks back 10) and inbox commands older than
        ``command_ttl`` go. Open remediations are never pruned, however old, and neither
        is a node's latest remediation when it handed the node to a person (SPEC E1:
        nothing automatic until a person acts; dropping it would restart the ladder).

        With ``archive`` (the daemon's retention, P4), the remediations dropped are first
        appended to the audit archive (`archive_file`, JSON lines, fsynced) under the
        lock; if that fails nothing is dropped (StoreError). A crash between the archive
        and the store write archives them again on the next run: a reader keeps the last
        line of an id.
        """
        now = _utc(now)
        with self.transaction() as txn:
            state = txn.state
            latest: dict[str, Remediation] = {}
            for r in state.remediations:
                if r.phase.terminal:
                    old = latest.get(r.node)
                    if old is None or _end_key(r) > _end_key(old):
                        latest[r.node] = r
            held = {r.id for r in latest.values() if r.data.handed_to_person}
            kept = tuple(r for r in state.remediations
                         if not r.phase.terminal or _utc(r.updated) >= now - keep
                         or r.id in held)
            inbox = tuple(c for c in state.inbox if _utc(c.at) >= now - command_ttl)
            # SPEC V2: a finished validation is kept as long as a remediation's record; an
            # open one (the machine is held or under test) is never dropped.
            vals = tuple(v for v in state.validations
                         if not v.terminal or _utc(v.updated) >= now - keep)
            if archive and len(kept) != len(state.remediations):
                ids = {r.id for r in kept}
                self._archive([r for r in state.remediations if r.id not in ids], now)
            if archive and len(vals) != len(state.validations):
                # Issue 26: a validation's audit record (P4) outlives the hot store too.
                ids = {v.id for v in vals}
                self._archive([v for v in state.validations if v.id not in ids], now,
                              "validation")
            if len(kept) != len(state.remediations) or len(inbox) != len(state.inbox) or \
                    len(vals) != len(state.validations):
                log.info("store prune: %d remediation(s), %d command(s), %d validation(s) "
                         "dropped", len(state.remediations) - len(kept),
                         len(state.inbox) - len(inbox), len(state.validations) - len(vals))
                txn.state = state.model_copy(update={"remediations": kept, "inbox": inbox,
                                                     "validations": vals})
        return txn.state


    def _archive(self, dropped: Sequence[Remediation | ValidationRun], now: datetime,
                 kind: Literal["remediation", "validation"] = "remediation") -> None:
        """Append remediations (or validations: lines keyed ``validation``, which
        `archived` skips) to the audit archive; the caller holds the lock."""
        lines = b"".join(
            json.dumps({"archived_at": now.isoformat(), kind: r.model_dump(mode="json")},
                       separators=(",", ":")).encode("utf-8") + b"\n"
            for r in dropped)
        try:
            with self.archive_file.open("ab") as fh:
                fh.write(lines)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise StoreError(f"cannot append to the audit archive {self.archive_file}: {exc}; "
                             "nothing was pruned") from exc


def archived(path: Path | str, *, node: str | None = None, host: str | None = None,
             remediation: str | None = None) -> list[Remediation]:
    """The remediations of an audit archive, the last line of each id winning, oldest
    first; with ``node``, ``host`` or ``remediation`` (an id) only those that match every
    one given. A malformed line (a torn last write) is skipped."""
    wanted = {k: v for k, v in (("node", node), ("host", host), ("id", remediation))
              if v is not None}
    # A line that does not even contain the value (as JSON writes it) is not parsed: a
    # node's history out of a year's archive reads the text once, not every record.
    needles = [json.dumps(v).encode("utf-8") for v in wanted.values()]
    out: dict[str, Remediation] = {}
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StoreError(f"cannot read the audit archive {path}: {exc}") from exc
    for line in data.splitlines():
        if not all(n in line for n in needles):
            continue
        try:
            rem = Remediation.model_validate(json.loads(line)["remediation"])
        except (ValueError, KeyError, TypeError, ValidationError):
            continue
        if any(getattr(rem, k) != v for k, v in wanted.items()):
            continue
        out.pop(rem.id, None)
        out[rem.id] = rem
    return list(out.values())


# --------------------------------------------------------------------------- helpers


# The start of a document this build (or any since schema 1) writes: `_decode`'s fast way.
_OURS = re.compile(rb'\A\s*\{\s*"schema_version"\s*:\s*([1-9][0-9]{0,5})\s*,')
# The free-form parts lie at most this deep in the document (state > remediations >
# remediation > attempts > attempt > its unknown field): their own depth is bounded by the rest.
_FREE_FORM_AT = 6


def _too_deep(state: State) -> bool:
    """Whether a free-form part of ``state`` (``data``, and the fields a newer build
    added that this one keeps as they are) nests deeper than the store allows."""
    limit = jsonsafe.MAX_DEPTH - _FREE_FORM_AT
    parts: list[Any] = [state.data]
    models: list[Any] = [state, state.breaker, state.pause, *state.inbox]
    owners: list[Remediation | ValidationRun] = [*state.remediations, *state.validations]
    for r in owners:
        models.append(r)
        models.append(r.__dict__.get("data"))
        models.append(r.__dict__.get("previous"))
        models.extend(r.steps)
        models.extend(r.attempts)
    parts.extend(m.__pydantic_extra__ for m in models
                 if m is not None and m.__pydantic_extra__)
    return any(jsonsafe.depth_exceeds(p, limit) for p in parts)


def _end_key(r: Remediation) -> tuple[datetime, str]:
    """When a terminal remediation ended (as the engine orders a node's history)."""
    return _utc(r.phase_times.get(r.phase.value) or r.updated), r.id


def _merge_attempts(stored: tuple[Attempt, ...], update: tuple[Attempt, ...]) -> tuple[Attempt, ...]:
    """Stored attempts win (they may carry outcomes another process recorded), except that
    an outcome in the update fills in one still in flight in the store."""
    by_key = {a.key: a for a in update}
    out = []
    for a in stored:
        u = by_key.get(a.key)
        out.append(u if (u is not None and a.outcome is None and u.outcome is not None) else a)
    seen = {a.key for a in stored}
    out.extend(a for a in update if a.key not in seen)
    return tuple(out)


def _keep_decisions(existing: Any, new: tuple[Decision, ...]) -> list[dict[str, Any]]:
    """Append decision records, keep the last N. Skipped: a record already kept (the same
    plan applied twice, by a replica or a retry) and a repeat of the node's last record
    (the same "blocked by S4" every cycle says nothing new)."""
    kept: list[dict[str, Any]] = [d for d in existing if isinstance(d, dict)] \
        if isinstance(existing, list) else []
    seen = {json.dumps(d, sort_keys=True, default=str) for d in kept}
    last: dict[str, tuple[Any, ...]] = {}
    for d in kept:
        last[str(d.get("node"))] = _decision_sig(d)
    for rec in new:
        d = rec.model_dump(mode="json")
        full = json.dumps(d, sort_keys=True, default=str)
        sig = _decision_sig(d)
        if full in seen or last.get(rec.node) == sig:
            continue
        seen.add(full)
        last[rec.node] = sig
        kept.append(d)
    return kept[-MAX_DECISIONS:]


def _decision_sig(d: dict[str, Any]) -> tuple[Any, ...]:
    return (d.get("remediation"), d.get("phase"), d.get("rule"), d.get("why"), d.get("action"))


def clock_frame(state: State) -> Frame | None:
    """The clock frame the stored times are on (None: not recorded yet)."""
    return Frame.read(state.data.get(CLOCK_KEY))


def _moved_state(state: State, step: timedelta, now: datetime) -> State:
    """Every typed time of the document ``step`` later (its free ``data`` aside), and a
    line in each open remediation's audit record (P4)."""
    data = state.data
    out: State = moved(state.model_copy(update={"data": {}}), step)
    why = (f"the controller's clock stepped {words(step)}: this remediation's times moved "
           "with it, so its waits and timeouts keep their real length (issue 34 item 5)")
    rems = tuple(r if r.phase.terminal else r.model_copy(update={"steps": r.steps + (
        Step(at=now, phase=r.phase.value, rule="P4", why=why),)}) for r in out.remediations)
    return out.model_copy(update={"remediations": rems, "data": data})


def _moved_data(data: dict[str, Any], step: timedelta) -> dict[str, Any]:
    """The incidents (S7 windows) and decision records of the free ``data``, ``step``
    later; an entry this build cannot read is kept as it is."""
    def each(raw: Any, model: type[Incident] | type[Decision]) -> Any:
        if not isinstance(raw, list):
            return raw
        out: list[Any] = []
        for item in raw:
            try:
                out.append(moved(model.model_validate(item), step).model_dump(mode="json"))
            except ValidationError:
                out.append(item)
        return out

    for key, model in ((INCIDENTS_KEY, Incident), (DECISIONS_KEY, Decision)):
        if key in data:
            data[key] = each(data[key], model)
    return data


def decisions(state: State, node: str | None = None) -> tuple[Decision, ...]:
    """The recent decision records kept in the state (oldest first), optionally one node's."""
    out = []
    for d in state.data.get(DECISIONS_KEY) or []:
        if not isinstance(d, dict) or (node is not None and d.get("node") != node):
            continue
        try:
            out.append(Decision.model_validate(d))
        except ValidationError:
            continue  # a malformed record is no reason to fail an `explain`
    return tuple(out)


def resolve_open(state: State, target: str, *, waiting_for_approval: bool = False) -> Remediation:
    """The open remediation ``target`` names: a remediation id, or a node that has one.

    With ``waiting_for_approval``, a node is resolved to its remediation in phase
    ``proposed`` when it has exactly one. NotFound when there is none or it is ambiguous.
    """
    if not target:
        raise NotFound("name a node or a remediation id")
    rem = state.get(target)
    if rem is not None:
        if rem.phase.terminal:
            raise NotFound(f"remediation {target} is already {rem.phase.value}")
        return rem
    candidates = state.open_for(target)
    if not candidates:
        raise NotFound(f"{target!r} is neither an open remediation id nor a node with an "
                       "open remediation (see `slurm-heal remediations`)")
    if waiting_for_approval and len(candidates) > 1:
        proposed = tuple(r for r in candidates if r.phase.value == "proposed")
        if len(proposed) == 1:
            return proposed[0]
    if len(candidates) > 1:
        raise NotFound(f"node {target} has {len(candidates)} open remediations ("
                       + ", ".join(r.id for r in candidates) + "); name one by its id")
    return candidates[0]
