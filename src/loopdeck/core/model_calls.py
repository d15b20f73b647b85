"""One model call under the budgets: classified retries, a timeout inside the deadline, and
compaction when the conversation outgrows the model's window."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

from loopdeck.core.budgets import BudgetExhausted, BudgetLedger
from loopdeck.core.compaction import compact, needs_compaction
from loopdeck.core.config import RunConfig
from loopdeck.core.control import Interrupted, StopRun
from loopdeck.core.events import ContextCompacted, EventBase, ModelCalled, ModelRetry
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

    def emit(self, event: EventBase) -> None: ...
    def publish_budget(self) -> None: ...
    async def interruptible(self, awaitable: Awaitable[T], *, by_cancel: bool = False) -> T: ...


class ModelCaller:
    def __init__(self, host: ModelHost) -> None:
        self.rt = host

    def compact(self, conversation: list[dict[str, Any]], reason: str) -> bool:
        """Compact in place; True if anything got shorter."""
        rt = self.rt
        count = getattr(rt.model, "count_tokens", None)
        if count is None:
            return False
        before = count(conversation)
        compacted = compact(conversation)
        after = count(compacted)
        if after >= before:
            return False
        conversation[:] = compacted
        rt.emit(
            ContextCompacted(
                run_id=rt.config.run_id,
                round=rt.round,
                tokens_before=before,
                tokens_after=after,
                reason=reason,
            )
        )
        return True

    def keep_in_window(self, conversation: list[dict[str, Any]]) -> None:
        window = getattr(self.rt.model, "context_window", None)
        count = getattr(self.rt.model, "count_tokens", None)
        if window is None or count is None:
            return
        while needs_compaction(count(conversation), window):
            if not self.compact(conversation, f"prompt above half of the {window}-token window"):
                return

    async def call(self, request: ModelRequest) -> ModelReply:
        rt = self.rt
        rt.ledger.before_model_call()
        attempt = 0
        compacted_for_overflow = False
        while True:
            attempt += 1
            timeout = min(rt.config.model_timeout_s, max(rt.ledger.remaining_time(), 0.001))
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
                ModelRetry(
                    run_id=rt.config.run_id, attempt=attempt, error=str(error), delay_s=delay
                )
            )
            await rt.interruptible(asyncio.sleep(delay))
        rt.ledger.record_model_call(reply.total_tokens, reply.cost_usd)
        rt.emit(
            ModelCalled(
                run_id=rt.config.run_id,
                role=request.role,
                round=rt.round,
                model=reply.model,
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                cost_usd=reply.cost_usd,
                latency_ms=reply.latency_ms,
                content=capped(reply.content or "", MESSAGE_EVENT_CAP),
            )
        )
        rt.publish_budget()
        rt.ledger.after_model_call()
        return reply
