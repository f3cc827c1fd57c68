"""The daemon's SIGHUP (SPEC I4): the file is checked again as `policy check` does; a good
one takes effect at the next cycle, a bad one is refused and the running one kept, logged.

The real `run_forever` loop and `Controller` over the in-process `MemorySlurm`; the signal
is a real SIGHUP sent to this process during the first cycle.
"""

from __future__ import annotations

import logging
import os
import signal
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_heal.configcheck import Reloader, check_config
from slurm_heal.controller import Controller, run_forever
from slurm_heal.providers import make_provider
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
GOOD = '[controller]\ninterval = 0.01\n[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\n'


def daemon_with_hup_in_first_cycle(tmp_path: Path, new_text: str) -> tuple[Controller, int]:
    """Run three cycles; during the first, the file is rewritten and SIGHUP arrives."""
    cfg = tmp_path / "heal.toml"
    cfg.write_text(GOOD)
    report = check_config(cfg)
    slurm = MemorySlurm([("gpu01", "a")], clock=lambda: T0)
    calls = []

    def clock() -> datetime:
        calls.append(1)
        if len(calls) == 1:
            cfg.write_text(new_text)
            os.kill(os.getpid(), signal.SIGHUP)
        return T0

    controller = Controller(slurm=slurm, provider=make_provider(report.policy.provider.table),
                            store=Store(tmp_path / "state"), policy=report.policy, clock=clock)
    old = signal.getsignal(signal.SIGHUP)
    try:
        cycles = run_forever(controller, report.settings.interval, max_cycles=3,
                             reload=Reloader(str(cfg), controller, report.settings))
    finally:
        signal.signal(signal.SIGHUP, old)
    return controller, cycles


def test_sighup_with_a_good_file_takes_effect_at_the_next_cycle(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    controller, cycles = daemon_with_hup_in_first_cycle(
        tmp_path, 'mode = "recommend_only"\n' + GOOD)
    assert cycles == 3
    assert controller.policy.mode == "recommend_only"
    assert any("reloaded" in r.getMessage() and "recommend_only" in r.getMessage()
               for r in caplog.records)


def test_sighup_with_a_bad_file_keeps_the_running_one_and_says_why(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    controller, cycles = daemon_with_hup_in_first_cycle(
        tmp_path, 'mode = "recommend_only"\n[provider]\ntype = "htp"\n')
    assert cycles == 3 and controller.policy.mode == "normal"
    (refused,) = [r for r in caplog.records if "reload refused" in r.getMessage()]
    assert refused.levelno == logging.ERROR and "provider.type" in refused.getMessage()
