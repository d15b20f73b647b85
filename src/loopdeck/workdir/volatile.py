"""An agent's tool input as the guard keys it and an approval binds it: without the fields the
agent renews on every call.

Real agents put per-call fields in a tool's input: Codex's adapter (0.16) its `call_id`,
`process_id`, `turn_id` and `started_at_ms`. Keyed as sent, six identical `cat calc.py` from
one state would be six calls and the guard would never trip. So they are left out: by name, by
rule (a name that says id or time, a value that looks made per call: a uuid, a long token, an
epoch, an ISO time; `issue_id = 2` is the call's input and stays), and by the agent's own list.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

VOLATILE_NAMES = frozenset(
    {"call_id", "callid", "tool_call_id", "toolcallid", "process_id", "processid", "pid",
     "turn_id", "turnid", "session_id", "sessionid", "request_id", "requestid", "nonce",
     "timestamp", "started_at", "startedat", "started_at_ms", "startedatms"}
)  # fmt: skip
ID_NAME = re.compile(r"(?i)(?:^|_)(?:id|uuid)$|[a-z0-9](?:Id|Uuid)$")
TIME_NAME = re.compile(
    r"(?i)(?:^|_)(?:at|at_ms|at_ns|time|timestamp|ts)$|[a-z0-9](?:At|AtMs|Time)$"
)
MADE_TOKEN = re.compile(
    r"(?i)^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|[a-z]{0,8}[_-]?(?=[a-z0-9]*[0-9])(?=[a-z0-9]*[a-z])[a-z0-9]{12,})$"
)
ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
EPOCH_S = 1_000_000_000  # a number past this, named as a time, is a clock reading


def volatile(name: str, value: Any, extra: Iterable[str] = ()) -> bool:
    """Whether a field is one the agent renews per call (never the call's own input)."""
    if name in extra or name.lower() in VOLATILE_NAMES:
        return True
    if ID_NAME.search(name):
        return isinstance(value, str) and bool(MADE_TOKEN.match(value))
    if TIME_NAME.search(name):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value >= EPOCH_S
        return isinstance(value, str) and bool(ISO_TIME.match(value))
    return False


def steady(value: Any, extra: frozenset[str] = frozenset()) -> Any:
    """The input without the fields the agent renews per call, at any depth."""
    if isinstance(value, dict):
        return {k: steady(v, extra) for k, v in value.items() if not volatile(str(k), v, extra)}
    if isinstance(value, list):
        return [steady(v, extra) for v in value]
    return value


def renewed(value: dict[str, Any], extra: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The top-level fields `steady` leaves out: put back into an input the operator edited,
    so the agent gets the fields it renews as it sent them."""
    return {k: v for k, v in value.items() if volatile(str(k), v, extra)}
