"""Node detectors per subject (SPEC D2, D3, D6, D8, D9).

Each module keeps its I/O (``gather*``) apart from its judgement (``evaluate*``, pure,
tested on golden files of the real tools' formats), and exposes its detector (an object
of `slurm_heal.checks.detector.Detector`) that `slurm_heal.checks.config.BUILTINS`
names; a module is imported only when its detector runs on the node:

    kernel_log  the kernel log (`slurm_heal.checks.kernlog`, `slurm_heal.checks.sources`)
    host        read-only mounts, the GPU count, services restarting in a loop
    gpu         the vendor-neutral GPU readings and the one evaluator that turns them
                into faults (NVIDIA and AMD readings alike)
    nvidia      NVML (nvidia-ml-py, imported lazily), nvidia-smi (``-q -x`` XML,
                ``--query-gpu`` CSV) and DCGM health (``dcgmi health -c -j``) -> readings
    amd         ``amd-smi ... --json`` and ``rocm-smi --json`` -> readings
    infiniband  /sys/class/infiniband/*/ports/*: state, rate, error counter rates
    network     TCP reachability of configured peers and endpoints
    disk        free space on configured paths (record only, D8)

Counters that only mean something as a rate (PCIe replays, NVLink and InfiniBand
errors) are kept between runs in the check's state file (`slurm_heal.checks.state`)
and judged per minute, never by their lifetime value.
"""
