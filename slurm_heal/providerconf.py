"""The ``[provider]`` table of each type (issue 21, 33): what every provider's own settings
model is made of, and the built-in types' models (``HttpSettings``, ``AwsSettings``, ...),
read through `sections.read_section`, so a problem is a ConfigError naming the key
(``provider.read_timeout``) and why, and the file where the caller knows it. A
third-party provider subclasses `ProviderSettings` the same way (docs/providers.md
"Third-party providers"; `slurm_heal.providers.settings` is the name it imports them by,
and each adapter module re-exports its own model).

The field types keep the words the section always had: one duration rule ("10s", "2m",
or bare seconds, `durations.parse_seconds`), integers and flags that are not coerced
from strings, tables of strings, the actions a provider supports.

Below the config, out of `slurm_heal.providers` (issue 33): the policy loader
(`config.load_policy`) reads a ``[provider]`` table through `check_table`, so it refuses
what ``slurm-heal policy check``'s construction of the provider refuses in the file, in
the same words (the checks that span keys are written once here, and the construction
calls them); what only the machine tells (a script that is not executable, a secret
file, clouds.yaml, an SDK or a third party's type installed) stays with the
construction, like whether a state directory is usable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from slurm_heal.durations import parse_seconds
from slurm_heal.errors import ConfigError
from slurm_heal.sections import read_section
from slurm_heal.types import SLURM_REBOOT_TIMEOUT, Action

SECTION = "provider"
DOCS = "docs/providers.md"


class ProviderSettings(BaseModel):
    """The keys of every ``[provider]`` section; a provider's model adds its own. An
    unknown key is an error naming it."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    type: str
    state_dir: str | None = None


S = TypeVar("S", bound=ProviderSettings)


def read_provider_section(model: type[S], cfg: Mapping[str, Any], *, file: str = "") -> S:
    """``cfg`` (the ``[provider]`` table) validated as ``model``; ConfigError names the
    key (``provider.url``), why, and ``file`` when given."""
    return read_section(model, dict(cfg), file=file, key=SECTION, docs=DOCS)


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a non-empty string, not {value!r}")
    return value


