"""The GPU reset job's body, run on the drained node as a Slurm job (SPEC E6).

The controller (`slurm_heal.gpureset`) writes ``spec.json`` and a job script that runs
``python -m slurm_heal.gpureset_job --spec SPEC --out DIR`` in a maintenance reservation
on the node. This module:

1. works out which GPUs to reset: the ones the alerts name, or all of them on a system
   whose GPUs talk over NVLink/NVSwitch (NVIDIA: the GPUs and NVSwitches of one
   baseboard are reset together, and the fabric manager must be running to train the
   links again after it; docs/rules.md "GPU reset");
2. runs the vendor's tool with a time limit (an argv list, killed with its process group
   on timeout): ``nvidia-smi -r [-i 0,1]`` or ``amd-smi reset --gpureset -g N``;
3. judges its output: exit 0 and no refusal is a reset; "In use by another client", "not
   supported", any other non-zero exit or a timeout is a failed step with the tool's words;
4. after a reset, leaves the reset's time in the node check's state directory
   (`slurm_heal.checks.reset`), so the Xid seen before the reset is no longer taken as
   present, and runs the node check once, so the controller sees a check newer than the
   reset (SPEC L5);
5. writes ``result.json`` in DIR (and the same verdict on stdout, the job's output).

Exit status: 0 when the GPUs were reset, 1 when the reset failed, 2 for a bad spec.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from slurm_heal import fsio
from slurm_heal.checks.proc import finish

RESULT = "result.json"
# What the tools print when they refuse (nvidia-smi: "GPU 00000000:3B:00.0 is currently
# in use by another client" / "Unable to reset ...: In use by another client"; "not
# supported" on GPUs or platforms without the reset; amd-smi: "Unable to reset").
REFUSALS = ("in use by another client", "not supported", "unable to reset",
            "insufficient permissions", "is currently being used")
OUTPUT_CAP = 64 * 1024


@dataclass(frozen=True)
class Verdict:
    """What the reset step came to: ``ok`` and the words that say why."""

    ok: bool
    detail: str


def judge(tool: str, rc: int | None, output: str, *, timed_out: bool = False,
          timeout_s: float = 0.0) -> Verdict:
    """SPEC E6: the tool's exit status and words decide (pure)."""
    words = " ".join(line.strip() for line in output.strip().splitlines()
                     if line.strip())[:500]
    if timed_out:
        return Verdict(False, f"{tool} did not finish within {timeout_s:g}s and was killed"
                       + (f": {words}" if words else ""))
    if rc is None:
        return Verdict(False, f"{tool}: not found on the node")
    low = output.lower()
    refused = next((r for r in REFUSALS if r in low), None)
    if refused is not None:
        return Verdict(False, f"{tool} refused the reset (exit {rc}): {words}")
    if rc != 0:
        return Verdict(False, f"{tool} failed (exit {rc})" + (f": {words}" if words else ""))
    return Verdict(True, f"{tool} reset the GPU(s)" + (f": {words}" if words else ""))


