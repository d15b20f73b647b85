"""`loopdeck fork RUN_ID --at CALL_ID` (issue 42): the fork is rebuilt from the run's events
with no model call (its prompts up to the fork are the run's, byte for byte), goes on with
what it changes, and nothing approved before the fork is reused once its state differs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from worker_helpers import lease_state, options, stored, with_a_worker, writes

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.events import (
    ApprovalDecided,
    ApprovalRequested,
    GrantRevoked,
    ModelReplied,
    RunForked,
    RunStarted,
    RunStopped,
    ToolFinished,
)
from loopdeck.core.grant_rules import GrantRule
from loopdeck.core.recorded_inputs import RecordedModel
from loopdeck.core.scenario import ScenarioError
from loopdeck.operator.fork import fork
from loopdeck.operator.placement import submit
from loopdeck.store import deciding, queries
from loopdeck.store.base import Location, Store
from loopdeck.store.opening import open_store


class Prompts:
    """Every prompt a run's model is asked, as sent (JSON of its messages), and whether the
    log served the reply (no call) or the model was called."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.asked: dict[str, list[tuple[bool, str]]] = {}
        complete = RecordedModel.complete

        async def recorded(model: RecordedModel, request: Any) -> Any:
            served = model.log is not None and not model.log.live
            self.asked.setdefault(model.rt.config.run_id, []).append(
                (served, json.dumps(request.messages))
            )
            return await complete(model, request)

        monkeypatch.setattr(RecordedModel, "complete", recorded)


async def ended(store: Store, run_id: str) -> bool:
    return await lease_state(store, run_id) == "ended"


async def run_to_end(db: Location, store: Store, run_id: str, decide: Any = None) -> None:
    async def done() -> bool:
        if decide is not None:
            await decide()
        return await ended(store, run_id)

    await with_a_worker(db, done)


