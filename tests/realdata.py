"""Where the real GPU-node captures are, and the skip reason where they are not.

The captures are leptonai/gpud's test data (Apache-2.0), read in place (never copied into
the project): ``shared/fixtures/real`` beside the clone (CI has it there), or the
directory ``$SLURM_HEAL_REAL_FIXTURES`` names. A clone without them skips the tests that
read them with `MISSING`, which says where they come from and the commands that add them.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REAL = Path(os.environ.get("SLURM_HEAL_REAL_FIXTURES")
            or REPO.parent / "shared" / "fixtures" / "real")
GPUD_COMMIT = "4a8de33a3f02e207f39e9023d67125592d599731"
# file or directory here -> its path in gpud at GPUD_COMMIT
FILES = {
    "dmesg-xid-119.log": "components/accelerator/nvidia/xid/testdata/dmesg-with-xid-119.log",
    "kmsg-1.log": "pkg/kmsg/testdata/kmsg.1.log",
    "sys-class-infiniband-h100":
        "components/accelerator/nvidia/infiniband/class/testdata/sys-class-infiniband-h100.0",
}
MISSING = (
    f"the real GPU-node captures are not in {REAL} (shared/fixtures/real beside the clone, "
    "or $SLURM_HEAL_REAL_FIXTURES): they are leptonai/gpud's test data (Apache-2.0), commit "
    f"{GPUD_COMMIT[:7]}; add them with `git clone https://github.com/leptonai/gpud && "
    f"git -C gpud checkout {GPUD_COMMIT[:12]} && mkdir -p DIR && "
    + " && ".join(f"cp -r gpud/{src} DIR/{name}" for name, src in FILES.items())
    + "` and run the tests with SLURM_HEAL_REAL_FIXTURES=DIR")

