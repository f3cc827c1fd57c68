"""Per-tool judges: parse a tool's output and hold it against the step's criteria (V3).

Each judge turns the tool's output into ``measured`` figures and compares them with the
step's ``criteria`` (models in `criteria`); output it cannot read is an ``error``
(nothing concluded), never a pass or a fail. The formats read, and where each comes
from, are listed in docs/validation.md:

- ``dcgm``: ``dcgmi diag -r N -j`` JSON, DCGM 3.x ("DCGM GPU Diagnostic", ``gpu_id``)
  and 4.x ("DCGM Diagnostic", ``entity_group``/``entity_id``, ``test_summary``);
- ``amd``: RVS ``[RESULT]`` verdict lines (gst's "Met target stress ... PASS" /
  "Couldnt meet target stress ... FAIL", older "met:/pass: TRUE|FALSE") or
  ``amd-smi metric --ecc --json`` (ECC counts per GPU);
- ``nccl``: nccl-tests ``all_reduce_perf`` text (the size table, "# Out of bounds
  values", "# Avg bus bandwidth");
- ``ib``: perftest ``ib_write_bw`` client output (Gb/sec or MB/sec table) and/or port
  states from ``ibstat`` or ``grep -H . /sys/class/infiniband/*/ports/*/{state,rate}``;
- ``fio``: ``fio --output-format=json`` (jobs[].read/write bw in KiB/s, iops, error; fio
  2.x and 3.x, ``mixed`` under ``unified_rw_reporting``, ``client_stats`` of ``--client``);
- ``mounts``: ``findmnt -J`` (tree or ``--list``).

A judge that finds a clear failure fails the step whatever the exit status; a tool that
exited non-zero with nothing failing in its output concludes nothing (``error``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from slurm_heal import suitecriteria as crit
from slurm_heal.suitesteps import Step, StepResult


class Unreadable(Exception):
    """The output does not hold what the judge needs (the message says what is missing)."""


# A judge returns (outcome "pass"|"fail", reason, measured, expected); it raises
# Unreadable when the output cannot be read.
Verdict = tuple[str, str, dict[str, Any], dict[str, Any]]


def _json_object(output: str, what: str) -> Any:
    """The JSON document in ``output``: the first line that starts one and decodes
    (tools print a warning line or two around it)."""
    decoder = json.JSONDecoder()
    first_error = ""
    tries = 0
    for m in re.finditer(r"^[ \t]*([{\[])", output, re.M):
        tries += 1
        if tries > 50:
            break
        try:
            doc, _ = decoder.raw_decode(output, m.start(1))
            return doc
        except (ValueError, RecursionError) as exc:  # RecursionError: "[[[[..." nested deep
            first_error = first_error or str(exc) or type(exc).__name__
    if not tries:
        raise Unreadable(f"no {what} JSON in the output")
    raise Unreadable(f"the {what} JSON does not parse: {first_error}")


def _num(value: Any) -> float | None:
    """A finite number from a JSON value or a string, else None (JSON may hold NaN)."""
    if isinstance(value, bool):
        return None
    number: float | None = None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    return number if number is not None and math.isfinite(number) else None


def _fmt(value: float) -> str:
    return f"{value:.6g}"


# ---------------------------------------------------------------------- dcgm

def _status(raw: Any) -> str:
    """DCGM's result words to Pass/Fail/Warn/Skip ("Skipped", "Not Run" -> Skip)."""
    text = str(raw or "").strip().lower()
    if text.startswith("pass"):
        return "Pass"
    if text.startswith("fail"):
        return "Fail"
    if text.startswith("warn"):
        return "Warn"
    if text.startswith("skip") or text.startswith("not run") or text == "not_run":
        return "Skip"
    return ""


def _texts(raw: Any, key: str) -> list[str]:
    """``info``/``warnings`` are a string, a list of strings or a list of objects."""
    if raw is None:
        return []
    if isinstance(raw, str):
        return [raw] if raw.strip() else []
    if isinstance(raw, dict):
        return [str(raw.get(key) or raw.get("message") or json.dumps(raw))]
    if isinstance(raw, list):
        out: list[str] = []
        for item in raw:
            out.extend(_texts(item, key))
        return out
    return [str(raw)]


