"""A decision the store took on an earlier asking, which the run had not read when it asked
again, against a policy's rule on the new asking: a rejection the store shows is never
replaced by a rule's allow, even when the store cannot be read at the moment the run looks
(the outage that left it unread may well last); an approval stands over a rule's allow but
never over a rule's deny."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_decisions_kept import _row, _run_reading_late


async def test_a_rejection_stands_over_a_rules_allow_through_a_store_outage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first read of the standing decision meets a held lock: it was taken as "no
    decision", the rule's allow ran the write and the row became "approved by rule"."""
    from loopdeck.store import approver, queries
    from loopdeck.store.base import StoreUnavailable

    real_standing = approver.standing_decision
    real_state = queries.approval_state
    blips: list[str] = []

    async def standing_through_a_blip(store: Any, request: Any) -> Any:
        async def locked_once(*args: Any, **kwargs: Any) -> Any:
            if not blips:
                blips.append(request.call_id)
                raise StoreUnavailable("database is locked", StoreUnavailable.LOCKED)
            return await real_state(*args, **kwargs)

        monkeypatch.setattr(queries, "approval_state", locked_once)
        try:
            return await real_standing(store, request)
        finally:
            monkeypatch.setattr(queries, "approval_state", real_state)

    monkeypatch.setattr(approver, "standing_decision", standing_through_a_blip)
    db = tmp_path / "s.db"
    outcome, events = await _run_reading_late(
        db, monkeypatch, first_approved=False, rule_allows_again=True
    )
    assert blips, "the standing read met the outage"
    decided = [(e.approved, e.by, e.on_earlier_ask) for e in events if e.kind == "approval_decided"]
    assert decided == [(False, "ops", 1)]
    update = next(c for c in outcome.calls if c.tool == "update_delivery_address")
    assert update.status.value != "executed"
    assert await _row(db, outcome.run_id, update.call_id) == ("rejected", "ops")


async def test_an_approval_on_an_earlier_asking_never_stands_over_a_rules_deny(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator approved the first asking; a rule denies the next: the write ran."""
    db = tmp_path / "s.db"
    outcome, events = await _run_reading_late(
        db, monkeypatch, first_approved=True, rule_denies_again=True
    )
    decided = [e for e in events if e.kind == "approval_decided"]
    assert [(e.approved, e.on_earlier_ask) for e in decided] == [(False, 0)]
    assert decided[0].by.startswith("rule") and decided[0].reason == "again"
    update = next(c for c in outcome.calls if c.tool == "update_delivery_address")
    assert update.status.value != "executed"
    state, by = await _row(db, outcome.run_id, update.call_id)
    assert (state, by) == ("rejected", decided[0].by)
