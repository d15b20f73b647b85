"""An agent's tool input as the guard keys it: without the fields the agent renews on every
call. What the operator sees and approves is always the whole input; only the key leaves these
out.

Real agents put per-call fields in a tool's input: Codex's adapter (0.16) its `call_id`,
`process_id`, `turn_id` and `started_at_ms`. Keyed as sent, six identical `cat calc.py` from
one state would be six calls and the guard would never trip. So they are left out of the key:
by name (a per-call id, a nonce, a timestamp) and by the agent's own list. Never by a value's
shape: `{"document_id": "3f1c…"}` (a uuid) names what the call acts on, and two calls on two
documents are two calls.
"""

from __future__ import annotations

from typing import Any

VOLATILE_NAMES = frozenset(
    {"call_id", "callid", "tool_call_id", "toolcallid", "process_id", "processid", "pid",
     "turn_id", "turnid", "session_id", "sessionid", "request_id", "requestid", "nonce",
     "timestamp", "started_at", "startedat", "started_at_ms", "startedatms"}
)  # fmt: skip


def volatile(name: str, extra: frozenset[str] = frozenset()) -> bool:
    """Whether a field, by its name, is one the agent renews per call (never the call's own
    input): a known per-call id or time, or one the agent's own list names."""
    return name in extra or name.lower() in VOLATILE_NAMES


def steady(value: Any, extra: frozenset[str] = frozenset()) -> Any:
    """The input without the fields the agent renews per call, at any depth."""
    if isinstance(value, dict):
        return {k: steady(v, extra) for k, v in value.items() if not volatile(str(k), extra)}
    if isinstance(value, list):
        return [steady(v, extra) for v in value]
    return value


def renewed(value: dict[str, Any], extra: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The top-level fields `steady` leaves out: put back into an input the operator edited,
    so the agent gets the fields it renews as it sent them."""
    return {k: v for k, v in value.items() if volatile(str(k), extra)}
