"""Providers: whatever repairs a node (SPEC L2, S6). See `base.py` for the protocol and
docs/providers.md for the configuration of each type.

The registry is an explicit list that rejects duplicate names (house style 7). Built-in
types: ``http``, ``exec``, ``slurm``, ``openstack``, ``aws``, ``gcp``, ``azure``, ``oci``,
``redfish``, ``simulator`` (the cloud ones need their extra installed). Third-party types
come in through the entry point group ``slurm_heal.providers``: each entry point names a
factory ``factory(cfg, *, slurm, state_dir) -> Provider``; one that fails to load is
listed by `available_providers` as unavailable, with its error.

This package imports nothing heavy at import time (no requests, no pydantic): the
adapters are imported when `make_provider` builds one.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_heal.errors import ConfigError
from slurm_heal.providers.base import Operation, OperationStatus, Provider
from slurm_heal.types import Action

if TYPE_CHECKING:
    from slurm_heal.slurm.base import SlurmClient

__all__ = ["ENTRY_POINT_GROUP", "Operation", "OperationStatus", "Provider",
           "ProviderFactory", "ProviderRegistry", "REGISTRY", "available_providers",
           "make_provider"]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "slurm_heal.providers"
SECTION = "provider"

ProviderFactory = Callable[..., Provider]
"""``factory(cfg: Mapping[str, Any], *, slurm: SlurmClient | None,
state_dir: Path | None) -> Provider``."""


class ProviderRegistry:
    """Provider types by name. Registering a name twice is an error."""

    def __init__(self) -> None:
        self._factories: dict[str, ProviderFactory] = {}
        self._origin: dict[str, str] = {}
        self._unavailable: dict[str, str] = {}
        self._plugins_loaded = False

    def register(self, name: str, factory: ProviderFactory, *, origin: str = "builtin") -> None:
        """Add a provider type; ValueError when ``name`` is taken."""
        if name in self._factories:
            raise ValueError(f"provider type {name!r} is already registered "
                             f"(by {self._origin[name]})")
        self._factories[name] = factory
        self._origin[name] = origin

    def get(self, name: str) -> ProviderFactory | None:
        """The factory for ``name`` (loading plugins on first miss)."""
        if name not in self._factories:
            self.load_plugins()
        return self._factories.get(name)

    def load_plugins(self) -> None:
        """Load the ``slurm_heal.providers`` entry points once."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                factory = ep.load()
                if not callable(factory):
                    raise TypeError(f"{ep.value} is not callable")
                self.register(ep.name, factory, origin=f"plugin {ep.value}")
            except Exception as exc:  # noqa: BLE001 - a bad plugin must not break the rest
                self._unavailable[ep.name] = f"{type(exc).__name__}: {exc}"
                log.warning("provider plugin %s (%s) is unavailable: %s", ep.name, ep.value, exc)

    def available(self) -> dict[str, str]:
        """Every known type -> "builtin", "plugin MODULE:ATTR" or "unavailable: ERROR"."""
        self.load_plugins()
        out = dict(self._origin)
        for name, error in self._unavailable.items():
            out.setdefault(name, f"unavailable: {error}")
        return out

    def names(self) -> list[str]:
        """Names of the usable types."""
        return sorted(self._factories)


REGISTRY = ProviderRegistry()


def available_providers() -> dict[str, str]:
    """Every provider type and where it comes from (or why it is unavailable)."""
    return REGISTRY.available()


