"""What every event is: `EventBase` (a run, a number, a time), and the call statuses events
carry. The events themselves are in `core/events.py` and `core/decision_events.py`."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Self

from pydantic import BaseModel, ConfigDict, Field


class CallStatus(StrEnum):
    PROPOSED = "proposed"
    PENDING_APPROVAL = "pending_approval"
    RUNNING = "running"
    INTERRUPTED = "interrupted"
    EXECUTED = "executed"
    FAILED = "failed"
    BLOCKED_REPEAT = "blocked_repeat"
    REJECTED = "rejected"
    REFUSED_DUPLICATE = "refused_duplicate"
    WITHDRAWN = "withdrawn"
    SKIPPED = "skipped"
    SKIPPED_AFTER_TRIP = "skipped_after_trip"
    OUTCOME_UNKNOWN = "outcome_unknown"


def _now() -> datetime:
    return datetime.now(UTC)


_new = object.__new__
_set = object.__setattr__
_SEQ = frozenset({"seq"})


class EventBase(BaseModel):
    """What every event has. The events themselves are the classes of `Event`, each with its
    `kind` literal: readers take `Event` and tell the classes apart by class, never by `kind`
    (which names the class in a stored row)."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    seq: int = 0
    at: datetime = Field(default_factory=_now)

    def numbered(self, seq: int) -> Self:
        """This event with the number `seq`, as a new event (this one is frozen): what
        `model_copy(update={"seq": seq})` makes (tests/test_events.py compares them), at less
        than half its cost: the bus numbers every event it publishes, and model_copy there
        cost about as much as serializing the event for the store."""
        numbered = _new(type(self))
        fields = self.__dict__.copy()
        fields["seq"] = seq
        _set(numbered, "__dict__", fields)
        _set(numbered, "__pydantic_fields_set__", self.__pydantic_fields_set__ | _SEQ)
        _set(numbered, "__pydantic_extra__", None)
        _set(numbered, "__pydantic_private__", None)
        return numbered
