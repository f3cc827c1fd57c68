"""Local Azure and OCI endpoints for the azure and oci providers (issue 41): real HTTP(S)
on 127.0.0.1 that the real SDKs talk to through their endpoint overrides, never a
patched function.

- `AzureCloud`: HTTPS (a self-signed certificate the test makes; azure-core's bearer
  token policy refuses plain http) serving Microsoft Entra ID's token endpoint and its
  OpenID configuration (for azure-identity's ClientSecretCredential, ``authority`` set to
  this server) and the Azure Resource Manager calls of azure-mgmt-compute: VM and scale
  set VM get / instanceView / list, and restart, redeploy, reimage, deallocate and start
  as long-running operations (202 with ``Azure-AsyncOperation`` and ``Location``; the
  operation status InProgress at the first look, Succeeded, or Failed when told, after).
  Shapes: tests/data/real/azure/ (the Compute REST specification's examples) and the ARM
  async-operation documentation (tests/data/real/SOURCES.md).
- `OciCloud`: HTTP serving the Core Services calls of the oci SDK's ComputeClient
  (GetInstance, ListInstances, InstanceAction, UpdateInstance, TerminateInstance,
  LaunchInstance, ListVnicAttachments, GetComputeCluster), VirtualNetworkClient (GetVnic)
  and WorkRequestClient (GetWorkRequest) under ``/20160918``, deduplicating by
  ``opc-retry-token`` as OCI does, and checking that every call is signed by the test key
  (its keyId) with the SDK's request signature.

Both count what really ran (``executed``) and every request they saw (``seen``), and
play the faults of the provider fault suite: an answer replaced before anything runs
(429 with Retry-After, 503), an answer lost after the action ran (500, or the connection
closed without an answer), an operation that fails late, credentials refused.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

REAL = Path(__file__).resolve().parent / "data" / "real"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


@dataclass
class Reply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


LOST = Reply(-1)  # close the connection without an answer


def hang(seconds: float) -> Reply:
    """Say nothing for ``seconds``, then close the connection."""
    return Reply(-2, seconds)


Hook = Callable[[str, str], None]


class _Server:
    """A threading HTTP(S) server on 127.0.0.1 whose requests go to ``self.handle``."""

    def __init__(self, tls: tuple[Path, Path] | None = None) -> None:
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        scheme = "http"
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        raise NotImplementedError

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                with outer._lock:
                    outer.seen.append((self.command, self.path, headers, body))
                reply = outer.handle(self.command, self.path, headers, body)
                if reply.status < 0:  # the answer is lost: close without a word
                    if reply.status == -2:
                        time.sleep(float(reply.body))
                    self.close_connection = True
                    return
                data = b"" if reply.body is None else (
                    reply.body if isinstance(reply.body, bytes)
                    else json.dumps(reply.body).encode())
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        return Handler


# --------------------------------------------------------------------------------- Azure
_ARM = (r"^/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)/providers/"
        r"Microsoft\.Compute/")
_VM = _ARM + r"virtualMachines/(?P<vm>[^/?]+)(?:/(?P<verb>[A-Za-z]+))?$"
_SSVM = (_ARM + r"virtualMachineScaleSets/(?P<ss>[^/]+)/virtualMachines/(?P<iid>[^/?]+)"
         r"(?:/(?P<verb>[A-Za-z]+))?$")
_VMS = _ARM + r"virtualMachines$"
_OP = (r"^/subscriptions/(?P<sub>[^/]+)/providers/Microsoft\.Compute/locations/"
       r"(?P<loc>[^/]+)/operations/(?P<op>[^/?]+)$")
AZURE_ACTIONS = ("restart", "redeploy", "reimage", "deallocate", "start", "powerOff")


@dataclass
class AzureVm:
    """One VM (or scale set VM) of the local cloud."""

    name: str
    vm_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    tags: dict[str, str] = field(default_factory=dict)
    ephemeral: bool = False  # an ephemeral (local) OS disk
    attached_os_disk: bool = False  # a specialized OS disk (createOption Attach): no image
    power: str = "running"
    provisioning: str = "succeeded"
    provisioned_at: str = "2019-10-14T21:30:12.8051917+00:00"
    host: int = 1  # which physical host (redeploy and deallocate move it)


class AzureCloud(_Server):
    """Entra ID's token endpoint and ARM's compute calls (module docstring)."""

    def __init__(self, tls: tuple[Path, Path], *, tenant: str = "contoso-tenant",
                 client_id: str = "app-1", secret: str = "s3cret",
                 subscription: str = "sub-1", hook: Hook | None = None) -> None:
        super().__init__(tls)
        self.hook = hook  # hook(action, VM name) when an action runs (the lab reboots)
        self.tenant, self.client_id, self.secret = tenant, client_id, secret
        self.subscription = subscription
        self.vm_example = json.loads((REAL / "azure" / "VirtualMachine_Get.json").read_text()
                                     )["responses"]["200"]["body"]
        self.view_example = json.loads(
            (REAL / "azure" / "VirtualMachine_Get_InstanceView.json").read_text()
        )["responses"]["200"]["body"]
        self.vms: dict[tuple[str, str], AzureVm] = {}  # (rg, name or "ss/iid") -> VM
        self.operations: dict[str, dict[str, Any]] = {}
        self.executed: list[tuple[str, str]] = []  # (action, target) that really ran
        self.tokens = 0
        self.answer_next: list[Reply] = []  # answered instead of the next ARM call
        self.lose: dict[str, Reply] = {}  # action -> the answer after it ran
        self.fail_late: set[str] = set()  # actions whose operation ends Failed
        self.refuse: dict[str, Reply] = {}  # action -> a definite no (nothing runs)

    def vm(self, rg: str, name: str, **kw: Any) -> AzureVm:
        made = AzureVm(name=name, **kw)
        self.vms[(rg, name)] = made
        return made

    def actions(self, verb: str | None = None) -> list[str]:
        """The action POSTs that reached the server (ran or not)."""
        return [p for m, p, _, _ in self.seen if m == "POST" and "/oauth2/" not in p
                and (verb is None or urlsplit(p).path.endswith("/" + verb))]

    # -- the server ---------------------------------------------------------------------
    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        parts = urlsplit(path)
        route = parts.path
        if route.endswith("/v2.0/.well-known/openid-configuration"):
            return self._openid(route.split("/")[1])
        if route.endswith("/oauth2/v2.0/token"):
            return self._token(parse_qs(body.decode()))
        if not headers.get("authorization", "").startswith("Bearer az-token-"):
            return Reply(401, {"error": {"code": "AuthenticationFailed", "message":
                         "Authentication failed. The 'Authorization' header is missing."}})
        with self._lock:
            injected = self.answer_next.pop(0) if self.answer_next else None
        if injected is not None:
            return injected
        m = re.match(_OP, route)
        if m and method == "GET":
            return self._operation(m["op"])
        m = re.match(_VMS, route)
        if m and method == "GET":
            found = [self._vm_json(m["rg"], v) for (rg, _), v in self.vms.items()
                     if rg == m["rg"] and "/" not in v.name]
            return Reply(200, {"value": found})
        m = re.match(_VM, route) or re.match(_SSVM, route)
        if not m:
            return Reply(404, {"error": {"code": "NotFound", "message": f"no {route}"}})
        groups = m.groupdict()
        name = f"{groups['ss']}/{groups['iid']}" if groups.get("ss") else groups["vm"]
        vm = self.vms.get((groups["rg"], name))
        if vm is None:
            return Reply(404, {"error": {"code": "ResourceNotFound", "message":
                         f"The Resource 'Microsoft.Compute/virtualMachines/{name}' under "
                         f"resource group '{groups['rg']}' was not found."}})
        verb = groups.get("verb")
        if method == "GET" and verb is None:
            return Reply(200, self._vm_json(groups["rg"], vm))
        if method == "GET" and verb == "instanceView":
            return Reply(200, self._view(vm))
        if method == "POST" and verb in AZURE_ACTIONS:
            return self._act(groups["sub"], verb, vm, body)
        return Reply(404, {"error": {"code": "NotFound", "message": f"no {method} {route}"}})

    def _openid(self, tenant: str) -> Reply:
        base = f"{self.url}/{tenant}"
        return Reply(200, {
            "token_endpoint": f"{base}/oauth2/v2.0/token",
            "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
            "issuer": f"{base}/v2.0", "token_endpoint_auth_methods_supported": [
                "client_secret_post", "private_key_jwt", "client_secret_basic"],
            "response_types_supported": ["code", "id_token", "code id_token",
                                         "id_token token"],
            "tenant_region_scope": None, "cloud_instance_name": "microsoftonline.com"})

    def _token(self, form: dict[str, list[str]]) -> Reply:
        if (form.get("client_id") != [self.client_id]
                or form.get("client_secret") != [self.secret]):
            return Reply(401, {
                "error": "invalid_client", "error_codes": [7000215],
                "error_description": "AADSTS7000215: Invalid client secret provided. "
                                     "Ensure the secret being sent in the request is the "
                                     "client secret value, not the client secret ID."})
        with self._lock:
            self.tokens += 1
            n = self.tokens
        return Reply(200, {"token_type": "Bearer", "expires_in": 3599,
                           "ext_expires_in": 3599, "access_token": f"az-token-{n}"})

    def _vm_json(self, rg: str, vm: AzureVm) -> dict[str, Any]:
        out = json.loads(json.dumps(self.vm_example))
        out.pop("managedBy", None)
        out.update(name=vm.name.rsplit("/", 1)[-1], tags=dict(vm.tags), id=(
            f"/subscriptions/{self.subscription}/resourceGroups/{rg}/providers/"
            f"Microsoft.Compute/virtualMachines/{vm.name}"))
        props = out["properties"]
        props["vmId"] = vm.vm_id
        props["hardwareProfile"]["vmSize"] = "Standard_ND96isr_H100_v5"
        os_disk = props["storageProfile"]["osDisk"]
        if vm.ephemeral:
            os_disk.update(caching="ReadOnly", diffDiskSettings={"option": "Local",
                                                                 "placement": "NvmeDisk"})
        if vm.attached_os_disk:
            os_disk["createOption"] = "Attach"
            props["storageProfile"].pop("imageReference", None)
        return dict(out)

    def _view(self, vm: AzureVm) -> dict[str, Any]:
        out = json.loads(json.dumps(self.view_example))
        out["computerName"] = vm.name
        with self._lock:
            out["statuses"] = [
                {"code": f"ProvisioningState/{vm.provisioning}", "level": "Info",
                 "displayStatus": f"Provisioning {vm.provisioning}",
                 "time": vm.provisioned_at},
                {"code": f"PowerState/{vm.power}", "level": "Info",
                 "displayStatus": f"VM {vm.power}"}]
        return dict(out)

    def _act(self, sub: str, verb: str, vm: AzureVm, body: bytes) -> Reply:
        refused = self.refuse.get(verb)
        if refused is not None:
            return refused
        if verb == "reimage" and vm.attached_os_disk and "/" not in vm.name:
            return Reply(409, {"error": {"code": "OperationNotAllowed", "message":
                         "Operation 'reimage' is not allowed on VM since the VM's OS disk "
                         "was attached (createOption Attach) and has no image."}})
        op = str(uuid.uuid4())
        with self._lock:
            self.executed.append((verb, vm.name))
            self.operations[op] = {"name": op, "status": "InProgress", "startTime": _now(),
                                   "vm": vm, "verb": verb, "looks": 0}
            vm.provisioning = "updating"
            lost = self.lose.pop(verb, None)
        if self.hook is not None:
            self.hook(verb, vm.name)
        if lost is not None:
            return lost
        url = (f"{self.url}/subscriptions/{sub}/providers/Microsoft.Compute/locations/"
               f"westus/operations/{op}?api-version=2026-04-01")
        return Reply(202, None, {"Azure-AsyncOperation": url,
                                 "Location": url + "&monitor=true", "Retry-After": "0"})

    def _operation(self, op_id: str) -> Reply:
        with self._lock:
            op = self.operations.get(op_id)
            if op is None:
                return Reply(404, {"error": {"code": "NotFound", "message": op_id}})
            op["looks"] += 1
            if op["looks"] >= 2 and op["status"] == "InProgress":
                vm: AzureVm = op["vm"]
                vm.provisioning, vm.provisioned_at = "succeeded", _now()
                if op["verb"] in self.fail_late:
                    op.update(status="Failed", endTime=_now(), error={
                        "code": "AllocationFailed", "message": "Allocation failed. We do "
                        "not have sufficient capacity for the requested VM size in this "
                        "region."})
                else:
                    op.update(status="Succeeded", endTime=_now())
                    vm.power = {"deallocate": "deallocated", "powerOff": "stopped"}.get(
                        op["verb"], "running")
                    if op["verb"] in ("redeploy", "deallocate"):
                        vm.host += 1
            return Reply(200, {k: v for k, v in op.items() if k not in ("vm", "verb",
                                                                        "looks")})

    def finish(self) -> None:
        """End every operation (as the platform does) without anybody looking."""
        for op_id in list(self.operations):
            self._operation(op_id)
            self._operation(op_id)


# ----------------------------------------------------------------------------------- OCI
_INSTANCE = r"^/20160918/instances/(?P<id>[^/?]+)$"
_INSTANCES = r"^/20160918/instances/?$"
_WORK = r"^/20160918/workRequests/(?P<id>[^/?]+)$"
_VNIC = r"^/20160918/vnics/(?P<id>[^/?]+)$"
_CLUSTER = r"^/20160918/computeClusters/(?P<id>[^/?]+)$"
_NOT_FOUND = Reply(404, {"code": "NotAuthorizedOrNotFound", "message":
                         "Authorization failed or requested resource not found."})


@dataclass
class OciInstance:
    id: str
    shape: str = "BM.GPU.H100.8"
    state: str = "RUNNING"
    maintenance_due: str | None = None
    image: str = "ocid1.image.oc1..aaaaimage"
    looks: int = 0
    host: int = 1
    display_name: str = ""
    vnics: list[dict[str, Any]] = field(default_factory=list)  # GetVnic bodies, primary first
    launched: dict[str, Any] | None = None  # the LaunchInstance body it was made from
    preserved_boot_volume: bool | None = None  # TerminateInstance's preserveBootVolume
    fields: dict[str, Any] = field(default_factory=dict)  # more of its GetInstance body


class OciCloud(_Server):
    """OCI Core Services' instance calls and work requests (module docstring)."""

    def __init__(self, key_id: str, hook: Hook | None = None) -> None:
        super().__init__()
        self.key_id, self.hook = key_id, hook
        self.instances: dict[str, OciInstance] = {}
        self.executed: list[tuple[str, str]] = []  # (action, instance OCID)
        self.by_token: dict[str, Reply] = {}  # opc-retry-token -> the first answer
        self.work: dict[str, dict[str, Any]] = {}
        self.answer_next: list[Reply] = []
        self.lose: dict[str, Reply] = {}
        self.fail_late: set[str] = set()
        self.shape = json.loads((REAL / "oci" / "instance-action-softstop.json").read_text())
        self.clusters: dict[str, dict[str, Any]] = {}

    def instance(self, shape: str = "BM.GPU.H100.8", **kw: Any) -> OciInstance:
        made = OciInstance(id=f"ocid1.instance.oc1.iad.{uuid.uuid4().hex}", shape=shape, **kw)
        made.display_name = made.display_name or made.id[-8:]
        if not made.vnics:
            made.vnics = [self._vnic(made, {"subnetId": "ocid1.subnet.oc1.iad.aaaagpu",
                                            "privateIp": f"10.0.{len(self.instances)}.5",
                                            "hostnameLabel": made.display_name,
                                            "nsgIds": ["ocid1.networksecuritygroup.oc1.iad.a"]},
                                      primary=True)]
        self.instances[made.id] = made
        return made

    def cluster(self, availability_domain: str | None = None,
                state: str = "ACTIVE") -> str:
        """A compute cluster (GetComputeCluster), by default in the instances' AD."""
        cid = f"ocid1.computecluster.oc1.iad.{uuid.uuid4().hex}"
        self.clusters[cid] = {
            "id": cid, "availabilityDomain": availability_domain or
            self.shape["availabilityDomain"], "compartmentId": self.shape["compartmentId"],
            "displayName": "gpu-cluster", "lifecycleState": state,
            "timeCreated": "2026-11-01T10:00:00.000Z", "freeformTags": {},
            "definedTags": {}}
        return cid

    def _vnic(self, inst: OciInstance, details: dict[str, Any], *,
              primary: bool) -> dict[str, Any]:
        return {"id": f"ocid1.vnic.oc1.iad.{uuid.uuid4().hex}",
                "availabilityDomain": self.shape["availabilityDomain"],
                "compartmentId": self.shape["compartmentId"],
                "displayName": details.get("displayName") or inst.display_name,
                "hostnameLabel": details.get("hostnameLabel"), "isPrimary": primary,
                "lifecycleState": "AVAILABLE", "macAddress": "02:00:17:00:00:01",
                "nsgIds": details.get("nsgIds") or [],
                "privateIp": details.get("privateIp") or "10.0.9.9",
                "publicIp": "129.0.0.1" if details.get("assignPublicIp") else None,
                "skipSourceDestCheck": bool(details.get("skipSourceDestCheck")),
                "subnetId": details["subnetId"], "timeCreated": _now(),
                "freeformTags": details.get("freeformTags") or {},
                "definedTags": details.get("definedTags") or {}}

    def finish(self) -> None:
        """Every instance action ends (the instances are RUNNING again)."""
        with self._lock:
            for inst in self.instances.values():
                if inst.state in ("STOPPING", "STARTING"):
                    inst.state = "RUNNING"

    def posts(self) -> list[tuple[str, dict[str, str]]]:
        """(path, headers) of every action that reached the server."""
        return [(p, h) for m, p, h, _ in self.seen if m in ("POST", "PUT")]

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        auth = headers.get("authorization", "")
        if f'keyId="{self.key_id}"' not in auth or 'version="1"' not in auth:
            return Reply(401, {"code": "NotAuthenticated", "message": "The required "
                               "information to complete authentication was not provided "
                               "or was incorrect."})
        with self._lock:
            injected = self.answer_next.pop(0) if self.answer_next else None
        if injected is not None:
            return injected
        parts = urlsplit(path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        m = re.match(_WORK, parts.path)
        if m and method == "GET":
            return self._work_request(m["id"])
        if method == "GET" and parts.path == "/20160918/vnicAttachments":
            return self._vnic_attachments(query)
        m = re.match(_VNIC, parts.path)
        if m and method == "GET":
            found = [v for i in self.instances.values() if i.state != "TERMINATED"
                     for v in i.vnics if v["id"] == m["id"]]
            return Reply(200, found[0]) if found else _NOT_FOUND
        m = re.match(_CLUSTER, parts.path)
        if m and method == "GET":
            cluster = self.clusters.get(m["id"])
            return Reply(200, cluster) if cluster else _NOT_FOUND
        if re.match(_INSTANCES, parts.path):
            if method == "GET":
                return Reply(200, [self._json(i) for i in list(self.instances.values())
                                   if i.display_name == query.get("displayName",
                                                                  i.display_name)])
            if method == "POST":
                return self._launch(headers.get("opc-retry-token", ""),
                                    json.loads(body or b"{}"))
        m = re.match(_INSTANCE, parts.path)
        inst = self.instances.get(m["id"]) if m else None
        if inst is None:
            return _NOT_FOUND
        if method == "GET":
            return self._get(inst)
        if method == "DELETE":
            return self._terminate(inst, query)
        token = headers.get("opc-retry-token", "")
        with self._lock:
            if token and token in self.by_token:  # OCI answers a repeat from the first
                return self.by_token[token]
        if method == "POST":
            action = (parse_qs(parts.query).get("action") or [""])[0]
            reply = self._action(inst, action, json.loads(body or b"{}"))
        elif method == "PUT":
            reply = self._update(inst, json.loads(body or b"{}"))
            action = "replaceBootVolume"
        else:
            return Reply(404, {"code": "NotFound", "message": path})
        with self._lock:
            if token and reply.status < 300:
                self.by_token[token] = reply
            lost = self.lose.pop(action, None)
        return lost if lost is not None and reply.status < 300 else reply

    def _json(self, inst: OciInstance) -> dict[str, Any]:
        out = dict(self.shape, id=inst.id, shape=inst.shape, lifecycleState=inst.state,
                   displayName=inst.display_name, timeMaintenanceRebootDue=inst.maintenance_due,
                   imageId=inst.image, **inst.fields)
        out["sourceDetails"] = dict(out["sourceDetails"], imageId=inst.image)
        return out

    def _vnic_attachments(self, query: dict[str, str]) -> Reply:
        """ListVnicAttachments of ``instanceId`` (VnicAttachment, API reference)."""
        inst = self.instances.get(query.get("instanceId", ""))
        if inst is None or inst.state == "TERMINATED":
            return Reply(200, [])
        return Reply(200, [{
            "id": f"ocid1.vnicattachment.oc1.iad.{v['id'][-12:]}", "instanceId": inst.id,
            "availabilityDomain": v["availabilityDomain"], "compartmentId": v["compartmentId"],
            "displayName": v["displayName"], "lifecycleState": "ATTACHED", "nicIndex": 0,
            "subnetId": v["subnetId"], "vlanTag": 0, "timeCreated": v["timeCreated"],
            "vnicId": v["id"]} for v in inst.vnics])

    def _terminate(self, inst: OciInstance, query: dict[str, str]) -> Reply:
        """TerminateInstance: 204, the instance TERMINATING, then TERMINATED at the next
        look (a repeat while it goes is answered the same and runs nothing)."""
        with self._lock:
            if inst.state not in ("TERMINATING", "TERMINATED"):
                self.executed.append(("TerminateInstance", inst.id))
                inst.state = "TERMINATING"
                inst.preserved_boot_volume = query.get("preserveBootVolume") == "true"
            lost = self.lose.pop("TerminateInstance", None)
        return lost if lost is not None else Reply(204, None,
                                                   {"opc-request-id": uuid.uuid4().hex})

    def _launch(self, token: str, details: dict[str, Any]) -> Reply:
        """LaunchInstance: a new instance PROVISIONING, its work request in the header; a
        repeat under the same opc-retry-token is answered with the first."""
        with self._lock:
            if token and token in self.by_token:
                return self.by_token[token]
        need = ("availabilityDomain", "compartmentId", "shape")
        if any(not details.get(k) for k in need) or \
                not (details.get("createVnicDetails") or {}).get("subnetId"):
            return Reply(400, {"code": "InvalidParameter", "message":
                               "availabilityDomain, compartmentId, shape and a subnet "
                               "are required"})
        cluster = self.clusters.get(details.get("computeClusterId") or "")
        if details.get("computeClusterId") and cluster is None:
            return _NOT_FOUND
        made = OciInstance(id=f"ocid1.instance.oc1.iad.{uuid.uuid4().hex}",
                           shape=details["shape"], state="PROVISIONING",
                           image=(details.get("sourceDetails") or {}).get("imageId", ""),
                           display_name=details.get("displayName") or "", launched=details)
        made.vnics = [self._vnic(made, details["createVnicDetails"], primary=True)]
        wr = f"ocid1.coreservicesworkrequest.oc1.iad.{uuid.uuid4().hex}"
        with self._lock:
            self.instances[made.id] = made
            self.executed.append(("LaunchInstance", made.id))
            self.work[wr] = {"instance": made, "looks": 0, "accepted": _now(), "image": None}
            reply = Reply(200, self._json(made), {"opc-work-request-id": wr, "etag": "e-l"})
            if token:
                self.by_token[token] = reply
            lost = self.lose.pop("LaunchInstance", None)
        return lost if lost is not None else reply

    def _get(self, inst: OciInstance) -> Reply:
        with self._lock:
            answer = self._json(inst)
            # the platform moves on at each look: STOPPING -> STARTING -> RUNNING
            inst.looks += 1
            inst.state = {"STOPPING": "STARTING", "STARTING": "RUNNING",
                          "PROVISIONING": "STARTING",
                          "TERMINATING": "TERMINATED"}.get(inst.state, inst.state)
        return Reply(200, answer, {"etag": f"e{inst.looks}"})

    def _action(self, inst: OciInstance, action: str, details: dict[str, Any]) -> Reply:
        if action not in ("SOFTRESET", "RESET", "REBOOTMIGRATE", "STOP", "START"):
            return Reply(400, {"code": "InvalidParameter", "message": f"action {action}"})
        if inst.state != "RUNNING":
            return Reply(409, {"code": "IncorrectState", "message":
                               f"Instance is in {inst.state} state"})
        if action == "REBOOTMIGRATE" and not inst.maintenance_due:
            return Reply(409, {"code": "IncorrectState", "message": "Reboot migration is "
                               "only available for an instance with a scheduled "
                               "maintenance reboot."})
        with self._lock:
            self.executed.append((action, inst.id))
            inst.state = "STOPPING"
            if action == "REBOOTMIGRATE":
                inst.host += 1
                inst.maintenance_due = None
            answer = self._json(inst)
        if self.hook is not None:
            self.hook(action, inst.id)
        return Reply(200, answer, {"opc-request-id": uuid.uuid4().hex.upper(),
                                   "etag": "e-act"})

    def _update(self, inst: OciInstance, details: dict[str, Any]) -> Reply:
        source = details.get("sourceDetails") or {}
        if source.get("sourceType") != "image":
            return Reply(400, {"code": "InvalidParameter", "message": "no sourceDetails"})
        wr = f"ocid1.coreservicesworkrequest.oc1.iad.{uuid.uuid4().hex}"
        with self._lock:
            self.executed.append(("replaceBootVolume", inst.id))
            self.work[wr] = {"instance": inst, "looks": 0, "accepted": _now(),
                             "image": source.get("imageId")}
            answer = self._json(inst)
        return Reply(200, answer, {"opc-work-request-id": wr, "etag": "e-upd"})

    def _work_request(self, wr: str) -> Reply:
        with self._lock:
            work = self.work.get(wr)
            if work is None:
                return Reply(404, {"code": "NotAuthorizedOrNotFound", "message": wr})
            work["looks"] += 1
            status = "IN_PROGRESS"
            if work["looks"] >= 2:
                status = "FAILED" if "replaceBootVolume" in self.fail_late else "SUCCEEDED"
            inst: OciInstance = work["instance"]
        return Reply(200, {
            "operationType": "UpdateInstance", "status": status, "id": wr,
            "compartmentId": self.shape["compartmentId"],
            "resources": [{"entityType": "instance", "actionType": "UPDATED",
                           "identifier": inst.id, "entityUri": f"/instances/{inst.id}"}],
            "percentComplete": 100.0 if status != "IN_PROGRESS" else 40.0,
            "timeAccepted": work["accepted"], "timeStarted": work["accepted"],
            "timeFinished": _now() if status != "IN_PROGRESS" else None})



# --------------------------------------------------------------------------- test helpers
def azure_config(az: AzureCloud, cert: Path, directory: Path, **extra: Any) -> dict[str, Any]:
    """A ``[provider]`` table for ``az``: an app registration's secret in a file, Entra ID
    and Resource Manager at the local server, its certificate as the CA bundle."""
    directory.mkdir(parents=True, exist_ok=True)
    secret = directory / "azure.secret"
    secret.write_text(az.secret + "\n")
    return {"type": "azure", "subscription_id": az.subscription, "resource_group": "hpc-rg",
            "tenant_id": az.tenant, "client_id": az.client_id,
            "client_secret_file": str(secret), "authority": az.url, "base_url": az.url,
            "verify": str(cert), "backoff": 0.01, **extra}


def oci_key(directory: Path) -> tuple[Path, str]:
    """An API signing key (openssl) and an oci config file naming it; (config file, the
    keyId the SDK signs with)."""
    import subprocess

    pem = directory / "oci_api_key.pem"
    subprocess.run(["openssl", "genrsa", "-out", str(pem), "2048"], check=True,
                   capture_output=True, timeout=60)
    tenancy = "ocid1.tenancy.oc1..aaaaaaaatest"
    user = "ocid1.user.oc1..aaaaaaaaslurmheal"
    fingerprint = "20:3b:97:13:55:1c:5b:0d:d3:37:d8:50:4e:c5:3a:34"
    config = directory / "oci.config"
    config.write_text(f"[DEFAULT]\nuser={user}\nfingerprint={fingerprint}\n"
                      f"tenancy={tenancy}\nregion=us-ashburn-1\nkey_file={pem}\n")
    return config, f"{tenancy}/{user}/{fingerprint}"


def oci_config(oci: OciCloud, config: Path, **extra: Any) -> dict[str, Any]:
    return {"type": "oci", "config_file": str(config), "endpoint": oci.url,
            "backoff": 0.01, **extra}
