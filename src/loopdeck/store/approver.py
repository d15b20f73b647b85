"""Approvals decided through the store, by this process or any other."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Protocol

from loopdeck.core.approvals import Answer, ApprovalDecision, ApprovalRequest
from loopdeck.core.grant_rules import GrantRule
from loopdeck.store import queries
from loopdeck.store.base import UNTAKEN, Store, StoreUnavailable
from loopdeck.store.writer import EventWriter

POLL_S = 0.1


class Recording(Protocol):
    """Where a run is recorded: its store and that store's writer. Whoever asks the store
    (an approver, the console's queue) is given this at construction; both are open by the
    time the run asks (a console opens its store as the run starts, after the queue is made)."""

    @property
    def store(self) -> Store: ...

    @property
    def writer(self) -> EventWriter: ...


async def _approval_row(store: Store, run_id: str, call_id: str) -> dict[str, Any] | None:
    """None also while the store cannot be read for now: the wait goes on (a restarted
    server, a held lock), it never ends the run."""
    try:
        return await queries.approval_state(store, run_id, call_id)
    except StoreUnavailable:
        return None


async def flush_when_available(writer: EventWriter) -> None:
    """Everything so far is durable; while the store cannot take writes, wait for it."""
    while True:
        await writer.recovered()
        try:
            await writer.flush()
            return
        except StoreUnavailable:
            continue  # the writer is in an outage now: wait for its end


async def _decided_at(store: Store, run_id: str, call_id: str) -> datetime | None:
    """When the call's decision (or answer) was taken, as its row says; None when the row
    cannot say it now (the run then counts its wait up to when it reads the decision)."""
    try:
        rows = await store.fetchall(
            "SELECT decided_at FROM approvals WHERE run_id = ? AND call_id = ?",
            (run_id, call_id),
        )
    except StoreUnavailable:
        return None
    at = rows[0]["decided_at"] if rows else None
    return None if at is None else datetime.fromisoformat(str(at))


def _decision(request: ApprovalRequest, row: dict[str, Any]) -> ApprovalDecision | None:
    """The row's decision with the asking it was made on; None while it has none."""
    if row["state"] not in ("approved", "rejected"):
        return None
    edited, grant, asked = row["edited_args"], row["grant_rule"], row["requested_at"]
    return ApprovalDecision(
        call_id=request.call_id,
        approved=row["state"] == "approved",
        reason=row["reason"] or "",
        by=row["decided_by"] or "store",
        args=None if edited is None else json.loads(edited),
        grant=None if grant is None else GrantRule.model_validate_json(grant),
        asked_at=None if asked is None else datetime.fromisoformat(str(asked)),
    )


async def decision_from_store(store: Store, request: ApprovalRequest) -> ApprovalDecision:
    """The decision the store has on the call, with the asking it was made on: the one
    asked, or an earlier one the run asked again after (its re-ask never replaces a row the
    store decided and the run has not taken: `store/event_rows.py`), which the run binds it to."""
    while True:
        row = await _approval_row(store, request.run_id, request.call_id)
        if row is not None and (decided := _decision(request, row)) is not None:
            at = await _decided_at(store, request.run_id, request.call_id)
            return decided.model_copy(update={"decided_at": at})
        await store.wait_for_change(POLL_S)


async def standing_decision(store: Store, request: ApprovalRequest) -> ApprovalDecision | None:
    """A decision the store took on the call that its run has not taken (None: the store has
    none): `StandingDecisions`. While the store cannot be read the read is waited out, never
    taken as "none": a decision stays untaken exactly when the run could not reach the store,
    and a rule's word in its place would carry out what the operator rejected (the run's
    kill or stop still ends the wait)."""
    while True:
        try:
            row = await queries.approval_state(store, request.run_id, request.call_id)
        except StoreUnavailable:
            await store.wait_for_change(POLL_S)
            continue
        return None if row is None or not row[UNTAKEN] else _decision(request, row)


async def standing_in(recording: Recording, request: ApprovalRequest) -> ApprovalDecision | None:
    """The standing decision once the asking's own row has landed (a decision that lands
    after the read would otherwise be replaced by the asking's write, or taken over by the
    rule's decision)."""
    await flush_when_available(recording.writer)
    return await standing_decision(recording.store, request)


class StoreApprover:
    """`--approve wait`: block until `loopdeck approve/reject` or a console decides."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        # The pending row is visible to other processes from here on.
        await flush_when_available(self.recording.writer)
        return await decision_from_store(self.recording.store, request)

    async def standing(self, request: ApprovalRequest) -> ApprovalDecision | None:
        return await standing_in(self.recording, request)


async def answer_from_store(store: Store, run_id: str, question_id: str) -> Answer:
    while True:
        row = await _approval_row(store, run_id, question_id)
        if row is not None and row["state"] == "answered":
            at = await _decided_at(store, run_id, question_id)
            return Answer(text=row["reason"] or "", by=row["decided_by"] or "store", decided_at=at)
        await store.wait_for_change(POLL_S)


class StoreAnswerer:
    """`--approve wait`: the model's question waits for `loopdeck answer` or a console."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording

    async def answer(self, run_id: str, question_id: str, question: str) -> Answer:
        await flush_when_available(self.recording.writer)
        return await answer_from_store(self.recording.store, run_id, question_id)
