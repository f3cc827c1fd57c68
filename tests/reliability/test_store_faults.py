"""The store under attack (issue "trust under faults"; SPEC I5, S5, house style 5).

Truncated, corrupt, foreign and deeply nested documents are set aside with every byte
kept and the store fails closed (breaker open); a document a newer minor version wrote
keeps its unknown fields; a newer major is refused and left as it is; a full disk (a
file size limit, or a small tmpfs where we may mount one) is a clear error from
`request` with nothing half-written, and the daemon skips the cycle instead of dying.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from slurm_heal.config import policy_from_dict
from slurm_heal.controller import Controller, run_forever
from slurm_heal.errors import StoreCorrupt, StoreError
from slurm_heal.models import (
    SCHEMA_VERSION,
    Attempt,
    Command,
    Effect,
    Phase,
    Plan,
    Remediation,
    State,
    Step,
)
from slurm_heal.providers.http import HttpProvider
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.types import Action
from tests.disks import fill, small_tmpfs

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
REPO = Path(__file__).resolve().parents[2]
SINFO = REPO / "tests" / "data" / "slurm" / "sinfo.json"


def _rem(rid: str = "r-1", node: str = "gpu01", phase: Phase = Phase.CORDONED) -> Remediation:
    return Remediation(id=rid, node=node, fault="gpu.xid.48", action=Action.REBOOT,
                       phase=phase, created=T0, updated=T0,
                       steps=(Step(at=T0, phase="proposed", rule="P1", why="alert"),),
                       attempts=(Attempt(key=f"{rid}:cordon:0", effect="cordon", started=T0,
                                         outcome="ok", finished=T0),),
                       data={"evidence_fault": "gpu.xid.48"})


def _real_store(path: Path, pad: int = 0) -> bytes:
    """A store the way the daemon leaves it: an open remediation, a handed-over one, a
    command in the inbox; ``pad`` bytes of engine bookkeeping make it big."""
    store = Store(path)
    with store.transaction() as txn:
        txn.state = State(
            remediations=(_rem(), _rem("r-2", "gpu02", Phase.FAILED)),
            inbox=(Command(id="c-1", at=T0, kind="approve", by="alice", remediation="r-1",
                           node="gpu01"),),
            data={"noted": {"d5:gpu03": "x"}, **({"pad": "x" * pad} if pad else {})})
    # and its heartbeat: the CLI writes only to a store a controller reads (I4)
    (path / "heartbeat").write_text(datetime.now(timezone.utc).isoformat() + "\n")
    return (path / "state.json").read_bytes()


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def _damaged(kind: str, good: bytes) -> bytes:
    if kind == "truncated":
        return good[: len(good) // 2]
    if kind == "corrupt":
        return good.replace(b'"remediations"', b'"remediations\x00', 1).replace(b"{", b"{{", 3)
    if kind == "foreign":
        return SINFO.read_bytes() if SINFO.exists() else b'{"meta": {}, "nodes": []}'
    if kind == "foreign-list":
        return b'[{"name": "gpu01"}]'
    if kind == "deep":
        return f'{{"schema_version": 1, "data": {{"x": {_deep(100_000)}}}}}'.encode()
    if kind == "deep-but-parseable":
        return f'{{"schema_version": 1, "data": {{"x": {_deep(200)}}}}}'.encode()
    if kind == "empty":
        return b""
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["truncated", "corrupt", "foreign", "foreign-list", "deep",
                                  "deep-but-parseable", "empty"])
def test_a_damaged_store_is_set_aside_whole_and_fails_closed(kind: str, tmp_path: Path) -> None:
    """House style 5, S5: a damaged document is moved aside with every byte, the error
    says where, and the fresh document has the breaker open until a person resets it.
    (Before: 100,000 levels of nesting gave a RecursionError traceback, nothing set aside.)"""
    bad = _damaged(kind, _real_store(tmp_path))
    (tmp_path / "state.json").write_bytes(bad)
    store = Store(tmp_path)
    with pytest.raises(StoreCorrupt, match=r"moved aside to .*state\.json\.corrupt-"):
        store.load()
    (aside,) = tmp_path.glob("state.json.corrupt-*")
    assert aside.read_bytes() == bad  # nothing lost: a person can repair it
    after = store.load()
    assert after.breaker.open and "corrupt" in after.breaker.why
    assert after.remediations == ()


def test_a_store_written_by_a_newer_minor_keeps_every_unknown_field(tmp_path: Path) -> None:
    """SPEC I5, docs/store.md: fields a newer minor version added are kept and written
    back unchanged; nothing is set aside, the breaker stays closed, the hand-to-person
    history stays. (Before: the models rejected unknown fields and the whole store was
    set aside as corrupt, with the breaker open.)"""
    doc = json.loads(_real_store(tmp_path))
    doc["schema_minor"] = 7
    doc["future_top"] = {"a": [1, 2]}
    doc["breaker"]["future_breaker"] = "kept"
    doc["inbox"][0]["future_command"] = True
    r1 = doc["remediations"][0]
    r1["future_rem"] = {"why": "added later"}
    r1["steps"][0]["future_step"] = 1
    r1["attempts"][0]["future_attempt"] = None
    (tmp_path / "state.json").write_text(json.dumps(doc))
    store = Store(tmp_path)
    state = store.load()
    assert not state.breaker.open and state.schema_minor == 7
    # A cycle changes the remediation and records a new intent: the document is rewritten.
    moved = state.remediations[0].model_copy(update={"phase": Phase.WAITING, "updated": T0})
    store.apply(Plan(updates=(moved,), effects=(Effect(kind="signal_jobs", node="gpu01",
                                                       remediation="r-1", key="r-1:sig:0"),)),
                T0 + timedelta(minutes=1))
    after = json.loads((tmp_path / "state.json").read_text())
    assert after["schema_minor"] == 7 and after["future_top"] == {"a": [1, 2]}
    assert after["breaker"]["future_breaker"] == "kept"
    assert after["inbox"][0]["future_command"] is True
    r1 = after["remediations"][0]
    assert r1["phase"] == "waiting" and r1["future_rem"] == {"why": "added later"}
    assert r1["steps"][0]["future_step"] == 1 and "future_attempt" in r1["attempts"][0]
    assert [a["key"] for a in r1["attempts"]] == ["r-1:cordon:0", "r-1:sig:0"]
    assert not list(tmp_path.glob("*.corrupt-*"))


def _cluster() -> MemorySlurm:
    from slurm_heal import extra
    from slurm_heal.types import Alert, Severity

    cluster = MemorySlurm([("gpu01", "a"), ("gpu02", "a"), ("gpu03", "a")], clock=lambda: T0)
    alert = Alert(node="gpu03", fault="gpu.xid.48", severity=Severity.CRITICAL, summary="",
                  first_seen=T0 - timedelta(hours=1), last_seen=T0, detector="kernel_log")
    cluster.set_extra("gpu03", extra.KEY, extra.our_section([alert], T0))
    return cluster


def _controller(tmp_path: Path) -> Controller:
    return Controller(slurm=_cluster(), provider=HttpProvider("http://127.0.0.1:9"),
                      store=Store(tmp_path), clock=lambda: T0,
                      policy=policy_from_dict({"approvals": {"default": "auto"}}))


def test_a_newer_major_store_is_refused_left_as_it_is_and_the_daemon_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """SPEC I5: an older slurm-heal never clobbers a newer major's store; the daemon
    logs why and skips the cycle instead of crashing into a restart loop."""
    doc = json.loads(_real_store(tmp_path))
    doc["schema_version"] = SCHEMA_VERSION + 1
    raw = json.dumps(doc).encode()
    (tmp_path / "state.json").write_bytes(raw)
    with pytest.raises(StoreError, match="newer than this slurm-heal") as err:
        Store(tmp_path).load()
    assert not isinstance(err.value, StoreCorrupt)
    with caplog.at_level(logging.ERROR, logger="slurm_heal"):
        assert run_forever(_controller(tmp_path), 0.001, max_cycles=2) == 2
    assert (tmp_path / "state.json").read_bytes() == raw
    assert not list(tmp_path.glob("*.corrupt-*"))
    assert sum("cycle skipped, the store cannot be used" in r.message
               for r in caplog.records) == 2


# ------------------------------------------------------------------ a full disk

def _request_with_file_size_limit(state_dir: Path, limit: int) -> subprocess.CompletedProcess[str]:
    """`slurm-heal request` in a child whose files may not grow past ``limit`` bytes
    (what `ulimit -f` does): the store's write fails with EFBIG."""
    code = textwrap.dedent(f"""
        import resource, sys
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, hard))
        from slurm_heal.cli import main
        main(["request", "gpu01", "reboot", "--reason", "disk test", "--by", "alice",
              "--state-dir", {str(state_dir)!r}])
    """)
    env = dict(os.environ, PATH="/nonexistent")  # no scontrol: the node is not checked
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60, check=False)