async def test_a_fork_is_the_run_byte_for_byte_up_to_its_call_with_no_model_call(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    prompts = Prompts(monkeypatch)
    db, root = tmp_path / "s.db", tmp_path / "shared"
    store = await open_store(db)
    try:
        original = await submit(db, options(root))
        await run_to_end(db, store, original)
        forked = await fork(db, original, "c5", script="other-address", message="Use the other.")
        await run_to_end(db, store, forked)
        before = [text for _, text in prompts.asked[original]]
        turns = len([e for e in await stored(store, original) if isinstance(e, ModelReplied)])
        assert len(before) == turns
        served = [(was_served, text) for was_served, text in prompts.asked[forked]]
        rebuilt = [text for was_served, text in served if was_served]
        # every turn before c5's (the planner and four executor turns) served, none called
        assert rebuilt == before[: len(rebuilt)] and len(rebuilt) == 5
        assert [was_served for was_served, _ in served] == [True] * 5 + [False] * (len(served) - 5)
        # the turn asked again: the run's prompt then, with the fork's message after it
        live = json.loads(served[5][1])
        assert live[:-1] == json.loads(before[5]) and "Use the other." in live[-1]["content"]
        log = await stored(store, forked)
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        # what the fork has of its source happened when the source made it: a decision by
        # its operator then, not at the fork's rebuild; the fork's start is its own
        source = await stored(store, original)
        inherited = [e for e in log if isinstance(e, ApprovalDecided)][:1]
        assert [e.at for e in inherited] == [
            e.at for e in source if isinstance(e, ApprovalDecided) and e.call_id == "c3"
        ]  # fmt: skip
        assert next(e for e in log if isinstance(e, RunStarted)).at > source[0].at
        said = next(e for e in log if isinstance(e, RunForked))
        assert (said.source, said.at_call, said.state_restored) == (original, "c5", True)
        assert "script other-address" in said.changed
        assert isinstance(log[-1], RunStopped) and log[-1].stop_reason.value == "stalled"
        # what ran before the fork did not run again; the fork's own write did, once
        assert [(w["tool"], w["args"].get("new_address")) for w in writes(root, forked)] == [
            ("update_delivery_address", "9 Other Street, Springfield")
        ]
        assert [w["tool"] for w in writes(root, original)] == [
            "add_note", "update_delivery_address"
        ]  # fmt: skip
    finally:
        await store.close()


async def _granted_original(db: Location, store: Store, root: Path) -> str:
    """A run whose first note is approved with a grant on add_note (covering the second),
    its address update approved as asked."""
    original = await submit(db, options(root, "two-notes", "wait"))

    async def decide() -> None:
        for item in await queries.pending_approvals(store, original):
            grant = GrantRule(scope="tool") if item["tool"] == "add_note" else None
            decision = ApprovalDecision(call_id=item["call_id"], approved=True,
                                        by="operator", grant=grant)  # fmt: skip
            await deciding.decide(store, original, decision)

    await run_to_end(db, store, original, decide)
    decided = [e for e in await stored(store, original) if isinstance(e, ApprovalDecided)]
    assert [(e.call_id, e.grant_id) for e in decided] == [("c2", None), ("c3", "g1"), ("c4", None)]
    return original


@pytest.mark.parametrize("restore", [True, False])
async def test_an_approval_from_before_the_fork_is_not_reused_once_the_state_differs(
    restore: bool, tmp_path: Path
) -> None:
    db, root = tmp_path / "s.db", tmp_path / "shared"
    store = await open_store(db)
    try:
        original = await _granted_original(db, store, root)
        settings = [] if restore else ["data.restore=false"]
        forked = await fork(db, original, "c3", settings=settings)

        async def c3_asked_or_done() -> bool:
            pending = await queries.pending_approvals(store, forked)
            done = [e for e in await stored(store, forked) if isinstance(e, ToolFinished)]
            return any(p["call_id"] == "c3" for p in pending) or "c3" in {e.call_id for e in done}

        await with_a_worker(db, c3_asked_or_done)
        log = await stored(store, forked)
        said = next(e for e in log if isinstance(e, RunForked))
        assert said.state_restored is restore
        revoked = [e.grant_id for e in log if isinstance(e, GrantRevoked)]
        asked = [e for e in log if isinstance(e, ApprovalRequested) and e.call_id == "c3"]
        if restore:  # the state is the one the grant was given in: it still covers the note
            assert revoked == [] and asked[-1].grant_id == "g1"
            done = [e for e in log if isinstance(e, ToolFinished) and e.call_id == "c3"]
            assert [e.status.value for e in done] == ["executed"]
        else:  # revoked as the fork went live: the second note is asked, not run
            assert revoked == ["g1"] and asked[-1].grant_id is None
            assert [p["call_id"] for p in await queries.pending_approvals(store, forked)] == ["c3"]
            assert len(writes(root, forked)) == 0
    finally:
        await store.close()


async def test_a_fork_names_what_it_cannot_be_forked_at(tmp_path: Path) -> None:
    db, root = tmp_path / "s.db", tmp_path / "shared"
    store = await open_store(db)
    try:
        original = await submit(db, options(root))
        await run_to_end(db, store, original)
    finally:
        await store.close()
    with pytest.raises(ScenarioError, match=r"has no call c9 \(its calls: c1, c2, c3, c4, c5\)"):
        await fork(db, original, "c9")


async def test_a_fork_whose_worker_was_lost_before_it_went_live_is_rebuilt_from_its_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Lost while it was being rebuilt (its log has part of the run's events, no fork yet),
    the fork is rebuilt from its source again, past what its log has: no model call before
    the fork, the same events as a fork never lost."""
    from worker_helpers import significant

    from loopdeck.store import leases
    from loopdeck.store.writer import EventWriter

    prompts = Prompts(monkeypatch)
    db, root = tmp_path / "s.db", tmp_path / "shared"
    store = await open_store(db)
    try:
        original = await submit(db, options(root))
        await run_to_end(db, store, original)
        whole = await fork(db, original, "c5", script="other-address")
        await run_to_end(db, store, whole)
        done = await stored(store, whole)
        went_live = next(i for i, e in enumerate(done) if isinstance(e, RunForked))
        row = await leases.placement(store, whole)
        assert row is not None
        kept = json.loads(row["options"])
        kept["run_id"] = "lost-fork"
        await leases.submit(store, "lost-fork", kept)
        claim = await leases.claim(store, leases.WorkerName("host-a", 1, "x"), 0.001)
        assert claim is not None and claim.run_id == "lost-fork"
        writer = EventWriter(store, fence=("lost-fork", claim.epoch))
        cut = went_live // 2
        await writer.write_back([e.model_copy(update={"run_id": "lost-fork"}) for e in done[:cut]])
        await run_to_end(db, store, "lost-fork")
        again = await stored(store, "lost-fork")
        assert [e.seq for e in again] == list(range(1, len(again) + 1))
        assert significant(again) == significant(done)
        assert all(was_served for was_served, _ in prompts.asked["lost-fork"][:5])
        assert [w["tool"] for w in writes(root, "lost-fork")] == ["update_delivery_address"]
    finally:
        await store.close()


async def test_a_fork_its_workers_env_cannot_put_where_the_run_was_is_refused_there(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Checked at submit, and again on the worker, whose env may start elsewhere: with no
    `restore(snapshot)` there, a fork past the run's first write ends `crashed`, saying why,
    before anything of it runs (never live from a state its log says nothing of)."""
    import sys

    db, root = tmp_path / "s.db", tmp_path / "shared"
    store = await open_store(db)
    try:
        original = await submit(db, options(root))
        await run_to_end(db, store, original)
        forked = await fork(db, original, "c5", script="other-address")  # restore: accepted
        env_class = next(
            m.SharedOrders for m in list(sys.modules.values()) if hasattr(m, "SharedOrders")
        )
        monkeypatch.delattr(env_class, "restore")  # this worker's env cannot restore
        await run_to_end(db, store, forked)
        done = await stored(store, forked)
        [stopped] = [e for e in done if isinstance(e, RunStopped)]
        assert stopped.stop_reason.value == "crashed"
        assert "it cannot be forked: its env (SharedOrders) starts in state" in stopped.detail
        assert not any(isinstance(e, RunForked) for e in done)
        assert writes(root, forked) == []
    finally:
        await store.close()


async def test_a_fork_whose_env_state_cannot_be_read_is_refused_at_submit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import sys

    db, root = tmp_path / "s.db", tmp_path / "shared"
    store = await open_store(db)
    try:
        original = await submit(db, options(root))
        await run_to_end(db, store, original)
    finally:
        await store.close()
    env_class = next(
        m.SharedOrders for m in list(sys.modules.values()) if hasattr(m, "SharedOrders")
    )
    monkeypatch.delattr(env_class, "restore")

    def unreadable(self: Any) -> str:
        raise OSError("orders.json: permission denied")

    monkeypatch.setattr(env_class, "fingerprint", unreadable)
    with pytest.raises(ScenarioError, match=r"its state could not be read.*permission denied"):
        await fork(db, original, "c2")