def make_provider(cfg: Mapping[str, Any], *, slurm: SlurmClient | None = None,
                  state_dir: str | os.PathLike[str] | None = None) -> Provider:
    """Build the provider a ``[provider]`` config section describes.

    ``state_dir`` (or the section's own ``state_dir`` key, which wins) is where the
    exec, slurm and openstack providers remember the idempotency keys they acted on;
    without one they remember them in memory only (not restart-safe). Raises
    ConfigError naming the key at fault.
    """
    if not isinstance(cfg, Mapping):
        raise ConfigError("must be a table", key=SECTION)
    kind = cfg.get("type")
    if not isinstance(kind, str) or not kind:
        raise ConfigError(f"missing or not a string; one of: {', '.join(REGISTRY.names())}",
                          key=f"{SECTION}.type")
    factory = REGISTRY.get(kind)
    if factory is None:
        why = REGISTRY.available().get(kind, "")
        raise ConfigError(f"unknown provider type {kind!r}"
                          + (f" ({why})" if why else "")
                          + f"; known: {', '.join(REGISTRY.names())}", key=f"{SECTION}.type")
    own = cfg.get("state_dir")
    if own is not None and not isinstance(own, str):
        raise ConfigError("must be a path string", key=f"{SECTION}.state_dir")
    chosen = own if own is not None else state_dir
    sd = Path(chosen) if chosen is not None else None
    if sd is None and kind in ("exec", "slurm", "openstack", "aws", "redfish", "gcp",
                               "azure", "oci"):
        log.warning("provider %s has no state_dir: idempotency keys are remembered in "
                    "memory only and a restart could repeat an action", kind)
    return factory(cfg, slurm=slurm, state_dir=sd)


# --- the factories: each reads its section through the provider's own settings model
# (providers/settings.py, config.read_section); what spans keys is checked here.
def _check_url(url: str, key: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"must be an http:// or https:// URL, not {url!r}", key=key)
    return url


def _make_http(cfg: Mapping[str, Any], *, slurm: SlurmClient | None,
               state_dir: Path | None) -> Provider:
    from slurm_heal.providerconf import read_provider_section
    from slurm_heal.providers.http import HttpProvider, HttpSettings

    s = read_provider_section(HttpSettings, cfg)
    return HttpProvider(s.url, **s.client_kwargs())


def _make_simulator(cfg: Mapping[str, Any], *, slurm: SlurmClient | None,
                    state_dir: Path | None) -> Provider:
    """An http provider against a simulator: the one at ``url``, or (no url) one started
    in this process on 127.0.0.1 (for the demo); `close()` stops it."""
    from slurm_heal.providerconf import read_provider_section, simulator_keys
    from slurm_heal.providers.http import HttpProvider, SimulatorSettings
    from slurm_heal.providers.simulator import LabHook, SimulatorServer

    s = read_provider_section(SimulatorSettings, cfg)
    kwargs = s.client_kwargs()
    if s.url is not None:
        simulator_keys(s, cfg)
        return HttpProvider(s.url, **kwargs)
    try:
        hook = LabHook(s.lab_dir, scratch_root=s.scratch_root, slurm=slurm) \
            if s.lab_dir else None
    except ConfigError as exc:  # not a lab: said now, not at the first reboot
        raise ConfigError(str(exc), key=f"{SECTION}.lab_dir") from None
    server = SimulatorServer(port=s.port, on_action=hook, duration=s.duration).start()
    return _EmbeddedSimulator(HttpProvider(server.url, **kwargs), server)


class _EmbeddedSimulator:
    """An http provider that owns the simulator it talks to."""

    name = "simulator"

    def __init__(self, client: Any, server: Any):
        self.client, self.server = client, server

    def supports(self, action: Action) -> bool:
        return bool(self.client.supports(action))

    def submit(self, node: str, action: Action, key: str) -> Operation:
        op: Operation = self.client.submit(node, action, key)
        return op

    def status(self, key: str) -> Operation | None:
        op: Operation | None = self.client.status(key)
        return op

    def close(self) -> None:
        """Stop the embedded simulator."""
        self.client.close()
        self.server.stop()


def _make_exec(cfg: Mapping[str, Any], *, slurm: SlurmClient | None,
               state_dir: Path | None) -> Provider:
    from slurm_heal.providerconf import exec_actions, read_provider_section
    from slurm_heal.providers.script import ExecProvider, ExecSettings

    s = read_provider_section(ExecSettings, cfg)
    scripts = exec_actions(s)  # each names an action (the file); each runs (the machine):
    for action, path in scripts.items():
        if not os.path.isfile(path) or not os.access(path, os.X_OK):
            raise ConfigError(f"{path} is not an executable file",
                              key=f"{SECTION}.scripts.{action.value}")
    return ExecProvider(scripts, state_dir=state_dir, timeout=s.timeout, env=s.env)