def _entity(result: dict[str, Any]) -> str:
    if "entity_id" in result:
        group = str(result.get("entity_group") or "GPU")
        return f"{group} {result['entity_id']}"
    for key in ("gpu_id", "gpu_ids"):
        if key in result and str(result[key]).strip() != "":
            return f"GPU {result[key]}"
    return ""


def judge_dcgm(step: Step, output: str) -> Verdict:
    c: crit.DcgmCriteria = crit.parse("dcgm", step.criteria)
    doc = _json_object(output, "dcgmi diag")
    if not isinstance(doc, dict):
        raise Unreadable("the dcgmi diag JSON is not an object")
    body = doc.get("DCGM Diagnostic") or doc.get("DCGM GPU Diagnostic")
    if not isinstance(body, dict) or not isinstance(body.get("test_categories"), list):
        if doc.get("runtime_error"):  # the diagnostic could not run at all
            raise Unreadable(f"dcgmi diag did not run: {doc['runtime_error']}")
        raise Unreadable("no 'DCGM Diagnostic' / 'DCGM GPU Diagnostic' test_categories")
    failing = c.failing()
    ran: dict[str, str] = {}  # test -> worst status seen
    bad: list[dict[str, Any]] = []
    counts = {"Pass": 0, "Fail": 0, "Warn": 0, "Skip": 0}
    rank = {"": 0, "Skip": 1, "Pass": 2, "Warn": 3, "Fail": 4}
    for cat in body["test_categories"]:
        if not isinstance(cat, dict) or not isinstance(cat.get("tests"), list):
            continue
        for test in cat["tests"]:
            if not isinstance(test, dict):
                continue
            name = str(test.get("name", ""))
            results = test.get("results")
            results = results if isinstance(results, list) else []
            summary = test.get("test_summary")
            if not results and isinstance(summary, dict):
                results = [summary]
            for res in results:
                if not isinstance(res, dict):
                    continue
                status = _status(res.get("status"))
                if not status:
                    continue
                counts[status] += 1
                if rank[status] > rank[ran.get(name, "")]:
                    ran[name] = status
                if name in c.ignore_tests or status not in failing:
                    continue
                bad.append({"test": name, "category": str(cat.get("category", "")),
                            "entity": _entity(res), "status": status,
                            "warnings": _texts(res.get("warnings"), "warning"),
                            "info": _texts(res.get("info"), "info")})
    if not ran:
        raise Unreadable("the dcgmi diag JSON lists no test results")
    measured: dict[str, Any] = {"tests": ran, "results": counts}
    expected: dict[str, Any] = {"fail_on": sorted(failing)}
    if bad:
        measured["failures"] = bad
        parts = []
        for b in bad:
            where = f" on {b['entity']}" if b["entity"] else ""
            words = "; ".join(b["warnings"] or b["info"])
            parts.append(f"{b['test']} {b['status']}{where}" + (f": {words}" if words else ""))
        return "fail", "dcgmi diag: " + " | ".join(parts), measured, expected
    missing = [t for t in c.require_tests if ran.get(t, "Skip") == "Skip"]
    if missing:
        expected["require_tests"] = list(c.require_tests)
        raise Unreadable(f"required test(s) did not run: {', '.join(missing)}")
    if counts["Skip"] and not counts["Pass"] + counts["Warn"] + counts["Fail"]:
        # DCGM skips what it cannot run (an unsupported GPU, a missing plugin): a diag
        # where everything was skipped tested nothing, which is no pass.
        raise Unreadable(f"every result was skipped ({counts['Skip']}): "
                         f"nothing was tested")
    skipped = f", {counts['Skip']} skipped" if counts["Skip"] else ""
    return "pass", f"{counts['Pass']} result(s) passed{skipped}", measured, expected


# ---------------------------------------------------------------------- amd

_AMD_KEYS = {
    "uncorrectable": ("total_uncorrectable_count", "total_uncorrectable"),
    "correctable": ("total_correctable_count", "total_correctable"),
    "deferred": ("total_deferred_count", "total_deferred"),
}


# RVS result lines: "[RESULT] [ 1234.567890] [action_1] gst 28851 Gflops 1.2e+05 Met target
# stress : 1.1e+05 PASS" (RVS 6.x gst), older modules end in "met: TRUE" / "pass: FALSE".
_RVS_RESULT = re.compile(r"^\s*\[RESULT\s*\]\s*(?:\[\s*[\d.]+\s*\]\s*)?(.*)$")
_RVS_FAIL = re.compile(r"\b(?:met|pass):\s*FALSE\b|\bFAIL\s*$|Couldn'?t meet", re.I)
_RVS_PASS = re.compile(r"\b(?:met|pass):\s*TRUE\b|\bPASS\s*$", re.I)
_RVS_WHO = re.compile(r"^(?:\[([^\]]+)\]\s*)?(\w+)\s+(\d+)\b")


