"""The node check's configuration: a small TOML file, validated into frozen records.

No pydantic and no stdlib dataclasses here on purpose (start-up time; the records are
`slurm_heal.frozen`'s). One section per detector: the built-in detectors are the one
tuple `BUILTINS` (section name, settings class, the module that implements it, named,
not imported); a third-party detector's section is found through its entry point
(docs/checks.md "Third-party detectors"). Every key is optional; an unknown key or a
value of the wrong type is a `ConfigError` naming the file and the key, so a typo never
silently switches a detector off. Example (all defaults shown)::

    [check]
    state_dir = "/var/lib/slurm-heal/node"   # under SLURM_HEAL_ROOT when set
    timeout = 20.0                           # seconds for all detectors together
    heartbeat = "30m"                        # SPEC O1: a healthy node whose findings did
                                             # not change writes to Slurm at most this
                                             # often (its check's liveness); the console
                                             # shows a check stale past heartbeat + 20m

    [kernel_log]                             # SPEC D1, D2, D4
    enabled = true
    source = "kmsg"                          # kmsg | file | journal
    path = "/var/log/kern.log"               # for source = "file"
    first_read_mb = 16                       # the first read (no cursor) is bounded
    hold = "1h"                              # how long a non-critical kernel fault stays
                                             # active after it was last seen; critical
                                             # ones stay until the node reboots
    timeout = 10.0
    modes = ["healthcheck", "prolog", "epilog", "agent"]

    [mounts]                                 # SPEC D4 read-only file systems
    enabled = true
    rw = ["/"]                               # mounts that must be read-write
    modes = ["healthcheck", "prolog", "epilog", "agent"]

    [gpus]                                   # SPEC D2 fewer GPUs than configured
    enabled = true
    expected = 0                             # GPUs this node must show; 0 = what
                                             # Slurm's gres.conf gives this node
                                             # (Name=gpu File=/Count=), else not checked
    gres_conf = "/etc/slurm/gres.conf"
    modes = ["healthcheck", "prolog", "epilog", "agent"]

    [services]                               # SPEC D4 restart loops
    enabled = true
    units = ["slurmd", "munge", "kubelet", "containerd"]
    window = 3600                            # seconds
    max_restarts = 3                         # more restarts than this in the window
    timeout = 5.0
    modes = ["healthcheck", "agent"]

    [nvidia]                                 # SPEC D2, D3 GPU telemetry
    enabled = true                           # unsupported (not a fault) without a driver
    source = "auto"                          # auto (NVML, else nvidia-smi) | nvml | smi
    smi_format = "xml"                       # nvidia-smi -q -x | csv (--query-gpu) | text (-q)
    dcgm = "auto"                            # auto (when dcgmi is on PATH) | on | off
    dcgm_group = 0                           # dcgmi health -g GROUP -c -j
    nvlink = true                            # NVLink state and error counters
    expected = 0                             # GPUs that must answer; 0 = [gpus] expected
    pcie_replays_per_min = 10.0
    nvlink_errors_per_min = 10.0
    thermal_for = 300.0                      # seconds a thermal slowdown must hold
    tool_timeout = 8.0                       # per nvidia-smi/dcgmi call; a hang is a fault
    timeout = 15.0
    modes = ["healthcheck", "agent"]

    [amd]                                    # SPEC D3, D9 (amd-smi, else rocm-smi)
    enabled = true
    expected = 0
    pcie_replays_per_min = 10.0
    thermal_for = 300.0
    tool_timeout = 8.0
    timeout = 15.0
    modes = ["healthcheck", "agent"]

    [infiniband]                             # SPEC D6 /sys/class/infiniband
    enabled = true
    expected_rate = 0                        # Gb/s every port must run at; 0 = not checked
    ports = 0                                # ports that must be present; 0 = not checked
    errors_per_min = 10.0
    link_layers = ["InfiniBand"]
    counters = ["symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
                "port_rcv_remote_physical_errors", "local_link_integrity_errors",
                "excessive_buffer_overrun_errors", "port_xmit_discards"]
    modes = ["healthcheck", "prolog", "epilog", "agent"]

    [network]                                # SPEC D6 host connectivity
    enabled = true
    endpoints = []                           # "host:port" reached by TCP connect
    connect_timeout = 2.0
    unreachable_for = 120.0                  # seconds unreachable before it is a fault
    timeout = 10.0
    modes = ["healthcheck", "agent"]

    [disk]                                   # SPEC D6, D8 record only
    enabled = true
    paths = ["/"]
    min_free_percent = 5.0
    min_free_gb = 0                          # when set, used instead of the percentage
    modes = ["healthcheck", "prolog", "epilog", "agent"]

    [gpud]                                   # SPEC D13 gpud's health states, when it runs
    enabled = true
    url = "https://localhost:15132"          # gpud's local API
    verify_tls = false                       # gpud's certificate is self-signed
    map = []                                 # "component=fault" over the built-in table
    connect_timeout = 2.0
    timeout = 5.0
    modes = ["healthcheck", "agent"]
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from slurm_heal.checks import paths, present
from slurm_heal.durations import parse_seconds
from slurm_heal.errors import ConfigError, not_toml
from slurm_heal.frozen import dataclass, field, fields_of

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from typing import Any

MODES = ("healthcheck", "prolog", "epilog", "agent")
SOURCES = ("kmsg", "file", "journal")
ALL_MODES = MODES
FAST_MODES = ("healthcheck", "prolog", "epilog", "agent")


@dataclass(frozen=True, slots=True)
class KernelLogConfig:
    enabled: bool = True
    source: str = "kmsg"
    path: str = "/var/log/kern.log"
    first_read_mb: float = 16.0
    hold: float = 3600.0
    timeout: float = 10.0
    modes: tuple[str, ...] = FAST_MODES


@dataclass(frozen=True, slots=True)
class MountsConfig:
    enabled: bool = True
    rw: tuple[str, ...] = ("/",)
    timeout: float = 5.0
    modes: tuple[str, ...] = FAST_MODES


@dataclass(frozen=True, slots=True)
class GpusConfig:
    enabled: bool = True
    expected: int = 0
    gres_conf: str = "/etc/slurm/gres.conf"  # used when expected is 0
    timeout: float = 5.0
    modes: tuple[str, ...] = FAST_MODES


@dataclass(frozen=True, slots=True)
class ServicesConfig:
    enabled: bool = True
    units: tuple[str, ...] = ("slurmd", "munge", "kubelet", "containerd")
    window: float = 3600.0
    max_restarts: int = 3
    timeout: float = 5.0
    # systemctl costs a process start: not inside every job's prolog/epilog.
    modes: tuple[str, ...] = ("healthcheck", "agent")


@dataclass(frozen=True, slots=True)
class NvidiaConfig:
    enabled: bool = True
    source: str = "auto"
    smi_format: str = "xml"
    dcgm: str = "auto"
    dcgm_group: int = 0
    nvlink: bool = True
    expected: int = 0
    pcie_replays_per_min: float = 10.0
    nvlink_errors_per_min: float = 10.0
    thermal_for: float = 300.0
    tool_timeout: float = 8.0
    timeout: float = 15.0
    # nvidia-smi costs a process start (NVML does not): not in every job's prolog/epilog.
    modes: tuple[str, ...] = ("healthcheck", "agent")


@dataclass(frozen=True, slots=True)
class AmdConfig:
    enabled: bool = True
    expected: int = 0
    pcie_replays_per_min: float = 10.0
    thermal_for: float = 300.0
    tool_timeout: float = 8.0
    timeout: float = 15.0
    modes: tuple[str, ...] = ("healthcheck", "agent")


IB_COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
               "port_rcv_remote_physical_errors", "local_link_integrity_errors",
               "excessive_buffer_overrun_errors", "port_xmit_discards")


@dataclass(frozen=True, slots=True)
class InfinibandConfig:
    enabled: bool = True
    expected_rate: int = 0
    ports: int = 0
    errors_per_min: float = 10.0
    link_layers: tuple[str, ...] = ("InfiniBand",)
    counters: tuple[str, ...] = IB_COUNTERS
    timeout: float = 5.0
    modes: tuple[str, ...] = FAST_MODES  # a few small sysfs reads


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    enabled: bool = True
    endpoints: tuple[str, ...] = ()
    connect_timeout: float = 2.0
    unreachable_for: float = 120.0
    timeout: float = 10.0
    modes: tuple[str, ...] = ("healthcheck", "agent")


@dataclass(frozen=True, slots=True)
class GpudConfig:
    enabled: bool = True
    url: str = "https://localhost:15132"  # gpud's local API (its own self-signed TLS)
    verify_tls: bool = False  # gpud's certificate is self-signed; the API is local
    # "component=fault" pairs over the built-in table (slurm_heal.checks.detectors.gpud)
    map: tuple[str, ...] = ()
    connect_timeout: float = 2.0
    timeout: float = 5.0
    modes: tuple[str, ...] = ("healthcheck", "agent")


@dataclass(frozen=True, slots=True)
class DiskConfig:
    enabled: bool = True
    paths: tuple[str, ...] = ("/",)
    min_free_percent: float = 5.0
    min_free_gb: int = 0
    timeout: float = 5.0
    modes: tuple[str, ...] = FAST_MODES


@dataclass(frozen=True, slots=True)
class DetectorSpec:
    """A detector as the check knows it before importing it (issue 21): its section, its
    settings class, and where it is implemented (``"module:ATTR"``, an object of the
    `slurm_heal.checks.detector.Detector` protocol), imported only when it runs."""

    name: str  # its check.toml section, and its name in the results
    settings: type  # its settings class (the section's keys and defaults)
    target: str  # "module:ATTR" of its Detector; imported only when it runs on this node
    # Why it cannot run on this node (no driver, no tool, nothing configured), decided
    # without importing it; None = it can. The reason is its "unsupported" status.
    present: Callable[[CheckConfig, str], str | None] | None = None
    # A vendor tool that hangs is itself a finding (gpu.tool.hung, SPEC D3), not an error.
    tool_hang_is_finding: bool = False
    loaded: Any = None  # a third-party detector: the object its entry point loaded

    def load(self) -> Any:
        """The Detector object (imports its module the first time)."""
        if self.loaded is not None:
            return self.loaded
        module, _, attr = self.target.partition(":")
        attr = attr or "DETECTOR"
        # __import__ rather than importlib.import_module: no importlib on the check path
        return getattr(__import__(module, fromlist=[attr]), attr)


_D = "slurm_heal.checks.detectors."
# The built-in detectors, in the order they run and report: CheckConfig's sections, the
# parser and the runner are all derived from this one tuple.
BUILTINS: tuple[DetectorSpec, ...] = (
    DetectorSpec("kernel_log", KernelLogConfig, _D + "kernel_log:DETECTOR"),
    DetectorSpec("mounts", MountsConfig, _D + "host:MOUNTS"),
    DetectorSpec("gpus", GpusConfig, _D + "host:GPUS"),
    DetectorSpec("services", ServicesConfig, _D + "host:SERVICES"),
    DetectorSpec("nvidia", NvidiaConfig, _D + "nvidia:DETECTOR", present.nvidia,
                 tool_hang_is_finding=True),
    DetectorSpec("amd", AmdConfig, _D + "amd:DETECTOR", present.amd,
                 tool_hang_is_finding=True),
    DetectorSpec("infiniband", InfinibandConfig, _D + "infiniband:DETECTOR",
                 present.infiniband),
    DetectorSpec("network", NetworkConfig, _D + "network:DETECTOR", present.network),
    DetectorSpec("disk", DiskConfig, _D + "disk:DETECTOR"),
    DetectorSpec("gpud", GpudConfig, _D + "gpud:DETECTOR", present.gpud),  # SPEC D13
)
SECTIONS = tuple(spec.name for spec in BUILTINS)
# The keys every detector's settings have (a third-party one's too): the runner reads them.
COMMON_KEYS = ("enabled", "timeout", "modes")
# The entry point group of third-party detectors (docs/checks.md).
ENTRY_POINTS = "slurm_heal.detectors"


@dataclass(frozen=True, slots=True)
class CheckConfig:
    state_dir: str = paths.STATE_DIR
    timeout: float = 20.0
    # SPEC S8, E6, V1, V4: our maintenance reservations (`slurm_heal.checks.maintenance`)
    maintenance_prefixes: tuple[str, ...] = ("slurm-heal-reset-", "slurm-heal-gate-",
                                             "slurm-heal-validate-")
    maintenance_users: tuple[str, ...] = ()
    # SPEC O1 (issue 43): seconds between the writes of a node whose findings did not
    # change (checked_at in Extra: the check's liveness, published with it as
    # heartbeat_s so the controller's staleness threshold follows it).
    heartbeat: float = 1800.0
    # One field per entry of BUILTINS, in its order (a test holds them together).
    kernel_log: KernelLogConfig = field(default_factory=KernelLogConfig)
    mounts: MountsConfig = field(default_factory=MountsConfig)
    gpus: GpusConfig = field(default_factory=GpusConfig)
    services: ServicesConfig = field(default_factory=ServicesConfig)
    nvidia: NvidiaConfig = field(default_factory=NvidiaConfig)
    amd: AmdConfig = field(default_factory=AmdConfig)
    infiniband: InfinibandConfig = field(default_factory=InfinibandConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    disk: DiskConfig = field(default_factory=DiskConfig)
    gpud: GpudConfig = field(default_factory=GpudConfig)
    source_file: str = ""  # where it was read from ("" = defaults)
    # Third-party detectors whose section the file has: (spec, its settings), in file order.
    plugins: tuple[tuple[DetectorSpec, Any], ...] = ()

    def state_path(self) -> str:
        """The state dir as read on this node (under the replay root when set; the
        default one under ``$SLURM_HEAL_DEFAULT_ROOT`` when that is set instead)."""
        if self.state_dir == paths.STATE_DIR:
            return paths.own(self.state_dir)
        return paths.host_path(self.state_dir)

    def detectors(self) -> tuple[tuple[DetectorSpec, Any], ...]:
        """Every detector with its settings: the built-ins, then the third-party ones."""
        return tuple((spec, getattr(self, spec.name)) for spec in BUILTINS) + self.plugins

    def section(self, name: str) -> Any:
        """The settings of the detector ``name`` (built-in or third-party); KeyError."""
        for spec, settings in self.detectors():
            if spec.name == name:
                return settings
        raise KeyError(name)


def _typed(file: str, key: str, value: Any, default: Any) -> Any:
    """Check ``value`` against the type of ``default``; convert ints to floats."""
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok:
            value = float(value)
            if value <= 0:
                raise ConfigError(f"must be positive, got {value}", file=file, key=key)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and value < 0:
            raise ConfigError(f"must not be negative, got {value}", file=file, key=key)
    elif isinstance(default, tuple):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        if ok:
            value = tuple(value)
    else:
        ok = isinstance(value, str)
    if not ok:
        want = type(default).__name__ if not isinstance(default, tuple) else "list of strings"
        raise ConfigError(f"expected {want}, got {value!r}", file=file, key=key)
    return value


# SPEC O1: the longest heartbeat (the controller reads a longer one as this).
MAX_HEARTBEAT = 86400.0

# Durations of the file, in seconds here: "1h", "30m" like every duration of slurm-heal,
# or bare seconds (existing files) -- the rule of config.parse_seconds.
DURATIONS = frozenset({"kernel_log.hold", "check.timeout", "check.heartbeat"})
# ... and every key of a section with one of these names (issue 25 item 6).
DURATION_KEYS = frozenset({"hold", "timeout", "tool_timeout", "connect_timeout", "window",
                           "thermal_for", "unreachable_for"})


def _seconds(file: str, key: str, value: Any) -> Any:
    if isinstance(value, str):
        try:
            return parse_seconds(value)
        except ValueError as exc:
            raise ConfigError(str(exc), file=file, key=key) from None
    return value


def _section(file: str, name: str, raw: Any, default: Any) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a table, got {raw!r}", file=file, key=name)
    known = {f: getattr(default, f) for f, _ in fields_of(type(default))}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            raise ConfigError(
                f"unknown key (known: {', '.join(k for k in known if k != 'source_file')})",
                file=file, key=f"{name}.{key}")
        if f"{name}.{key}" in DURATIONS or key in DURATION_KEYS:
            value = _seconds(file, f"{name}.{key}", value)
        values[key] = _typed(file, f"{name}.{key}", value, known[key])
    for bad in set(values.get("modes", ())) - set(MODES):
        raise ConfigError(f"unknown mode {bad!r} (known: {', '.join(MODES)})",
                          file=file, key=f"{name}.modes")
    return type(default)(**values)


# The keys of [check] (CheckConfig's own fields).
TOP_KEYS = ("state_dir", "timeout", "heartbeat", "maintenance_prefixes", "maintenance_users")


def parse_config(data: dict[str, Any], file: str = "<config>") -> CheckConfig:
    """Validate a parsed TOML document into a CheckConfig (ConfigError on bad input)."""
    sections: dict[str, Any] = {spec.name: spec.settings() for spec in BUILTINS}
    plugins: list[DetectorSpec] = []
    for key in data:
        if key not in ("check", *sections):
            plugins.append(_third_party(key, file, sections))
    built = {name: _section(file, name, data.get(name, {}), default)
             for name, default in sections.items()}
    extra = tuple((spec, _section(file, spec.name, data[spec.name], spec.settings()))
                  for spec in plugins)
    check = data.get("check", {})
    if not isinstance(check, dict):
        raise ConfigError("expected a table", file=file, key="check")
    top: dict[str, Any] = {}
    for key, value in check.items():
        if key not in TOP_KEYS:
            raise ConfigError(f"unknown key (known: {', '.join(TOP_KEYS)})", file=file,
                              key=f"check.{key}")
        if f"check.{key}" in DURATIONS:
            value = _seconds(file, f"check.{key}", value)
        top[key] = _typed(file, f"check.{key}", value, getattr(CheckConfig(), key))
    if top.get("heartbeat", 0.0) > MAX_HEARTBEAT:
        raise ConfigError(f"must be at most {MAX_HEARTBEAT / 3600:g}h (the controller trusts "
                          f"no longer a silence), got {top['heartbeat']:g}s", file=file,
                          key="check.heartbeat")
    if built["kernel_log"].source not in SOURCES:
        raise ConfigError(f"unknown source {built['kernel_log'].source!r} "
                          f"(known: {', '.join(SOURCES)})", file=file, key="kernel_log.source")
    for key, value, known in (
            ("nvidia.source", built["nvidia"].source, ("auto", "nvml", "smi")),
            ("nvidia.smi_format", built["nvidia"].smi_format, ("xml", "csv", "text")),
            ("nvidia.dcgm", built["nvidia"].dcgm, ("auto", "on", "off"))):
        if value not in known:
            raise ConfigError(f"unknown value {value!r} (known: {', '.join(known)})",
                              file=file, key=key)
    for ep in built["network"].endpoints:
        split_endpoint(ep, file)
    for pair in built["gpud"].map:
        component, sep, fault = pair.partition("=")
        if not sep or not component.strip() or not fault.strip():
            raise ConfigError(f"{pair[:80]!r} is not COMPONENT=FAULT (e.g. "
                              "accelerator-nvidia-ecc=gpu.ecc.dbe)", file=file, key="gpud.map")
    if not built["gpud"].url.startswith(("http://", "https://")):
        raise ConfigError(f"{built['gpud'].url[:80]!r} is not an http(s) URL", file=file,
                          key="gpud.url")
    return CheckConfig(**top, **built, source_file=file, plugins=extra)


def split_endpoint(text: str, file: str | None = None) -> tuple[str, int]:
    """``host:port`` / ``[v6]:port`` -> (host, port); ConfigError when malformed (issue 34
    item 6: a port of 5,000 digits, or of digits that are not ASCII, is no port: never
    int()'s ValueError)."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if (not sep or not host or not (port.isascii() and port.isdigit()) or len(port) > 5
            or not 0 < int(port) < 65536):
        raise ConfigError(f"endpoint {text[:80]!r} is not HOST:PORT (a port is 1-65535)",
                          file=file, key="network.endpoints")
    return host, int(port)