def _required(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def required(value: Any) -> Any:
        if value is None:
            raise ValueError("is required")
        return check(value)
    return required


def _url(value: Any) -> str:
    text = _text(value)
    if not text.startswith(("http://", "https://")):
        raise ValueError(f"must be an http:// or https:// URL, not {text!r}")
    return text


def _seconds(minimum: float) -> Callable[[Any], float]:
    def seconds(value: Any) -> float:
        got = parse_seconds(value)  # ValueError in the words of every duration
        if got < minimum:
            raise ValueError(f"must be at least {minimum:g}s, not {value!r}")
        return got
    return seconds


def _integer(minimum: int) -> Callable[[Any], int]:
    def integer(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"must be an integer >= {minimum}, not {value!r}")
        return value
    return integer


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, not {value!r}")
    return value


def _table(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in value.items()):
        raise ValueError("must be a table of name = \"string\"")
    return dict(value)


def _verify(value: Any) -> bool | str:
    if not isinstance(value, (bool, str)) or value == "":
        raise ValueError("must be true, false or a CA bundle path")
    return value


def supported_action(name: Any, supported: frozenset[Action]) -> Action | None:
    """The action ``name`` names when it is one of ``supported``, else None."""
    try:
        action = Action(name)
    except ValueError:
        return None
    return action if action in supported else None


def words_of(actions: frozenset[Action]) -> str:
    return ", ".join(sorted(a.value for a in actions))


def actions_of(supported: frozenset[Action]) -> BeforeValidator:
    """The ``actions`` key: a list of some of the ``supported`` actions."""
    def actions(value: Any) -> frozenset[Action]:
        if not isinstance(value, list):
            raise ValueError("must be a list of actions")
        out = set()
        for item in value:
            action = supported_action(item, supported)
            if action is None:
                raise ValueError(f"{item!r} is not one of {words_of(supported)}")
            out.add(action)
        return frozenset(out)
    return BeforeValidator(actions)


Text = Annotated[str, BeforeValidator(_text)]
RequiredText = Annotated[str, BeforeValidator(_required(_text))]  # Field(None, validate_default=True)
Url = Annotated[str, BeforeValidator(_url)]
RequiredUrl = Annotated[str, BeforeValidator(_required(_url))]
Duration = Annotated[float, BeforeValidator(_seconds(0.0))]  # backoff: 0 is allowed
Timeout = Annotated[float, BeforeValidator(_seconds(0.001))]  # a timeout is never 0
LongTimeout = Annotated[float, BeforeValidator(_seconds(1.0))]  # deadlines: a second or more
Count = Annotated[int, BeforeValidator(_integer(1))]
Port = Annotated[int, BeforeValidator(_integer(0))]  # 0: any free port
Flag = Annotated[bool, BeforeValidator(_flag)]
StrTable = Annotated[dict[str, str], BeforeValidator(_table)]
Verify = Annotated[bool | str, BeforeValidator(_verify)]


# --- the built-in types' tables (issue 33: here, below the config; each adapter module
# re-exports its own under the name it always had).
HTTP_ACTIONS = frozenset({Action.REBOOT, Action.REBUILD, Action.MIGRATE, Action.POWER_CYCLE})
# The whole of one call, retries and their waits included.
CALL_TIMEOUT = 60.0
EXEC_ACTIONS = frozenset({Action.REBOOT, Action.REBUILD, Action.MIGRATE, Action.POWER_CYCLE})
AWS_ACTIONS = frozenset({Action.REBOOT, Action.REBUILD, Action.MIGRATE, Action.POWER_CYCLE})
GCP_ACTIONS = frozenset({Action.REBOOT, Action.REBUILD, Action.MIGRATE, Action.POWER_CYCLE})
FAULT_BEHAVIORS = ("UNRECOVERABLE_GPU_ERROR", "PERFORMANCE", "SILENT_DATA_CORRUPTION",
                   "CHIP_ERROR", "BEHAVIOR_UNSPECIFIED")
AZURE_ACTIONS = frozenset({Action.REBOOT, Action.REBUILD, Action.MIGRATE, Action.POWER_CYCLE})
OCI_ACTIONS = frozenset({Action.REBOOT, Action.REBUILD, Action.MIGRATE, Action.POWER_CYCLE})
REDFISH_ACTIONS = frozenset({Action.REBOOT, Action.POWER_CYCLE})
DEFAULT_REBOOT_TYPES = ("ForceRestart", "GracefulRestart", "PowerCycle")
REBOOT_TYPES = DEFAULT_REBOOT_TYPES


class HttpSettings(ProviderSettings):
    """``type = "http"``: our provider API at ``url`` (docs/providers.md)."""

    url: RequiredUrl = Field(default=None, validate_default=True)
    token_file: Text | None = None
    connect_timeout: Timeout = 3.0
    read_timeout: Timeout = 10.0
    attempts: Count = 5
    backoff: Duration = 0.5
    call_timeout: Timeout = CALL_TIMEOUT
    actions: Annotated[frozenset[Action], actions_of(HTTP_ACTIONS)] = HTTP_ACTIONS

    @field_validator("token_file")
    @classmethod
    def _readable(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).is_file():
            raise ValueError(f"{value} is not a readable file")
        return value

    def client_kwargs(self) -> dict[str, Any]:
        """What HttpProvider takes besides the URL."""
        return {"token_file": self.token_file, "connect_timeout": self.connect_timeout,
                "read_timeout": self.read_timeout, "attempts": self.attempts,
                "backoff": self.backoff, "call_timeout": self.call_timeout,
                "actions": self.actions}


class SimulatorSettings(HttpSettings):
    """``type = "simulator"``: an http provider against the simulator at ``url``, or
    (no url) one started in this process on 127.0.0.1 with these knobs."""

    url: Url | None = None  # type: ignore[assignment]
    duration: Duration = 1.0
    lab_dir: Text | None = None
    scratch_root: Text | None = None
    port: Port = 0


class ExecSettings(ProviderSettings):
    """``type = "exec"``: one script per action (docs/providers.md)."""

    scripts: StrTable = Field(default=None, validate_default=True)
    timeout: Timeout = 600.0
    env: StrTable = Field(default_factory=dict)

    @field_validator("scripts", mode="before")
    @classmethod
    def _some(cls, value: Any) -> Any:
        if not value:  # missing or empty: nothing to run
            raise ValueError("needs at least one action = \"/path/to/script\"")
        return value


class SlurmSettings(ProviderSettings):
    """``type = "slurm"``: `scontrol reboot` through slurmctld (docs/providers.md)."""

    nextstate: Text = "DRAIN"
    timeout: LongTimeout = SLURM_REBOOT_TIMEOUT


class AwsSettings(ProviderSettings):
    """``type = "aws"`` (docs/providers.md); credentials never in the file."""

    region: Text | None = None
    profile: Text | None = None
    endpoint_url: Url | None = None
    instances: StrTable = Field(default_factory=dict)
    image: Text | None = None
    connect_timeout: Timeout = 3.0
    read_timeout: Timeout = 15.0
    attempts: Count = 4
    deadline: LongTimeout = 60.0
    backoff: Duration = 0.5
    actions: Annotated[frozenset[Action], actions_of(AWS_ACTIONS)] = AWS_ACTIONS


class GcpSettings(ProviderSettings):
    """``type = "gcp"`` (docs/providers.md)."""

    project: RequiredText = Field(default=None, validate_default=True)
    zone: RequiredText = Field(default=None, validate_default=True)
    instances: StrTable = Field(default_factory=dict)
    instance_group_manager: Text | None = None
    fault_behavior: Text = "UNRECOVERABLE_GPU_ERROR"
    api_endpoint: Url | None = None
    credentials_file: Text | None = None
    read_timeout: Timeout = 30.0
    deadline: LongTimeout = 90.0
    backoff: Duration = 0.5
    actions: Annotated[frozenset[Action], actions_of(GCP_ACTIONS)] = GCP_ACTIONS

    @field_validator("fault_behavior")
    @classmethod
    def _behavior(cls, value: str) -> str:
        if value not in FAULT_BEHAVIORS:
            raise ValueError(f"{value!r} is not a reportHostAsFaulty behavior")
        return value


class OpenStackSettings(ProviderSettings):
    """``type = "openstack"`` (docs/providers.md): a password, a password file, an
    application credential or a clouds.yaml entry (checked together when it is built)."""

    auth_url: Text | None = None
    username: Text | None = None
    password: Text | None = None
    password_file: Text | None = None
    project_name: Text | None = None
    user_domain: Text | None = None
    project_domain: Text | None = None
    compute_url: Url | None = None
    interface: Text | None = None
    region: Text | None = None
    image: Text | None = None
    live: Flag = False
    servers: StrTable = Field(default_factory=dict)
    connect_timeout: Timeout | None = None  # not used (openstacksdk: read_timeout)
    read_timeout: Timeout = 15.0
    attempts: Count = 4
    call_timeout: Timeout = 60.0
    cloud: Text | None = None
    clouds_yaml: Text | None = None
    application_credential_id: Text | None = None
    application_credential_secret_file: Text | None = None
    reboot: Text = "hard"
    soft_reboot_timeout: LongTimeout = 300.0
    backoff: Duration = 0.5
    verify: Verify | None = None  # None: clouds.yaml's, else true

    @field_validator("reboot")
    @classmethod
    def _reboot(cls, value: str) -> str:
        if value not in ("hard", "soft"):
            raise ValueError(f"must be \"hard\" or \"soft\", not {value!r}")
        return value


class RedfishSettings(ProviderSettings):
    """``type = "redfish"`` (docs/providers.md): BMCs from ``[provider.bmcs.NODE]``
    tables and/or ``bmcs_file`` (each BMC's table is checked when it is built)."""

    bmcs: dict[str, Any] = Field(default_factory=dict)
    bmcs_file: Text | None = None
    username: Text | None = None
    password_file: Text | None = None
    verify: Verify = True
    reboot_types: list[str] = Field(default_factory=lambda: list(DEFAULT_REBOOT_TYPES))
    connect_timeout: Timeout = 5.0
    read_timeout: Timeout = 30.0
    attempts: Count = 3
    deadline: LongTimeout = 90.0
    backoff: Duration = 0.5
    actions: Annotated[frozenset[Action], actions_of(REDFISH_ACTIONS)] = REDFISH_ACTIONS

    @field_validator("bmcs", mode="before")
    @classmethod
    def _table(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ValueError("must be a table of node = {address = ...}")
        return value

    @field_validator("reboot_types", mode="before")
    @classmethod
    def _types(cls, value: Any) -> Any:
        if not isinstance(value, list) or not value or not all(
                t in REBOOT_TYPES for t in value):
            raise ValueError("must be a list of ForceRestart, GracefulRestart, PowerCycle")
        return value


class AzureSettings(ProviderSettings):
    """``type = "azure"`` (docs/providers.md): the VM mapping, and the identity as a
    managed identity (default), or an app registration's secret in a file."""

    subscription_id: RequiredText = Field(default=None, validate_default=True)
    resource_group: RequiredText = Field(default=None, validate_default=True)
    vm_name: Text = "{node}"
    tag: Text | None = None
    scale_set: Text | None = None
    vms: StrTable = Field(default_factory=dict)
    power_cycle: Flag = False
    tenant_id: Text | None = None
    client_id: Text | None = None
    client_secret_file: Text | None = None
    authority: Url | None = None  # Entra ID's host (sovereign clouds)
    base_url: Url | None = None  # Resource Manager's endpoint (sovereign clouds)
    verify: Verify = True
    read_timeout: Timeout = 30.0
    deadline: LongTimeout = 60.0
    attempts: Count = 4
    backoff: Duration = 0.5
    actions: Annotated[frozenset[Action], actions_of(AZURE_ACTIONS)] = AZURE_ACTIONS


class OciSettings(ProviderSettings):
    """``type = "oci"`` (docs/providers.md): an API key through the SDK's config file, or
    the controller's instance principal."""

    auth: Text = "config_file"
    config_file: Text | None = None
    profile: Text = "DEFAULT"
    region: Text | None = None
    endpoint: Url | None = None
    instances: StrTable = Field(default_factory=dict)
    compartment_id: Text | None = None
    image: Text | None = None
    preserve_boot_volume: Flag = False
    delete_local_storage: Flag = False
    # migrate where OCI offers no reboot migration: terminate and relaunch with the same
    # launch details in ``compute_cluster_id`` (off: a new OCID, new local NVMe, maybe
    # new IPs; docs/providers.md)
    migrate_relaunch: Flag = False
    compute_cluster_id: Text | None = None
    connect_timeout: Timeout = 10.0
    read_timeout: Timeout = 30.0
    deadline: LongTimeout = 60.0
    attempts: Count = 4
    backoff: Duration = 0.5
    actions: Annotated[frozenset[Action], actions_of(OCI_ACTIONS)] = OCI_ACTIONS

    @field_validator("auth")
    @classmethod
    def _auth(cls, value: str) -> str:
        if value not in ("config_file", "instance_principal"):
            raise ValueError(f'must be "config_file" or "instance_principal", not {value!r}')
        return value


# What each built-in type's table is read with (`providers.REGISTRY` builds them).
BUILTIN: dict[str, type[ProviderSettings]] = {
    "http": HttpSettings, "simulator": SimulatorSettings, "exec": ExecSettings,
    "slurm": SlurmSettings, "openstack": OpenStackSettings, "aws": AwsSettings,
    "gcp": GcpSettings, "redfish": RedfishSettings, "azure": AzureSettings,
    "oci": OciSettings,
}
# Keys a type refuses to find in the file at all: a secret written out (SPEC I4).
SECRETS: dict[str, tuple[tuple[str, str], ...]] = {
    "aws": tuple((k, "AWS credentials never go in this file: use the environment, a profile "
                  "or the instance role")
                 for k in ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")),
    "redfish": (("password", "never in this file: use password_file"),),
}
EMBEDDED_ONLY = ("duration", "lab_dir", "scratch_root", "port")


def refuse_secrets(kind: str, cfg: Mapping[str, Any]) -> None:
    """ConfigError for a secret of type ``kind`` written in the file."""
    for key, why in SECRETS.get(kind, ()):
        if key in cfg:
            raise ConfigError(why, key=f"{SECTION}.{key}")


def simulator_keys(s: SimulatorSettings, cfg: Mapping[str, Any]) -> None:
    """A simulator at ``url`` takes none of the embedded simulator's knobs."""
    if s.url is not None:
        for embedded_only in EMBEDDED_ONLY:
            if embedded_only in cfg:
                raise ConfigError("only applies to an embedded simulator (no url)",
                                  key=f"{SECTION}.{embedded_only}")


def exec_actions(s: ExecSettings) -> dict[Action, str]:
    """The exec provider's scripts by the action each names (a name that is none of
    EXEC_ACTIONS is refused; whether the file runs is the machine's, checked on build)."""
    out: dict[Action, str] = {}
    for name, path in s.scripts.items():
        action = supported_action(name, EXEC_ACTIONS)
        if action is None:
            raise ConfigError(f"not an action; one of {words_of(EXEC_ACTIONS)}",
                              key=f"{SECTION}.scripts.{name}")
        out[action] = path
    return out


def slurm_nextstate(s: SlurmSettings) -> None:
    """SPEC L5: the slurm provider's node stays drained through the reboot."""
    nextstate = s.nextstate.upper()
    if nextstate != "DRAIN":
        # SPEC L5: RESUME let Slurm put the node back to IDLE ~5 s before the health
        # check; DOWN comes back by itself under ReturnToService=2 (both seen on the lab).
        raise ConfigError(f"{nextstate!r} would let Slurm return the node to service before "
                          "slurm-heal's health check (SPEC L5); remove the key: the node "
                          "stays drained through the reboot and slurm-heal resumes it after "
                          "the check", key=f"{SECTION}.nextstate")


def table_type(cfg: Mapping[str, Any], known: Callable[[], list[str]]) -> str:
    """The table's ``type``; ConfigError when it is missing or not a string (``known``:
    the types to name)."""
    kind = cfg.get("type")
    if not isinstance(kind, str) or not kind:
        raise ConfigError(f"missing or not a string; one of: {', '.join(known())}",
                          key=f"{SECTION}.type")
    return kind


def check_table(cfg: Mapping[str, Any], *, file: str = "") -> None:
    """A ``[provider]`` table as far as the file tells (issue 33: what `config.load_policy`
    refuses, as ``policy check``'s construction of the provider does, in its words): a
    type written, ``state_dir``, a secret written out, a built-in type's own model and
    what spans its keys. A type not built in is a third party's: whether it is installed
    is the machine's, like an SDK. ConfigError names ``file`` and the key."""
    try:
        _check_table(cfg)
    except ConfigError as exc:
        raise ConfigError(str(exc), file=file or None) from None


def _check_table(cfg: Mapping[str, Any]) -> None:
    kind = table_type(cfg, lambda: sorted(BUILTIN))
    own = cfg.get("state_dir")
    if own is not None and not isinstance(own, str):
        raise ConfigError("must be a path string", key=f"{SECTION}.state_dir")
    model = BUILTIN.get(kind)
    if model is None:
        # A third party's type: whether it is installed is the machine's (the check and
        # the daemon build it), its table its own model's, read when it is built.
        return
    refuse_secrets(kind, cfg)
    s = read_provider_section(model, cfg)
    if isinstance(s, SimulatorSettings):
        simulator_keys(s, cfg)
    elif isinstance(s, ExecSettings):
        exec_actions(s)
    elif isinstance(s, SlurmSettings):
        slurm_nextstate(s)
