"""The read model: what the CLI (`commands/`), the API and the console show, computed
once from the store and Slurm's view (ARCHITECTURE "Layout").

- `overview`: the cluster at a glance (`status`, the console's front page, /api/v1/overview);
- `nodes`: one node's status (its state flags, the reason classified, its alerts);
- `words`: who asked for a remediation, where its approval stands, a policy as plain data.

It imports nothing of `commands/` (a test holds every module below `commands/` to that).
"""
