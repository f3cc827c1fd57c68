"""The `redfish` provider: bare metal through the node's BMC, with sushy (SPEC L2, E4, S6).

- reboot -> ``ComputerSystem.Reset`` with the first reset type the BMC advertises of the
  configured preference (default ``ForceRestart``, ``GracefulRestart``, ``PowerCycle``);
- power_cycle -> ``PowerCycle`` where the BMC advertises it, else ``ForceOff``, then
  ``On`` once the system reports its power off (two steps, driven by `status`).
- rebuild and migrate are not things a BMC does: refused.

A BMC without Redfish is driven over IPMI 2.0 (LAN, RMCP+) with pyghmi instead
(``protocol = "ipmi"`` for that node): reboot -> chassis control ``boot`` (power on when
off, else a hard reset), power_cycle -> ``off``, then ``on`` once ``get_power()`` reports
off. pyghmi blocks, so every IPMI exchange runs in a worker thread waited for at most
``deadline``; a command whose answer is lost after the login is an unknown outcome and
is never sent again for the key (SPEC S6), a login that fails (unreachable, wrong
password) sent nothing and is tried again at the next poll.

BMC address and credentials per node come from the config (``[provider.bmcs.NODE]``) or
a file (``bmcs_file``, TOML); a password is read from a file, never written in the main
config. TLS certificates are verified unless ``verify = false`` (or a CA bundle path).

Reads (the system, its power state and advertised reset types) go through sushy. The
reset itself is one POST that is never repeated once sent (sushy's connector would
re-send it after a read timeout): Redfish has no idempotency key, so each key is recorded
locally before the POST, and a reset whose answer was lost ends failed, never re-sent
(SPEC S6). A POST that never reached the BMC (connect error, 429/503 "busy") is retried
with backoff, within the overall deadline. A BMC that answers 202 with a task monitor is
followed until the task ends.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from slurm_heal.errors import ProviderError, ProviderRefused, ProviderTimeout
from slurm_heal.providerconf import DEFAULT_REBOOT_TYPES as DEFAULT_REBOOT_TYPES
from slurm_heal.providerconf import REBOOT_TYPES as REBOOT_TYPES
from slurm_heal.providerconf import REDFISH_ACTIONS as REDFISH_ACTIONS
from slurm_heal.providerconf import RedfishSettings as RedfishSettings
from slurm_heal.providers._records import KeyRecords, SteppedOperations, operation
from slurm_heal.providers._transport import connection_words, plain_reason
from slurm_heal.providers.base import Operation
from slurm_heal.types import Action


@dataclass(frozen=True)
class Bmc:
    """One node's BMC."""

    address: str  # https://10.0.0.11 (the Redfish service root is /redfish/v1 under it)
    username: str
    password: str
    system: str | None = None  # the ComputerSystem's @odata.id; None: the only one
    protocol: str = "redfish"  # or "ipmi": then address is the BMC's host name or IP
    port: int = 623  # IPMI over LAN (UDP)


class _Unknown(ProviderError):
    """The reset was sent and its answer lost."""


