"""The runtime: one supervised agent as an explicit state machine. No Textual, no SQLite.

Its names are read lazily (PEP 562): `from loopdeck.core import Environment` imports the module
that defines it, so a front end that needs one corner of the runtime (`loopdeck runs` reads
`core.text`) does not import all of it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loopdeck.core.approvals import (
        ApprovalDecision,
        ApprovalReceipt,
        ApprovalRequest,
        Approver,
        AutoApprover,
        DenyApprover,
    )
    from loopdeck.core.budgets import Budget
    from loopdeck.core.call_progress import report_progress
    from loopdeck.core.environment import Environment, tool
    from loopdeck.core.events import CallStatus, EventBase, EventBus
    from loopdeck.core.outcome import CallRecord, RunOutcome
    from loopdeck.core.runtime import RunConfig, Runtime
    from loopdeck.core.states import RunState, StopReason
    from loopdeck.core.tools import ErrorCode, NoArgs, ToolError

_DEFINED_IN = {
    "ApprovalDecision": "loopdeck.core.approvals",
    "ApprovalReceipt": "loopdeck.core.approvals",
    "ApprovalRequest": "loopdeck.core.approvals",
    "Approver": "loopdeck.core.approvals",
    "AutoApprover": "loopdeck.core.approvals",
    "Budget": "loopdeck.core.budgets",
    "CallRecord": "loopdeck.core.outcome",
    "CallStatus": "loopdeck.core.events",
    "DenyApprover": "loopdeck.core.approvals",
    "Environment": "loopdeck.core.environment",
    "ErrorCode": "loopdeck.core.tools",
    "EventBase": "loopdeck.core.events",
    "EventBus": "loopdeck.core.events",
    "NoArgs": "loopdeck.core.tools",
    "RunConfig": "loopdeck.core.runtime",
    "RunOutcome": "loopdeck.core.outcome",
    "RunState": "loopdeck.core.states",
    "Runtime": "loopdeck.core.runtime",
    "StopReason": "loopdeck.core.states",
    "ToolError": "loopdeck.core.tools",
    "report_progress": "loopdeck.core.call_progress",
    "tool": "loopdeck.core.environment",
}

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
    "report_progress",
    "tool",
]


def __getattr__(name: str) -> object:
    module = _DEFINED_IN.get(name)
    if module is None:
        raise AttributeError(f"module 'loopdeck.core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