def _judge_rvs(output: str) -> Verdict:
    passed, failed = [], []
    for line in output.splitlines():
        m = _RVS_RESULT.match(line)
        if not m:
            continue
        text = m.group(1).strip()
        if _RVS_FAIL.search(text):
            failed.append(text)
        elif _RVS_PASS.search(text):
            passed.append(text)
    if not passed and not failed:
        raise Unreadable("no RVS [RESULT] line with a verdict (PASS/FAIL, met:/pass: TRUE/FALSE)")
    measured: dict[str, Any] = {"passed": len(passed), "failed": len(failed)}
    if failed:
        who = []
        for text in failed:
            w = _RVS_WHO.match(text)
            who.append(f"{w.group(2)} GPU {w.group(3)}" if w else text[:80])
        measured["failures"] = failed[:20]
        return "fail", "rvs: " + "; ".join(dict.fromkeys(who)) + f": {failed[0]}", measured, {}
    return "pass", f"rvs: {len(passed)} result(s) passed", measured, {}


def judge_amd(step: Step, output: str) -> Verdict:
    c: crit.AmdCriteria = crit.parse("amd", step.criteria)
    if "[RESULT" in output:  # RVS; amd-smi's JSON never holds it
        return _judge_rvs(output)
    doc = _json_object(output, "amd-smi")
    if isinstance(doc, dict) and isinstance(doc.get("gpu_data"), list):
        doc = doc["gpu_data"]  # amd-smi of ROCm 6.4+ wraps the per-GPU list
    gpus = doc if isinstance(doc, list) else [doc]
    measured: dict[str, Any] = {}
    for item in gpus:
        if not isinstance(item, dict) or not isinstance(item.get("ecc"), dict):
            continue
        counts: dict[str, int] = {}
        for what, keys in _AMD_KEYS.items():
            for key in keys:
                value = _num(item["ecc"].get(key))
                if value is not None:
                    counts[what] = int(value)
                    break
        if "uncorrectable" in counts:
            measured[str(item.get("gpu", len(measured)))] = counts
    if not measured:
        raise Unreadable("no GPU with ecc total_uncorrectable_count in the amd-smi JSON")
    limits = {"uncorrectable": c.max_uncorrectable, "correctable": c.max_correctable,
              "deferred": c.max_deferred}
    expected = {f"max_{k}": v for k, v in limits.items() if v is not None}
    over = [f"GPU {gpu} {what} ECC {n} > {limits[what]}"
            for gpu, counts in measured.items() for what, n in counts.items()
            if limits.get(what) is not None and n > int(limits[what] or 0)]
    if over:
        return "fail", "amd-smi: " + "; ".join(over), {"gpus": measured}, expected
    return "pass", f"{len(measured)} GPU(s) within the ECC limits", {"gpus": measured}, expected


# ---------------------------------------------------------------------- nccl

# A decimal number float() takes ("1.2.3" or "." would pass "[\d.]+" and raise).
NUM = r"(?:\d+(?:\.\d*)?|\.\d+)"
# "  8589934592  2147483648  float  sum  -1  36245  236.99  414.73  0  36195 ..."
_NCCL_ROW = re.compile(
    rf"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)"
    rf"\s+({NUM})\s+({NUM})\s+({NUM})\s+(\S+)"
    rf"(?:\s+({NUM})\s+({NUM})\s+({NUM})\s+(\S+))?\s*$")
_NCCL_AVG = re.compile(rf"^#\s*Avg bus bandwidth\s*:\s*({NUM})(?![\d.])", re.M)
_NCCL_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)", re.M)
_NCCL_DEV = re.compile(r"^#\s+Rank\s+\d+.*?device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$", re.M)
# Before nccl-tests 2.11 (2021) a row had no root column and a max-error column
# ("2e-07", a float) where #wrong is now: "size count type redop time algbw busbw error".
_NCCL_OLD_ROW = re.compile(
    rf"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)"
    rf"\s+({NUM})\s+({NUM})\s+({NUM})\s+(\S+)"
    rf"(?:\s+({NUM})\s+({NUM})\s+({NUM})\s+(\S+))?\s*$")
