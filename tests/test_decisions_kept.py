"""A decision the store took is the one the run carries out, whatever the clocks and the
store's outages say: an approval taken just before its asking expired gets a receipt the run
can dispatch under (counted from when the run reads it, not from the asking's expiry); the run's
re-ask never erases a decided row (the upsert itself replaces only a row still pending, or
one whose decision the run took and found no longer holding), and the run then takes what
the store has; on PostgreSQL an asking's expiry is judged on the store's clock alone."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_decision_expiry import _waited_run

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.events import ApprovalDecided
from loopdeck.store import deciding, queries


async def test_an_approval_the_store_took_just_before_the_expiry_is_carried_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`approve` said approved (the store took it before the expiry); the run read it after
    the expiry, in its last look: its receipt was already expired, so it asked again."""
    from loopdeck.core import write_approvals
    from loopdeck.store import approver, deciding

    monkeypatch.setattr(write_approvals, "LAST_LOOK_S", 5.0)
    real = approver.decision_from_store
    approved = asyncio.Event()

    async def slow_reader(store: Any, request: Any) -> ApprovalDecision:
        if not approved.is_set():
            yes = ApprovalDecision(call_id=request.call_id, approved=True, by="ops")
            assert await deciding.decide(store, request.run_id, yes)
            approved.set()
            wait = (request.expires_at - datetime.now(UTC)).total_seconds()
            await asyncio.sleep(max(wait, 0) + 0.05)
        return await real(store, request)

    async def nothing(run_id: str, call_id: str, n: int) -> None:
        return None

    monkeypatch.setattr(approver, "decision_from_store", slow_reader)
    outcome, events = await _waited_run(tmp_path / "s.db", 3.0, nothing)
    decided = [e for e in events if e.kind == "approval_decided"]
    assert [(e.approved, e.by) for e in decided] == [(True, "ops")]
    assert not [e for e in events if e.kind == "approval_invalidated"]
    update = next(c for c in outcome.calls if c.tool == "update_delivery_address")
    assert update.status.value == "executed"


