"""Repairs over time (issue 42, SPEC P4, S5, S7, E7): what the console's history page
and ``GET /api/v1/history`` show, from the store's remediations with the audit archive's
put back (`Store.load_history`), the incidents on record and the breaker.

Pure: `summarize` takes the remediations, the incidents, the breaker's openings and
``now``, and returns a JSON-able dict; `charts` turns that dict into the geometry of its
SVG charts (rectangles and labels), so the template only writes elements.

What is counted, over the last ``days`` days (7, 30 or 90; whole UTC days, today the
last):

* **remediations per day by outcome**: each remediation that ended (done, failed,
  cancelled, withdrawn, denied) on the day it entered that phase;
* **time to repair** by fault and action: from the alert's first sight (the remediation's
  creation when it has none) to ``done``, for those done in the window: their count, the
  median (the middle value, the mean of the two middle ones for an even count) and the
  90th percentile (nearest rank: the ``ceil(0.9 n)``-th smallest);
* **repeats per machine**: remediations whose action ran in the window (its first act
  sent, as E7's ledger counts it; the ``acting`` phase's entry for a record without
  attempts), per machine (its identity, ``host``, else the node's name): the machines
  with two or more, most first, and how many machines had 1, 2, 3, 4 or more;
* **the breaker's openings** (S5): the times the gate held a remediation with the breaker
  opening (its ``blocked`` step under S5 whose words say it opens), and the breaker's own
  ``opened_at`` while it is open;
* **incidents** (S7): those opened in the window, per day, with their component.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import date, datetime, time, timedelta, timezone
from typing import Any

from slurm_heal.models import Breaker, Incident, Remediation
from slurm_heal.policy.facts import acted_at

WINDOWS = (7, 30, 90)
OUTCOMES = ("done", "failed", "cancelled", "withdrawn", "denied")
TOP = 15  # rows of the time-to-repair and repeats tables the charts draw


def median(values: Sequence[float]) -> float:
    """The middle value of ``values`` (the mean of the two middle ones); ValueError on
    none."""
    if not values:
        raise ValueError("the median of no values")
    v = sorted(values)
    mid = len(v) // 2
    return float(v[mid]) if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile (0 < p <= 100): the ``ceil(p/100 * n)``-th
    smallest value; ValueError on none."""
    if not values:
        raise ValueError("a percentile of no values")
    if not 0 < p <= 100:
        raise ValueError(f"p must be in (0, 100], not {p}")
    v = sorted(values)
    return float(v[max(1, math.ceil(p / 100 * len(v))) - 1])


def ended_at(rem: Remediation) -> datetime | None:
    """When a finished remediation entered its last phase (None while open)."""
    if not rem.phase.terminal:
        return None
    return rem.phase_times.get(rem.phase.value) or rem.updated


def _utc(at: datetime) -> datetime:
    return at.astimezone(timezone.utc) if at.tzinfo else at.replace(tzinfo=timezone.utc)


def _day(at: datetime) -> date:
    return _utc(at).date()


def breaker_openings(breaker: Breaker | None) -> list[datetime]:
    """Every opening of the breaker it keeps (`Breaker.openings`), and the one that holds
    it open now, oldest first (one per instant)."""
    if breaker is None:
        return []
    seen = {_utc(t) for t in breaker.openings}
    if breaker.open and breaker.opened_at is not None:
        seen.add(_utc(breaker.opened_at))
    return sorted(seen)


