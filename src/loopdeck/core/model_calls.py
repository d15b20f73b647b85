"""One model call under the budgets: classified retries, a timeout inside the deadline, and
compaction when the conversation outgrows the model's window."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

from loopdeck.core.budgets import BudgetExhausted, BudgetLedger
from loopdeck.core.compaction import Compaction, ContextWindow
from loopdeck.core.config import RunConfig
from loopdeck.core.control import Interrupted, StopRun
from loopdeck.core.events import ContextCompacted, Emit, ModelCalled, ModelRetry
from loopdeck.core.model import ModelClient, ModelReply, ModelRequest, ProviderError
from loopdeck.core.states import StopReason
from loopdeck.core.text import capped
from loopdeck.core.timeouts import bounded

T = TypeVar("T")
MAX_MODEL_RETRIES = 3
MESSAGE_EVENT_CAP = 8000


class ModelHost(Protocol):
    """What a model call needs from the run it belongs to."""

    config: RunConfig
    round: int
    model: ModelClient
    ledger: BudgetLedger

    @property
    def emit(self) -> Emit: ...
    def publish_budget(self) -> None: ...
    async def hold_while_unavailable(self) -> None: ...
    async def interruptible(self, awaitable: Awaitable[T], *, by_cancel: bool = False) -> T: ...


class ModelCaller:
    def __init__(self, host: ModelHost) -> None:
        self.rt = host
        self._window: ContextWindow | None = None
        self.compactions = 0

    def _context(self) -> ContextWindow | None:
        """The running estimate for the model's window; None when the window is unknown."""
        window = getattr(self.rt.model, "context_window", None)
        count = getattr(self.rt.model, "count_tokens", None)
        if window is None or count is None:
            return None
        if self._window is None or self._window.window != window:
            overhead = self._window.overhead if self._window is not None else 0
            self._window = ContextWindow(window, count, overhead)
        return self._window

    def compact(self, conversation: list[dict[str, Any]], reason: str) -> bool:
        """The provider said the prompt overflowed: compact in place; True if it got shorter."""
        context = self._context()
        if context is None or not context.tracks(conversation):
            count = getattr(self.rt.model, "count_tokens", None)
            if count is None:
                return False
            # Not the conversation being tracked (the planner's), or no window known.
            window = context.window if context else max(1, count(conversation))
            context = ContextWindow(window, count, context.overhead if context else 0)
        return self._emit(context.fit(conversation, force=True), reason)

    def keep_in_window(self, conversation: list[dict[str, Any]]) -> None:
        """Before a call: past half of the window, compact down to `TARGET` (35 %)."""
        context = self._context()
        if context is not None and (done := context.fit(conversation)):
            self._emit(done, f"prompt above half of the {context.window:,}-token window")

    def _emit(self, done: Compaction | None, reason: str) -> bool:
        if done is None:
            return False
        rt = self.rt
        self.compactions += 1
        rt.emit(
            ContextCompacted,
            run_id=rt.config.run_id,
            round=rt.round,
            tokens_before=done.tokens_before,
            tokens_after=done.tokens_after,
            reason=reason,
            results_shortened=done.results_shortened,
            turns_dropped=done.turns_dropped,
        )
        return True

    async def call(self, request: ModelRequest) -> ModelReply:
        rt = self.rt
        await rt.hold_while_unavailable()  # never a model call the store cannot record
        rt.ledger.before_model_call()
        attempt = 0
        compacted_for_overflow = False
        while True:
            attempt += 1
            timeout = min(rt.config.model_timeout_s, max(rt.ledger.remaining_time(), 0.001))
            if timeout != request.timeout_s:  # the deadline is nearer than a call's timeout
                request = request.model_copy(update={"timeout_s": timeout})
            try:
                reply = await rt.interruptible(bounded(rt.model.complete(request), timeout))
                break
            except TimeoutError:
                error = ProviderError(f"model call timed out after {timeout:.1f}s", retryable=True)
            except ProviderError as exc:
                error = exc
            except (Interrupted, StopRun, BudgetExhausted):
                raise
            except Exception as exc:  # a client that broke on a malformed response
                message = capped(f"{type(exc).__name__}: {exc}", MESSAGE_EVENT_CAP)
                error = ProviderError(f"unreadable model response: {message}", retryable=True)
            if error.context_overflow and not compacted_for_overflow:
                compacted_for_overflow = True
                if self.compact(request.messages, "the provider reported a context overflow"):
                    attempt -= 1
                    continue
            if not error.retryable or attempt > MAX_MODEL_RETRIES:
                raise StopRun(StopReason.PROVIDER_FAILURE, str(error))
            delay = rt.config.model_backoff_s * 2 ** (attempt - 1)
            rt.emit(
                ModelRetry,
                run_id=rt.config.run_id,
                attempt=attempt,
                error=str(error),
                delay_s=delay,
            )
            await rt.interruptible(asyncio.sleep(delay))
        if self._window is not None:
            self._window.observe(request.messages, reply.prompt_tokens or 0)
        rt.ledger.record_model_call(reply.total_tokens, reply.cost_usd)
        rt.emit(
            ModelCalled,
            run_id=rt.config.run_id,
            role=request.role,
            round=rt.round,
            model=reply.model,
            prompt_tokens=reply.prompt_tokens or 0,
            completion_tokens=reply.completion_tokens or 0,
            tokens_unknown=reply.total_tokens is None,
            cost_usd=reply.cost_usd,
            latency_ms=reply.latency_ms,
            content=capped(reply.content or "", MESSAGE_EVENT_CAP),
        )
        rt.publish_budget()
        rt.ledger.after_model_call()
        return reply
