"""Writes whose outcome is unknown (they timed out, raised, or were cut short), and the
operator's word on them (`Runtime.resolve`, `loopdeck resolve`, the console's keys): only the
operator can know whether such a write took effect.

`applied`: recorded as executed, by the operator's word. `not applied`: recorded as failed,
its idempotency key freed and its guard key forgotten, so the model may propose it again (a
new proposal, asked for a new approval, that runs once). Either way the model is told before
its next turn, as the operator's words (`OutcomeResolved` is the record).
"""

from __future__ import annotations

from loopdeck.core.events import CallStatus, Emit, OutcomeResolved
from loopdeck.core.guard import NoProgressGuard, guard_key
from loopdeck.core.outcome import CallRecord
from loopdeck.core.text import short_args


class Unresolvable(Exception):
    """The call named has no outcome to resolve; the message says why."""


class UnknownOutcomes:
    def __init__(
        self, guard: NoProgressGuard, executed_writes: set[str], emit: Emit, run_id: str
    ) -> None:
        self.guard = guard
        self.executed_writes = executed_writes
        self.emit = emit
        self.run_id = run_id
        self._keys: dict[str, tuple[CallRecord, str]] = {}  # call id -> (record, idempotency)

    def noted(self, record: CallRecord, idempotency: str) -> None:
        self._keys[record.call_id] = (record, idempotency)

    def waiting(self) -> list[str]:
        return list(self._keys)

    def settle(self, call_ids: list[str]) -> None:
        """These are no longer the operator's to resolve: a fork's env was restored to the
        state seen after them (`RunForked.settled` records it), which holds their outcome."""
        for call_id in call_ids:
            self._keys.pop(call_id, None)

    def resolve(self, call_id: str, applied: bool, by: str) -> str:
        """The operator's word recorded; what the model is told. Raises `Unresolvable`."""
        if call_id not in self._keys:
            raise Unresolvable(f"{call_id} is not a write whose outcome is unknown in this run")
        record, idempotency = self._keys.pop(call_id)
        shown = f"{record.tool}({short_args(record.args, 80)}) ({call_id})"
        if applied:
            record.status = CallStatus.EXECUTED
            said = f"your call {shown}, whose outcome was unknown, took effect."
        else:
            record.status = CallStatus.FAILED
            self.executed_writes.discard(idempotency)
            self.guard.forget(guard_key(record.tool, record.args, record.state_hash))
            said = (
                f"your call {shown}, whose outcome was unknown, did not take effect. You may"
                " propose it again if it is still needed; it will be asked for approval again."
            )
        self.emit(
            OutcomeResolved,
            run_id=self.run_id,
            call_id=call_id,
            tool=record.tool,
            applied=applied,
            by=by,
        )
        return said