# mpirun --tag-output (Open MPI, and so a Kubeflow MPIJob's launcher log): "[1,0]<stdout>:"
_MPI_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>: ?")


def _untagged(output: str) -> str:
    """The output without mpirun's per-line rank tags (``[1,0]<stdout>:``)."""
    if "]<std" not in output:
        return output
    return "\n".join(_MPI_TAG.sub("", line, count=1) for line in output.splitlines())


def _nccl_runs(output: str) -> list[dict[str, Any]]:
    """Each run of the log: its rows, #wrong, out-of-bounds count and "# Avg bus
    bandwidth" (None when the run did not finish). A log may hold several runs (a job
    that runs the test twice, one table per process of a non-MPI build)."""
    runs: list[dict[str, Any]] = []
    run: dict[str, Any] = {"rows": [], "wrong": 0, "oob": 0, "avg": None}
    for line in output.splitlines():
        m = _NCCL_ROW.match(line)
        if m:
            busbw = [float(m.group(8))] + ([float(m.group(12))] if m.group(12) else [])
            for w in (m.group(9), m.group(13)):
                if w is not None and w.isdigit():
                    run["wrong"] += int(w)
            run["rows"].append({"size": int(m.group(1)), "busbw": min(busbw)})
            continue
        m = _NCCL_OLD_ROW.match(line)
        if m:  # the old table: its "error" is a float tolerance, not a count of wrongs
            busbw = [float(m.group(7))] + ([float(m.group(11))] if m.group(11) else [])
            run["rows"].append({"size": int(m.group(1)), "busbw": min(busbw)})
            continue
        m = _NCCL_OOB.match(line)
        if m:
            run["oob"] += int(m.group(1))
            continue
        m = _NCCL_AVG.match(line)
        if m:
            run["avg"] = float(m.group(1))
            runs.append(run)
            run = {"rows": [], "wrong": 0, "oob": 0, "avg": None}
    if run["rows"]:
        runs.append(run)  # a last run that did not finish
    return runs


def judge_nccl(step: Step, output: str) -> Verdict:
    c: crit.NcclCriteria = crit.parse("nccl", step.criteria)
    output = _untagged(output)
    runs = _nccl_runs(output)
    if not any(r["rows"] for r in runs):
        raise Unreadable("no all_reduce_perf result rows (size count type redop root ...)")
    if any(r["avg"] is None for r in runs):
        raise Unreadable("no '# Avg bus bandwidth' line (the run did not finish)")
    runs = [r for r in runs if r["rows"]]
    models = [m.group(1) for m in _NCCL_DEV.finditer(output)]
    per_run: list[dict[str, Any]] = []
    for r in runs:
        largest = max(r["rows"], key=lambda row: row["size"])
        per_run.append({"avg_busbw_gbps": r["avg"], "largest_size_bytes": largest["size"],
                        "busbw_gbps": largest["busbw"], "wrong": r["wrong"],
                        "out_of_bounds": r["oob"]})
    # Judged on the worst run: the lowest bandwidths, every wrong result of all runs.
    worst = min(per_run, key=lambda r: r["busbw_gbps"])
    wrong = sum(r["wrong"] for r in per_run)
    oob = sum(r["out_of_bounds"] for r in per_run)
    measured: dict[str, Any] = {"avg_busbw_gbps": min(r["avg_busbw_gbps"] for r in per_run),
                                "largest_size_bytes": worst["largest_size_bytes"],
                                "busbw_gbps": worst["busbw_gbps"], "wrong": wrong,
                                "out_of_bounds": oob, "gpus": len(models)}
    if len(per_run) > 1:
        measured["runs"] = per_run
        measured["gpus"] = len(models) // len(per_run) if len(models) % len(per_run) == 0 \
            else len(models)
    if models:
        measured["model"] = models[0]
    expected: dict[str, Any] = {}
    floor = c.min_busbw_gbps
    if c.expected_by_model:
        hit = next((k for k in c.expected_by_model if any(k in m for m in models)), None)
        if hit is not None:
            floor = c.expected_by_model[hit]
            expected["model"] = hit
        elif floor is None and c.min_avg_busbw_gbps is None:
            raise Unreadable("no GPU model of expected_by_model ("
                             + ", ".join(c.expected_by_model) + ") in the '# Using devices' "
                             "lines" + (f" (saw {models[0]!r})" if models else ""))
    many = len(per_run) > 1

    def which(i: int) -> str:
        return f"run {i + 1}: " if many else ""

    if wrong or oob:
        return ("fail", f"all_reduce_perf: {wrong} wrong result(s), {oob} out of bounds value(s)"
                + (f" over {len(per_run)} runs" if len(per_run) > 1 else ""),
                measured, expected)
    fails: list[str] = []
    if floor is not None:
        expected["min_busbw_gbps"] = floor
    if c.min_avg_busbw_gbps is not None:
        expected["min_avg_busbw_gbps"] = c.min_avg_busbw_gbps
    for i, r in enumerate(per_run):
        if floor is not None and r["busbw_gbps"] < floor:
            fails.append(f"{which(i)}busbw {_fmt(r['busbw_gbps'])} GB/s at "
                         f"{r['largest_size_bytes']} B < {_fmt(floor)} GB/s expected")
        if c.min_avg_busbw_gbps is not None and r["avg_busbw_gbps"] < c.min_avg_busbw_gbps:
            fails.append(f"{which(i)}avg busbw {_fmt(r['avg_busbw_gbps'])} GB/s "
                         f"< {_fmt(c.min_avg_busbw_gbps)} GB/s expected")
    if fails:
        return "fail", "all_reduce_perf: " + "; ".join(fails), measured, expected
    if len(per_run) > 1:
        return ("pass", f"{len(per_run)} runs: " + "; ".join(
            f"busbw {_fmt(r['busbw_gbps'])} GB/s at {r['largest_size_bytes']} B, avg "
            f"{_fmt(r['avg_busbw_gbps'])} GB/s" for r in per_run), measured, expected)
    return ("pass", f"busbw {_fmt(worst['busbw_gbps'])} GB/s at {worst['largest_size_bytes']} B",
            measured, expected)


