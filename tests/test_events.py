"""Events are told apart by class: every class of the `Event` union has its own `kind`
literal, reads back from its stored row as the same class, and the readers' tables are keyed
by those classes."""

from __future__ import annotations

import types
import typing
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Literal, get_args, get_origin

import pytest
from pydantic import BaseModel, ValidationError

from loopdeck.core import events as events_module
from loopdeck.core.events import (
    EVENT_ADAPTER,
    EVENTS_ADAPTER,
    Event,
    EventBase,
    EventBus,
    StateChanged,
)
from loopdeck.core.states import RunState
from loopdeck.operator.replay_link import parse_rows
from loopdeck.operator.runview import VIEW_HANDLERS
from loopdeck.operator.transcript import ENTRY_MAKERS
from loopdeck.store.event_rows import ROW_WRITERS, event_json

AT = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
EVENT_CLASSES: tuple[type[EventBase], ...] = get_args(get_args(Event)[0])


def _value(annotation: Any) -> Any:
    """A valid value of a field's type, for events made from their annotations alone."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return args[0]
    if origin in (typing.Union, types.UnionType):
        return _value(next(arg for arg in args if arg is not type(None)))
    if origin is dict:
        return {"a": _value(args[1])}
    if origin is list:
        return [_value(args[0])]
    if origin is tuple:
        return tuple(_value(arg) for arg in args)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return next(iter(annotation))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):  # a nested model
        return annotation(**{n: _value(f.annotation) for n, f in annotation.model_fields.items()})
    samples = {str: "text", int: 3, float: 1.5, bool: True, datetime: AT}
    return samples.get(annotation, 7)


def _sample(cls: type[EventBase]) -> EventBase:
    fields = {
        name: _value(info.annotation)
        for name, info in cls.model_fields.items()
        if name not in ("kind", "seq", "at")
    }
    return cls(seq=4, at=AT, **fields)


def test_every_event_class_is_in_the_union_with_a_kind_of_its_own() -> None:
    defined = {
        value
        for value in vars(events_module).values()
        if isinstance(value, type) and issubclass(value, EventBase) and value is not EventBase
    }
    assert defined == set(EVENT_CLASSES)
    kinds = [cls.model_fields["kind"].default for cls in EVENT_CLASSES]
    assert all(get_origin(cls.model_fields["kind"].annotation) is Literal for cls in EVENT_CLASSES)
    assert [get_args(cls.model_fields["kind"].annotation) for cls in EVENT_CLASSES] == [
        (kind,) for kind in kinds
    ]
    assert len(set(kinds)) == len(kinds), kinds


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda cls: cls.__name__)
def test_every_event_reads_back_from_its_stored_row_as_itself(cls: type[EventBase]) -> None:
    event = _sample(cls)
    body = event_json(event)
    one = EVENT_ADAPTER.validate_json(body)
    (in_a_batch,) = EVENTS_ADAPTER.validate_json(f"[{body}]")
    assert type(one) is cls and one == event and in_a_batch == event
    assert event_json(one) == body


def test_a_stored_row_of_todays_format_reads_and_is_written_the_same() -> None:
    body = (
        '{"run_id":"r","seq":2,"at":"2026-01-02T03:04:05.678901Z","kind":"state_changed",'
        '"source":"ready","target":"planning"}'
    )
    (event,) = parse_rows([(2, "state_changed", body)])
    assert event == StateChanged(
        run_id="r", seq=2, at=AT, source=RunState.READY, target=RunState.PLANNING
    )
    assert event_json(event) == body


def test_a_stored_row_of_an_unknown_kind_is_an_error_naming_the_kind() -> None:
    good = event_json(_sample(StateChanged))
    unknown = '{"run_id":"r","seq":5,"at":"2026-01-02T03:04:05Z","kind":"teleported"}'
    with pytest.raises(ValidationError, match="'teleported'"):
        parse_rows([(4, "state_changed", good), (5, "teleported", unknown)])


def test_numbered_makes_what_model_copy_makes_and_leaves_the_event_alone() -> None:
    for cls in EVENT_CLASSES:
        event = _sample(cls).model_copy(update={"seq": 0})
        numbered = event.numbered(9)
        expected = event.model_copy(update={"seq": 9})
        assert type(numbered) is cls and event.seq == 0
        for slot in BaseModel.__slots__:  # every part of a pydantic model's state
            assert getattr(numbered, slot) == getattr(expected, slot), (cls, slot)
        assert event_json(numbered) == event_json(expected)


def test_the_bus_hands_every_subscriber_the_same_numbered_events_in_order() -> None:
    bus = EventBus()
    first: list[Event] = []
    second: list[Event] = []
    bus.subscribe(first.append)
    bus.subscribe(second.append)
    made = [_sample(cls).model_copy(update={"seq": 0}) for cls in EVENT_CLASSES]
    published = [bus.publish(event) for event in made]
    assert [e.seq for e in published] == list(range(1, len(made) + 1))
    assert first == second == published and all(e.seq == 0 for e in made)


@pytest.mark.parametrize(
    "table", [VIEW_HANDLERS, ENTRY_MAKERS, ROW_WRITERS], ids=["runview", "transcript", "rows"]
)
def test_the_readers_tables_are_keyed_by_event_classes_of_their_annotation(
    table: dict[type[EventBase], Any],
) -> None:
    assert table and set(table) <= set(EVENT_CLASSES)
    for cls, handler in table.items():
        hints = typing.get_type_hints(handler)
        assert hints["e"] is cls, (cls, handler)


def test_an_emitted_event_is_made_with_its_number_and_a_failed_one_takes_none() -> None:
    bus = EventBus()
    seen: list[Event] = []
    bus.subscribe(seen.append)
    first = bus.emit(StateChanged, run_id="r", source=RunState.READY, target=RunState.PLANNING)
    with pytest.raises(ValidationError):
        bus.emit(StateChanged, run_id="r", source="nowhere", target=RunState.PLANNING)
    made = StateChanged(run_id="r", seq=2, source=RunState.PLANNING, target=RunState.DECIDING)
    second = bus.publish(made)  # made elsewhere with the next number: goes out as it is
    third = bus.emit(StateChanged, run_id="r", source=RunState.DECIDING, target=RunState.EXECUTING)
    assert [e.seq for e in seen] == [1, 2, 3] and seen == [first, second, third]
    assert second is made and seen[0] is first


async def test_the_fleet_reads_a_runs_last_events_by_their_class(tmp_path) -> None:
    """The fleet's columns come from the stored events of three classes (found by the kind
    column, read back as those classes)."""
    from loopdeck.core.events import (
        BudgetUpdated,
        GuardTripped,
        OperatorCommand,
        ReviewVerdict,
        RunStarted,
    )
    from loopdeck.operator.fleet import Fleet
    from loopdeck.store.opening import open_store
    from loopdeck.store.writer import EventWriter

    store = await open_store(tmp_path / "s.db")
    try:
        bus, writer = EventBus(), EventWriter(store)
        bus.subscribe(writer)
        bus.emit(RunStarted, run_id="r", env="e", script=None, model="m", mode="rounds",
                 goal="g", budget={"tokens": 100.0})  # fmt: skip
        for used in (10.0, 80.0):
            usage = {"tokens": (used, 100.0), "cost_usd": (0.0, 1.0)}
            bus.emit(BudgetUpdated, run_id="r", usage=usage, cost_unknown_calls=0)
        for call_id in ("c1", "c2"):
            bus.emit(GuardTripped, run_id="r", call_id=call_id, tool="t", fingerprint="f")
        reasons = ["no state change this round"]
        bus.emit(ReviewVerdict, run_id="r", round=1, verdict="stalled", reasons=reasons,
                 before_hash="a", after_hash="a")  # fmt: skip
        for command in ("pause", "resume", "pause"):
            bus.emit(OperatorCommand, run_id="r", command=command, by="o")
        await writer.flush()
        fleet = Fleet()
        await fleet.refresh(store)
        row = fleet.rows["r"]
        assert (row.closest, row.closest_fraction) == ("tokens 80%", 0.8)
        assert row.last_finding == "no state change this round" and row.repeats == 2
        assert row.live and row.paused
    finally:
        await store.close()