def _make_slurm(cfg: Mapping[str, Any], *, slurm: SlurmClient | None,
                state_dir: Path | None) -> Provider:
    from slurm_heal.providerconf import read_provider_section, slurm_nextstate
    from slurm_heal.providers.slurm import SlurmRebootProvider, SlurmSettings

    s = read_provider_section(SlurmSettings, cfg)
    if slurm is None:
        raise ConfigError("the slurm provider needs a Slurm client (none was given)",
                          key=f"{SECTION}.type")
    slurm_nextstate(s)
    return SlurmRebootProvider(slurm, state_dir=state_dir, nextstate="DRAIN",
                               timeout=s.timeout)


def _make_openstack(cfg: Mapping[str, Any], *, slurm: SlurmClient | None,
                    state_dir: Path | None) -> Provider:
    _need("openstack", "openstack")
    _refuse_resending_sdk()
    from slurm_heal.providerconf import read_provider_section
    from slurm_heal.providers.openstack import OpenStackProvider, OpenStackSettings

    s = read_provider_section(OpenStackSettings, cfg)
    if s.connect_timeout is not None:
        log.warning("[provider] connect_timeout is not used by the openstack provider "
                    "(openstacksdk takes one per-request timeout: read_timeout)")
    auth: dict[str, Any] = {}
    cloud = s.cloud
    if cloud is not None:
        auth = _clouds_yaml(cloud, s.clouds_yaml)
    verify = s.verify if s.verify is not None else auth.get("verify", True)
    if not isinstance(verify, (bool, str)) or verify == "":
        raise ConfigError("must be true, false or a CA bundle path", key=f"{SECTION}.verify")
    password = s.password
    password_file = s.password_file
    app_id = s.application_credential_id or auth.get("application_credential_id")
    app_secret_file = s.application_credential_secret_file
    app_secret = auth.get("application_credential_secret")
    if app_secret_file is not None:
        app_secret = _read_secret(app_secret_file, "application_credential_secret_file")
    if app_id is not None:
        if not app_secret:
            raise ConfigError("an application credential needs its secret "
                              "(application_credential_secret_file or clouds.yaml)",
                              key=f"{SECTION}.application_credential_secret_file")
    elif cloud is not None and password is None and password_file is None:
        password = auth.get("password")
        if not password:
            raise ConfigError(f"cloud {cloud!r} has neither a password nor an application "
                              "credential", key=f"{SECTION}.cloud")
    elif (password is None) == (password_file is None):
        raise ConfigError("set exactly one of password and password_file (or an "
                          "application credential, or cloud)", key=f"{SECTION}.password_file")
    if password_file is not None:
        password = _read_secret(password_file, "password_file")
    auth_url = s.auth_url or auth.get("auth_url")
    if not auth_url:
        raise ConfigError("is required (here or in the clouds.yaml entry)",
                          key=f"{SECTION}.auth_url")
    username = s.username or auth.get("username") or ""
    project = s.project_name or auth.get("project_name") or ""
    if app_id is None and (not username or not project):
        raise ConfigError("username and project_name are required with a password",
                          key=f"{SECTION}.username" if not username
                          else f"{SECTION}.project_name")
    return OpenStackProvider(
        auth_url=_check_url(str(auth_url), f"{SECTION}.auth_url"),
        username=username, password=password or "", project_name=project,
        user_domain=s.user_domain or auth.get("user_domain_name") or "Default",
        project_domain=s.project_domain or auth.get("project_domain_name") or "Default",
        compute_url=s.compute_url,
        interface=s.interface or auth.get("interface") or "public",
        region=s.region or auth.get("region_name"),
        image=s.image, live=s.live, servers=s.servers,
        reboot=s.reboot, verify=verify, soft_reboot_timeout=s.soft_reboot_timeout,
        state_dir=state_dir, read_timeout=s.read_timeout, attempts=s.attempts,
        backoff=s.backoff, application_credential_id=app_id,
        application_credential_secret=app_secret, call_timeout=s.call_timeout)


