"""An event's JSON is made once and kept (`EventBase.as_json`): the store's body, the text
its hash chain links, the spill's line. A copy never carries its original's JSON."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

from loopdeck.core.events import CallStatus, EventBus, StateChanged, ToolFinished
from loopdeck.core.states import RunState
from loopdeck.operator.replay_link import parse_rows


def _event(seq: int = 1) -> StateChanged:
    return StateChanged(run_id="r", seq=seq, source=RunState.DECIDING, target=RunState.EXECUTING)


def test_the_json_is_the_models_own_made_once() -> None:
    event = _event()
    made = event.as_json()
    assert made == event.model_dump_json()
    assert event.as_json() is made  # kept, not made again
    assert StateChanged.model_validate_json(made) == event


def test_keeping_it_changes_neither_equality_nor_dumps() -> None:
    kept, fresh = _event(), _event()
    kept_at = kept.as_json()
    same_time = fresh.model_copy(update={"at": kept.at})
    assert kept == same_time and kept.model_dump() == same_time.model_dump()
    assert "_json" not in kept.model_dump() and kept_at not in repr(kept)


def test_a_copy_is_serialized_as_itself() -> None:
    event = _event()
    event.as_json()
    for other, seq in (
        (event.numbered(7), 7),
        (event.model_copy(update={"seq": 8}), 8),
        (copy.deepcopy(event.model_copy(update={"seq": 9})), 9),
        (pickle.loads(pickle.dumps(event.numbered(10))), 10),
        (StateChanged.model_validate_json(event.numbered(11).as_json()), 11),
    ):
        assert other.seq == seq
        assert other.as_json() == other.model_dump_json()
        assert f'"seq":{seq},' in other.as_json()


def test_text_utf8_cannot_carry_is_escaped_never_fatal() -> None:
    event = ToolFinished(
        run_id="r", seq=1, call_id="c", tool="t", status=CallStatus.EXECUTED,
        result={"text": "a \ud800 b"}, duration_ms=1.0,
    )  # fmt: skip
    made = event.as_json()
    assert "\\ud800" in made and made.encode()


class CountingSerializer:
    """A model's serializer that counts the JSON it makes."""

    def __init__(self, serializer: Any) -> None:
        self.serializer, self.made = serializer, 0

    def to_json(self, value: Any, **options: Any) -> bytes:
        self.made += 1
        return bytes(self.serializer.to_json(value, **options))


def test_made_where_the_event_is_made_and_never_when_read_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counting = CountingSerializer(StateChanged.__pydantic_serializer__)
    monkeypatch.setattr(StateChanged, "__pydantic_serializer__", counting)
    made = EventBus().emit(
        StateChanged, run_id="r", source=RunState.DECIDING, target=RunState.EXECUTING
    )
    assert counting.made == 1
    made.as_json()
    assert counting.made == 1  # carried to the writer, not made again
    read = parse_rows([("r", 1, made.as_json())])  # the store's load
    assert read == [made] and counting.made == 1
    assert read[0].as_json() == made.as_json() and counting.made == 2  # at its first need