def _third_party(key: str, file: str, sections: dict[str, Any]) -> DetectorSpec:
    """The third-party detector whose section ``key`` is (entry point group
    ``slurm_heal.detectors``, name ``key``), loaded and checked; else the unknown-section
    error. Entry points are looked up only here: a file of built-in sections only (or
    none) never pays for importlib.metadata."""
    from importlib import metadata

    found = {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINTS)}
    ep = found.get(key)
    if ep is None:
        more = f", {', '.join(sorted(found))}" if found else ""
        raise ConfigError(f"unknown section (known: check, {', '.join(sections)}{more})",
                          file=file, key=key)
    where = f"detector {ep.value!r} (entry point {key!r} of {ENTRY_POINTS})"
    try:
        obj = ep.load()
    except Exception as exc:  # a broken plugin is a configuration error that names it
        raise ConfigError(f"{where} does not load: {type(exc).__name__}: {exc}",
                          file=file, key=key) from None
    missing = [a for a in ("name", "settings", "modes", "gather", "evaluate")
               if not hasattr(obj, a)]
    if missing:
        raise ConfigError(f"{where} is not a Detector: it has no {', '.join(missing)} "
                          "(docs/checks.md \"Third-party detectors\")", file=file, key=key)
    if obj.name != key:
        raise ConfigError(f"{where} calls itself {obj.name!r}", file=file, key=key)
    try:
        keys = [n for n, _ in fields_of(obj.settings)]
    except (TypeError, AttributeError):
        keys = []
    lacking = [k for k in COMMON_KEYS if k not in keys]
    if lacking:
        raise ConfigError(f"{where}: its settings class has no {', '.join(lacking)} "
                          "(every detector's settings have enabled, timeout and modes)",
                          file=file, key=key)
    return DetectorSpec(name=key, settings=obj.settings, target=ep.value,
                        tool_hang_is_finding=bool(getattr(obj, "tool_hang_is_finding", False)),
                        loaded=obj)


