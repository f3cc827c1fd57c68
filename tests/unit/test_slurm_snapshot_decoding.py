"""The controller's snapshot reads (issue 26; SPEC I3, I6): typed decoding of only the
fields read, its own depth guard, lean records, and the commands' output read in one
buffer. The real answers are tests/data/real/slurm (origins in tests/data/real/SOURCES.md)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_heal.errors import SlurmError, SlurmUnreachable
from slurm_heal.extra import CheckCache, read_check_data
from slurm_heal.slurm import cli
from slurm_heal.types import UNREAD, NodeInfo

REAL = Path(__file__).resolve().parent.parent / "data" / "real" / "slurm"
T0 = __import__("datetime").datetime(2026, 6, 1, tzinfo=__import__("datetime").timezone.utc)


def _docs(key: str) -> list[str]:
    return sorted(p.name for p in REAL.glob("*.json")
                  if isinstance(json.loads(p.read_text()).get(key), list))


NODE_DOCS = _docs("nodes")
JOB_DOCS = _docs("jobs")


def test_the_corpus_has_node_and_job_answers_of_every_dialect() -> None:
    """The parametrised tests below run on 21.08 .. 26.05, both dialects."""
    assert {"sinfo-json-21.08.5-rivos.json", "lab-sinfo-json-22.05.json",
            "lab-scontrol-json-show-node-25.11.json",
            "lab-scontrol-json-show-node-26.05.json"} <= set(NODE_DOCS)
    assert {"squeue-json-21.08.5-rivos.json", "lab-squeue-json-22.05.json",
            "lab-squeue-json-26.05.json"} <= set(JOB_DOCS)


@pytest.mark.parametrize("name", NODE_DOCS)
def test_i6_typed_node_decoding_reads_every_real_answer_as_the_generic_reader(name: str) -> None:
    """SPEC I6, issue 26: each real node answer (21.08 .. 26.05, the commands and
    slurmrestd) is read by the typed decoder itself, not handed to the generic reader,
    and gives the very records the generic reader gives (Extra included)."""
    text = (REAL / name).read_bytes()
    try:
        generic = cli.parse_sinfo_json(text, typed=False)
    except SlurmUnreachable:
        with pytest.raises(SlurmUnreachable):  # the 22.05 controller-down answer
            cli.parse_sinfo_json(text)
        return
    fast = cli._typed_nodes(text)
    assert fast is not None, "the typed decoder handed a real answer to the generic reader"
    assert fast == generic
    assert [n.extra for n in fast] == [n.extra for n in generic]


@pytest.mark.parametrize("name", JOB_DOCS)
def test_i6_typed_job_decoding_reads_every_real_answer_as_the_generic_reader(name: str) -> None:
    text = (REAL / name).read_bytes()
    try:
        generic = cli._parse_squeue_json(text, (), "")
    except SlurmUnreachable:
        with pytest.raises(SlurmUnreachable):
            cli.parse_squeue_json(text)
        return
    fast = cli._typed_jobs(text)
    assert fast is not None, "the typed decoder handed a real answer to the generic reader"
    assert fast == generic and len(fast) >= 1


@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_i6_hostile_nesting_in_a_field_nobody_reads_is_a_clear_slurm_error(depth: int) -> None:
    """The depth guard costs nothing on an ordinary answer (msgspec counts its own
    recursion, also while skipping a field it does not read) and still refuses a
    document nested past it, with the command named; never a RecursionError."""
    doc = (b'{"nodes": [{"name": "gpu01", "tres": ' + b"[" * depth + b"]" * depth + b"}]}")
    with pytest.raises(SlurmError, match="sinfo --json did not print JSON .*nested"):
        cli.parse_sinfo_json(doc)
    jobs = b'{"jobs": [{"job_id": 1, "x": ' + b"{\"a\":" * depth + b"1" + b"}" * depth + b"}]}"
    with pytest.raises(SlurmError, match="squeue --json did not print JSON .*nested"):
        cli.parse_squeue_json(jobs)


def test_i6_a_field_of_the_wrong_type_is_still_named_by_the_generic_reader() -> None:
    """A shape the typed decoder does not read goes to the generic reader, which names
    the node (the fuzz tests hold every other shape to a SlurmError)."""
    doc = json.dumps({"nodes": [{"name": "gpu01", "state": "IDLE", "state_flags": 5}]})
    with pytest.raises(SlurmError, match="node 'gpu01'"):
        cli.parse_sinfo_json(doc)
    # A value the generic reader accepts is read the same by both (a number as text).
    lenient = json.dumps({"nodes": [{"name": 7, "state": "idle", "reason": 5}]})
    assert cli.parse_sinfo_json(lenient) == cli.parse_sinfo_json(lenient, typed=False)


def test_lean_records_share_states_partitions_and_features_and_keep_extra_as_text() -> None:
    """Issue 26: nodes in the same state, partition and features share one object for
    each; an address or host name equal to the name is that string; Extra stays text
    until ``extra`` is read, then parses once."""
    extra = json.dumps({"slurm_heal": {"v": 1, "alerts": []}})
    doc = json.dumps({"nodes": [
        {"name": f"gpu{i:02d}", "state": "idle", "state_flags": ["DRAIN"],
         "partitions": ["gpu"], "features": "h100,ib", "address": f"gpu{i:02d}",
         "hostname": f"gpu{i:02d}", "extra": extra} for i in range(3)]})
    a, b, c = cli.parse_sinfo_json(doc)
    assert a.states == frozenset({"IDLE", "DRAIN"}) and a.states is b.states is c.states
    assert a.partitions == ("gpu",) and a.partitions is b.partitions
    assert a.features == ("h100", "ib") and a.features is c.features
    assert a.address is a.name and a.hostname is a.name
    assert a.extra_raw == extra
    assert a.peek_extra() == {"slurm_heal": {"v": 1, "alerts": []}}
    first = a.extra
    assert first == {"slurm_heal": {"v": 1, "alerts": []}} and a.extra is first


def test_a_record_built_unread_equals_one_built_with_its_parsed_extra() -> None:
    """NodeInfo(extra=UNREAD) behaves as a plain field: equality, repr and replace see
    the parsed Extra; a given ``extra`` is what it reads; text that is not JSON reads
    as None (someone else's text), empty text as an empty object."""
    import dataclasses

    from slurm_heal import frozen

    raw = '{"site": {"rack": "r1"}}'
    lazy = NodeInfo(name="gpu01", states=frozenset({"IDLE"}), extra_raw=raw, extra=UNREAD)
    eager = NodeInfo(name="gpu01", states=frozenset({"IDLE"}), extra_raw=raw,
                     extra={"site": {"rack": "r1"}})
    assert lazy == eager and repr(lazy) == repr(eager)
    assert dataclasses.replace(lazy, name="gpu02").extra == {"site": {"rack": "r1"}}
    assert NodeInfo(name="n", states=frozenset(), extra_raw="k=v", extra=UNREAD).extra is None
    assert NodeInfo(name="n", states=frozenset(), extra_raw="", extra=UNREAD).extra == {}
    assert NodeInfo(name="n", states=frozenset(), extra={"x": 1}).peek_extra() == {"x": 1}
    with pytest.raises(frozen.FrozenInstanceError):  # the types' frozen classes (issue 26)
        lazy.extra = {}  # type: ignore[misc]


def test_the_check_cache_reads_unread_records_as_their_parsed_extra() -> None:
    """SPEC I2: the controller's check cache gives an UNREAD record the check data of its
    parsed Extra, and reads it again when the text changes."""
    ours = {"slurm_heal": {"v": 1, "checked_at": "2026-05-31T23:59:00+00:00", "alerts": [
        {"fault": "gpu.xid.79", "severity": "critical", "summary": "off the bus",
         "detector": "kernel_log", "first_seen": "2026-05-31T23:00:00+00:00",
         "last_seen": "2026-05-31T23:59:00+00:00", "evidence": []}]}}
    raw = json.dumps(ours)
    node = NodeInfo(name="gpu01", states=frozenset({"IDLE"}), extra_raw=raw, extra=UNREAD)
    cache = CheckCache()
    got = cache.read_view([node], T0)
    assert got["gpu01"] == read_check_data("gpu01", ours, T0)
    assert got.flagged == ("gpu01",)
    quiet = NodeInfo(name="gpu01", states=frozenset({"IDLE"}), extra_raw="{}", extra=UNREAD)
    assert cache.read_view([quiet], T0).flagged == ()


def _stub(tmp_path: Path, name: str, body: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def test_a_large_answer_with_a_chatty_stderr_is_read_whole(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands' output is read into one buffer (issue 26), both pipes at once: an
    answer far past the pipe's buffer beside 200 KB of warnings on stderr neither
    blocks nor loses a byte."""
    nodes = [{"name": f"gpu{i:05d}", "state": "idle", "extra": "x" * 100} for i in range(3000)]
    (tmp_path / "sinfo.json").write_text(json.dumps({"errors": [], "nodes": nodes}))
    bin_dir = _stub(tmp_path, "sinfo", 'if [ "$1" = "--version" ]; then echo "slurm 22.05.8";'
                    ' exit 0; fi\nhead -c 200000 /dev/zero | tr "\\0" w >&2\n'
                    f'cat "{tmp_path / "sinfo.json"}"\n')
    _stub(tmp_path, "scontrol", "exit 0\n")  # no text answer: the JSON is read (issue 26)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    got = cli.CliSlurm(timeout=60).nodes()
    assert [n.name for n in got] == [n["name"] for n in nodes]
    assert got[-1].extra_raw == "x" * 100


def test_a_command_that_does_not_finish_in_time_is_unreachable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC I6: the timeout holds while the output is read (the command is killed)."""
    bin_dir = _stub(tmp_path, "squeue", "echo '{\"jobs\": ['\nexec sleep 30\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(SlurmUnreachable, match="within 1s"):
        cli.CliSlurm(timeout=1, retries=0).jobs()


def test_the_node_checks_one_node_read_does_not_import_msgspec() -> None:
    """msgspec's import (typing_extensions, inspect, socket) is the controller's: the
    node check's read of its own node (`scontrol --json show node NAME`) uses the
    generic reader."""
    doc = (REAL / "lab-scontrol-json-show-node-25.11.json").read_text()
    code = ("import sys, json\nfrom slurm_heal.slurm import cli\n"
            "nodes = cli.parse_sinfo_json(sys.stdin.read(), typed=False)\n"
            "assert [n.name for n in nodes] == ['gpu01', 'gpu02', 'gpu03']\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'msgspec'))\n")
    out = subprocess.run([sys.executable, "-c", code], input=doc, capture_output=True,
                         text=True, check=True, timeout=60).stdout
    assert out.strip() == "[]"


def test_jsonsafe_counts_brackets_before_it_walks_and_still_refuses_depth() -> None:
    """The depth walk after json.loads runs only when the text has more opening brackets
    than the limit (issue 26); nesting past the limit is still refused, as text or bytes,
    and many shallow brackets are not mistaken for depth."""
    from slurm_heal import jsonsafe

    deep = "[" * 65 + "]" * 65
    for doc in (deep, deep.encode()):
        with pytest.raises(jsonsafe.TooDeep):
            jsonsafe.loads(doc)
    assert jsonsafe.loads("[" * 64 + "]" * 64) is not None
    assert jsonsafe.loads("[" + ",".join(["[]"] * 200) + "]") == [[]] * 200


@pytest.mark.parametrize("depth", [65, 200, 900])
def test_i6_nesting_past_the_limit_is_refused_below_any_interpreters_recursion_limit(
        depth: int) -> None:
    """Issue 38: msgspec's own guard follows the interpreter (3.13 read 2,000 levels that
    3.10 and 3.11 refused), so the typed reads hold a decoded answer to the generic
    reader's limit (jsonsafe.MAX_DEPTH, 64), counted on the text: far below any
    recursion limit, the same on every Python."""
    from slurm_heal import jsonsafe

    assert depth > jsonsafe.MAX_DEPTH
    doc = (b'{"nodes": [{"name": "gpu01", "tres": ' + b"[" * depth + b"]" * depth + b"}]}")
    with pytest.raises(SlurmError, match=r"sinfo --json did not print JSON .*more than 64"):
        cli.parse_sinfo_json(doc)
    jobs = b'{"jobs": [{"job_id": 1, "x": ' + b'{"a":' * depth + b"1" + b"}" * depth + b"}]}"
    with pytest.raises(SlurmError, match=r"squeue --json did not print JSON .*more than 64"):
        cli.parse_squeue_json(jobs)


def test_i6_brackets_and_escapes_inside_strings_are_not_nesting() -> None:
    """A node whose reason and Extra hold brackets, quotes and backslashes (a host list,
    a message) at the limit's depth is read, not refused."""
    from slurm_heal import jsonsafe

    inner = 64 - 4  # {"nodes": [ {node} ... "tres": [...] ]}: 3 levels above the list
    reason = 'gpu[01-04] "[[[[" \\ {{{{ ]]]] \\"' + "[" * 100
    doc = json.dumps({"nodes": [{"name": "gpu01", "state": "idle", "state_flags": ["DRAIN"],
                                 "reason": reason,
                                 "extra": json.dumps({"why": "]" * 100 + '\\"'}),
                                 "tres": json.loads("[" * inner + "]" * inner)}]})
    assert not jsonsafe.nesting_exceeds(doc)
    (node,) = cli.parse_sinfo_json(doc.encode())
    assert node.reason == reason


def test_the_text_depth_count_agrees_with_the_walk_on_any_json() -> None:
    """jsonsafe.nesting_exceeds (on the text) says what depth_exceeds (on the value) says,
    for any JSON value whose strings hold brackets, quotes and backslashes."""
    from hypothesis import given
    from hypothesis import strategies as st

    from slurm_heal import jsonsafe

    text = st.text(alphabet='[]{}"\\ab\n\u00e9', max_size=8)
    values = st.recursive(st.none() | st.integers() | text,
                          lambda kids: st.lists(kids, max_size=3)
                          | st.dictionaries(text, kids, max_size=3), max_leaves=40)

    @given(values, st.integers(min_value=0, max_value=12), st.booleans())
    def agree(value: object, limit: int, ascii_only: bool) -> None:
        doc = json.dumps(value, ensure_ascii=ascii_only)
        assert jsonsafe.nesting_exceeds(doc, limit) == jsonsafe.depth_exceeds(value, limit)
        assert jsonsafe.nesting_exceeds(doc.encode(), limit) == \
            jsonsafe.depth_exceeds(value, limit)

    agree()
