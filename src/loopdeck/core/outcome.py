"""What a finished run reports: the record the CLI prints and tests assert on."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from loopdeck.core.budgets import Cap, CapUsage
from loopdeck.core.decided_by import DecidedBy
from loopdeck.core.event_base import cut_short
from loopdeck.core.events import CallStatus
from loopdeck.core.progress_events import ToolProgress
from loopdeck.core.states import RunState, StopReason


@dataclass(slots=True)
class CallRecord:
    """One proposed call and what became of it. A plain dataclass, not a pydantic model: the
    runtime makes one per call and updates it as the call goes, the console keeps the newest
    500 (building and updating models was a third of loading a long run); `RunOutcome`
    validates and dumps it like any field."""

    call_id: str
    round: int
    tool: str
    args: dict[str, Any]
    risk: str
    fingerprint: str
    state_hash: str
    status: CallStatus = CallStatus.PROPOSED
    result: dict[str, Any] | None = None
    duration_ms: float | None = None
    retries: int = 0
    risk_source: str = ""  # where the risk came from (an MCP server's annotation, an override)
    decided_by: DecidedBy | None = None  # who decided its last ask (None: never asked)
    # The latest progress it reported while it ran, as the console shows it: not in dumps.
    progress: ToolProgress | None = field(default=None, metadata={"exclude": True})


def left_open(rows: Iterable[CallRecord]) -> list[CallRecord]:
    """The calls a stop no runtime recorded (a runner killed) left open, each marked as the
    runtime marks a call its stop cuts short (`cut_short`); a read shown as proposed may have
    been running (the events tell a read's start from its proposal by nothing)."""
    settled = []
    for row in rows:
        in_flight = row.status is CallStatus.PROPOSED and row.risk == "read"
        if status := cut_short(CallStatus.RUNNING if in_flight else row.status, row.risk):
            row.status = status
            settled.append(row)
    return settled


class RunOutcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str
    env: str
    script: str | None
    model: str
    mode: str
    state: RunState
    stop_reason: StopReason
    detail: str
    rounds: int
    model_calls: int
    tool_calls: int
    # None: unknown, some call never said it (a reply with no usage, an unpriced model):
    # `budget` has what was reported of it.
    tokens: int | None
    cost_usd: float | None
    cost_unknown_calls: int
    elapsed_s: float
    findings: list[str]
    calls: list[CallRecord] = Field(default_factory=list)
    # Env code the run stopped waiting for and that was still running at the stop.
    stray: str | None = None
    # Time the run waited on the operator (paused, or a write awaiting approval).
    operator_wait_s: float = 0.0
    # The model's input window (None: unknown, so never compacted) and how often it was.
    context_window: int | None = None
    compactions: int = 0
    # Each time the run held because its store could not take writes, said for the operator.
    recording_held: list[str] = Field(default_factory=list)
    # Each cap's use (None: unknown), limit and what was reported, as the run ended; in
    # `--json` as `budget.tokens.used` (null when unknown).
    budget: dict[Cap, CapUsage] = Field(default_factory=dict)

    def unknown(self, cap: Cap) -> str:
        """How a cap's unknown use reads: `unknown`, with what was reported when some was
        (`unknown (≥1,200 reported)`)."""
        usage = self.budget.get(cap)
        return usage.spent(cap) if usage is not None and usage.used is None else "unknown"

    def summary_json(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", exclude={"calls"})
        data["calls"] = [
            {
                "call_id": c.call_id,
                "round": c.round,
                "tool": c.tool,
                "args": c.args,
                "risk": c.risk,
                "risk_source": c.risk_source or None,
                "fingerprint": c.fingerprint,
                "status": c.status.value,
                "decided_by": c.decided_by.flat() if c.decided_by else None,
                **_result_fields(c),
            }
            for c in self.calls
        ]
        return data


def _result_fields(call: CallRecord) -> dict[str, Any]:
    """What became of a call for a script reading `--json`: its data, or its error's code
    and the words the model was told."""
    result = call.result or {}
    error = result.get("error") if isinstance(result.get("error"), dict) else None
    return {
        "result": result.get("data") if result.get("ok") else None,
        "error_code": error.get("code") if error else None,
        "error": error.get("message") if error else None,
        "retries": call.retries,
        "duration_ms": call.duration_ms,
    }
