"""The call a write asks is declared once (`AskedCall`): the request and its
`approval_requested` event both carry it, and the event is stored as it always was."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from loopdeck.core.approvals import ApprovalRequest, request_for
from loopdeck.core.asked_call import AskedCall
from loopdeck.core.events import ApprovalRequested

# The stored row's fields, in order (`store/chain.py` reads `at` where it stands; older
# stores and outside checks read these names).
STORED = [
    "run_id", "seq", "at", "kind", "call_id", "tool", "args", "args_sha256", "state_hash",
    "fingerprint", "plan_step", "requested_at", "expires_at", "rationale", "asked_again",
    "args_schema", "risk_source", "not_editable", "diff", "grant_id", "asked_by",
]  # fmt: skip


def test_the_event_is_stored_with_the_fields_it_always_had() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    request = request_for(
        run_id="r1", call_id="c1", tool="refund", args={"at": "x"}, state_hash="h",
        fingerprint="f", plan_step=None, ttl_s=60.0, diff="d",
    )  # fmt: skip
    event = ApprovalRequested(grant_id=None, at=at, **request.model_dump())
    assert list(json.loads(event.model_dump_json())) == STORED
    assert event.model_dump_json().startswith('{"run_id":"r1","seq":0,"at":"2026-01-01T00:00:00Z"')


def test_the_request_and_the_event_carry_one_asked_call() -> None:
    asked = set(AskedCall.model_fields)
    assert set(ApprovalRequest.model_fields) == asked | {"run_id", "asked_by"}
    assert set(ApprovalRequested.model_fields) - asked == {
        "run_id", "seq", "at", "kind", "grant_id", "asked_by"
    }  # fmt: skip
    assert issubclass(ApprovalRequest, AskedCall) and issubclass(ApprovalRequested, AskedCall)
