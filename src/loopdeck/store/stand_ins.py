"""An event that cannot be made JSON (env code handed the run a value that is not JSON data),
recorded as a stand-in instead of ending its batch (for `store/writer.py`): its fields as they
are, each value that is not JSON data as `"<not JSON data: TYPE>"`, and why it is one."""

from __future__ import annotations

import json

from loopdeck.core.events import Event
from loopdeck.store.chain import EventRow, body_at
from loopdeck.store.event_rows import event_row


def _not_json(value: object) -> str:
    return f"<not JSON data: {type(value).__name__}>"


def stand_in_row(event: Event, error: Exception) -> EventRow:
    """The row of an event that cannot be made JSON: its fields as they are, each value that
    is not JSON data replaced by `"<not JSON data: TYPE>"`; if even that fails, its run, number,
    kind, time and the error (`unwritable`)."""
    try:
        body = type(event).__pydantic_serializer__.to_json(event, fallback=_not_json).decode()
    except Exception:  # nothing of it serializes: what it was, and why it is not here
        head = {"run_id": event.run_id, "seq": event.seq, "at": event.at.isoformat()}
        said = f"{type(error).__name__}: {error}"
        body = json.dumps({**head, "kind": event.kind, "unwritable": said}, default=str)
    return event.run_id, event.seq, event.kind, body_at(body) or event.at.isoformat(), body


def row_of(event: Event) -> tuple[EventRow, str | None]:
    """An event's row, and None; or its stand-in's (`stand_in_row`) and why it is one."""
    try:
        return event_row(event), None
    except Exception as exc:  # a value that is not JSON data: the rest is still committed
        said = (
            f"run {event.run_id}: event {event.seq} ({event.kind}) could not be made JSON"
            f" ({type(exc).__name__}: {exc}); recorded with each value that is not JSON data"
            " as <not JSON data: TYPE>"
        )
        return stand_in_row(event, exc), said