def _read_secret(path: str, name: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}", key=f"{SECTION}.{name}") from exc


def _clouds_yaml(cloud: str, path: str | None) -> dict[str, Any]:
    """The auth settings of ``cloud`` in clouds.yaml (openstacksdk's loader: the usual
    places, or ``path``), flattened: auth_url, username, password, project_name, domains,
    application_credential_id/secret, region_name, interface, verify (false or the
    cacert path)."""
    try:
        from openstack.config import loader
    except ImportError as exc:
        raise ConfigError("clouds.yaml needs openstacksdk (pip install "
                          "'slurm-heal[openstack]')", key=f"{SECTION}.cloud") from exc
    import warnings

    try:
        with warnings.catch_warnings():  # the SDK warns about its optional metrics backends
            warnings.simplefilter("ignore")
            region = loader.OpenStackConfig(config_files=[path] if path else None,
                                            load_envvars=False).get_one(cloud=cloud)
    except Exception as exc:  # noqa: BLE001 - the SDK raises several kinds; name the key
        raise ConfigError(f"cannot use cloud {cloud!r} from "
                          f"{path or 'clouds.yaml'}: {exc}", key=f"{SECTION}.cloud") from exc
    auth = dict(region.config.get("auth") or {})
    auth["region_name"] = region.get_region_name() or None
    auth["interface"] = region.get_interface() or None
    verify = region.get_requests_verify_args()[0]  # verify: false, or cacert: PATH
    auth["verify"] = verify if verify is not True else None
    for generic, specific in (("user_domain_name", "domain_name"),
                              ("project_domain_name", "domain_name")):
        if not auth.get(generic) and auth.get(specific):
            auth[generic] = auth[specific]
    return {k: v for k, v in auth.items() if v is not None}


def _need(module: str, extra: str) -> None:
    """A clear ConfigError (not an ImportError traceback) when an extra is missing."""
    from importlib.util import find_spec

    try:
        found = find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package (google.cloud) is missing
        found = False
    if not found:
        raise ConfigError(f"needs the {module} package: pip install 'slurm-heal[{extra}]'",
                          key=f"{SECTION}.type")


# The first openstacksdk that does not resend an action POST whose answer was lost: before
# it, its Proxy.request passed connect_retries=1 to keystoneauth on every call, over the
# connection's connect_retries=0, and keystoneauth retries a connection failure of any
# request, a POST included (issue 38: openstacksdk 4.13 and 4.14 rebooted twice). It
# needs Python >= 3.11; pyproject's openstack extra asks for it.
OPENSTACKSDK_FLOOR = (4, 15)


def _refuse_resending_sdk() -> None:
    """A ConfigError for an openstacksdk older than OPENSTACKSDK_FLOOR (one installed
    beside slurm-heal by other means than its extra): two actions for one remediation
    (SPEC S6) are worse than none."""
    from importlib.metadata import version

    found = version("openstacksdk")
    release = tuple(int(part) for part in re.findall(r"\d+", found)[:2])
    if release < OPENSTACKSDK_FLOOR:
        floor = ".".join(map(str, OPENSTACKSDK_FLOOR))
        raise ConfigError(f"openstacksdk {found} resends an action whose answer was lost "
                          "(it retries a connection failure of a POST by itself): two "
                          f"reboots for one remediation (SPEC S6); install openstacksdk >= "
                          f"{floor} (pip install 'slurm-heal[openstack]'; Python >= 3.11)",
                          key=f"{SECTION}.type")


def _make_aws(cfg: Mapping[str, Any], *, slurm: SlurmClient | None,
              state_dir: Path | None) -> Provider:
    _need("boto3", "aws")
    from slurm_heal.providerconf import read_provider_section, refuse_secrets
    from slurm_heal.providers.aws import AwsProvider, AwsSettings

    refuse_secrets("aws", cfg)
    s = read_provider_section(AwsSettings, cfg)
    return AwsProvider(
        region=s.region, profile=s.profile, endpoint_url=s.endpoint_url,
        instances=s.instances, slurm=slurm, image=s.image, state_dir=state_dir,
        connect_timeout=s.connect_timeout, read_timeout=s.read_timeout,
        attempts=s.attempts, deadline=s.deadline, backoff=s.backoff, actions=s.actions)