def _assert_clear_and_intact(res: subprocess.CompletedProcess[str], state_dir: Path,
                             before: bytes) -> None:
    assert res.returncode == 5, res.stderr
    assert "slurm-heal: error: cannot write the store" in res.stderr
    assert "nothing was changed" in res.stderr and "Traceback" not in res.stderr
    assert (state_dir / "state.json").read_bytes() == before  # nothing half-written
    assert not list(state_dir.glob(".state.json.*.tmp"))  # no temp file left behind


def test_request_on_a_full_disk_is_a_clear_error_and_writes_nothing(tmp_path: Path) -> None:
    """SPEC I5: `request` when the store cannot be written (a file size limit, EFBIG)
    exits 5 with a message, and the old document is untouched. (Before: a raw OSError
    traceback.)"""
    before = _real_store(tmp_path, pad=64 * 1024)
    res = _request_with_file_size_limit(tmp_path, limit=16 * 1024)
    _assert_clear_and_intact(res, tmp_path, before)


def test_request_on_a_full_tmpfs_is_a_clear_error_and_writes_nothing(tmp_path: Path) -> None:
    """The same on a really full file system (ENOSPC), a small tmpfs."""
    with small_tmpfs(tmp_path / "disk", "256k") as disk:
        before = _real_store(disk, pad=8 * 1024)
        fill(disk)
        env = dict(os.environ, PATH="/nonexistent")
        res = subprocess.run([sys.executable, "-m", "slurm_heal.cli", "request", "gpu01",
                              "reboot", "--reason", "disk test", "--by", "alice",
                              "--state-dir", str(disk)], capture_output=True, text=True,
                             env=env, timeout=60, check=False)
        _assert_clear_and_intact(res, disk, before)