# ---------------------------------------------------------------------- ib

_IB_HEAD = re.compile(r"#bytes\s+#iterations\s+BW peak\[(Gb|MB)/sec\]\s+BW average\[(?:Gb|MB)/sec\]")
_IB_ROW = re.compile(rf"^\s*(\d+)\s+(\d+)\s+({NUM})\s+({NUM})\s+({NUM})\s*$")
_IBSTAT_CA = re.compile(r"^CA '([^']+)'")
_IBSTAT_PORT = re.compile(r"^\s+Port (\d+):")
_IBSTAT_KV = re.compile(r"^\s+(State|Physical state|Rate|Link layer):\s*(.+?)\s*$")
# "/sys/class/infiniband/mlx5_0/ports/1/state:4: ACTIVE"
_SYSFS = re.compile(r"(?:^|/)([^/\s]+)/ports/(\d+)/(state|phys_state|rate|link_layer):(.*)$")


def _ib_row(line: str, prefixed: bool) -> re.Match[str] | None:
    """A perftest result row; after a header that had something before it (a logging
    harness's prefix on each line), the row is the line's last five fields."""
    m = _IB_ROW.match(line)
    if m is None and prefixed:
        fields = line.split()
        if len(fields) > 5:
            m = _IB_ROW.match(" ".join(fields[-5:]))
    return m


def _bw_table(output: str) -> dict[str, Any] | None:
    unit = ""
    prefixed = False
    rows: list[tuple[int, float]] = []
    for line in _untagged(output).splitlines():
        if "**" in line:  # a table posted in markdown with its values bolded: "**96.50**"
            line = line.replace("**", "")
        head = _IB_HEAD.search(line)
        if head:
            unit = head.group(1)
            prefixed = bool(line[:head.start()].strip())
            continue
        m = _ib_row(line, prefixed) if unit else None
        if m:
            avg = float(m.group(4))
            # perftest's MB is 2^20 bytes (its MEGA); Gb is 10^9 bits.
            gbps = avg if unit == "Gb" else avg * 1048576 * 8 / 1e9
            rows.append((int(m.group(1)), gbps))
    if not rows:
        return None
    size, gbps = max(rows)
    return {"bw_avg_gbps": round(gbps, 3), "size_bytes": size, "unit": f"{unit}/sec"}


