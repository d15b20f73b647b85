"""Runs one tool call: receipt check, timeout, transient retries for reads, a normalized and
size-capped result. A write runs at most once: it is never retried, and a write whose outcome
is not known (it timed out, failed transiently or crashed) says so.

A read that failed transiently (`TEMPORARY_UNAVAILABLE`: a dropped connection, a busy
server) is tried up to MAX_RETRIES more times; one that timed out only TIMEOUT_RETRIES more:
a read that hung once likely hangs again, and each try costs its whole timeout (a long
read-only operation runs again from its start)."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from datetime import time as day_time
from decimal import Decimal
from enum import Enum
from pathlib import PurePath
from typing import Any
from uuid import UUID

from pydantic import BaseModel

from loopdeck.core.approvals import ApprovalReceipt
from loopdeck.core.control import StopRun
from loopdeck.core.env_faults import described, home_of
from loopdeck.core.env_thread import EnvBusy, EnvThread, Then
from loopdeck.core.state_reads import StateReads
from loopdeck.core.text import capped, escape_surrogates, json_text
from loopdeck.core.timeouts import bounded
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
TIMEOUT_RETRIES = 1
RESULT_CHAR_CAP = 4000
# A write that ended this way may or may not have taken effect.
UNKNOWN_OUTCOME_CODES = TRANSIENT_CODES | {ErrorCode.TOOL_CRASHED}


class ReceiptRefused(Exception):
    """A write was about to run without a receipt that covers it."""


class UnserializableResult(Exception):
    """A tool returned something that is not JSON data (a cycle, tuple keys, an object)."""


RetryHook = Callable[[int, str, float], None]


def _json_form(value: Any) -> Any:
    """What JSON carries of a value it has no type for: a time, a date, a decimal, a UUID or a
    path as its text, an enum as its value, a set or a tuple as a list. Anything else (an
    object, a function, bytes) is refused: its `str` would tell the model nothing."""
    if isinstance(value, (datetime, date, day_time)):
        return value.isoformat()
    if isinstance(value, (Decimal, UUID, PurePath)):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    raise TypeError(f"{type(value).__name__} {capped(repr(value), 60)} has no JSON form")


_ascii_json = json.JSONEncoder(default=_json_form).encode


def _jsonable(value: Any) -> tuple[Any, str | None]:
    """The tool's result as JSON data, and its `json_text` when that is known already: the
    ASCII text it was read back from is the same text when it escaped nothing (`\\u`)."""
    try:
        if isinstance(value, BaseModel):
            return value.model_dump(mode="json"), None
        text = _ascii_json(value)
        return json.loads(text), None if "\\u" in text else text
    except (TypeError, ValueError, RecursionError) as exc:
        raise UnserializableResult(f"{type(exc).__name__}: {exc}") from None


def _capped(data: Any, cap: int, text: str | None = None) -> tuple[Any, bool]:
    if text is None:
        text = json_text(data)
    if len(text) <= cap:
        return data, False
    return capped(escape_surrogates(text), cap), True


class Dispatcher:
    def __init__(
        self,
        backoff_s: float = 0.05,
        result_char_cap: int = RESULT_CHAR_CAP,
        env_thread: EnvThread | None = None,
    ) -> None:
        self.backoff_s = backoff_s
        self.result_char_cap = result_char_cap
        self.env_thread = env_thread or EnvThread()
        # The run's reads of the state, told of each tool before it runs (`before_tool`).
        self.state_reads: StateReads | None = None

    async def _invoke(self, spec: ToolSpec, args: BaseModel, then: Then | None) -> Any:
        label = f"tool {spec.name}"
        if inspect.iscoroutinefunction(spec.fn):
            return await bounded(self.env_thread.run_async(label, spec.fn, args), spec.timeout_s)
        # The env thread bounds it, with no timer for a call done within its quick wait; it
        # runs in the call's context, where `report_progress` finds its call.
        run = contextvars.copy_context().run
        return await self.env_thread.call(
            label, run, spec.fn, args, then=then, timeout_s=spec.timeout_s
        )

    def _failure(self, code: ErrorCode, message: str) -> ToolFailure:
        return ToolFailure(
            code=code, message=capped(escape_surrogates(message), self.result_char_cap)
        )

    async def run(
        self,
        spec: ToolSpec,
        call_id: str,
        args: dict[str, Any],
        *,
        receipt: ApprovalReceipt | None = None,
        receipt_problem: Callable[[ApprovalReceipt], str | None] | None = None,
        on_retry: RetryHook | None = None,
        then: Then | None = None,
    ) -> ToolResult:
        if spec.risk == "write":
            if receipt is None or receipt_problem is None:
                raise ReceiptRefused(f"{spec.name} is a write and has no approval receipt")
            problem = receipt_problem(receipt)
            if problem is not None:
                raise ReceiptRefused(problem)
        parsed = spec.args_model.model_validate(args)
        if self.state_reads is not None:  # a read-only tool needs no read after it
            then = self.state_reads.before_tool(spec, then)
        started_at = datetime.now(UTC)
        t0 = time.perf_counter()
        data, failure, attempts = await self._attempts(spec, parsed, on_retry, then)
        # Validated: pydantic's `model_construct` runs in Python and cost twice as much (the
        # data, `Any`, is taken as it is: JSON data already, never copied).
        provenance = Provenance(
            tool=spec.name,
            call_id=call_id,
            started_at=started_at,
            duration_ms=(time.perf_counter() - t0) * 1000,
            attempts=attempts,
        )
        if failure is not None:
            return ToolResult(ok=False, error=failure, provenance=provenance)
        capped_data, truncated = _capped(data[0], self.result_char_cap, data[1])
        return ToolResult(
            ok=True, data=capped_data, error=None, truncated=truncated, provenance=provenance
        )

    async def _attempts(
        self, spec: ToolSpec, parsed: BaseModel, on_retry: RetryHook | None, then: Then | None
    ) -> tuple[tuple[Any, str | None], ToolFailure | None, int]:
        """The call, and its retries for a read that failed transiently: (its data and its
        text as `_jsonable` gives them, its failure, how many attempts)."""
        write = spec.risk == "write"
        attempt = 0
        while True:
            attempt += 1
            try:
                return _jsonable(await self._invoke(spec, parsed, then)), None, attempt
            except ToolError as exc:
                failure = self._failure(exc.code, exc.message)
                if write and exc.applied is False:  # definite: it did not take effect
                    return (None, None), failure, attempt
            except TimeoutError:
                failure = self._failure(
                    ErrorCode.TIMEOUT, f"{spec.name} timed out after {spec.timeout_s}s"
                )
            except (EnvBusy, StopRun):
                raise  # the runtime stops the run: env code still running, a server gone
            except UnserializableResult as exc:
                message = f"{spec.name} returned a result that is not JSON: {exc}"
                return (None, None), self._failure(ErrorCode.INVALID_RESULT, message), attempt
            except Exception as exc:  # a crashing tool is reported to the model, not swallowed
                said = described(exc, home_of(spec.fn), f"tool {spec.name}")
                failure = self._failure(ErrorCode.TOOL_CRASHED, said)
            if write and failure.code in UNKNOWN_OUTCOME_CODES:
                failure = self._failure(
                    ErrorCode.OUTCOME_UNKNOWN,
                    f"{spec.name} may or may not have taken effect ({failure.code.value}: "
                    f"{failure.message}); it is not retried. Check the state before acting on it.",
                )
                return (None, None), failure, attempt
            retries = TIMEOUT_RETRIES if failure.code is ErrorCode.TIMEOUT else MAX_RETRIES
            if write or failure.code not in TRANSIENT_CODES or attempt > retries:
                return (None, None), failure, attempt
            delay = self.backoff_s * 2 ** (attempt - 1)
            if on_retry is not None:
                on_retry(attempt, f"{failure.code.value}: {failure.message}", delay)
            await asyncio.sleep(delay)
