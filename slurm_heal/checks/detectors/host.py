"""The host detectors of `slurm_heal.checks.node` (SPEC D2, D4): read-only mounts, fewer
GPUs than configured, services restarting in a loop."""

from __future__ import annotations

from slurm_heal.checks import node, paths
from slurm_heal.checks.config import GpusConfig, MountsConfig, ServicesConfig

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from datetime import datetime

    from slurm_heal.checks.config import CheckConfig
    from slurm_heal.checks.detector import State, Update
    from slurm_heal.types import Finding


def expected_gpus(cfg: CheckConfig, name: str) -> int:
    """``[gpus] expected``, else what Slurm's gres.conf gives this node, else 0."""
    if cfg.gpus.expected > 0:
        return cfg.gpus.expected
    text = paths.read_text(paths.host_path(cfg.gpus.gres_conf))
    return (node.gres_gpus(text, name) or 0) if text else 0


class Mounts:
    """SPEC D4: mounts that should be read-write but are read-only."""

    name = "mounts"
    settings = MountsConfig
    modes = MountsConfig().modes

    def gather(self, cfg: CheckConfig, st: State, name: str, now: datetime) -> str:
        path = paths.host_path("/proc/mounts")
        text = paths.read_text(path, default="\0")
        if text == "\0":
            raise node.Unsupported(f"{path} does not exist")
        return text

    def evaluate(self, cfg: CheckConfig, st: State, name: str, now: datetime,
                 seen: str) -> tuple[list[Finding], Update]:
        return node.evaluate_mounts(node.parse_mounts(seen), cfg.mounts.rw, name), {}


class Gpus:
    """SPEC D2: fewer GPUs than configured (``[gpus] expected``, else Slurm's gres.conf;
    neither = not checked)."""

    name = "gpus"
    settings = GpusConfig
    modes = GpusConfig().modes

    def gather(self, cfg: CheckConfig, st: State, name: str,
               now: datetime) -> tuple[int, int]:
        expected = expected_gpus(cfg, name)
        if expected <= 0:
            raise node.Unsupported("no expected GPU count configured (nor in gres.conf)")
        return node.count_gpus(paths.host_path("/proc/driver/nvidia/gpus")), expected

    def evaluate(self, cfg: CheckConfig, st: State, name: str, now: datetime,
                 seen: tuple[int, int]) -> tuple[list[Finding], Update]:
        visible, expected = seen
        return node.evaluate_gpu_count(visible, expected, name), {}


class Services:
    """SPEC D4: slurmd/munge/kubelet/containerd restarting in a loop; D12: an enabled
    NVLink fabric manager or IMEX service that is not running."""

    name = "services"
    settings = ServicesConfig
    modes = ServicesConfig().modes

    def gather(self, cfg: CheckConfig, st: State, name: str,
               now: datetime) -> tuple[dict[str, int], dict[str, tuple[str, str]]]:
        return node.gather_units(cfg.services.units, cfg.services.timeout)

    def evaluate(self, cfg: CheckConfig, st: State, name: str, now: datetime,
                 seen: tuple[dict[str, int], dict[str, tuple[str, str]]],
                 ) -> tuple[list[Finding], Update]:
        sc = cfg.services
        counts, fabric = seen
        found, hist = node.evaluate_restarts(node.history_json(st.get("services")), counts,
                                             now, sc.window, sc.max_restarts, name)
        # SPEC D12: the fabric manager and IMEX, where the site enabled them
        return found + node.evaluate_fabric_units(fabric, name, now), {"services": hist}


MOUNTS = Mounts()
GPUS = Gpus()
SERVICES = Services()