def _ports(output: str) -> dict[str, dict[str, str]]:
    ports: dict[str, dict[str, str]] = {}
    ca = port = ""
    for line in output.splitlines():
        m = _IBSTAT_CA.match(line)
        if m:
            ca, port = m.group(1), ""
            continue
        m = _IBSTAT_PORT.match(line)
        if m and ca:
            port = f"{ca}/{m.group(1)}"
            ports[port] = {}
            continue
        m = _IBSTAT_KV.match(line)
        if m and port:
            key = {"State": "state", "Physical state": "phys_state", "Rate": "rate",
                   "Link layer": "link_layer"}[m.group(1)]
            ports[port][key] = m.group(2)
            continue
        m = _SYSFS.search(line.strip())
        if m:
            ports.setdefault(f"{m.group(1)}/{m.group(2)}", {})[m.group(3)] = m.group(4).strip()
    return {k: v for k, v in ports.items() if "state" in v}


def _word(state: str) -> str:
    """"4: ACTIVE" (sysfs) and "Active" (ibstat) -> "ACTIVE"."""
    return state.split(":")[-1].strip().upper()


def _rate(rate: str) -> float | None:
    """"400 Gb/sec (4X NDR)" (sysfs) and "400" (ibstat) -> 400.0."""
    parts = rate.split()
    return _num(parts[0]) if parts else None


def judge_ib(step: Step, output: str) -> Verdict:
    c: crit.IbCriteria = crit.parse("ib", step.criteria)
    table = _bw_table(output)
    listed = _ports(output)
    # Ports of another link layer (a RoCE bond on the same adapter) are not judged.
    ports = {k: v for k, v in listed.items() if v.get("link_layer", "InfiniBand") in c.link_layers}
    if table is None and not ports and listed:
        layers = sorted({v.get("link_layer", "InfiniBand") for v in listed.values()})
        roce = " (RoCE)" if layers == ["Ethernet"] else ""
        raise Unreadable(f"{len(listed)} port(s) listed, all with link layer "
                         f"{', '.join(layers)}{roce}, none of {', '.join(c.link_layers)}: "
                         f"nothing to judge (set link_layers to judge them)")
    if table is None and not ports:
        raise Unreadable("no ib_write_bw result table (#bytes #iterations BW peak ...) and "
                         "no port states (ibstat or sysfs lines)")
    if c.min_bw_gbps is not None and table is None:
        raise Unreadable("min_bw_gbps is set but there is no ib_write_bw result table")
    if c.wants_ports() and not ports:
        raise Unreadable("port criteria are set but the output lists no port")
    if c.devices:  # a listed adapter absent from a listing of ports is a failure below
        ports = {k: v for k, v in ports.items() if k.split("/")[0] in c.devices}
    measured: dict[str, Any] = {}
    expected: dict[str, Any] = {}
    fails: list[str] = []
    if table is not None:
        measured.update(table)
        if c.min_bw_gbps is not None:
            expected["min_bw_gbps"] = c.min_bw_gbps
            if table["bw_avg_gbps"] < c.min_bw_gbps:
                fails.append(f"ib_write_bw {_fmt(table['bw_avg_gbps'])} Gb/s at "
                             f"{table['size_bytes']} B < {_fmt(c.min_bw_gbps)} Gb/s expected")
    missing = [d for d in c.devices if not any(k.split("/")[0] == d for k in ports)]
    if c.devices:
        expected["devices"] = list(c.devices)
    if missing:
        fails.append(f"no port of {', '.join(missing)} in the listing")
    if ports:
        want = c.port_state.upper()
        expected["port_state"] = want
        active = 0
        measured["ports"] = {}
        for name, p in sorted(ports.items()):
            state, rate = _word(p["state"]), _rate(p.get("rate", ""))
            measured["ports"][name] = {"state": state, "rate_gbps": rate}
            if state != want:
                fails.append(f"{name} is {state}, not {want}")
                continue
            active += 1
            if c.min_rate_gbps is not None and (rate is None or rate < c.min_rate_gbps):
                fails.append(f"{name} rate {p.get('rate') or '?'} < {_fmt(c.min_rate_gbps)} "
                             f"Gb/s expected")
        measured["active_ports"] = active
        if c.min_rate_gbps is not None:
            expected["min_rate_gbps"] = c.min_rate_gbps
        if c.min_active_ports is not None:
            expected["min_active_ports"] = c.min_active_ports
            if active < c.min_active_ports:
                fails.append(f"{active} port(s) {want} < {c.min_active_ports} expected")
    if fails:
        return "fail", "; ".join(fails), measured, expected
    words = []
    if table is not None:
        words.append(f"{_fmt(table['bw_avg_gbps'])} Gb/s at {table['size_bytes']} B")
    if ports:
        words.append(f"{measured['active_ports']} port(s) {c.port_state.upper()}")
    return "pass", ", ".join(words), measured, expected