_BMC_KEYS = frozenset({"address", "system", "username", "password_file", "password",
                       "protocol", "port"})


def _make_redfish(cfg: Mapping[str, Any], *, slurm: SlurmClient | None,
                  state_dir: Path | None) -> Provider:
    """BMCs from ``[provider.bmcs.NODE]`` tables and/or ``bmcs_file`` (TOML, same tables
    at its top level; only there may a ``password`` be written out). A BMC with
    ``protocol = "ipmi"`` is driven over IPMI (pyghmi) instead of Redfish (sushy)."""
    from slurm_heal.providerconf import read_provider_section, refuse_secrets
    from slurm_heal.providers.redfish import Bmc, RedfishProvider, RedfishSettings

    refuse_secrets("redfish", cfg)
    s = read_provider_section(RedfishSettings, cfg)
    entries: dict[str, tuple[Mapping[str, Any], str]] = {}
    bmcs_file = s.bmcs_file
    if bmcs_file is not None:
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover
            import tomli as tomllib
        try:
            data = tomllib.loads(Path(bmcs_file).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {bmcs_file}: {exc}",
                              key=f"{SECTION}.bmcs_file") from exc
        for node, entry in data.items():
            entries[node] = (entry, f"{bmcs_file}: {node}")
    for node, entry in s.bmcs.items():
        if isinstance(entry, Mapping) and "password" in entry:
            raise ConfigError("never in this file: use password_file or bmcs_file",
                              key=f"{SECTION}.bmcs.{node}.password")
        entries[node] = (entry, f"{SECTION}.bmcs.{node}")
    if not entries:
        raise ConfigError("no BMCs: add [provider.bmcs.NODE] tables or a bmcs_file",
                          key=f"{SECTION}.bmcs")
    default_user = s.username
    default_pw_file = s.password_file
    bmcs: dict[str, Bmc] = {}
    for node, (entry, where) in entries.items():
        if not isinstance(entry, Mapping):
            raise ConfigError("must be a table with address", key=where)
        unknown = sorted(set(entry) - _BMC_KEYS)
        if unknown:
            raise ConfigError(f"unknown key {unknown[0]!r}; allowed: "
                              f"{', '.join(sorted(_BMC_KEYS))}", key=where)
        protocol = entry.get("protocol", "redfish")
        if protocol not in ("redfish", "ipmi"):
            raise ConfigError(f"must be \"redfish\" or \"ipmi\", not {protocol!r}",
                              key=f"{where}.protocol")
        address = entry.get("address")
        if protocol == "ipmi":
            if not isinstance(address, str) or not address or "/" in address:
                raise ConfigError("needs address = \"BMC host name or IP\" (IPMI: no URL)",
                                  key=f"{where}.address")
            if "system" in entry:
                raise ConfigError("only for Redfish BMCs", key=f"{where}.system")
        else:
            if not isinstance(address, str):
                raise ConfigError("needs address = \"https://BMC\"", key=where)
            _check_url(address, f"{where}.address")
            if "port" in entry:
                raise ConfigError("only for IPMI BMCs (a Redfish port goes in the URL)",
                                  key=f"{where}.port")
        port = entry.get("port", 623)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ConfigError(f"must be a UDP port number, not {port!r}", key=f"{where}.port")
        user = entry.get("username", default_user)
        password = entry.get("password")
        pw_file = entry.get("password_file", default_pw_file)
        if not isinstance(user, str) or not user:
            raise ConfigError("no username (here or in [provider] username)", key=where)
        if password is None:
            if not isinstance(pw_file, str):
                raise ConfigError("no password_file (here or in [provider] password_file)",
                                  key=where)
            try:
                password = Path(pw_file).read_text().strip()
            except OSError as exc:
                raise ConfigError(f"cannot read {pw_file}: {exc}",
                                  key=f"{where}.password_file") from exc
        system = entry.get("system")
        if system is not None and (not isinstance(system, str) or not system.startswith("/")):
            raise ConfigError("must be the system's @odata.id, e.g. /redfish/v1/Systems/1",
                              key=f"{where}.system")
        bmcs[node] = Bmc(address=address, username=user, password=str(password),
                         system=system, protocol=protocol, port=port)
    if any(b.protocol == "redfish" for b in bmcs.values()):
        _need("sushy", "redfish")
    if any(b.protocol == "ipmi" for b in bmcs.values()):
        _need("pyghmi", "ipmi")
    return RedfishProvider(
        bmcs, verify=s.verify, state_dir=state_dir, reboot_types=s.reboot_types,
        connect_timeout=s.connect_timeout, read_timeout=s.read_timeout,
        attempts=s.attempts, deadline=s.deadline, backoff=s.backoff, actions=s.actions)


