"""The `rest` Slurm backend (SPEC I3): slurmrestd's OpenAPI with JWT auth, for a
controller that runs where no Slurm commands are installed.

- The token is read from a file (``rest_token_file``; mode 600 by the site), re-read when
  the file changes (tokens expire and get rotated) and never logged, printed or put in an
  error message. The user name sent with it (``X-SLURM-USER-NAME``) is the token's own
  ``sun`` claim unless configured.
- The node and job objects are the data_parser ones `scontrol --json` prints, so the cli
  backend's parsers read them (`node_from_json`, `job_from_json`).
- slurmrestd (25.11, 26.05) has no call to reboot a node or requeue a job. Those two go
  through the Slurm commands when they are installed (`scontrol`), else they are a clear
  SlurmError saying so.
- The API version is the newest this module knows that the server answers
  (``/slurm/v0.0.45/ping`` first); checked live against 25.11.7 (v0.0.44) and 26.05.3
  (v0.0.45, its data_parser's newest).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from typing import Any
from urllib.parse import quote

import requests

from slurm_heal import jsonsafe
from slurm_heal.errors import NotFound, SlurmError, SlurmUnreachable
from slurm_heal.extra import with_key
from slurm_heal.slurm.cli import NEXT_STATES, CliSlurm, parse_sinfo_json, parse_squeue_json
from slurm_heal.slurm.mapping import ACTIVE_JOB_STATES
from slurm_heal.types import ClusterView, JobInfo, NodeInfo

API_VERSIONS = ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41")
_NOT_FOUND = ("Unable to query node", "Failure to query node", "Invalid node name",
              "not found", "Unknown node")
_JOB_GONE = ("already completing or completed", "Invalid job id", "Job has already finished")


def _token_user(token: str) -> str:
    """The ``sun`` (Slurm user name) claim of a JWT, '' when it has none. The token is
    only decoded, never verified here: slurmctld does that."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return ""
    return str(claims.get("sun", "")) if isinstance(claims, dict) else ""


