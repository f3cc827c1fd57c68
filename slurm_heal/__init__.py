"""slurm-heal: Slurm-native automatic remediation for GPU clusters.

Keep this module free of imports: the node-side check (`slurm-heal check`) runs on
every node every few minutes and its start-up time is part of the budget.
"""

__version__ = "0.1.0"