def summarize(remediations: Iterable[Remediation], incidents: Iterable[Incident],
              openings: Iterable[datetime], now: datetime, days: int) -> dict[str, Any]:
    """The repairs of the last ``days`` days before ``now`` (see the module docstring)."""
    if days < 1:
        raise ValueError(f"days must be at least 1, not {days}")
    now = _utc(now)
    first = now.date() - timedelta(days=days - 1)
    since = datetime.combine(first, time(0), tzinfo=timezone.utc)
    days_list = [first + timedelta(days=i) for i in range(days)]
    per_day: dict[date, dict[str, int]] = {d: {o: 0 for o in OUTCOMES} for d in days_list}
    totals = {o: 0 for o in OUTCOMES}
    ttr: dict[tuple[str, str], list[float]] = {}
    acted: dict[str, list[Remediation]] = {}
    ran_at: dict[str, datetime] = {}
    for r in remediations:
        end = ended_at(r)
        if end is not None and since <= _utc(end) <= now and r.phase.value in totals:
            per_day[_day(end)][r.phase.value] += 1
            totals[r.phase.value] += 1
            if r.phase.value == "done":
                start = r.alert_first_seen or r.created
                ttr.setdefault((r.fault, r.action.value), []).append(
                    max(0.0, (_utc(end) - _utc(start)).total_seconds()))
        ran = acted_at(r) or r.phase_times.get("acting")
        if ran is not None and since <= _utc(ran) <= now:
            acted.setdefault(r.host or r.node, []).append(r)
            ran_at[r.id] = _utc(ran)
    repair_rows: list[dict[str, Any]] = [
        {"fault": f, "action": a, "count": len(v), "median_s": median(v),
         "p90_s": percentile(v, 90)}
        for (f, a), v in sorted(ttr.items(), key=lambda kv: (
            -len(kv[1]), -percentile(kv[1], 90), kv[0][0], kv[0][1]))]
    repeats: list[dict[str, Any]] = [
        {"machine": m, "node": max(rs, key=lambda r: r.created).node, "count": len(rs),
         "faults": sorted({r.fault for r in rs}),
         "last": max(ran_at[r.id] for r in rs).isoformat()}
        for m, rs in sorted(acted.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        if len(rs) >= 2]
    spread = {"1": 0, "2": 0, "3": 0, "4+": 0}
    for rs in acted.values():
        spread[str(len(rs)) if len(rs) < 4 else "4+"] += 1
    opened = sorted(_utc(t) for t in openings if since <= _utc(t) <= now)
    incs = sorted((i for i in incidents if since <= _utc(i.opened) <= now),
                  key=lambda i: (i.opened, i.id))
    inc_day = {d: 0 for d in days_list}
    for i in incs:
        inc_day[_day(i.opened)] += 1
    brk_day = {d: 0 for d in days_list}
    for t in opened:
        brk_day[t.date()] += 1
    return {
        "days": days, "since": since.isoformat(), "until": now.isoformat(),
        "outcomes": list(OUTCOMES),
        "totals": {**totals, "ended": sum(totals.values())},
        "per_day": [{"day": d.isoformat(), **per_day[d]} for d in days_list],
        "time_to_repair": repair_rows,
        "repeats": repeats,
        "repeats_spread": spread,
        "breaker": {"openings": [t.isoformat() for t in opened],
                    "per_day": [{"day": d.isoformat(), "openings": brk_day[d]}
                                for d in days_list]},
        "incidents": {"list": [{"id": i.id, "component": i.component, "kind": i.kind,
                                "name": i.name, "nodes": len(i.nodes), "size": i.size,
                                "state": i.state, "opened": _utc(i.opened).isoformat(),
                                "resolved": _utc(i.resolved).isoformat()
                                if i.resolved else None} for i in incs],
                      "per_day": [{"day": d.isoformat(), "opened": inc_day[d]}
                                  for d in days_list]},
    }


# --------------------------------------------------------------------------- charts

W, H = 900, 150  # a per-day chart's plot area (px)
LEFT, BOTTOM = 36, 18  # room for the value axis and the day labels


def _nice(top: int) -> int:
    """The value axis's top: 1, 2, 5 x 10^k at least ``top`` (at least 1)."""
    top = max(1, top)
    k = int(10 ** int(math.log10(top)))
    return next(m * k for m in (1, 2, 5, 10) if m * k >= top)


def stacked(rows: Sequence[dict[str, Any]], keys: Sequence[str], height: int = H
            ) -> dict[str, Any]:
    """A stacked bar per row (a day) of ``keys``: rectangles, a title for each, the axis.

    Each rectangle is ``{"x", "y", "w", "h", "key", "title"}`` in the chart's pixels; a
    zero value has none. ``mid``: the middle tick's value, when a whole number."""
    top = _nice(max((sum(int(r[k]) for k in keys) for r in rows), default=0))
    n = max(1, len(rows))
    step = W / n
    bw = max(1.0, step * 0.8)
    bars = []
    for i, r in enumerate(rows):
        y = float(height)
        for k in keys:
            v = int(r[k])
            if not v:
                continue
            h = height * v / top
            y -= h
            bars.append({"x": round(LEFT + i * step + (step - bw) / 2, 1), "y": round(y, 1),
                         "w": round(bw, 1), "h": round(h, 1), "key": k,
                         "title": f"{r['day']}: {v} {k}"})
    every = 1 if n <= 10 else 7 if n <= 31 else 14
    labels = [{"x": round(LEFT + i * step + step / 2, 1), "text": r["day"][5:]}
              for i, r in enumerate(rows) if i % every == 0 or i == n - 1]
    return {"bars": bars, "top": top, "mid": top // 2 if top % 2 == 0 else None,
            "labels": labels, "width": W + LEFT + 24, "right": W + LEFT,
            "height": height + BOTTOM + 6, "plot_h": height, "left": LEFT}


def hbars(rows: Sequence[dict[str, Any]], keys: Sequence[str], label: str,
          unit: str = "") -> dict[str, Any]:
    """Horizontal bars, one line per row (at most `TOP`), a bar per key (overlaid, the
    first the longest: p90 behind the median)."""
    rows = list(rows)[:TOP]
    top = max((float(r[k]) for r in rows for k in keys), default=0.0) or 1.0
    line, text_w, bar_w = 22, 300, 400
    out = []
    for i, r in enumerate(rows):
        bars = [{"key": k, "w": round(bar_w * float(r[k]) / top, 1)} for k in keys]
        out.append({"y": i * line, "label": str(r[label]), "bars": bars,
                    "values": [float(r[k]) for k in keys], "row": r})
    return {"rows": out, "top": top, "text_w": text_w, "bar_w": bar_w, "line": line,
            "width": text_w + bar_w + 140, "height": max(1, len(rows)) * line + 4,
            "unit": unit}


def charts(summary: dict[str, Any]) -> dict[str, Any]:
    """The geometry of the history page's charts, from `summarize`'s dict."""
    ttr = [{**r, "what": f"{r['fault']} → {r['action']}"} for r in summary["time_to_repair"]]
    return {
        "outcomes": stacked(summary["per_day"], summary["outcomes"]),
        "time_to_repair": hbars(ttr, ("p90_s", "median_s"), "what", "s"),
        "repeats": hbars(summary["repeats"], ("count",), "machine"),
        "breaker": stacked(summary["breaker"]["per_day"], ("openings",), H // 2),
        "incidents": stacked(summary["incidents"]["per_day"], ("opened",), H // 2),
    }