# ---------------------------------------------------------------------- fio

_FIO_AGGREGATE = "All clients"  # fio --client's own sum over the servers


def _fio_jobs(doc: Any) -> list[dict[str, Any]]:
    """The job entries of a fio JSON document: ``jobs`` (a local run) or ``client_stats``
    (``fio --client``: one entry per server and job, plus fio's own "All clients" sum
    when there are several servers; that sum alone is read then, not added again)."""
    if not isinstance(doc, dict):
        raise Unreadable("the fio JSON is not an object")
    for key in ("jobs", "client_stats"):
        jobs = doc.get(key)
        if isinstance(jobs, list) and jobs:
            entries = [j for j in jobs if isinstance(j, dict)]
            total = [j for j in entries if j.get("jobname") == _FIO_AGGREGATE]
            return total or entries
    raise Unreadable("no jobs (or client_stats) in the fio JSON")


def judge_fio(step: Step, output: str) -> Verdict:
    c: crit.FioCriteria = crit.parse("fio", step.criteria)
    doc = _json_object(output, "fio")
    jobs = _fio_jobs(doc)
    total = {"read_mibps": 0.0, "write_mibps": 0.0, "read_iops": 0.0, "write_iops": 0.0}
    errors: list[str] = []
    seen: set[str] = set()  # read / write / mixed (unified_rw_reporting) parts found
    for job in jobs:
        name = str(job.get("jobname", "?"))
        err = _num(job.get("error"))
        if err:
            where = f" on {job['hostname']}" if job.get("hostname") else ""
            errors.append(f"job {name}{where} error {int(err)}")
        for rw in ("read", "write", "mixed"):
            part = job.get(rw)
            if not isinstance(part, dict):
                continue
            bw, iops = _num(part.get("bw")), _num(part.get("iops"))
            if bw is None or iops is None:
                continue
            seen.add(rw)
            total[f"{rw}_mibps"] = total.get(f"{rw}_mibps", 0.0) + bw / 1024  # KiB/s
            total[f"{rw}_iops"] = total.get(f"{rw}_iops", 0.0) + iops
    if not seen and not errors:
        raise Unreadable("no read/write (or mixed) bw and iops in the fio jobs")
    mixed_only = "mixed" in seen and not seen & {"read", "write"}
    measured: dict[str, Any] = {k: round(v, 3) for k, v in total.items()
                                if not mixed_only or k.startswith("mixed")}
    expected = {k: v for k, v in {"min_read_mibps": c.min_read_mibps,
                                  "min_write_mibps": c.min_write_mibps,
                                  "min_read_iops": c.min_read_iops,
                                  "min_write_iops": c.min_write_iops,
                                  "min_mixed_mibps": c.min_mixed_mibps,
                                  "min_mixed_iops": c.min_mixed_iops}.items() if v is not None}
    if errors:
        return "fail", "fio: " + "; ".join(errors), measured, expected
    if mixed_only:
        # unified_rw_reporting: reads and writes are one figure; a read or write floor
        # cannot be told from it (neither passed nor failed).
        blind = [k for k in expected if not k.startswith("min_mixed")]
        if blind:
            raise Unreadable(f"mixed figures only (unified_rw_reporting): "
                             f"{', '.join(blind)} cannot be judged; use min_mixed_mibps / "
                             f"min_mixed_iops")
    elif any(k.startswith("min_mixed") for k in expected):
        raise Unreadable("no mixed figures (unified_rw_reporting is off): "
                         "min_mixed_mibps / min_mixed_iops cannot be judged")
    fails = []
    for key, floor in expected.items():
        have = total[key.removeprefix("min_")]
        unit = "MiB/s" if key.endswith("mibps") else "IOPS"
        if have < floor:
            fails.append(f"{key.removeprefix('min_').split('_')[0]} {_fmt(have)} {unit} "
                         f"< {_fmt(floor)} {unit} expected")
    if fails:
        return "fail", "fio: " + "; ".join(fails), measured, expected
    if mixed_only:
        return ("pass", f"mixed {_fmt(total['mixed_mibps'])} MiB/s, "
                f"{_fmt(total['mixed_iops'])} IOPS", measured, expected)
    return ("pass", f"read {_fmt(total['read_mibps'])} MiB/s, write "
            f"{_fmt(total['write_mibps'])} MiB/s", measured, expected)