def _make_gcp(cfg: Mapping[str, Any], *, slurm: SlurmClient | None,
              state_dir: Path | None) -> Provider:
    _need("google.cloud.compute_v1", "gcp")
    from slurm_heal.providerconf import read_provider_section
    from slurm_heal.providers.gcp import GcpProvider, GcpSettings

    s = read_provider_section(GcpSettings, cfg)
    return GcpProvider(
        project=s.project, zone=s.zone, instances=s.instances,
        instance_group_manager=s.instance_group_manager, fault_behavior=s.fault_behavior,
        api_endpoint=s.api_endpoint, credentials_file=s.credentials_file,
        state_dir=state_dir, read_timeout=s.read_timeout, deadline=s.deadline,
        backoff=s.backoff, actions=s.actions)


def _make_azure(cfg: Mapping[str, Any], *, slurm: SlurmClient | None,
                state_dir: Path | None) -> Provider:
    """Credentials: an app registration's secret (tenant_id, client_id and
    client_secret_file together), else the VM's managed identity (client_id: a
    user-assigned one). Never a secret in this file."""
    _need("azure.mgmt.compute", "azure")
    _need("azure.identity", "azure")
    from slurm_heal.providers.azure import AzureProvider, AzureSettings
    from slurm_heal.providers.settings import read_provider_section

    if "client_secret" in cfg:
        raise ConfigError("never in this file: use client_secret_file (or a managed "
                          "identity)", key=f"{SECTION}.client_secret")
    s = read_provider_section(AzureSettings, cfg)
    if "{node}" not in s.vm_name:
        raise ConfigError(f"must contain {{node}}, not {s.vm_name!r}", key=f"{SECTION}.vm_name")
    if s.tag is not None and s.scale_set is not None:
        raise ConfigError("a tag names VMs, not scale set instances: use vms or vm_name "
                          "with a scale_set", key=f"{SECTION}.tag")
    for node, mapped in s.vms.items():
        if mapped.count("/") > 1 or mapped.startswith("/") or mapped.endswith("/"):
            raise ConfigError(f"must be a VM name or scale-set/instance-id, not {mapped!r}",
                              key=f"{SECTION}.vms.{node}")
    from azure import identity

    verify = s.verify
    transport: dict[str, Any] = {} if verify is True else {"connection_verify": verify}
    if s.authority is not None:
        transport["authority"] = s.authority
    credential: Any
    if s.client_secret_file is not None:
        if s.tenant_id is None or s.client_id is None:
            raise ConfigError("client_secret_file needs tenant_id and client_id",
                              key=f"{SECTION}.tenant_id" if s.tenant_id is None
                              else f"{SECTION}.client_id")
        secret = _read_secret(s.client_secret_file, "client_secret_file")
        credential = identity.ClientSecretCredential(
            s.tenant_id, s.client_id, secret,
            disable_instance_discovery=s.authority is not None, **transport)
    else:
        if s.tenant_id is not None:
            raise ConfigError("only with client_secret_file (a managed identity has its "
                              "own tenant)", key=f"{SECTION}.tenant_id")
        credential = identity.ManagedIdentityCredential(client_id=s.client_id)
    return AzureProvider(
        subscription_id=s.subscription_id, resource_group=s.resource_group,
        credential=credential, vm_name=s.vm_name, tag=s.tag, scale_set=s.scale_set,
        vms=s.vms, power_cycle=s.power_cycle, base_url=s.base_url, verify=verify,
        slurm=slurm, state_dir=state_dir, read_timeout=s.read_timeout, deadline=s.deadline,
        attempts=s.attempts, backoff=s.backoff, actions=s.actions)


