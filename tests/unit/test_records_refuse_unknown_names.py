"""A typed record refuses a name it does not have (issue 33): ``Work().but(...)``, a
record made by our code and ``record.model_copy(update=...)`` name the bad field in the
error, where before the typo was stored beside the flag it meant (``handed_to_persn``
stored, ``handed_to_person`` still False). What the store *reads* keeps the fields a
newer slurm-heal wrote, as before (SPEC I5, docs/store.md)."""

from __future__ import annotations

import keyword
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import slurm_heal.heartbeat
import slurm_heal.ledger
import slurm_heal.notify
import slurm_heal.notify.events  # noqa: F401 - its records are among those checked
from slurm_heal.models import Record, Remediation, State, Work
from slurm_heal.types import Action, ClusterView

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _records() -> list[type[Record]]:
    out: list[type[Record]] = []
    todo = list(Record.__subclasses__())
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(set(out), key=lambda c: f"{c.__module__}.{c.__qualname__}")


RECORDS = _records()
names = st.from_regex(r"\A[a-z_][a-z0-9_]{0,20}\Z").filter(lambda n: not keyword.iskeyword(n))


def _named(exc: ValidationError, name: str) -> bool:
    return any(e["loc"] == (name,) and f"no field {name!r}" in e["msg"] for e in exc.errors())


def test_the_records_checked_are_the_stores_and_the_decisions() -> None:
    found = {c.__name__ for c in RECORDS}
    assert {"Work", "Remediation", "Step", "Attempt", "HeldBy", "Command", "Breaker", "Pause",
            "ValidationRun", "Previous", "State", "Effect", "Decision", "Plan", "Incident",
            "IncidentAlert", "Machine", "Delivery", "QueueDoc", "Event",
            "Heartbeat"} <= found


def test_a_typo_in_work_but_is_refused_and_names_the_field() -> None:
    with pytest.raises(ValidationError) as err:
        Work().but(handed_to_persn=True)
    assert _named(err.value, "handed_to_persn")
    assert "did you mean 'handed_to_person'" in str(err.value)
    assert Work().but(handed_to_person=True).handed_to_person


@given(name=names)
def test_work_but_refuses_every_name_that_is_no_flag(name: str) -> None:
    if name in Work.model_fields:
        return
    with pytest.raises(ValidationError) as err:
        Work().but(**{name: True})
    assert _named(err.value, name)


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__qualname__)
@settings(max_examples=25)
@given(name=names)
def test_every_record_refuses_an_unknown_name_made_or_copied(cls: type[Record],
                                                             name: str) -> None:
    if name in cls.model_fields:
        return
    with pytest.raises(ValidationError) as made:
        cls(**{name: 1})
    assert _named(made.value, name)
    with pytest.raises(ValidationError) as copied:
        cls.model_construct().model_copy(update={name: 1})
    assert _named(copied.value, name)


def test_what_a_newer_build_stored_is_still_read_and_kept() -> None:
    """SPEC I5: the refusal is for our own code's names; a stored document's unknown
    keys load and survive a change of a flag (``but`` kept them only since issue 33)."""
    doc = {"id": "r-1", "node": "n1", "fault": "gpu.xid.79", "action": "reboot",
           "created": T0.isoformat(), "updated": T0.isoformat(), "newer_field": 1,
           "data": {"signalled": True, "newer_flag": "x"}}
    rem = Remediation.model_validate(doc)
    assert rem.action is Action.REBOOT and rem.model_extra == {"newer_field": 1}
    changed = rem.model_copy(update={"data": rem.data.but(evict_n=1)})
    assert changed.data.model_dump(mode="json") == {"signalled": True, "evict_n": 1,
                                                    "newer_flag": "x"}
    state = State.model_validate_json(State(remediations=(changed,)).model_dump_json())
    assert state.remediations[0].model_extra == {"newer_field": 1}
    assert state.remediations[0].data.model_extra == {"newer_flag": "x"}


def _dataclass_records() -> list[Any]:
    from slurm_heal import controller
    from slurm_heal.models import Effect, Plan, ValidationRun
    from slurm_heal.types import Alert, Severity
    from slurm_heal.validation import flow

    run = ValidationRun(id="v-1", node="n1", created=T0, updated=T0)
    executed = controller.Executed(effect=Effect(kind="notify", node="n1"), outcome="ok")
    return [
        Alert(node="n1", fault="gpu.xid.79", severity=Severity.CRITICAL, summary="",
              first_seen=T0, last_seen=T0),
        executed,
        controller.CycleReport(at=T0),
        controller.CycleFacts(at=T0, view=ClusterView(nodes=()), before=State(), after=State(),
                              plan=Plan(), executed=(executed,), duration_s=0.0),
        flow.Advance(run=run),
        flow.VEffect(kind="drain", key="k", node="n1"),
        flow.Knobs(),
    ]


@pytest.mark.parametrize("record", _dataclass_records(), ids=lambda r: type(r).__name__)
def test_the_dataclass_records_refuse_an_unknown_name(record: Any) -> None:
    """The dataclasses of the cycle, the validation flow and the cluster view: made,
    replaced or set, a name that is no field is an error naming it (a frozen one refuses
    every assignment; the others have slots)."""
    import dataclasses

    from slurm_heal import frozen

    cls = type(record)
    names = [f.name for f in dataclasses.fields(record)]
    values = {n: getattr(record, n) for n in names}
    with pytest.raises(TypeError, match="handed_to_persn"):
        cls(**values, handed_to_persn=True)
    replace = frozen.replace if hasattr(cls, frozen.FIELDS) else dataclasses.replace
    with pytest.raises(TypeError, match="handed_to_persn"):
        replace(record, handed_to_persn=True)
    with pytest.raises(AttributeError):
        record.handed_to_persn = True
    assert not hasattr(record, "handed_to_persn")
