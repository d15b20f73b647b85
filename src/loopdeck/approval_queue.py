"""An Approver whose decisions come from a person, one pending request per write.

Each pending request carries an asyncio.Future; whoever decides resolves it. If the runtime
stops waiting (kill, stop, deadline) the wait is cancelled and the request withdrawn.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest

Listener = Callable[[], None]


@dataclass
class PendingApproval:
    request: ApprovalRequest
    future: asyncio.Future[ApprovalDecision]


class ApprovalQueue:
    def __init__(self) -> None:
        self._pending: OrderedDict[str, PendingApproval] = OrderedDict()
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    def pending(self) -> list[PendingApproval]:
        return list(self._pending.values())

    def get(self, call_id: str) -> PendingApproval | None:
        return self._pending.get(call_id)

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        future: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
        self._pending[request.call_id] = PendingApproval(request, future)
        self._notify()
        try:
            return await future
        finally:
            self._pending.pop(request.call_id, None)
            self._notify()

    def _resolve(self, call_id: str, decision: ApprovalDecision) -> bool:
        """False when the request is gone or already decided: exactly one decision wins."""
        item = self._pending.get(call_id)
        if item is None or item.future.done():
            return False
        item.future.set_result(decision)
        return True

    def approve(self, call_id: str, by: str = "console") -> bool:
        return self._resolve(call_id, ApprovalDecision(approved=True, by=by))

    def reject(self, call_id: str, reason: str = "", by: str = "console") -> bool:
        decision = ApprovalDecision(
            approved=False, reason=reason or "rejected by the operator", by=by
        )
        return self._resolve(call_id, decision)