async def test_a_decision_the_run_could_not_read_before_it_asked_again_is_kept_and_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store took an approval before the expiry, and could not be read by the run for
    its whole last look: the run asked again, and its new request's row replaced the decided
    one (pending again, undecided) though `approve` had said approved. Now the row keeps the
    decision and the run, reading it, carries it out as approved on the asking it was made on."""
    from loopdeck.store import approver, deciding

    real = approver.decision_from_store
    first: list[Any] = []

    async def unreadable_at_first(store: Any, request: Any) -> ApprovalDecision:
        if not first:
            first.append(request)
            yes = ApprovalDecision(call_id=request.call_id, approved=True, by="ops")
            assert await deciding.decide(store, request.run_id, yes)
            await asyncio.Event().wait()  # never read: the store out of reach meanwhile
        return await real(store, request)

    async def nothing(run_id: str, call_id: str, n: int) -> None:
        return None

    monkeypatch.setattr(approver, "decision_from_store", unreadable_at_first)
    outcome, events = await _waited_run(tmp_path / "s.db", 1.0, nothing)
    decided = [e for e in events if e.kind == "approval_decided"]
    assert [(e.approved, e.by) for e in decided] == [(True, "ops")]
    update = next(c for c in outcome.calls if c.tool == "update_delivery_address")
    assert update.status.value == "executed"
    asked = [e for e in events if e.kind == "approval_requested"]
    assert len(asked) == 2  # the expiry's ask again, which found the decision


class _Skewed(datetime):
    """The deciding host's clock, `skew` off the store's."""

    skew = timedelta(0)

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return datetime.now(tz) + cls.skew


@pytest.mark.parametrize(("skew_min", "ttl_s", "taken"), [(10, 300, True), (-10, -60, False)])
async def test_on_postgresql_an_askings_expiry_is_judged_on_the_stores_clock(
    monkeypatch: pytest.MonkeyPatch, skew_min: int, ttl_s: float, taken: bool
) -> None:
    """A decider whose clock is ten minutes ahead was refused an asking with minutes left (the
    row's expiry, the run's clock, against the decider's); one ten minutes behind decided an
    asking already expired (the run had asked again, or would). The store's clock judges."""
    from conftest import fresh_pg_database
    from test_decision_refusals import Recorded, record

    from loopdeck.core.states import RunState
    from loopdeck.store import deciding, queries
    from loopdeck.store.opening import open_store

    store = await open_store(fresh_pg_database(monkeypatch))
    try:
        await record(
            store, Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1", ttl_s=ttl_s)
        )
        monkeypatch.setattr(_Skewed, "skew", timedelta(minutes=skew_min))
        monkeypatch.setattr(queries, "datetime", _Skewed)
        yes = ApprovalDecision(call_id="c1", approved=True, by="ops")
        assert await deciding.decide(store, "r1", yes) is taken
        found = await store.fetchall("SELECT state FROM approvals WHERE call_id = 'c1'")
    finally:
        await store.close()
    assert [row["state"] for row in found] == ["approved" if taken else "pending"]


@pytest.mark.parametrize(("skew_min", "ttl_s", "taken"), [(10, 300, True), (-10, -60, False)])
def test_on_postgresql_approve_and_pending_judge_an_expiry_on_the_stores_clock(
    monkeypatch: pytest.MonkeyPatch, cli: Any, skew_min: int, ttl_s: float, taken: bool
) -> None:
    """`loopdeck approve` on a host ten minutes ahead was told the asking "expired unanswered
    … nothing was decided" with minutes left on the store's clock, and `pending` listed it
    expired: the command judged it on its own clock before the store could. The store judges,
    and what the command says of an asking that did expire is still said."""
    from conftest import fresh_pg_database
    from test_decision_refusals import Recorded, record

    from loopdeck.cli import store_commands
    from loopdeck.core.states import RunState
    from loopdeck.operator import entries, records
    from loopdeck.store import queries
    from loopdeck.store.opening import open_store

    url = fresh_pg_database(monkeypatch)

    async def asked() -> None:
        store = await open_store(url)
        try:
            run = Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1", ttl_s=ttl_s)
            await record(store, run)
        finally:
            await store.close()

    asyncio.run(asked())
    monkeypatch.setattr(_Skewed, "skew", timedelta(minutes=skew_min))
    for module in (records, queries, entries, store_commands):
        monkeypatch.setattr(module, "datetime", _Skewed, raising=False)
    code, listed, err = cli("pending", "--json", "--db", url)
    assert code == 0 and listed is not None, err
    assert [(w["call_id"], w["expired"]) for w in listed] == [("c1", not taken)]
    code, said, err = cli("approve", "r1", "c1", "--json", "--db", url)
    assert said is not None and (code, said["decided"]) == (0 if taken else 1, taken), err
    if not taken:
        assert "c1's approval request expired unanswered at" in err
        assert "nothing was decided" in err


# How each run's first asking ended before the call is asked again: who decided it in the
# store (None: nobody), whether the run took that decision, and whether it then found it no
# longer holding; and whether the row keeps the store's decision through the next asking.
ENDINGS = {
    "r1": ("approve", False, False, True),  # the store took it, the run never read it
    "r2": ("run", True, True, False),  # the run's own approval, found moved
    "r3": ("approve", True, True, False),  # read from the store, found moved
    "r4": (None, False, False, False),  # expired unanswered
    "r5": ("approve", True, False, False),  # read from the store and carried out
    "r6": ("reject", True, False, False),  # read from the store: rejected
}


async def test_asking_again_replaces_a_row_unless_its_decision_was_never_taken(db: Any) -> None:
    """The re-ask's upsert itself: only a decision the store took that the run never read
    stays (r1). One the run took is replaced by the new asking, pending, whether it then
    held (r5: an agent's second permission request for the same call was approved from the
    first answer, nobody asked; r6: rejected so) or not (r2, r3); an asking nobody decided is
    replaced (r4). The new asking is decided on its own."""
    from test_decision_refusals import Recorded

    from loopdeck.core.approvals import request_for
    from loopdeck.core.decision_events import (
        ApprovalDecided,
        ApprovalInvalidated,
        ApprovalRequested,
    )
    from loopdeck.core.states import RunState
    from loopdeck.store import approver, deciding
    from loopdeck.store.opening import open_store
    from loopdeck.store.writer import EventWriter

    store = await open_store(db)
    try:
        for run_id, (decider, taken, moved, kept) in ENDINGS.items():
            run = Recorded(run_id).started(RunState.AWAITING_APPROVAL).write("c1")
            writer = EventWriter(store, approve_mode="wait")
            for event in run.events:
                writer(event)
            await writer.flush()
            approved = decider != "reject"
            if decider in ("approve", "reject"):
                said = ApprovalDecision(call_id="c1", approved=approved, by="ops")
                assert await deciding.decide(store, run_id, said)
            if taken:
                by = "ops" if decider != "run" else "operator"
                run.add(ApprovalDecided, call_id="c1", approved=approved, reason="", by=by)
            if moved:
                run.add(ApprovalInvalidated, call_id="c1", problem="state changed")
            if not taken:  # its asking expired with no decision read
                run.add(ApprovalInvalidated, call_id="c1", problem="expired", unanswered=True)
            first = await deciding.asking(store, run_id, "c1")
            again = Recorded(run_id).write("c1")
            run.events.append(again.events[0].model_copy(update={"seq": len(run.events) + 1}))
            for event in run.events[3:]:
                writer(event)
            await writer.flush()
            row = await store.fetchall(
                "SELECT state, decided_by, requested_at FROM approvals WHERE run_id = ?",
                (run_id,),
            )
            found = (row[0]["state"], row[0]["decided_by"], row[0]["requested_at"] == first)
            assert found == (("approved", "ops", True) if kept else ("pending", None, False)), (
                run_id
            )
            if kept:
                continue
            asked = again.events[0]
            assert isinstance(asked, ApprovalRequested)
            request = request_for(
                run_id=run_id, call_id="c1", tool="write_file", args={"path": "a.txt"},
                state_hash="s1", fingerprint="f1", plan_step=None, ttl_s=300,
            ).model_copy(update={"requested_at": asked.requested_at})  # fmt: skip
            no = ApprovalDecision(call_id="c1", approved=False, reason="not now", by="ops2")
            assert await deciding.decide(store, run_id, no)
            got = await asyncio.wait_for(approver.decision_from_store(store, request), 10)
            assert (got.approved, got.by, got.asked_at) == (False, "ops2", asked.requested_at)
    finally:
        await store.close()


def test_an_approval_that_no_longer_held_is_never_an_unknown_outcome(
    tmp_path: Path, cli: Any
) -> None:
    """The run took the approval and found the call's state moved (asked again, then stopped
    after its last ask): its row said `approved` with no outcome, read as a write whose
    outcome is unknown though it never ran. It says what happened, to `approve` too."""
    from test_decision_refusals import Recorded, recorded

    from loopdeck.core.decision_events import ApprovalDecided, ApprovalInvalidated
    from loopdeck.core.states import RunState
    from loopdeck.operator import records
    from loopdeck.store import outcome_queries

    db = tmp_path / "s.db"
    run = Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1")
    run.add(ApprovalDecided, call_id="c1", approved=True, reason="", by="ops")
    run.add(ApprovalInvalidated, call_id="c1", problem="environment state changed")
    recorded(db, run.stopped(withdrawn=[]))

    async def unknown() -> list[str]:
        async with records.opened(db) as store:
            return await outcome_queries.outcome_unknown(store, "r1")

    assert asyncio.run(unknown()) == []
    code, said, err = cli("approve", "r1", "c1", "--json", "--db", str(db))
    assert code == 1 and said is not None and said["state"] == "invalidated"
    assert "approved by ops, and the approval no longer held (the call's state" in err


async def _run_reading_late(
    db: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    first_approved: bool,
    rule_allows_again: bool = False,
    rule_denies_again: bool = False,
    moved: bool = False,
    policy: Path | None = None,
    gates: list[Any] | None = None,
) -> tuple[Any, list[Any]]:
    """order_support/solve waiting on the store, each asking open 0.5 s: the store takes the
    operator's decision (`first_approved`) on the first asking and the run cannot read it
    before that asking expires (it asks again, and reads it then). `rule_allows_again`: a
    policy's rule allows the call's asks after the first (`rule_denies_again`: denies them);
    `moved`: the state moved between
    the proposal and the expiry; a third asking, if any, is approved by the operator.
    `policy`: the run's policy file (its gate put in `gates`)."""
    from conftest import SAMPLES

    from loopdeck.core.decided_by import DecidedBy
    from loopdeck.core.policy_gate import Ruling
    from loopdeck.operator.launch import RunOptions
    from loopdeck.operator.session import RunSession
    from loopdeck.store import approver, deciding

    real_reader = approver.decision_from_store
    reads: list[Any] = []

    async def late_reader(store: Any, request: Any) -> ApprovalDecision:
        reads.append(request)
        if len(reads) == 1:
            first = ApprovalDecision(
                call_id=request.call_id, approved=first_approved, reason="no", by="ops"
            )
            assert await deciding.decide(store, request.run_id, first)
            await asyncio.Event().wait()  # never read: the store out of reach meanwhile
        if len(reads) == 3:
            yes = ApprovalDecision(call_id=request.call_id, approved=True, by="ops")
            assert await deciding.decide(store, request.run_id, yes)
        return await real_reader(store, request)

    monkeypatch.setattr(approver, "decision_from_store", late_reader)
    session = RunSession(db)
    options = RunOptions(
        env=str(SAMPLES / "order_support"), script="solve", approve="wait", policy=policy
    )
    runtime = session.prepare(options).runtime
    runtime.config = runtime.config.model_copy(update={"approval_ttl_s": 0.5})
    events: list[Any] = []
    runtime.bus.subscribe(events.append)
    real_hash = runtime.state_hash

    async def state_hash() -> str:
        expired = any(e.kind == "approval_invalidated" for e in events)
        return await real_hash() + ("-moved" if moved and expired else "")

    runtime.state_hash = state_hash  # type: ignore[method-assign]
    step = runtime.calls.approvals.policy
    if gates is not None:
        gates.append(step.gate)
    real_ruling = step.ruling
    rulings: list[Any] = []

    def ruling(record: Any, *args: Any) -> Ruling:
        rulings.append(record.call_id)
        ruled_again = rule_allows_again or rule_denies_again
        if not ruled_again or rulings.count(record.call_id) == 1:
            return real_ruling(record, *args)
        by = DecidedBy(who="rule", rule_id="again", level="run", policy_sha256="0" * 64)
        made = ApprovalDecision(
            call_id=record.call_id, approved=not rule_denies_again, reason="again", by=by.words()
        )
        return Ruling(made, by)

    monkeypatch.setattr(step, "ruling", ruling)
    try:
        async with session.opened():
            outcome = await session.record()
    finally:
        session.cleanup()
    return outcome, events


async def test_a_rule_never_overrides_the_stores_decision_on_an_earlier_asking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator rejected the first asking (the store took it before it expired); the run
    asked again before reading it and a rule allowed the new asking: the write ran while its
    row said rejected by the operator. The standing decision is the one taken."""
    db = tmp_path / "s.db"
    outcome, events = await _run_reading_late(
        db, monkeypatch, first_approved=False, rule_allows_again=True
    )
    decided = [e for e in events if e.kind == "approval_decided"]
    assert [(e.approved, e.by) for e in decided] == [(False, "ops")]
    assert [e.on_earlier_ask for e in decided] == [1]
    update = next(c for c in outcome.calls if c.tool == "update_delivery_address")
    assert update.status.value != "executed"
    assert await _row(db, outcome.run_id, update.call_id) == ("rejected", "ops")
    # Rebuilt from the log, the decision stands over the rule's again, where it stood.
    from loopdeck.core.approvals import ApprovalRequest
    from loopdeck.core.replay_log import ReplayLog

    log = ReplayLog(events)
    log.at = log.sig.index(decided[0])
    asked = next(e for e in reversed(events) if e.kind == "approval_requested")
    standing = log.standing(ApprovalRequest.model_validate(asked.model_dump()))
    assert standing is not None and (standing.approved, standing.on_earlier_ask) == (False, 1)


async def test_a_rule_a_standing_decision_stood_over_is_not_counted_as_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator rejected the first asking (the store took it before it expired); the
    state moved and the run asked again before reading it, and a rule allowed the new asking.
    The rejection stood over the rule, yet the rule's use was counted: a rule allowed once
    (`rule.uses < 1`) was spent on a call it never decided."""
    policy = tmp_path / "policy.toml"
    when = 'call.tool == "update_delivery_address" && !state.unchanged && rule.uses < 1'
    policy.write_text(f'[[rule]]\nid = "moved-once"\neffect = "allow"\nwhen = \'{when}\'\n')
    gates: list[Any] = []
    outcome, events = await _run_reading_late(
        tmp_path / "s.db", monkeypatch, first_approved=False, moved=True, policy=policy,
        gates=gates,
    )  # fmt: skip
    update = next(c for c in outcome.calls if c.tool == "update_delivery_address")
    said = [(e.effect, e.decided_by and e.decided_by.rule_id) for e in events
            if e.kind == "policy_decided" and e.call_id == update.call_id]  # fmt: skip
    assert said == [("none", None), ("allow", "moved-once")]
    decided = [e for e in events if e.kind == "approval_decided"]
    assert [(e.approved, e.by, e.on_earlier_ask) for e in decided] == [(False, "ops", 1)]
    assert gates[0].book.counted.get("run:moved-once", 0) == 0
    assert gates[0].book.allowed_in == {}


async def test_replay_counts_a_rule_as_the_run_counted_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`loopdeck policy replay` of that run under its own policy: the ask the operator's
    standing rejection stood over replays as that rejection (nothing differs from what ran),
    and the rule is not spent on it, as the run did not spend it."""
    from loopdeck.policy import replay as replaying
    from loopdeck.policy.record import read_run

    policy = tmp_path / "policy.toml"
    when = 'call.tool == "update_delivery_address" && !state.unchanged && rule.uses < 1'
    policy.write_text(f'[[rule]]\nid = "moved-once"\neffect = "allow"\nwhen = \'{when}\'\n')
    outcome, events = await _run_reading_late(
        tmp_path / "s.db", monkeypatch, first_approved=False, moved=True, policy=policy
    )
    books: list[Any] = []
    book_of = replaying.RuleBook

    def kept_book(since: Any) -> Any:
        books.append(book_of(since))
        return books[-1]

    record = read_run(outcome.run_id, events)
    recorded = replaying.recorded_policy(record)
    assert recorded is not None
    with monkeypatch.context() as patched:
        patched.setattr(replaying, "RuleBook", kept_book)
        done = replaying.replay(record, recorded)
    [stood] = [d for d in done if d.ask.decided and d.ask.decided.on_earlier_ask == 1]
    assert (stood.effect, stood.by and stood.by.words()) == ("ask", "operator via ops")
    assert [d.ask.call_id for d in done if d.differs] == []
    assert books[0].counted.get("run:moved-once", 0) == 0


async def _row(db: Path, run_id: str, call_id: str) -> tuple[str, str]:
    """What the store says of the call's asking: its state and who decided."""
    from loopdeck.store import queries
    from loopdeck.store.opening import open_store

    store = await open_store(db)
    try:
        row = await queries.approval_state(store, run_id, call_id)
    finally:
        await store.close()
    assert row is not None
    return row["state"], row["decided_by"]


async def test_a_decision_on_an_earlier_asking_is_rebuilt_bound_to_that_asking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's approval of the first asking, read after the run asked again, binds the
    first asking (its state, which moved before it expired): the approval no longer holds and
    the call is asked a third time. The log did not say which asking it was, and a rebuilt
    run bound it to the second (the state as it expired): approved, diverging from the log."""
    from loopdeck.core.approvals import ApprovalRequest
    from loopdeck.core.asked_on import made_on
    from loopdeck.core.replay_log import ReplayLog

    outcome, events = await _run_reading_late(
        tmp_path / "s.db", monkeypatch, first_approved=True, moved=True
    )
    decided = [e for e in events if e.kind == "approval_decided"]
    assert [(e.approved, e.by, e.on_earlier_ask) for e in decided] == [
        (True, "ops", 1),
        (True, "ops", 0),
    ]
    invalidated = [e.problem for e in events if e.kind == "approval_invalidated"]
    assert len(invalidated) == 2 and "state changed" in invalidated[1]
    update = next(c for c in outcome.calls if c.tool == "update_delivery_address")
    assert update.status.value == "executed"
    # Rebuilt: the log serves the decision where the run took it, and it binds the asking
    # the live run bound (the first), not the one asked when it was read.
    asked = [
        ApprovalRequest.model_validate({**e.model_dump(), "run_id": e.run_id})
        for e in events
        if e.kind == "approval_requested"
    ]
    log = ReplayLog(events)
    log.at = log.sig.index(decided[0])
    served = log.decision(asked[1])
    assert made_on(asked[1], served, [asked[0]]) is asked[0]


async def test_a_decision_on_an_earlier_asking_read_after_a_move_binds_that_asking(
    db: Any, tmp_path: Path
) -> None:
    """The store took the operator's approval of a write's first asking; the run's wait for
    it ended unanswered (the state moved meanwhile), it asked again, and its worker was lost.
    Rebuilt on another worker, its askings had new times, so the approval (named by its
    asking's time in the row) bound the second asking: the write ran on a state nobody
    approved. It binds the first, as the live run binds it: no longer holding, asked again."""
    from worker_helpers import lease_state, left_by_a_lost_worker, options, stored, writes
    from worker_helpers import with_a_worker as worker_until

    from loopdeck.core.events import ApprovalInvalidated, ApprovalRequested, StateSeen
    from loopdeck.store import leases
    from loopdeck.store.opening import open_store
    from loopdeck.store.writer import EventWriter

    log = await _expired_then_asked_again(tmp_path / "first", "r1")
    first, again = [i for i, e in enumerate(log) if isinstance(e, ApprovalRequested)][:2]
    asked: Any = log[first]
    assert asked.state_hash != log[again].state_hash  # type: ignore[union-attr]
    store = await open_store(db)
    try:
        root = tmp_path / "shared"
        run = options(root, approve="wait", run_id="r1")
        await left_by_a_lost_worker(store, root, "r1", log[: first + 1], run)
        yes = ApprovalDecision(call_id=asked.call_id, approved=True, by="ops")
        assert await deciding.decide(store, "r1", yes, asked_at=asked.requested_at.isoformat())
        # The run read none of it: its wait ended unanswered, it asked again, then was lost.
        place = await leases.placement(store, "r1")
        assert place is not None
        writer = EventWriter(store, approve_mode="wait", fence=("r1", int(place["epoch"])))
        writer.host, writer.pid = "host-a", 1
        await writer.write_back(log[first + 1 : again + 1])
        seen = next(e for e in reversed(log[: again + 1]) if isinstance(e, StateSeen))
        assert seen.snapshot is not None
        (root / "r1" / "orders.json").write_text(json.dumps(seen.snapshot["orders"]))

        async def ended() -> bool:  # the write asked again once more: approved too
            for item in await queries.pending_approvals(store, "r1"):
                again_yes = ApprovalDecision(call_id=item["call_id"], approved=True, by="ops")
                await deciding.decide(store, "r1", again_yes)
            return await lease_state(store, "r1") == "ended"

        await worker_until(db, ended)
        moved = (await stored(store, "r1"))[again + 1 :]
        decided = [e for e in moved if isinstance(e, ApprovalDecided)]
        assert (decided[0].call_id, decided[0].on_earlier_ask) == (asked.call_id, 1)
        problems = [e.problem for e in moved if isinstance(e, ApprovalInvalidated)]
        assert problems and "state changed" in problems[0]
        ran = [w["tool"] for w in writes(root, "r1")]
        assert ran.count(asked.tool) == 1  # once, under the approval of its third asking
    finally:
        await store.close()


async def _expired_then_asked_again(root: Path, run_id: str) -> list[Any]:
    """shared_orders/solve as a worker runs it, its first write's first asking ending
    unanswered after the state moved (another order's date changed meanwhile); every other
    asking approved."""
    from worker_helpers import options

    from loopdeck.core.approvals import ApprovalRequest
    from loopdeck.core.events import EventBus
    from loopdeck.core.recorded_inputs import record_inputs
    from loopdeck.operator.launch import prepare_run

    bus = EventBus()
    events: list[Any] = []
    bus.subscribe(events.append)
    prepared = prepare_run(options(root, run_id=run_id), bus=bus)
    runtime = prepared.runtime
    env: Any = runtime.env
    env.reopen(run_id)
    asks: list[ApprovalRequest] = []

    class ExpiresFirst:
        async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
            asks.append(request)
            if len(asks) == 1:
                env.orders["ORD-2001"]["eta"] = "2027-01-04"
                raise TimeoutError  # as the wait for an asking nobody answered in time ends
            return ApprovalDecision(call_id=request.call_id, approved=True, by="auto")

    runtime.calls.approvals.approver = ExpiresFirst()
    record_inputs(runtime)
    try:
        await runtime.run()
    finally:
        prepared.cleanup()
    return events