def _make_oci(cfg: Mapping[str, Any], *, slurm: SlurmClient | None,
              state_dir: Path | None) -> Provider:
    """Credentials: the SDK's config file (an API key; ``config_file``, ``profile``), or
    the controller host's instance principal. Never a key in this file."""
    _need("oci", "oci")
    from slurm_heal.providers.oci import OciProvider, OciSettings
    from slurm_heal.providers.settings import read_provider_section

    for secret in ("key_file", "key_content", "pass_phrase", "fingerprint", "user"):
        if secret in cfg:
            raise ConfigError("never in this file: it goes in the oci config file "
                              "(config_file, profile)", key=f"{SECTION}.{secret}")
    s = read_provider_section(OciSettings, cfg)
    if s.migrate_relaunch:
        if s.instances:
            raise ConfigError("not with migrate_relaunch = true: a relaunch gives the node a "
                              "new instance OCID and this table would name the terminated "
                              "one; map nodes by Slurm's InstanceId or by display name "
                              "(compartment_id) instead", key=f"{SECTION}.instances")
        if not s.compute_cluster_id:
            raise ConfigError("required with migrate_relaunch = true: OCI's GetInstance does "
                              "not say which compute cluster an instance is in, so name the "
                              "cluster the relaunched instance goes into",
                              key=f"{SECTION}.compute_cluster_id")
    elif s.compute_cluster_id is not None:
        raise ConfigError("only with migrate_relaunch = true",
                          key=f"{SECTION}.compute_cluster_id")
    import oci

    config: dict[str, Any]
    if s.auth == "instance_principal":
        if s.config_file is not None:
            raise ConfigError("only with auth = \"config_file\"", key=f"{SECTION}.config_file")
        # Made at the first call (it asks the instance metadata service).
        signer: Any = oci.auth.signers.InstancePrincipalsSecurityTokenSigner
        config = {"region": s.region} if s.region is not None else {}
    else:
        path = s.config_file or oci.config.DEFAULT_LOCATION
        try:
            config = dict(oci.config.from_file(os.path.expanduser(path), s.profile))
        except Exception as exc:  # noqa: BLE001 - ConfigFileNotFound, ProfileNotFound, ...
            raise ConfigError(f"cannot use profile {s.profile!r} of {path}: {exc}",
                              key=f"{SECTION}.config_file") from exc
        if s.region is not None:
            config["region"] = s.region
        signer = oci.signer.Signer(
            tenancy=config["tenancy"], user=config["user"],
            fingerprint=config["fingerprint"], private_key_file_location=config.get("key_file"),
            pass_phrase=config.get("pass_phrase"),
            private_key_content=config.get("key_content"))
    return OciProvider(
        config=config, signer=signer, endpoint=s.endpoint, instances=s.instances,
        compartment_id=s.compartment_id, image=s.image,
        preserve_boot_volume=s.preserve_boot_volume,
        delete_local_storage=s.delete_local_storage, migrate_relaunch=s.migrate_relaunch,
        compute_cluster_id=s.compute_cluster_id, slurm=slurm, state_dir=state_dir,
        connect_timeout=s.connect_timeout, read_timeout=s.read_timeout,
        deadline=s.deadline, attempts=s.attempts, backoff=s.backoff, actions=s.actions)


for _name, _factory in (("http", _make_http), ("exec", _make_exec), ("slurm", _make_slurm),
                        ("openstack", _make_openstack), ("simulator", _make_simulator),
                        ("aws", _make_aws), ("redfish", _make_redfish), ("gcp", _make_gcp),
                        ("azure", _make_azure), ("oci", _make_oci)):
    REGISTRY.register(_name, _factory)