class RedfishProvider(SteppedOperations):
    """ComputerSystem.Reset through each node's BMC."""

    name = "redfish"

    def __init__(self, bmcs: Mapping[str, Bmc], *, verify: bool | str = True,
                 state_dir: str | os.PathLike[str] | None = None,
                 reboot_types: Sequence[str] = DEFAULT_REBOOT_TYPES,
                 connect_timeout: float = 5.0, read_timeout: float = 30.0,
                 attempts: int = 3, deadline: float = 90.0, backoff: float = 0.5,
                 actions: frozenset[Action] = REDFISH_ACTIONS,
                 sleep: Callable[[float], None] = time.sleep):
        import requests  # lazy: the node side never needs it

        self.bmcs = dict(bmcs)
        self.verify = verify
        self.reboot_types = tuple(reboot_types)
        self.timeout = (connect_timeout, read_timeout)
        self.attempts, self.deadline, self.backoff = max(1, attempts), deadline, backoff
        self.actions = actions
        self._sleep = sleep
        self._http = requests.Session()
        self._clients: dict[str, Any] = {}
        self.records = KeyRecords(Path(state_dir) / "redfish-provider.json"
                                  if state_dir is not None else None)

    def close(self) -> None:
        """Close the HTTP session."""
        self._http.close()

    # --- the protocol -------------------------------------------------------------------
    def submit(self, node: str, action: Action, key: str) -> Operation:
        """Reset the system of ``node`` once per ``key``."""
        known = self._repeat(key, node, action)  # a BMC can reboot and power_cycle
        if known is not None:
            return known
        bmc = self._bmc(node)
        if bmc.protocol == "ipmi":
            return self._begin(key, {
                "id": "ipmi-" + uuid.uuid4().hex[:12], "node": node, "action": action.value,
                "protocol": "ipmi", "steps": ["boot"] if action == Action.REBOOT
                else ["off", "on"], "step": 0, "sent": False, "status": "running",
                "detail": "", "submitted": datetime.now(timezone.utc).isoformat()})
        system = self._system(node, bmc)
        allowed = {str(getattr(v, "value", v)) for v in system.get_allowed_reset_system_values()}
        if action == Action.REBOOT:
            chosen = next((t for t in self.reboot_types if t in allowed), None)
            if chosen is None:
                raise ProviderRefused(
                    f"redfish: the BMC of {node} advertises none of "
                    f"{', '.join(self.reboot_types)} (it allows {', '.join(sorted(allowed))})")
            steps = [chosen]
        elif "PowerCycle" in allowed:
            steps = ["PowerCycle"]
        elif {"ForceOff", "On"} <= allowed:
            steps = ["ForceOff", "On"]
        else:
            raise ProviderRefused(f"redfish: the BMC of {node} can neither PowerCycle nor "
                                  f"ForceOff and On (it allows {', '.join(sorted(allowed))})")
        target = _reset_target(system.json, system.path)
        rec: dict[str, Any] = {"id": "bmc-" + uuid.uuid4().hex[:12], "node": node,
                               "action": action.value, "system": system.path,
                               "target": target, "steps": steps, "step": 0,
                               "sent": False, "status": "running", "detail": "",
                               "submitted": datetime.now(timezone.utc).isoformat()}
        return self._begin(key, rec)  # intent first: a reset is never posted twice for a key

    # --- the steps ----------------------------------------------------------------------
    def _advance(self, key: str, rec: dict[str, Any]) -> Operation:
        node = str(rec["node"])
        try:
            while rec["status"] == "running":
                step = rec["steps"][rec["step"]]
                if rec.get("unknown"):
                    rec.update(status="failed", detail=(
                        f"{_proto(rec)}: the answer to {step} on {node} was lost, so whether "
                        "it ran is unknown; not sent again (SPEC S6)"))
                    break
                if not rec["sent"]:
                    if step in ("On", "on") and not self._powered_off(node, rec):
                        rec["detail"] = f"{_proto(rec)}: waiting for {node} to power off"
                        break
                    if rec.get("protocol") == "ipmi":
                        self._ipmi_power(node, rec, step)
                    else:
                        self._reset(node, rec, step)
                if rec.get("monitor") and not self._task_done(node, rec):
                    break
                if rec["step"] + 1 < len(rec["steps"]):
                    rec.update(step=rec["step"] + 1, sent=False, monitor="")
                    continue
                rec.update(status="succeeded",
                           detail=f"{_proto(rec)}: {' then '.join(rec['steps'])} on {node} "
                                  "accepted")
        except _Unknown as exc:
            rec.update(sent=True, unknown=True, detail=str(exc))
        except ProviderRefused as exc:
            rec.update(status="failed", detail=str(exc))
        except ProviderError:
            self.records.put(key, rec)  # not sent: the next poll tries again
            raise
        self.records.put(key, rec)
        return operation(key, rec)

    def _powered_off(self, node: str, rec: dict[str, Any]) -> bool:
        if rec.get("protocol") == "ipmi":
            answer = self._ipmi(node, "get_power", lambda cmd: cmd.get_power(), read=True)
            return isinstance(answer, dict) and answer.get("powerstate") == "off"
        system = self._system(node, self._bmc(node))
        system.refresh()
        state = str(getattr(system.power_state, "value", system.power_state) or "")
        return state.lower() == "off"

    def _reset(self, node: str, rec: dict[str, Any], reset_type: str) -> None:
        """POST the reset once; retried only when it certainly did not reach the BMC."""
        import requests

        bmc = self._bmc(node)
        url = bmc.address.rstrip("/") + str(rec["target"])
        end = time.monotonic() + self.deadline
        last, timed_out = "", False
        for attempt in range(self.attempts):
            try:
                resp = self._http.post(url, json={"ResetType": reset_type},
                                       auth=(bmc.username, bmc.password), verify=self.verify,
                                       timeout=self.timeout,
                                       headers={"OData-Version": "4.0"})
            except requests.exceptions.SSLError as exc:
                raise ProviderError(f"redfish: TLS to the BMC of {node} failed ({exc}); "
                                    "set [provider] verify to a CA bundle") from exc
            except requests.exceptions.ConnectTimeout as exc:
                last, timed_out = f"connect timed out: {plain_reason(exc)}", True
            except requests.exceptions.ConnectionError as exc:
                if not _never_sent(exc):
                    raise _Unknown(f"redfish: {reset_type} on {node}: {exc}") from exc
                last = f"connection failed: {connection_words(url, exc)}"
            except requests.exceptions.Timeout as exc:
                raise _Unknown(f"redfish: {reset_type} on {node}: no answer ({exc})") from exc
            else:
                if resp.status_code in (200, 202, 204):
                    rec["sent"] = True
                    rec["monitor"] = resp.headers.get("Location", "") \
                        if resp.status_code == 202 else ""
                    rec["detail"] = (f"redfish: {reset_type} on {node} accepted "
                                     f"(HTTP {resp.status_code})")
                    return
                message = _redfish_message(resp)
                if resp.status_code in (401, 403):
                    raise ProviderError(f"redfish: the BMC of {node} refused the credentials "
                                        f"(HTTP {resp.status_code}): {message}")
                if resp.status_code in (429, 503):
                    last = f"BMC busy (HTTP {resp.status_code}): {message}"
                elif resp.status_code >= 500:
                    raise _Unknown(f"redfish: {reset_type} on {node}: HTTP "
                                   f"{resp.status_code}: {message}")
                else:
                    raise ProviderRefused(f"redfish: {reset_type} on {node}: HTTP "
                                          f"{resp.status_code}: {message}")
            left = end - time.monotonic()
            if attempt + 1 >= self.attempts or left <= 0:
                break
            self._sleep(min(random.uniform(0, self.backoff * 2 ** attempt), left))  # noqa: S311
        error = ProviderTimeout if timed_out else ProviderError
        raise error(f"redfish: {reset_type} on {node}: gave up after {attempt + 1} tries: "
                    f"{last}")

    # --- IPMI (pyghmi) ------------------------------------------------------------------
    def _ipmi_power(self, node: str, rec: dict[str, Any], state: str) -> None:
        """``set_power(state)`` once; a lost answer raises _Unknown (never re-sent)."""
        answer = self._ipmi(node, f"set_power {state}",
                            lambda cmd: cmd.set_power(state, wait=False), read=False)
        rec["sent"] = True
        rec["detail"] = f"ipmi: power {state} on {node} accepted ({answer})"

    def _ipmi(self, node: str, what: str, fn: Callable[[Any], Any], *, read: bool) -> Any:
        """Log into the node's BMC and run ``fn(command)`` in a worker thread, waiting at
        most ``deadline`` seconds (pyghmi blocks, with its own retransmits)."""
        bmc = self._bmc(node)
        state: dict[str, Any] = {"logged_in": False, "cancelled": False}
        gate = threading.Lock()

        def work() -> None:
            try:
                from pyghmi.ipmi import command

                # Credentials as bytes: pyghmi (1.6) files a session being set up under
                # the credentials as given and removes it, once logged in, under their
                # encoded form; with str they never match, and the next Command for the
                # same BMC waits forever on that stale entry.
                for _ in range(2):
                    cmd = command.Command(bmc=bmc.address, userid=bmc.username.encode(),
                                          password=bmc.password.encode(), port=bmc.port)
                    session = cmd.ipmi_session
                    if not getattr(session, "broken", False) and \
                            getattr(session, "logged", True):
                        break
                    # pyghmi handed back a login abandoned at an earlier deadline that
                    # has failed since (it is forgotten now): log in afresh, once.
                else:
                    raise ConnectionError(getattr(session, "errormsg", None)
                                          or "the session failed to log in")
                with gate:
                    # A login that outlived the caller's deadline must not send: the
                    # caller has reported the command as not sent (SPEC S6).
                    if state["cancelled"]:
                        return
                    state["logged_in"] = True
                state["value"] = fn(cmd)
            except BaseException as exc:  # handed to the caller's thread  # noqa: BLE001
                state["error"] = exc

        worker = threading.Thread(target=work, name="ipmi-call", daemon=True)
        worker.start()
        worker.join(self.deadline)
        where = f"the BMC of {node} at {bmc.address}:{bmc.port}"
        with gate:
            alive = worker.is_alive()
            state["cancelled"] = alive
        if alive:
            if state["logged_in"] and not read:
                raise _Unknown(f"ipmi: {what} on {node}: no answer within {self.deadline:g}s")
            raise ProviderTimeout(f"ipmi: {what}: no answer from {where} within "
                                  f"{self.deadline:g}s")
        error = state.get("error")
        if error is None:
            return state.get("value")
        message = str(error) or error.__class__.__name__
        if not state["logged_in"]:
            if "password" in message.lower() or "unauthorized" in message.lower():
                raise ProviderError(f"ipmi: {where} refused the credentials: {message}")
            raise ProviderError(f"ipmi: cannot log into {where}: {message}")
        if read:
            raise ProviderError(f"ipmi: {what} on {node}: {message}")
        if "timeout" in message.lower() or "session" in message.lower():
            raise _Unknown(f"ipmi: {what} on {node}: {message}")
        raise ProviderRefused(f"ipmi: {what} on {node}: the BMC refused it: {message}")

    def _task_done(self, node: str, rec: dict[str, Any]) -> bool:
        import requests

        bmc = self._bmc(node)
        monitor = str(rec["monitor"])
        url = monitor if monitor.startswith("http") else bmc.address.rstrip("/") + monitor
        try:
            resp = self._http.get(url, auth=(bmc.username, bmc.password), verify=self.verify,
                                  timeout=self.timeout)
        except requests.RequestException as exc:
            raise ProviderError(f"redfish: task monitor {monitor} of {node}: {exc}") from exc
        if resp.status_code == 202:
            rec["detail"] = f"redfish: reset task on {node} still running"
            return False
        if resp.status_code >= 400:
            raise ProviderRefused(f"redfish: task monitor {monitor} of {node}: HTTP "
                                  f"{resp.status_code}: {_redfish_message(resp)}")
        try:
            body = resp.json() if resp.content else {}
        except ValueError:
            body = {}
        state = body.get("TaskState") if isinstance(body, dict) else None
        if state in ("Exception", "Killed", "Cancelled"):
            raise ProviderRefused(f"redfish: reset task on {node} ended {state}")
        return True

    # --- BMCs ---------------------------------------------------------------------------
    def _bmc(self, node: str) -> Bmc:
        try:
            return self.bmcs[node]
        except KeyError:
            raise ProviderRefused(f"redfish: no BMC configured for {node} ([provider.bmcs."
                                  f"{node}] or bmcs_file)") from None

    def _system(self, node: str, bmc: Bmc) -> Any:
        import sushy
        from sushy import auth as sushy_auth
        from sushy import exceptions as sx

        try:
            client = self._clients.get(node)
            if client is None:
                client = sushy.Sushy(
                    bmc.address.rstrip("/") + "/redfish/v1", verify=self.verify,
                    auth=sushy_auth.BasicAuth(bmc.username, bmc.password),
                    connect_timeout=self.timeout[0], read_timeout=self.timeout[1],
                    server_side_retries=2, server_side_retries_delay=1)
                self._clients[node] = client
            return client.get_system(bmc.system)
        except sx.ResourceNotFoundError as exc:
            raise ProviderRefused(f"redfish: the BMC of {node} has no system "
                                  f"{bmc.system}: {exc}") from exc
        except sx.UnknownDefaultError as exc:
            raise ProviderRefused(f"redfish: the BMC of {node} has more than one system; "
                                  f"name it in [provider.bmcs.{node}] system") from exc
        except sx.AccessError as exc:
            raise ProviderError(f"redfish: the BMC of {node} refused the credentials: "
                                f"{exc}") from exc
        except sx.SushyError as exc:
            raise ProviderError(f"redfish: the BMC of {node} at {bmc.address}: {exc}") from exc


def _proto(rec: dict[str, Any]) -> str:
    return "ipmi" if rec.get("protocol") == "ipmi" else "redfish"


def _reset_target(doc: Any, path: str) -> str:
    try:
        target = doc["Actions"]["#ComputerSystem.Reset"]["target"]
    except (KeyError, TypeError):
        raise ProviderRefused(f"redfish: system {path} has no ComputerSystem.Reset "
                              "action") from None
    if not isinstance(target, str) or not target.startswith("/"):
        raise ProviderError(f"redfish: system {path}: malformed reset target {target!r}")
    return target


def _never_sent(exc: Exception) -> bool:
    """A connection refused / name not resolved: the request never reached the BMC."""
    text = repr(exc)
    return any(s in text for s in ("NewConnectionError", "Connection refused",
                                   "Name or service not known", "NameResolutionError"))


def _redfish_message(resp: Any) -> str:
    try:
        body = resp.json()
    except ValueError:
        return str(resp.text).strip()[:300] or str(resp.reason)
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        extended = err.get("@Message.ExtendedInfo")
        if isinstance(extended, list) and extended and isinstance(extended[0], dict):
            return str(extended[0].get("Message") or err.get("message", ""))
        return str(err.get("message", ""))
    return str(body)[:300]