def _run(argv: list[str], timeout_s: float) -> tuple[int | None, str, bool]:
    """(exit status or None when the tool is missing, output, timed out)."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except FileNotFoundError:
        return None, "", False
    out, _, timed_out = finish(proc, timeout_s)  # house style 6: its group killed
    return proc.returncode, out[:OUTPUT_CAP].decode("utf-8", "replace"), timed_out


def nvswitch_system(root: str = "") -> bool:
    """An NVSwitch baseboard (HGX/DGX): its NVSwitch devices are present."""
    for d in (f"{root}/proc/driver/nvidia-nvswitch/devices", f"{root}/dev"):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        if d.endswith("devices") and names:
            return True
        if any(n.startswith("nvidia-nvswitch") and n[len("nvidia-nvswitch"):].isdigit()
               for n in names):
            return True
    return False


def fabric_manager_running(root: str = "") -> bool:
    """The NVIDIA Fabric Manager daemon (``nv-fabricmanager``) runs on this node."""
    proc = f"{root}/proc"
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return False
    for pid in pids:
        try:
            with open(f"{proc}/{pid}/comm", encoding="utf-8", errors="replace") as fh:
                if fh.read().strip().startswith("nv-fabricmanage"):  # comm: 15 characters
                    return True
        except OSError:
            continue
    return False


def nvlink_active(output: str) -> bool:
    """``nvidia-smi nvlink --status`` lists an active link ("Link 0: 26.562 GB/s")."""
    return any("GB/s" in line and "Link" in line for line in output.splitlines())


def reset_argv(vendor: str, gpus: list[int], all_gpus: bool) -> list[str]:
    """The vendor's reset command for ``gpus`` (all of them when ``all_gpus``)."""
    if vendor == "amd":
        # amd-smi resets one GPU per -g; without ids, every GPU (docs/rules.md: on an
        # XGMI hive a reset reaches the hive's other GPUs too)
        ids = [str(g) for g in gpus] if gpus and not all_gpus else ["all"]
        return ["amd-smi", "reset", "--gpureset", "-g", *ids]
    argv = ["nvidia-smi", "-r"]
    if gpus and not all_gpus:
        argv += ["-i", ",".join(str(g) for g in gpus)]
    return argv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m slurm_heal.gpureset_job",
                                 description="reset the GPUs of this node (SPEC E6)")
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = Path(args.out)
    try:
        spec: dict[str, Any] = json.loads(Path(args.spec).read_text(encoding="utf-8"))
        node = str(spec["node"])
        vendor = str(spec.get("vendor", "nvidia"))
        gpus = [int(g) for g in spec.get("gpus", [])]
        timeout_s = float(spec.get("timeout_s", 120))
        if vendor not in ("nvidia", "amd"):
            raise ValueError(f"vendor {vendor!r} (nvidia or amd)")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        sys.stderr.write(f"slurm-heal gpu reset: bad spec {args.spec}: {exc}\n")
        return 2
    root = os.environ.get("SLURM_HEAL_ROOT", "")
    notes: list[str] = []
    all_gpus = not gpus
    if vendor == "nvidia" and nvswitch_system(root):
        all_gpus = True
        notes.append("NVSwitch system: all GPUs are reset together")
        if not fabric_manager_running(root):
            # NVIDIA: the fabric manager trains the NVLinks again after the reset; without
            # it the GPUs are not usable for CUDA jobs afterwards. Not reset: the reboot
            # (E1) brings the fabric manager up with the node.
            return _write(out, {"node": node, "outcome": "failed", "detail": "; ".join(
                [*notes, "the NVIDIA Fabric Manager (nv-fabricmanager) is not running on "
                 "this NVSwitch system: the GPUs were not reset (their NVLinks would not be "
                 "trained again)"]), "command": [], "rc": None, "timed_out": False,
                "output": "", "at": datetime.now(timezone.utc).isoformat(), "gpus": []})
    elif vendor == "nvidia" and gpus:
        rc, text, _ = _run(["nvidia-smi", "nvlink", "--status"], min(timeout_s, 30.0))
        if rc == 0 and nvlink_active(text):
            all_gpus = True
            notes.append("GPUs linked by NVLink: all GPUs are reset together")
    cmd = reset_argv(vendor, gpus, all_gpus)
    at = datetime.now(timezone.utc)
    rc, text, timed_out = _run(cmd, timeout_s)
    verdict = judge(cmd[0], rc, text, timed_out=timed_out, timeout_s=timeout_s)
    result: dict[str, Any] = {
        "node": node, "outcome": "ok" if verdict.ok else "failed",
        "detail": "; ".join([*notes, verdict.detail]), "command": cmd, "rc": rc,
        "timed_out": timed_out, "output": text[:4000], "at": at.isoformat(),
        "gpus": [] if all_gpus else gpus}
    if verdict.ok:
        from slurm_heal.checks import reset as check_reset

        try:
            where = check_reset.mark(spec.get("check_config"), at, [] if all_gpus else gpus)
            result["marked"] = where
        except Exception as exc:  # the reset happened; the check may still see the Xid
            result["marked"] = ""
            result["detail"] += f"; the reset time could not be left for the node check: {exc}"
        # --publish: checked_at after the reset at once, even where the findings did
        # not change (the check otherwise writes only changes and its heartbeat), so
        # the controller's L5 wait ends now (issue 43).
        check = [sys.executable, "-m", "slurm_heal.cli", "check", "--node", node, "--publish"]
        if spec.get("check_config"):
            check += ["--config", str(spec["check_config"])]
        crc, ctext, ctimed = _run(check, 120.0)
        result["check"] = {"rc": crc, "timed_out": ctimed, "output": ctext[-2000:]}
    return _write(out, result)


def _write(out: Path, result: dict[str, Any]) -> int:
    """``result.json`` (atomically) and the verdict on stdout; the job's exit status."""
    out.mkdir(parents=True, exist_ok=True)
    # The one atomic write (fsync of the file and the directory, house style 13), as the
    # validation runner writes its results: the controller reads it.
    fsio.atomic_write(out / RESULT, json.dumps(result, indent=1) + "\n", 0o644)
    sys.stdout.write(f"slurm-heal gpu reset of {result['node']}: {result['outcome']}: "
                     f"{result['detail']}\n")
    return 0 if result["outcome"] == "ok" else 1


if __name__ == "__main__":  # pragma: no cover - run as the job's body
    sys.exit(main())