def load_config(path: str | None) -> CheckConfig:
    """Read the config file. ``None``: the default file when it exists, else defaults.

    A file named explicitly must exist; the default one may be absent. The parsed
    document is kept in the state dir (`CACHE`) with the file's text, so a node whose
    check.toml did not change never imports the TOML parser again (tomllib and what it
    imports: ~10 ms of every run, issue 26); it is validated every run.
    """
    explicit = path is not None
    file = path if explicit else paths.own(paths.CONFIG_FILE)
    assert file is not None
    try:
        with open(file, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        if explicit:
            raise ConfigError("file not found", file=file) from None
        return CheckConfig()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=file) from None
    text = raw.decode()
    data = _cached(file, text)
    if data is not None:
        return parse_config(data, file)
    if sys.version_info >= (3, 11):
        import tomllib  # only when the file changed: most nodes run on defaults or a cache
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or an int of over 4,300 digits (issue 34)
        raise not_toml(exc, text, file) from None
    parsed = parse_config(data, file)
    _remember(file, text, data)
    return parsed


# The parsed check.toml, kept in the default state dir (where it exists: the check
# creates it; a site's own [check] state_dir cannot be known before the file is read).
CACHE = "check-toml.json"


def _cache_file() -> str:
    import os

    return os.path.join(paths.own(paths.STATE_DIR), CACHE)


def _cached(file: str, text: str) -> dict[str, Any] | None:
    """The document parsed from this very text of this file, else None."""
    import json
    import os

    try:
        with open(_cache_file(), "rb") as fh:
            cached = json.loads(fh.read())
    except (OSError, ValueError):
        return None
    if not isinstance(cached, dict) or cached.get("path") != os.path.abspath(file) \
            or cached.get("text") != text:
        return None
    data = cached.get("data")
    return data if isinstance(data, dict) else None


def _remember(file: str, text: str, data: dict[str, Any]) -> None:
    """Keep a valid document for the next run; never an error (a read-only or absent
    state dir, a value JSON cannot hold such as a TOML date: nothing is kept)."""
    import json
    import os

    from slurm_heal import fsio

    target = _cache_file()
    if not os.path.isdir(os.path.dirname(target)):
        return
    try:
        out = json.dumps({"path": os.path.abspath(file), "text": text, "data": data},
                         sort_keys=True)
        if json.loads(out)["data"] != data:  # e.g. a NaN, which is never equal to itself
            return
        fsio.atomic_write(target, out, 0o640)
    except (OSError, TypeError, ValueError):
        return
