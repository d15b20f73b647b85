"""A write as it is asked, declared once: what an `ApprovalRequest` (`core/approvals.py`) and
its `approval_requested` event (`core/decision_events.py`) both carry. A module of its own,
below both, so the events never import the approval path (an import of `loopdeck.core` on a
preparing thread must not wait on one of `core.events` on the console's)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict


class AskedCall(BaseModel):
    """A write as it is asked: what the request and its `approval_requested` event both carry,
    said once (the event is `AskedCall` with an event's head, `core/decision_events.py`)."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    tool: str
    args: dict[str, Any]
    args_sha256: str
    state_hash: str
    fingerprint: str
    plan_step: str | None
    requested_at: datetime
    expires_at: datetime
    # The model's own words for the turn that proposed the call ("" when it gave none).
    rationale: str = ""
    # Why this call is asked again ("" on the first ask): the last receipt's problem.
    asked_again: str = ""
    # The tool's argument schema (JSON Schema), for an operator editing the arguments.
    args_schema: dict[str, Any] = {}
    risk_source: str = ""  # where the write's risk came from (an MCP server's annotation)
    # Why an edit of this call's arguments cannot be carried out ("" when it can): the call
    # is the agent's own and runs the agent's input. Such a call is approved or rejected as
    # proposed; an edit is offered as "reject and tell the agent" instead.
    not_editable: str = ""
    # A file write's change to the working copy as a unified diff ("" for other writes).
    diff: str = ""
