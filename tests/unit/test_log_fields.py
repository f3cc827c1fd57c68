"""The daemon's logs (issue 38): under ``--json`` a controller line carries node,
remediation, rule, phase (and the effect, action and outcome of a step) as keys of its
own, not only inside the message; in text mode on the journal each line begins with its
syslog priority, as journald reads it.

A real controller cycle over the in-process `MemorySlurm`, its log lines formatted by the
daemon's own formatters (`setup_logging`); `daemon --help` and the journald check run the
real command."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_heal import extra
from slurm_heal.commands.jsonmode import (
    JournalFormatter,
    JsonLogFormatter,
    setup_logging,
    stderr_is_journal,
)
from slurm_heal.config import load_policy
from slurm_heal.controller import Controller, Where
from slurm_heal.providers import make_provider
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.types import Alert, Severity

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)


@pytest.fixture
def captured() -> Iterator[tuple[io.StringIO, logging.Handler]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    logger = logging.getLogger("slurm_heal")
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield out, handler
    logger.removeHandler(handler)
    logger.setLevel(old)


def _cycles(tmp_path: Path) -> None:
    """A critical GPU alert on gpu01, auto-approved: the cycles decide and drain it."""
    slurm = MemorySlurm([("gpu01", "a"), ("gpu02", "a")], clock=lambda: T0)
    cfg = tmp_path / "heal.toml"
    cfg.write_text('[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\nattempts = 1\n'
                   '[approvals]\ndefault = "auto"\n')
    policy = load_policy(cfg)
    now = [T0]
    ctl = Controller(slurm=slurm, provider=make_provider(policy.provider.table),
                     store=Store(tmp_path / "state"), policy=policy, clock=lambda: now[0])
    alert = Alert(node="gpu01", fault="gpu.xid.119", severity=Severity.CRITICAL,
                  summary="GSP timeout", first_seen=T0, last_seen=T0)
    slurm.set_extra("gpu01", extra.KEY, extra.our_section([alert], T0))
    for _ in range(3):
        ctl.cycle()
        now[0] += timedelta(minutes=1)


def test_json_log_lines_carry_node_remediation_rule_and_phase_as_keys(
        tmp_path: Path, captured: tuple[io.StringIO, logging.Handler]) -> None:
    out, handler = captured
    handler.setFormatter(JsonLogFormatter())
    _cycles(tmp_path)
    lines = [json.loads(ln) for ln in out.getvalue().splitlines()]
    mine = [ln for ln in lines if ln.get("node") == "gpu01"]
    assert mine, lines
    decided = [ln for ln in mine if "effect" not in ln]
    assert decided and all(ln["remediation"].startswith("r-") and ln["rule"] and ln["phase"]
                           for ln in decided)
    assert {ln["phase"] for ln in decided} <= {"proposed", "approved", "cordoned", "waiting",
                                               "draining", "acting", "returning", "done",
                                               "failed", "cancelled", "withdrawn", "denied"}
    steps = [ln for ln in mine if "effect" in ln and "outcome" in ln]
    assert steps, mine
    for ln in steps:
        assert ln["remediation"].startswith("r-") and ln["rule"] and ln["action"]
        assert ln["outcome"] in ("ok", "failed", "unknown")
    assert any(ln["effect"] == "cordon" and ln["outcome"] == "ok" for ln in steps), steps
    # the text is still there for a person, the values the same as the keys
    first = steps[0]
    assert f"node=gpu01 remediation={first['remediation']}" in first["message"]


def test_text_log_lines_keep_the_key_value_words(
        tmp_path: Path, captured: tuple[io.StringIO, logging.Handler]) -> None:
    out, handler = captured
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    _cycles(tmp_path)
    lines = [ln for ln in out.getvalue().splitlines() if "node=gpu01" in ln]
    assert any("phase=" in ln and "rule=" in ln and "remediation=r-" in ln for ln in lines)
    assert any("effect=cordon" in ln and "outcome=ok" in ln for ln in lines), lines
    assert not any("Phase." in ln for ln in lines)  # values, not enum names


def test_where_is_its_words_and_its_fields() -> None:
    where = Where(node="gpu01", remediation="r-1", rule="", phase=None)
    assert where == "node=gpu01 remediation=r-1"
    assert where.plus(effect="act").fields == {"node": "gpu01", "remediation": "r-1",
                                               "effect": "act"}


@pytest.mark.parametrize(("level", "prefix"), [
    (logging.DEBUG, "<7>"), (logging.INFO, "<6>"), (logging.WARNING, "<4>"),
    (logging.ERROR, "<3>"), (logging.CRITICAL, "<2>")])
def test_journal_lines_begin_with_the_syslog_priority(level: int, prefix: str) -> None:
    record = logging.LogRecord("slurm_heal", level, __file__, 1, "%s stepped", ("gpu01",), None)
    assert JournalFormatter().format(record) == \
        f"{prefix}{logging.getLevelName(level)} slurm_heal gpu01 stepped"
    json_line = JsonLogFormatter(journal=True).format(record)
    assert json_line.startswith(prefix + "{")
    assert json.loads(json_line[len(prefix):])["message"] == "gpu01 stepped"
    assert not JsonLogFormatter().format(record).startswith("<")


def test_stderr_is_the_journal_only_when_journal_stream_names_stderr(tmp_path: Path) -> None:
    st = os.fstat(2)
    assert stderr_is_journal({"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
    assert not stderr_is_journal({"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino + 1}"})
    assert not stderr_is_journal({"JOURNAL_STREAM": "junk"})
    assert not stderr_is_journal({})


def test_the_daemon_s_logging_follows_journal_stream(tmp_path: Path) -> None:
    """In a process whose stderr is a file named by $JOURNAL_STREAM (as systemd's
    journal stream is), a warning is written `<4>WARNING ...`; the same process with the
    variable naming another stream writes the dated line."""
    code = ("import logging, sys\n"
            "from slurm_heal.commands.jsonmode import setup_logging\n"
            "setup_logging('INFO', as_json=False)\n"
            "logging.getLogger('slurm_heal').warning('node=gpu01 drained')\n")
    err = tmp_path / "stderr"
    for names_it in (True, False):
        with err.open("w") as fh:
            st = os.fstat(fh.fileno())
            env = dict(os.environ, JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino + (0 if names_it else 1)}")
            subprocess.run([sys.executable, "-c", code], stderr=fh, env=env, check=True,
                           timeout=60)
        line = err.read_text().strip()
        if names_it:
            assert line == "<4>WARNING slurm_heal node=gpu01 drained"
        else:
            assert line.endswith(" WARNING slurm_heal node=gpu01 drained") and line[0] != "<"


def test_the_option_overrides_the_detection(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging("INFO", as_json=False, journal=True)
        logging.getLogger("slurm_heal.test").error("store busy")
        assert capsys.readouterr().err == "<3>ERROR slurm_heal.test store busy\n"
        setup_logging("INFO", as_json=True, journal=False)
        logging.getLogger("slurm_heal.test").info("x", extra={"fields": {"node": "gpu02"}})
        line = json.loads(capsys.readouterr().err)
        assert line["node"] == "gpu02" and line["level"] == "INFO"
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