# ---------------------------------------------------------------------- mounts

def _filesystems(items: Any, out: dict[str, dict[str, str]]) -> None:
    if not isinstance(items, list):
        return
    for fs in items:
        if not isinstance(fs, dict):
            continue
        target = fs.get("target")
        if isinstance(target, str):
            out[target] = {"source": str(fs.get("source", "")),
                           "fstype": str(fs.get("fstype", ""))}
            if "options" in fs:  # no OPTIONS column (findmnt --df): the mode is unknown
                out[target]["options"] = str(fs.get("options") or "")
        _filesystems(fs.get("children"), out)


def judge_mounts(step: Step, output: str) -> Verdict:
    c: crit.MountsCriteria = crit.parse("mounts", step.criteria)
    doc = _json_object(output, "findmnt")
    if not isinstance(doc, dict) or not isinstance(doc.get("filesystems"), list):
        raise Unreadable("no 'filesystems' in the findmnt JSON")
    mounted: dict[str, dict[str, str]] = {}
    _filesystems(doc["filesystems"], mounted)
    fails: list[str] = []
    measured: dict[str, Any] = {}
    for target in dict.fromkeys([*c.mounts, *c.rw, *c.ro]):
        fs = mounted.get(target)
        if fs is None:
            fails.append(f"{target} is not mounted")
            measured[target] = None
            continue
        if "options" not in fs:
            measured[target] = {"fstype": fs["fstype"], "source": fs["source"], "mode": None}
            if target in c.rw or target in c.ro:
                raise Unreadable(f"findmnt printed no OPTIONS column, so whether {target} is "
                                 f"rw or ro cannot be told (findmnt --df lists none; run "
                                 f"findmnt -J -o TARGET,SOURCE,FSTYPE,OPTIONS)")
            continue
        options = fs["options"].split(",")
        measured[target] = {"fstype": fs["fstype"], "source": fs["source"],
                            "mode": "rw" if "rw" in options else "ro" if "ro" in options else ""}
        for mode, wanted in (("rw", c.rw), ("ro", c.ro)):
            if target in wanted and mode not in options:
                fails.append(f"{target} is not {mode} ({fs['options']})")
    expected = {"mounts": list(c.mounts), "rw": list(c.rw), "ro": list(c.ro)}
    if fails:
        return "fail", "; ".join(fails), {"mounts": measured}, expected
    return "pass", f"{len(measured)} mount(s) as expected", {"mounts": measured}, expected


JUDGES: dict[str, Callable[[Step, str], Verdict]] = {
    "dcgm": judge_dcgm, "amd": judge_amd, "nccl": judge_nccl, "ib": judge_ib,
    "fio": judge_fio, "mounts": judge_mounts,
}


def judge(step: Step, rc: int, output: str, base: dict[str, Any]) -> StepResult:
    """Judge ``step`` by its kind: a clear failure in the output fails it; unreadable
    output, or a non-zero exit with nothing failing in the output, is an ``error``."""
    fn = JUDGES.get(step.kind)
    if fn is None:
        return StepResult(**base, outcome="error", reason=f"no judge for kind {step.kind!r}")
    try:
        crit.parse(step.kind, step.criteria)
    except ValueError as exc:  # checked at load; only a hand-built Step gets here
        return StepResult(**base, outcome="error", reason=f"criteria: {exc}")
    try:
        outcome, reason, measured, expected = fn(step, output)
    except Unreadable as exc:
        why = f"{step.command[0]}: {exc}"
        if rc:
            why += f" (exit status {rc})"
        return StepResult(**base, outcome="error", reason=why)
    except Exception as exc:  # a judge's bug must not lose the other steps' results
        return StepResult(**base, outcome="error",
                          reason=f"the {step.kind} judge failed: {type(exc).__name__}: {exc}")
    if outcome == "pass" and rc != 0:
        return StepResult(**base, outcome="error", measured=measured, expected=expected,
                          reason=f"exit status {rc} though the output shows no failure "
                                 f"({reason})")
    return StepResult(**base, outcome="fail" if outcome == "fail" else "pass",
                      reason=reason, measured=measured, expected=expected)
