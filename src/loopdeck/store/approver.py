"""Approvals decided through the store, by this process or any other."""

from __future__ import annotations

import asyncio

from loopdeck.approval_queue import ApprovalQueue
from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.store import queries
from loopdeck.store.database import Store
from loopdeck.store.writer import EventWriter

POLL_S = 0.1


async def _decision_from_store(store: Store, request: ApprovalRequest) -> ApprovalDecision:
    while True:
        row = await queries.approval_state(store, request.run_id, request.call_id)
        if row is not None and row["state"] in ("approved", "rejected"):
            return ApprovalDecision(
                approved=row["state"] == "approved",
                reason=row["reason"] or "",
                by=row["decided_by"] or "store",
            )
        await asyncio.sleep(POLL_S)


class StoreApprover:
    """`--approve wait`: block until `loopdeck approve/reject` or a console decides."""

    def __init__(self, store: Store, writer: EventWriter) -> None:
        self.store = store
        self.writer = writer

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        await self.writer.flush()  # the pending row is visible to other processes from here on
        return await _decision_from_store(self.store, request)


class StoreBackedQueue(ApprovalQueue):
    """The console's queue when the run is recorded: a local key press and a remote command
    race, and the store's atomic update decides which one wins."""

    def __init__(self) -> None:
        super().__init__()
        self.store: Store | None = None
        self.writer: EventWriter | None = None

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        if self.store is None or self.writer is None:
            return await super().decide(request)
        store = self.store
        await self.writer.flush()
        local = asyncio.ensure_future(super().decide(request))
        remote = asyncio.ensure_future(_decision_from_store(store, request))
        try:
            done, _ = await asyncio.wait({local, remote}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (local, remote):
                if not task.done():
                    task.cancel()
        if remote in done:
            return remote.result()
        mine = local.result()
        won = await queries.decide(
            store,
            request.run_id,
            request.call_id,
            approved=mine.approved,
            by=mine.by,
            reason=mine.reason,
        )
        if won:
            return mine
        return await _decision_from_store(store, request)
