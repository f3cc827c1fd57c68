"""Whether a detector has anything to look at on this node, decided before it is imported.

A node without GPUs never imports the GPU readers, one without InfiniBand never the
InfiniBand reader, one with no endpoints configured never `socket` (issue 26: the
node check's start-up time). Each function takes the check's configuration and the
node's name and returns why the detector cannot run here (its "unsupported" status,
never a fault), or None when it can. They only look (stat, PATH): a detector that
passes still reports its own "unsupported" when what it finds says so.
"""

from __future__ import annotations

import os

from slurm_heal.checks import paths, proc

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)

if TYPE_CHECKING:
    from slurm_heal.checks.config import CheckConfig

INFINIBAND_SYSFS = "/sys/class/infiniband"


def nvidia(cfg: CheckConfig, node: str) -> str | None:
    """The NVIDIA driver (``/proc/driver/nvidia``; live, also ``/dev/nvidiactl``, which
    NVML needs) or ``nvidia-smi`` on PATH; or NVML asked for by name (its own error then
    says what is missing)."""
    if cfg.nvidia.source == "nvml" or proc.which("nvidia-smi") is not None:
        return None
    if os.path.isdir(paths.host_path("/proc/driver/nvidia")):
        return None
    if not paths.root() and os.path.exists("/dev/nvidiactl"):
        return None
    return "no NVIDIA driver and no nvidia-smi on this node"


def amd(cfg: CheckConfig, node: str) -> str | None:
    """``amd-smi`` or ``rocm-smi`` on PATH, or the amdgpu driver loaded."""
    if proc.which("amd-smi") is not None or proc.which("rocm-smi") is not None:
        return None
    if os.path.isdir(paths.host_path("/sys/module/amdgpu")):
        return None
    return "no amdgpu driver and no amd-smi/rocm-smi on this node"


def infiniband(cfg: CheckConfig, node: str) -> str | None:
    """``/sys/class/infiniband`` exists."""
    base = paths.host_path(INFINIBAND_SYSFS)
    if os.path.isdir(base):
        return None
    return f"{base} does not exist (no InfiniBand adapter)"


def network(cfg: CheckConfig, node: str) -> str | None:
    """Endpoints are configured (``[network] endpoints``)."""
    if cfg.network.endpoints:
        return None
    return "no endpoints configured ([network] endpoints)"


def gpud(cfg: CheckConfig, node: str) -> str | None:
    """gpud runs here: for a local URL, gpud is installed (on PATH, or its systemd unit)
    and something listens on its port (``/proc/net/tcp``, ``tcp6``: a file read, no
    socket); a remote URL is asked."""
    url = cfg.gpud.url
    hostport = url.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    if not host:
        host, port = hostport, ("443" if url.startswith("https") else "80")
    if host.strip("[]") not in ("localhost", "127.0.0.1", "::1") or not port.isdigit():
        return None
    # Installed at all (a stat per PATH entry): only then is /proc/net/tcp read.
    if proc.which("gpud") is None and not os.path.exists(
            paths.host_path("/etc/systemd/system/gpud.service")):
        return "gpud is not installed (no gpud on PATH, no gpud.service)"
    want = f":{int(port):04X} "
    seen_any = False
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(paths.host_path(name), encoding="ascii", errors="replace") as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        seen_any = True
        for line in lines:
            cols = line.split()
            # local_address is column 1 ("0100007F:3A9C"), st column 3 ("0A" = LISTEN)
            if len(cols) > 3 and cols[3] == "0A" and (cols[1] + " ").endswith(want):
                return None
    if not seen_any:
        return "gpud is not running (no /proc/net/tcp to find its port in)"
    return f"gpud is not running (nothing listens on port {int(port)})"
