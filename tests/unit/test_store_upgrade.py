"""A store written by the build before issue 21's typed attempt fields still reads
(SPEC I5): the round trip of tests/data/store/main-af95cff/, which that build's own
controller and retention wrote (see make.py beside it). Fast: no Slurm."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from slurm_heal.models import (
    SCHEMA_MINOR,
    SETTLE,
    Attempt,
    Decision,
    Remediation,
    Step,
    Work,
    key_step,
    mark,
)
from slurm_heal.policy.facts import act_attempts
from slurm_heal.policy.holds import Hold
from slurm_heal.store import Store, archived

MAIN = Path(__file__).resolve().parents[2] / "tests" / "data" / "store" / "main-af95cff"


def _copy(tmp_path: Path) -> Store:
    for name in ("state.json", "audit.jsonl"):
        shutil.copy(MAIN / name, tmp_path / name)
    return Store(tmp_path)


def _by_node(rems: tuple[Remediation, ...] | list[Remediation]) -> dict[str, Remediation]:
    return {r.node: r for r in rems}


def test_the_act_main_did_not_send_reads_as_not_sent_and_counts_for_no_escalation(
        tmp_path: Path) -> None:
    """Issue 21, SPEC E1/E2, house style 2: main recorded the act a person's drain stopped
    as ``detail="not sent: ..."``; read now, that attempt is ``sent=False`` with its words
    kept for the audit record, and it is no act towards the ladder. Every other attempt
    was sent."""
    state = _copy(tmp_path).load()
    assert state.schema_minor == 0  # as main wrote it
    gpu02 = _by_node(state.remediations)["gpu02"]
    (act,) = [a for a in gpu02.attempts if a.effect == "act"]
    assert not act.sent and act.outcome == "failed"
    assert act.detail.startswith("not sent: gpu02 was drained by someone else ('bad PSU")
    assert act_attempts(gpu02) == [] and gpu02.data.handed_to_person
    others = [a for r in state.remediations for a in r.attempts if a is not act]
    assert others and all(a.sent for a in others)


def test_every_attempt_main_wrote_gets_the_step_its_key_names(tmp_path: Path) -> None:
    """Issue 21: rules count attempts by the typed ``step`` (D5 counts ``notify-held``
    notices by it); a record main wrote gets it from its key, in the store and in the
    audit archive alike."""
    store = _copy(tmp_path)
    state = store.load()
    steps = {r.node: [a.step for a in r.attempts] for r in state.remediations}
    assert steps == {"gpu02": ["cordon", "act", "notify"], "gpu03": ["cordon", "notify-held"],
                     "gpu04": []}
    (gpu01,) = archived(store.archive_file)
    assert gpu01.node == "gpu01" and gpu01.phase.value == "done"
    assert [a.step for a in gpu01.attempts] == ["cordon", "act", "resume"]
    assert all(a.sent for a in gpu01.attempts)


def _without_new_fields(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for r in doc["remediations"]:
        r = dict(r)
        r["attempts"] = [{k: v for k, v in a.items() if k not in ("sent", "step")}
                         for a in r["attempts"]]
        out.append(r)
    return out


def test_a_store_main_wrote_round_trips_with_only_the_typed_fields_added(
        tmp_path: Path) -> None:
    """SPEC I5: written back by this build, main's document keeps every field it had as
    it had it (the audit words, keys, times, the inbox command, the decision records);
    what is added is each attempt's ``sent`` and ``step``, and the minor says so. Read
    again, it is the same state."""
    raw = json.loads((MAIN / "state.json").read_text())
    store = _copy(tmp_path)
    with store.transaction() as txn:  # a write of the loaded state
        txn.state = txn.state.model_copy(update={"paused": True})
    written = json.loads((tmp_path / "state.json").read_text())
    assert _without_new_fields(written) == _without_new_fields(raw)
    assert written["inbox"] == raw["inbox"] and written["data"] == raw["data"]
    assert written["schema_minor"] == SCHEMA_MINOR >= 1
    assert all(set(a) >= {"sent", "step"} for r in written["remediations"]
               for a in r["attempts"])
    again = store.load()
    assert again.remediations == txn.state.remediations and again.paused


def test_an_attempt_of_the_old_shape_gets_its_typed_fields_from_what_it_recorded() -> None:
    """Issue 21: the migration of one record (the shapes main wrote): a validation's key
    ``<run>:<phase>:<effect>`` names its phase; a key of another shape names no step; an
    attempt that says what it is keeps it."""
    old = {"key": "v-1a2b:reserving:reserve", "effect": "reserve",
           "started": "2026-01-05T00:00:00Z"}
    assert Attempt.model_validate(old).step == "reserving"
    assert key_step("no-colons") == "" and key_step("r-1:act:0") == "act"
    typed = Attempt.model_validate({**old, "step": "held", "sent": False,
                                    "detail": "anything"})
    assert (typed.step, typed.sent, typed.detail) == ("held", False, "anything")


def test_the_marks_main_stored_load_typed_and_are_written_back_as_they_were(
        tmp_path: Path) -> None:
    """Issue 33 (SPEC O6, I5): a hold's mark is typed (the rule, and which hold of it);
    main's document holds it as text ("D5"), which loads as that rule with no subject and
    is written back as the same text, so an older build reads what this one writes."""
    rem = next(r for r in _copy(tmp_path).load().remediations if r.id == "r-9159d2e53d29")
    assert rem.data.blocked == mark("D5") and rem.data.blocked.subject == ""
    assert rem.data.model_dump(mode="json")["blocked"] == "D5"


def test_a_subject_mark_of_an_older_store_means_the_same_hold() -> None:
    """SPEC S7: an incident's, a component's (whose id has a colon of its own) and the
    settle wait's marks, as an older store holds them, are the holds the gates name now:
    the engine sees the same mark and records no second ``blocked`` step."""
    for text, subject in (("S7:i-1", "i-1"), ("S7:switch:leaf1", "switch:leaf1"),
                          ("S7:settle", "settle")):
        work = Work.model_validate({"blocked": text,
                                    "hold": {"rule": "S7", "mark": text, "why": "w"}})
        assert work.blocked == Hold("S7", "w", subject=subject).key == mark("S7", subject)
        assert work.hold is not None and work.hold.mark == work.blocked
        assert work.model_dump(mode="json") == {"blocked": text, "hold": {
            "rule": "S7", "mark": text, "why": "w", "until": None, "lifts": "",
            "command": "", "incident": None, "label": ""}}
    assert str(mark("P1")) == "P1" and mark("P1") != mark("P1", "x")


def test_a_settle_wait_step_of_an_older_build_gets_its_mark_from_its_words_once() -> None:
    """Issue 33 (SPEC S7): a step or decision record written before records carried their
    hold's mark is given the settle wait's mark from the words it has always said, at load;
    any other record gets none and is written back without one."""
    old = {"at": "2026-01-05T00:00:00Z", "phase": "blocked", "rule": "S7",
           "why": "ib.link_down is a fault a shared component can cause: waits until "
                  "2026-01-05T00:05:00Z (incidents.settle = 5m) to see whether ..."}
    assert Step.model_validate(old).mark == SETTLE
    assert Decision.model_validate({**old, "node": "gpu01"}).mark == SETTLE
    incident = {**old, "why": "held by incident i-1 on rack r1"}
    assert Step.model_validate(incident).mark is None
    assert "mark" not in Step.model_validate(incident).model_dump(mode="json")
    typed = Step.model_validate({**old, "mark": "S7:i-1"})  # a record that says its mark
    assert typed.mark == mark("S7", "i-1")
    assert typed.model_dump(mode="json")["mark"] == "S7:i-1"