def test_the_daemon_skips_cycles_on_a_full_disk_and_recovers(tmp_path: Path) -> None:
    """SPEC I5, O1: on a full disk each cycle is skipped with a log line that says why;
    the daemon neither crashes nor acts (nothing recorded, nothing executed); once space
    is back the next cycle works. (Before: an OSError out of run_forever, and systemd's
    crash loop.)"""
    with small_tmpfs(tmp_path / "disk", "256k") as disk:
        before = _real_store(disk, pad=8 * 1024)
        fill(disk)
        script = textwrap.dedent(f"""
            import logging, sys
            from pathlib import Path
            sys.path.insert(0, {str(REPO)!r})
            from tests.reliability.test_store_faults import _controller
            from slurm_heal.controller import run_forever
            logging.basicConfig(level=logging.INFO, stream=sys.stderr)
            ctl = _controller(Path({str(disk)!r}))
            print("cycles", run_forever(ctl, 0.01, Path({str(disk)!r}) / "heartbeat",
                                        max_cycles=3))
            print("drained", ctl.slurm.node("gpu03").drained)
        """)
        res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=120, check=False, cwd=REPO)
        assert res.returncode == 0, res.stderr
        assert "cycles 3" in res.stdout and "drained False" in res.stdout
        assert res.stderr.count("cycle skipped, the store cannot be used") == 3
        assert "No space left on device" in res.stderr and "Traceback" not in res.stderr
        assert (disk / "state.json").read_bytes() == before
        (disk / "filler").unlink()  # space is back: the next cycle records and acts
        ctl = _controller(disk)
        assert run_forever(ctl, 0.01, max_cycles=1) == 1
        state: Any = Store(disk).load()
        assert any(r.node == "gpu03" for r in state.remediations)


def test_nodes_under_the_marker_of_a_set_aside_store_are_shown_with_what_to_run(
        tmp_path: Path) -> None:
    """Issue 22 item 10 (SPEC I5, O6): the store is found corrupt while gpu01 is acting;
    it is set aside and the breaker opens, and gpu01 stays drained under a marker the new
    store does not know. `status` (text and JSON) and the console name the node, the old
    store and the commands that release it or hand it to slurm-heal again."""
    from slurm_heal import reasons
    from slurm_heal.api.app import ApiApp
    from slurm_heal.api.settings import ApiSettings
    from slurm_heal.api.views import Sources
    from slurm_heal.api.views import overview as console_overview
    from slurm_heal.location import locate
    from slurm_heal.readmodel import overview

    store = Store(tmp_path)
    with store.transaction() as txn:
        txn.state = State(remediations=(_rem("r-0000acting1", phase=Phase.ACTING),))
    slurm = MemorySlurm([("gpu01", "gpu"), ("gpu02", "gpu")], clock=lambda: T0)
    slurm.drain("gpu01", reasons.format_marker("gpu.xid.48", "r-0000acting1", "controller",
                                               "for reboot"))
    slurm.drain("gpu02", reasons.format_marker("gpu.xid.48", by="check", text="xid"))
    store.file.write_text('{"schema_version": 1, "remediations": [tru')  # torn
    with pytest.raises(StoreCorrupt):
        store.load()
    state = store.load()
    assert state.breaker.open and state.remediations == ()
    (aside,) = [p.name for p in tmp_path.glob("state.json.corrupt-*")]

    ov = overview.gather(state, slurm.nodes(), T0, heartbeat=None)
    (lost,) = ov.unrecorded  # gpu02 is the node check's own drain: not lost
    assert (lost.node, lost.remediation, lost.set_aside) == ("gpu01", "r-0000acting1", aside)
    assert lost.release == "scontrol update nodename=gpu01 state=resume"
    assert lost.request.startswith("slurm-heal request gpu01 reboot --reason")
    text = "\n".join(overview.render(ov))
    assert "marker the store does not know" in text and lost.release in text and aside in text

    tokens = tmp_path / "tokens.toml"
    tokens.write_text("[[token]]\nname = 'a'\nrole = 'viewer'\nsha256 = '" + "0" * 64 + "'\n")
    tokens.chmod(0o600)
    loc = locate(str(tmp_path))
    app = ApiApp(ApiSettings(tokens=tokens), loc)
    o = console_overview(Sources(loc, lambda: slurm))
    assert o["status"]["unrecorded"][0]["node"] == "gpu01"
    html = app.jinja.get_template("overview.html").render(
        o=o, me=None, csrf="", flash=None, path="/", new_key=lambda: "k")
    assert 'id="unrecorded"' in html and "scontrol update nodename=gpu01 state=resume" in html
    assert aside in html
