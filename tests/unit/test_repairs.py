"""Repairs over time (issue 42, SPEC P4, S5, S7, E7): `readmodel.repairs` on hand-made
histories whose answers are known: remediations per day by outcome, time to repair by
fault and action (median, nearest-rank p90), repeats per machine, the breaker's openings,
the incidents, each over a window of whole UTC days; and the charts' geometry. The page
and the API: tests/unit/test_console_map_pages.py; in a browser: tests/browser/test_console_map.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from slurm_heal.models import Attempt, Breaker, Incident, Phase, Remediation, Step
from slurm_heal.readmodel import repairs
from slurm_heal.readmodel.repairs import median, percentile, summarize
from slurm_heal.types import Action

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=timezone.utc)
DAY = timedelta(days=1)
MIN = timedelta(minutes=1)


def _rem(rid: str, end: datetime, phase: Phase = Phase.DONE, *, took: timedelta = 10 * MIN,
         fault: str = "gpu.xid.79", action: Action = Action.REBOOT, node: str = "g01",
         host: str | None = None, acted: bool = True, seen_before: timedelta = 0 * MIN,
         steps: tuple[Step, ...] = ()) -> Remediation:
    start = end - took
    times = {"proposed": start, phase.value: end}
    if acted:
        times["acting"] = start + took / 2
    return Remediation(id=rid, node=node, host=host, fault=fault, action=action, phase=phase,
                       created=start, updated=end, phase_times=times, steps=steps,
                       alert_first_seen=start - seen_before if seen_before else None)


def test_median_and_the_nearest_rank_percentile() -> None:
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 3, 2]) == 2.5
    assert percentile(list(range(1, 11)), 90) == 9  # ceil(0.9 * 10) = 9th smallest
    assert percentile(list(range(1, 21)), 90) == 18
    assert percentile([7, 1, 4], 90) == 7  # ceil(2.7) = 3rd
    assert percentile([5], 90) == 5 and percentile([1, 2], 50) == 1
    assert percentile([1, 2, 3], 100) == 3
    with pytest.raises(ValueError, match="no values"):
        median([])
    with pytest.raises(ValueError, match="no values"):
        percentile([], 90)
    with pytest.raises(ValueError, match="p must be"):
        percentile([1], 0)


def test_remediations_per_day_by_outcome_count_the_day_each_ended_in_the_window() -> None:
    rems = [
        _rem("r1", NOW - 1 * MIN),  # today
        _rem("r2", NOW - DAY),  # yesterday
        _rem("r3", NOW - DAY, Phase.FAILED),
        _rem("r4", datetime(2026, 3, 4, 0, 0, tzinfo=timezone.utc), Phase.CANCELLED,
             acted=False),  # the window's first instant (7 days: Mar 4 .. Mar 10)
        _rem("r5", datetime(2026, 3, 3, 23, 59, tzinfo=timezone.utc)),  # before it
        _rem("r6", NOW - 2 * DAY, Phase.WITHDRAWN, acted=False),
        _rem("r7", NOW - 2 * DAY, Phase.DENIED, acted=False),
        _rem("r8", NOW + MIN),  # after now (a clock ahead): not counted
    ]
    open_ = _rem("r9", NOW, Phase.ACTING)
    got = summarize([*rems, open_], (), (), NOW, 7)
    assert got["since"] == "2026-03-04T00:00:00+00:00"
    assert [d["day"] for d in got["per_day"]] == [f"2026-03-{d:02d}" for d in range(4, 11)]
    by_day = {d["day"]: {k: v for k, v in d.items() if k != "day" and v}
              for d in got["per_day"]}
    assert by_day == {"2026-03-04": {"cancelled": 1}, "2026-03-05": {}, "2026-03-06": {},
                      "2026-03-07": {}, "2026-03-08": {"withdrawn": 1, "denied": 1},
                      "2026-03-09": {"done": 1, "failed": 1}, "2026-03-10": {"done": 1}}
    assert got["totals"] == {"done": 2, "failed": 1, "cancelled": 1, "withdrawn": 1,
                             "denied": 1, "ended": 6}
    assert len(summarize(rems, (), (), NOW, 30)["per_day"]) == 30
    with pytest.raises(ValueError, match="at least 1"):
        summarize(rems, (), (), NOW, 0)


def test_time_to_repair_by_fault_and_action_from_the_alerts_first_sight() -> None:
    rems = [_rem(f"a{i}", NOW - i * MIN, took=t * MIN) for i, t in
            enumerate((10, 20, 30, 40, 100), start=1)]
    # the alert was first seen 5 minutes before the remediation began: counted from there
    rems.append(_rem("b1", NOW - DAY, took=10 * MIN, fault="ib.link_down",
                     seen_before=5 * MIN))
    rems.append(_rem("b2", NOW - DAY, took=20 * MIN, fault="ib.link_down",
                     action=Action.REBUILD))
    rems.append(_rem("f1", NOW - DAY, Phase.FAILED, took=1 * MIN))  # only done counts
    got = summarize(rems, (), (), NOW, 7)["time_to_repair"]
    assert got == [
        {"fault": "gpu.xid.79", "action": "reboot", "count": 5, "median_s": 1800.0,
         "p90_s": 6000.0},  # ceil(4.5) = the 5th: 100 min
        {"fault": "ib.link_down", "action": "rebuild", "count": 1, "median_s": 1200.0,
         "p90_s": 1200.0},
        {"fault": "ib.link_down", "action": "reboot", "count": 1, "median_s": 900.0,
         "p90_s": 900.0},
    ]


def test_repeats_per_machine_count_the_remediations_that_acted_by_its_identity() -> None:
    rems = [
        # one machine under two names (a migrate, a renamed node): counted together
        _rem("h1a", NOW - DAY, host="serial-1", node="g01"),
        _rem("h1b", NOW - 2 * DAY, Phase.FAILED, host="serial-1", node="g01"),
        _rem("h1c", NOW - 3 * DAY, host="serial-1", node="g09", fault="ib.link_down"),
        _rem("h2a", NOW - DAY, host="serial-2", node="g02"),
        _rem("h2b", NOW - 40 * DAY, host="serial-2", node="g02"),  # before the window
        _rem("h3a", NOW - DAY, node="g03"), _rem("h3b", NOW - DAY, node="g03"),  # no host
        _rem("h4a", NOW - DAY, node="g04", acted=False, phase=Phase.DENIED),
        _rem("h4b", NOW - DAY, node="g04", acted=False, phase=Phase.WITHDRAWN),
        # the act sent, as E7's ledger counts it (its attempt), though no acting phase;
        # an act the controller never sent is no act
        _rem("h5a", NOW - DAY, node="g05", acted=False).model_copy(update={"attempts": (
            Attempt(key="k1", effect="act", action=Action.REBOOT, started=NOW - DAY),)}),
        _rem("h5b", NOW - 2 * DAY, node="g05", acted=False).model_copy(update={
            "attempts": (Attempt(key="k2", effect="act", action=Action.REBOOT,
                                 started=NOW - 2 * DAY, sent=False),)}),
        _rem("h5c", NOW - 3 * DAY, node="g05", acted=False).model_copy(update={
            "attempts": (Attempt(key="k3", effect="act", action=Action.REBOOT,
                                 started=NOW - 40 * DAY),)}),  # acted before the window
    ]
    got = summarize(rems, (), (), NOW, 30)
    assert [(r["machine"], r["node"], r["count"], r["faults"]) for r in got["repeats"]] == [
        ("serial-1", "g01", 3, ["gpu.xid.79", "ib.link_down"]),
        ("g03", "g03", 2, ["gpu.xid.79"])]
    assert got["repeats_spread"] == {"1": 2, "2": 1, "3": 1, "4+": 0}  # g05: one act


def test_the_breakers_openings_it_keeps_and_the_open_breaker() -> None:
    """The openings come from the breaker's own typed history (never from a step's
    words), with the opening that holds it open now; a closed breaker's last opening is
    one of its kept openings already."""
    closed = Breaker(open=False, opened_at=NOW - 3 * DAY, openings=(NOW - 3 * DAY,))
    assert repairs.breaker_openings(closed) == [NOW - 3 * DAY]
    assert repairs.breaker_openings(None) == []
    now_open = closed.model_copy(update={"open": True, "opened_at": NOW - 10 * MIN,
                                         "openings": (NOW - 3 * DAY, NOW - 10 * MIN)})
    assert repairs.breaker_openings(now_open) == [NOW - 3 * DAY, NOW - 10 * MIN]
    # a store written before the history was kept: the open breaker's opening still shows
    older = Breaker(open=True, opened_at=NOW - 10 * MIN, why="...")
    assert repairs.breaker_openings(older) == [NOW - 10 * MIN]
    got = summarize([], (), [NOW - 3 * DAY, NOW - 10 * MIN, NOW - 9 * DAY], NOW, 7)
    assert got["breaker"]["openings"] == [(NOW - 3 * DAY).isoformat(),
                                          (NOW - 10 * MIN).isoformat()]
    assert [d["openings"] for d in got["breaker"]["per_day"]] == [0, 0, 0, 1, 0, 0, 1]


def test_incidents_opened_in_the_window_per_day() -> None:
    def inc(iid: str, opened: datetime, state: str = "resolved") -> Incident:
        return Incident(id=iid, component="switch:leaf1", kind="switch", name="leaf1",
                        group="xid", size=4, opened=opened, updated=opened,
                        nodes=("g01", "g02"), state=state,  # type: ignore[arg-type]
                        resolved=opened + MIN if state == "resolved" else None)

    got = summarize([], [inc("i-3", NOW - MIN, "open"), inc("i-1", NOW - 2 * DAY),
                         inc("i-0", NOW - 8 * DAY)], (), NOW, 7)
    assert [(i["id"], i["state"], i["nodes"]) for i in got["incidents"]["list"]] == [
        ("i-1", "resolved", 2), ("i-3", "open", 2)]
    assert [d["opened"] for d in got["incidents"]["per_day"]] == [0, 0, 0, 0, 1, 0, 1]


def test_the_charts_geometry_is_proportional_with_a_round_axis() -> None:
    rows = [{"day": "2026-03-09", "done": 3, "failed": 1},
            {"day": "2026-03-10", "done": 0, "failed": 0}]
    ch = repairs.stacked(rows, ("done", "failed"))
    assert ch["top"] == 5 and ch["mid"] is None  # 4 rounds up to 5
    done, failed = ch["bars"]  # the empty day has no bar; done at the bottom
    assert (done["key"], done["h"], done["y"]) == ("done", 90.0, 60.0)
    assert (failed["key"], failed["h"], failed["y"]) == ("failed", 30.0, 30.0)
    assert failed["title"] == "2026-03-09: 1 failed"
    assert [lbl["text"] for lbl in ch["labels"]] == ["03-09", "03-10"]
    assert repairs.stacked([{"day": "2026-03-10", "n": 0}], ("n",))["top"] == 1
    assert repairs.stacked([{"day": "2026-03-10", "n": 11}], ("n",))["top"] == 20
    bars = repairs.hbars([{"what": "a", "p": 10.0, "m": 5.0}, {"what": "b", "p": 2.0,
                                                                 "m": 1.0}],
                         ("p", "m"), "what")
    assert [[b["w"] for b in r["bars"]] for r in bars["rows"]] == [[400.0, 200.0],
                                                                   [80.0, 40.0]]
