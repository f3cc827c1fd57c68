"""Node-side health checks (SPEC D1, D2, D4, I1, I2).

Each detector keeps its I/O (``gather``) apart from its judgement (``evaluate``, pure,
tested on golden files). Everything on this path stays free of pydantic, requests and
click: `slurm-heal check` runs on every node every few minutes and inside every job's
epilog, so interpreter start-up is most of its cost.

Modules:
    paths      replay root (``SLURM_HEAL_ROOT``) for every system path
    config     the node check's TOML configuration (frozen records) and BUILTINS, the
               one tuple of built-in detectors
    detector   the Detector protocol every detector follows (built in or third-party)
    present    whether a detector has anything to look at here, before it is imported
    kernlog    kernel log parsing and evaluation (pure)
    sources    kernel log sources with cursors: /dev/kmsg, a file, journalctl (I/O)
    node       read-only mounts and service restart loops
    state      the check's state file (cursors, latched findings, what we set)
    runner     run the detectors, turn findings into alerts, publish to Slurm
    fastcli    the entry point without click (``python -m slurm_heal.checks``)
    agent      the long-running node agent
"""
