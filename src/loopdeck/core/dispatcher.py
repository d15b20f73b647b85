"""Runs one tool call: receipt check, timeout, transient retries, normalized size-capped result."""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from loopdeck.core.approvals import ApprovalReceipt
from loopdeck.core.tools import (
    TRANSIENT_CODES,
    ErrorCode,
    Provenance,
    ToolError,
    ToolFailure,
    ToolResult,
    ToolSpec,
)

MAX_RETRIES = 3
RESULT_CHAR_CAP = 4000


class ReceiptRefused(Exception):
    """A write was about to run without a receipt that covers it."""


RetryHook = Callable[[int, str, float], None]


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return json.loads(json.dumps(value, default=str))


def _capped(data: Any, cap: int) -> tuple[Any, bool]:
    text = json.dumps(data, ensure_ascii=False, default=str)
    if len(text) <= cap:
        return data, False
    return f"{text[:cap]} …[truncated {len(text) - cap} chars]", True


class Dispatcher:
    def __init__(self, backoff_s: float = 0.05, result_char_cap: int = RESULT_CHAR_CAP) -> None:
        self.backoff_s = backoff_s
        self.result_char_cap = result_char_cap

    async def _invoke(self, spec: ToolSpec, args: BaseModel) -> Any:
        if inspect.iscoroutinefunction(spec.fn):
            return await asyncio.wait_for(spec.fn(args), spec.timeout_s)
        return await asyncio.wait_for(asyncio.to_thread(spec.fn, args), spec.timeout_s)

    async def run(
        self,
        spec: ToolSpec,
        call_id: str,
        args: dict[str, Any],
        *,
        receipt: ApprovalReceipt | None = None,
        receipt_problem: Callable[[ApprovalReceipt], str | None] | None = None,
        on_retry: RetryHook | None = None,
    ) -> ToolResult:
        if spec.risk == "write":
            if receipt is None or receipt_problem is None:
                raise ReceiptRefused(f"{spec.name} is a write and has no approval receipt")
            problem = receipt_problem(receipt)
            if problem is not None:
                raise ReceiptRefused(problem)
        parsed = spec.args_model.model_validate(args)
        started_at = datetime.now(UTC)
        t0 = time.perf_counter()
        failure: ToolFailure | None = None
        attempt = 0
        while True:
            attempt += 1
            try:
                data = await self._invoke(spec, parsed)
                failure = None
                break
            except ToolError as exc:
                failure = ToolFailure(code=exc.code, message=exc.message)
            except TimeoutError:
                failure = ToolFailure(
                    code=ErrorCode.TIMEOUT, message=f"{spec.name} timed out after {spec.timeout_s}s"
                )
            except Exception as exc:  # a crashing tool is reported to the model, not swallowed
                failure = ToolFailure(
                    code=ErrorCode.TOOL_CRASHED, message=f"{type(exc).__name__}: {exc}"
                )
            if failure.code not in TRANSIENT_CODES or attempt > MAX_RETRIES:
                break
            delay = self.backoff_s * 2 ** (attempt - 1)
            if on_retry is not None:
                on_retry(attempt, f"{failure.code.value}: {failure.message}", delay)
            await asyncio.sleep(delay)
        provenance = Provenance(
            tool=spec.name,
            call_id=call_id,
            started_at=started_at,
            duration_ms=(time.perf_counter() - t0) * 1000,
            attempts=attempt,
        )
        if failure is not None:
            return ToolResult(ok=False, error=failure, provenance=provenance)
        capped, truncated = _capped(_jsonable(data), self.result_char_cap)
        return ToolResult(ok=True, data=capped, truncated=truncated, provenance=provenance)
