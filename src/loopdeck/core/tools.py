"""Tool contracts: the allowlist entries an environment declares and the results they return."""

from __future__ import annotations

import json
import weakref
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Risk = Literal["read", "write"]


class ErrorCode(StrEnum):
    NOT_FOUND = "NOT_FOUND"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    TEMPORARY_UNAVAILABLE = "TEMPORARY_UNAVAILABLE"
    TIMEOUT = "TIMEOUT"
    CONFLICT = "CONFLICT"
    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    REPEATED_CALL = "REPEATED_CALL"
    REJECTED = "REJECTED"
    DUPLICATE_WRITE = "DUPLICATE_WRITE"
    TOOL_CRASHED = "TOOL_CRASHED"
    INVALID_RESULT = "INVALID_RESULT"
    OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
    SKIPPED_AFTER_TRIP = "SKIPPED_AFTER_TRIP"
    ENV_BUSY = "ENV_BUSY"
    TOOL_ERROR = "TOOL_ERROR"  # an MCP server's `isError`: the tool says it failed


TRANSIENT_CODES = frozenset({ErrorCode.TEMPORARY_UNAVAILABLE, ErrorCode.TIMEOUT})


class ToolError(Exception):
    """Raised by a tool to report a failure the model can act on.

    `applied=False` says the failure is definite: the write did not take effect (it is
    recorded `failed`, its idempotency key left unspent, so it may be proposed again). A
    write's timeout, transient failure or any other exception leaves its outcome unknown."""

    def __init__(self, code: ErrorCode | str, message: str, *, applied: bool | None = None) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.applied = applied


class ToolFailure(BaseModel):
    model_config = ConfigDict(frozen=True)

    code: ErrorCode
    message: str


class Provenance(BaseModel):
    model_config = ConfigDict(frozen=True)

    tool: str
    call_id: str
    started_at: datetime
    duration_ms: float
    attempts: int = 1


class ToolResult(BaseModel):
    """The normalized record the model sees as a tool result. Data, never instructions."""

    model_config = ConfigDict(frozen=True)

    ok: bool
    data: Any = None
    error: ToolFailure | None = None
    truncated: bool = False
    provenance: Provenance

    @classmethod
    def failure(
        cls, tool: str, call_id: str, code: ErrorCode, message: str, duration_ms: float = 0.0
    ) -> ToolResult:
        return cls(
            ok=False,
            error=ToolFailure(code=code, message=message),
            provenance=Provenance(
                tool=tool, call_id=call_id, started_at=datetime.now(UTC), duration_ms=duration_ms
            ),
        )

    def for_model(self) -> dict[str, Any]:
        body: dict[str, Any] = {"ok": self.ok, "data": self.data}
        body["error"] = self.error.model_dump(mode="json") if self.error else None
        if self.truncated:
            body["truncated"] = True
        return body


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


ToolFn = Callable[[Any], Any | Awaitable[Any]]


class ToolSpec(BaseModel):
    """One allowlisted tool."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    description: str
    args_model: type[BaseModel]
    risk: Risk = "read"
    # Where the risk came from, for the operator ("server says read-only", "scenario
    # override"); empty for a Python tool, whose `@tool(risk=…)` says it.
    risk_source: str = ""
    timeout_s: float = Field(default=10.0, gt=0)
    exempt_from_guard: bool = False
    fn: Any = Field(exclude=True)
    idempotency_fields: tuple[str, ...] | None = None
    # Why an operator's edit of this tool's arguments cannot be carried out ("" when it
    # can): an agent's own tool runs the agent's input, whatever loopdeck approves.
    not_editable: str = ""

    def json_schema(self) -> dict[str, Any]:
        """The tool as the model is told of it, a new dict each time (the caller's to keep)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.args_schema(),
            },
        }

    def args_schema(self) -> dict[str, Any]:
        """Its arguments' JSON schema, a new dict each time (the caller's to keep)."""
        schema: dict[str, Any] = json.loads(_parameters_text(self.args_model))
        return schema


# Each argument model's JSON schema, as text: made once per model and process, where pydantic
# made it again for every run (a few hundred microseconds a tool, before the run's first step).
_parameters: weakref.WeakKeyDictionary[type[BaseModel], str] = weakref.WeakKeyDictionary()


def _parameters_text(args_model: type[BaseModel]) -> str:
    text = _parameters.get(args_model)
    if text is None:
        text = _parameters[args_model] = json.dumps(args_model.model_json_schema())
    return text
