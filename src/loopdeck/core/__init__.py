"""The runtime: one supervised agent as an explicit state machine. No Textual, no SQLite."""

from loopdeck.core.approvals import (
    ApprovalDecision,
    ApprovalReceipt,
    ApprovalRequest,
    Approver,
    AutoApprover,
    DenyApprover,
)
from loopdeck.core.budgets import Budget
from loopdeck.core.environment import Environment, tool
from loopdeck.core.events import CallStatus, EventBase, EventBus
from loopdeck.core.outcome import CallRecord, RunOutcome
from loopdeck.core.runtime import RunConfig, Runtime
from loopdeck.core.states import RunState, StopReason
from loopdeck.core.tools import ErrorCode, NoArgs, ToolError

__all__ = [
    "ApprovalDecision",
    "ApprovalReceipt",
    "ApprovalRequest",
    "Approver",
    "AutoApprover",
    "Budget",
    "CallRecord",
    "CallStatus",
    "DenyApprover",
    "Environment",
    "ErrorCode",
    "EventBase",
    "EventBus",
    "NoArgs",
    "RunConfig",
    "RunOutcome",
    "RunState",
    "Runtime",
    "StopReason",
    "ToolError",
    "tool",
]
