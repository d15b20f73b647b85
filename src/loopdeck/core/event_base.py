"""What every event is: `EventBase` (a run, a number, a time), and the call statuses events
carry. The events themselves are in `core/events.py` and `core/decision_events.py`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Self

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


def cut_short(status: CallStatus, risk: str) -> CallStatus | None:
    """What a call still open as its run stops is recorded as (None: it had ended): one
    running is interrupted (a write's outcome unknown: it may have happened), one not yet
    run skipped, one waiting for approval withdrawn."""
    if status is CallStatus.RUNNING:
        return CallStatus.OUTCOME_UNKNOWN if risk == "write" else CallStatus.INTERRUPTED
    return {
        CallStatus.PROPOSED: CallStatus.SKIPPED,
        CallStatus.PENDING_APPROVAL: CallStatus.WITHDRAWN,
    }.get(status)


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
    # The event's JSON (`as_json`), made where the event is made (`__init__`: the runtime's
    # `EventBus.emit`), so that the store's writer only links and appends it. A slot, not a
    # field nor a private attribute: equality, dumps, copies and pickles never see it, and a
    # copy (`numbered`, `model_copy`) starts without it, as its JSON differs: None (or unset,
    # in an event made without `__init__`: validated from JSON, copied) until its first need.
    __slots__ = ("_json",)

    if not TYPE_CHECKING:  # the typed signature is pydantic's (its mypy plugin's)

        def __init__(self, /, **data: Any) -> None:
            self.__pydantic_validator__.validate_python(data, self_instance=self)
            try:
                made = type(self).__pydantic_serializer__.to_json(self).decode()
            except Exception:  # never the maker's problem: `as_json` tries again, and says
                made = None
            _set(self, "_json", made)

        # Validation alone, as pydantic's own `__init__` is marked: an event read back
        # (`model_validate_json`, the store's loads) is made without it, its JSON at its
        # first need (tests/test_store_event_json.py).
        __init__.__pydantic_base_init__ = True

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
        _set(numbered, "_json", None)
        return numbered

    def as_json(self) -> str:
        """The event as JSON, made once, where the event was made or here at its first need
        (the store's body of its row, the text its hash chain links, the spill's line): the
        model's own serializer, without model_dump_json's argument handling per call. Text
        that UTF-8 cannot carry (a lone surrogate) is escaped, never fatal."""
        try:
            made: str | None = _stored_json(self)
        except AttributeError:  # made without `__init__`: from JSON, or a copy
            made = None
        if made is None:
            try:
                made = type(self).__pydantic_serializer__.to_json(self).decode()
            except ValueError:  # pydantic's serialization error for a lone surrogate
                made = json.dumps(self.model_dump(mode="json"), default=str)
            _set(self, "_json", made)
        return made


# The slot read directly: an unset slot read as an attribute goes through pydantic's
# `__getattr__` (microseconds, on the writer's path once per event).
_stored_json: Any = EventBase.__dict__["_json"].__get__