class RestSlurm:
    """SlurmClient over slurmrestd. ``url``: e.g. ``http://127.0.0.1:6820``;
    ``token_file``: a file holding the JWT (``scontrol token`` prints ``SLURM_JWT=...``;
    either form is read)."""

    def __init__(self, url: str, token_file: str, user: str | None = None,
                 timeout: float = 20.0, slurm_conf: str | None = None,
                 api_version: str | None = None) -> None:
        if not url:
            raise SlurmError("the rest backend needs slurmrestd's URL "
                             "(controller.slurm_rest_url or SLURM_HEAL_REST_URL)")
        if not token_file:
            raise SlurmError("the rest backend needs a token file "
                             "(controller.slurm_rest_token_file or SLURM_HEAL_REST_TOKEN_FILE)")
        self.url = url.rstrip("/")
        self.token_file = token_file
        self.timeout = timeout
        self._user = user
        self._token: tuple[float, str] | None = None
        self._api = api_version
        self._http = requests.Session()
        self._slurm_conf = slurm_conf

    def __repr__(self) -> str:  # never the token
        return f"RestSlurm(url={self.url!r}, token_file={self.token_file!r})"

    # plumbing
    def _read_token(self) -> str:
        try:
            mtime = os.stat(self.token_file).st_mtime
            if self._token is None or self._token[0] != mtime:
                with open(self.token_file, encoding="utf-8") as fh:
                    text = fh.read().strip()
                self._token = (mtime, text.removeprefix("SLURM_JWT=").strip())
        except OSError as exc:
            raise SlurmError(f"cannot read the slurmrestd token file {self.token_file}: "
                             f"{exc.strerror}") from None
        if not self._token[1]:
            raise SlurmError(f"the slurmrestd token file {self.token_file} is empty")
        return self._token[1]

    def _headers(self) -> dict[str, str]:
        token = self._read_token()
        headers = {"X-SLURM-USER-TOKEN": token, "Accept": "application/json"}
        user = self._user or _token_user(token)
        if user:
            headers["X-SLURM-USER-NAME"] = user
        return headers

    def _send(self, method: str, path: str, body: Any = None,
              params: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        resp = self._request(method, path, body, params)
        return resp.status_code, self._object(f"slurmrestd {method} {path}", resp)

    def _request(self, method: str, path: str, body: Any = None,
                 params: dict[str, str] | None = None) -> requests.Response:
        what = f"slurmrestd {method} {path}"
        try:
            resp = self._http.request(method, self.url + path, headers=self._headers(),
                                      json=body, params=params, timeout=self.timeout)
        except requests.Timeout:
            raise SlurmUnreachable(f"{what}: no answer within {self.timeout:g}s") from None
        except requests.RequestException as exc:
            raise SlurmUnreachable(f"{what}: cannot connect to {self.url} "
                                   f"({type(exc).__name__})") from None
        if resp.status_code in (401, 403):
            raise SlurmError(f"{what}: slurmrestd refused the token from {self.token_file} "
                             f"(HTTP {resp.status_code})")
        return resp

    @staticmethod
    def _object(what: str, resp: requests.Response) -> dict[str, Any]:
        try:  # jsonsafe: the same depth limit on every Python (issue 38)
            data = jsonsafe.loads(resp.content)
        except ValueError:  # not JSON, or nested too deeply (issue 22)
            data = None
        if not isinstance(data, dict):
            raise SlurmError(f"{what}: HTTP {resp.status_code}, not a JSON object: "
                             f"{resp.text[:120]!r}")
        return data

    def _listing(self, path: str) -> bytes | dict[str, Any]:
        """A whole-cluster read (``nodes/``, ``jobs/``): the answer's bytes as they came,
        for the typed decoding (issue 26: no dict of the whole answer, no json.dumps of
        it to be parsed again); an error answer or one that is no JSON object as the
        generic dict, read as before."""
        resp = self._request("GET", path)
        if resp.status_code < 400 and resp.content.lstrip()[:1] == b"{":
            return resp.content
        data = self._object(f"slurmrestd GET {path}", resp)
        if resp.status_code >= 400 and not data.get("errors"):
            raise SlurmError(f"slurmrestd GET {path}: HTTP {resp.status_code}")
        return data

    def _errors(self, data: dict[str, Any]) -> str:
        errors = data.get("errors") or []
        if not isinstance(errors, list):  # issue 22: any shape, never a TypeError
            errors = [errors]
        return "; ".join(" - ".join(str(e[k]) for k in ("description", "error") if e.get(k))
                         for e in errors if isinstance(e, dict))

    @property
    def api(self) -> str:
        """The OpenAPI version to use: the newest known one the server answers."""
        if self._api is None:
            last = ""
            for version in API_VERSIONS:
                try:
                    status, _ = self._send("GET", f"/slurm/{version}/ping/")
                except SlurmUnreachable:
                    raise
                except SlurmError as exc:
                    # A version the server lacks: 25.11.7 answers v0.0.45 with a plain-text
                    # 404. A refused token fails every version: said at the end.
                    last = str(exc)
                    continue
                if status == 200:
                    self._api = version
                    break
                last = f"{version}: HTTP {status}"
            else:
                raise SlurmError(f"slurmrestd at {self.url} answers none of "
                                 f"{', '.join(API_VERSIONS)} (last: {last})")
        return self._api

    def _path(self, tail: str) -> str:
        return f"/slurm/{self.api}/{tail}"

    def _write(self, method: str, path: str, body: Any = None,
               params: dict[str, str] | None = None) -> dict[str, Any]:
        status, data = self._send(method, path, body, params)
        errors = self._errors(data)
        if status >= 400 or errors:
            raise SlurmError(f"slurmrestd {method} {path}: HTTP {status}: {errors or data}")
        return data

    def _cli(self, what: str) -> CliSlurm:
        """The Slurm commands, for what slurmrestd cannot do."""
        if shutil.which("scontrol") is None:
            raise SlurmError(f"slurmrestd has no call to {what} and the Slurm commands "
                             "(scontrol) are not installed here")
        return CliSlurm(slurm_conf=self._slurm_conf, timeout=self.timeout)

    # reads
    def nodes(self) -> tuple[NodeInfo, ...]:
        path = self._path("nodes/")
        data = self._listing(path)
        return parse_sinfo_json(data if isinstance(data, bytes) else json.dumps(data),
                                what=f"slurmrestd GET {path}")

    def node(self, name: str) -> NodeInfo:
        if not name or "/" in name:
            raise NotFound(f"not a single node name: {name!r}")
        path = self._path(f"node/{quote(name)}")
        status, data = self._send("GET", path)
        errors = self._errors(data)
        if status == 404 or any(s in errors for s in _NOT_FOUND):
            raise NotFound(f"Slurm does not know node {name!r}")
        found = [n for n in parse_sinfo_json(json.dumps(data), what=f"slurmrestd GET {path}")
                 if n.name == name]
        if not found:
            raise NotFound(f"Slurm does not know node {name!r}")
        return found[0]

    def jobs(self, node: str | None = None) -> tuple[JobInfo, ...]:
        path = self._path("jobs/")
        data = self._listing(path)
        jobs = parse_squeue_json(data if isinstance(data, bytes) else json.dumps(data))
        return jobs if node is None else tuple(j for j in jobs if node in j.nodes)

    def snapshot(self) -> ClusterView:
        return ClusterView(nodes=self.nodes(), jobs=self.jobs())

    # writes
    def _update(self, node: str, body: dict[str, Any]) -> None:
        self.node(node)  # NotFound before asking Slurm to change anything
        self._write("POST", self._path(f"node/{quote(node)}"), body)

    def drain(self, node: str, reason: str) -> None:
        if not reason.strip():
            raise SlurmError("a drain needs a reason (Slurm refuses an empty one)")
        self._update(node, {"state": ["DRAIN"], "reason": reason})

    def resume(self, node: str) -> None:
        if self.node(node).states & {"DRAIN", "DOWN", "FAIL"}:
            self._update(node, {"state": ["RESUME"]})

    def set_extra(self, node: str, key: str, value: Any | None,
                  current: str | None = None) -> None:
        # Read-modify-write: foreign keys survive; non-JSON foreign text raises.
        base = self.node(node).extra_raw if current is None else current
        self._update(node, {"extra": with_key(base, key, value)})

    def reboot(self, node: str, reason: str, nextstate: str = "RESUME") -> None:
        if nextstate.upper() not in NEXT_STATES:
            raise SlurmError(f"nextstate must be one of {', '.join(NEXT_STATES)}, "
                             f"not {nextstate!r}")
        self.node(node)
        self._cli("reboot a node").reboot(node, reason, nextstate)

    def _active(self, node: str) -> list[int]:
        return [j.job_id for j in self.jobs(node) if j.state in ACTIVE_JOB_STATES]

    def _signal(self, job_id: int, signal: str) -> None:
        path = self._path(f"job/{job_id}")
        # flags: slurmrestd's default is the full job (batch shell too), like `scancel --full`.
        status, data = self._send("DELETE", path, params={"signal": signal})
        errors = self._errors(data)
        if status >= 400 or errors:
            if any(s in errors for s in _JOB_GONE):
                return  # ended between listing and acting: nothing more to do
            raise SlurmError(f"slurmrestd DELETE {path}: HTTP {status}: {errors or data}")

    def signal_jobs(self, node: str, signal: str) -> None:
        sig = "SIG" + signal.upper().removeprefix("SIG")
        for job_id in self._active(node):
            self._signal(job_id, sig)

    def requeue_jobs(self, node: str) -> None:
        if self._active(node):
            self._cli("requeue a job").requeue_jobs(node)

    def cancel_jobs(self, node: str) -> None:
        for job_id in self._active(node):
            self._signal(job_id, "SIGKILL")
