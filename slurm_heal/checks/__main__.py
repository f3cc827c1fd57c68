"""``python -m slurm_heal.checks [check options]``: the fast `slurm-heal check`."""

import sys

from slurm_heal.checks.fastcli import main

if __name__ == "__main__":
    sys.exit(main())
