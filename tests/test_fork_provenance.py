"""A fork and the log it came from: a run whose log is broken up to the fork point is never
forked (a fork would carry the edited events on under a fresh chain); a fork records its
source's hash there (`RunForked.source_hash`), which `verify` checks while the source is in
the store; what the fork was served from its source's log costs it nothing; its trace says it
is a fork, links to its source and keeps every span inside its run's span."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_fork import run_to_end
from worker_helpers import options, stored

from loopdeck.cli import main
from loopdeck.core.events import ModelCalled, RunForked
from loopdeck.core.scenario import ScenarioError
from loopdeck.operator.fork import fork
from loopdeck.operator.otel_fork import FROM_SOURCE, digest
from loopdeck.operator.otel_spans import TraceBuilder
from loopdeck.operator.placement import submit
from loopdeck.store.chain import GENESIS, link
from loopdeck.store.opening import open_store


def _sql(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _rewritten(db: Path, run_id: str) -> None:
    """Event 3 edited and every hash after it made again: the run's own chain holds."""
    rows = _sql(db, "SELECT seq, body, origin FROM events WHERE run_id = ? ORDER BY seq",
                (run_id,))  # fmt: skip
    prev = GENESIS
    for seq, body, origin in rows:
        if seq == 3:
            body = body.replace('"kind"', '"kind" ')
        prev = link(prev, body, origin)
        _sql(db, "UPDATE events SET body = ?, hash = ? WHERE run_id = ? AND seq = ?",
             (body, prev, run_id, seq))  # fmt: skip


async def _source(tmp_path: Path) -> tuple[Path, str]:
    db, root = tmp_path / "s.db", tmp_path / "shared"
    store = await open_store(db)
    try:
        original = await submit(db, options(root))
        await run_to_end(db, store, original)
    finally:
        await store.close()
    return db, original


async def _verify(capsys: pytest.CaptureFixture[str], db: Path, run_id: str) -> tuple[int, str]:
    code = await asyncio.to_thread(main, ["verify", run_id, "--db", str(db)])  # its own loop
    return code, capsys.readouterr().out


async def test_a_run_whose_log_is_broken_before_the_fork_point_is_not_forked(
    tmp_path: Path,
) -> None:
    db, original = await _source(tmp_path)
    _sql(db, "UPDATE events SET body = replace(body, '\"kind\"', '\"kind\" ')"
             " WHERE run_id = ? AND seq = 3", (original,))  # fmt: skip
    with pytest.raises(ScenarioError, match=r"cannot be forked at c5: .*event 3 edited"):
        await fork(db, original, "c5", script="other-address")
    assert _sql(db, "SELECT COUNT(*) FROM leases")[0][0] == 1  # nothing queued


async def test_a_fork_is_checked_against_its_source_and_costs_none_of_its_calls(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db, original = await _source(tmp_path)
    store = await open_store(db)
    try:
        forked = await fork(db, original, "c5", script="other-address")
        await run_to_end(db, store, forked)
        log = await stored(store, forked)
        source = await stored(store, original)
    finally:
        await store.close()
    said = next(e for e in log if isinstance(e, RunForked))
    [(head,)] = _sql(db, "SELECT hash FROM events WHERE run_id = ? AND seq = ?",
                     (original, said.through_seq))  # fmt: skip
    assert said.source_hash == head
    # Served from the log: no tokens, no cost; the source's calls had them.
    served = [e for e in log if isinstance(e, ModelCalled) and e.seq < said.seq]
    assert len(served) == 5 and all(e.cost_usd == 0 and not e.prompt_tokens for e in served)
    paid = [e for e in source if isinstance(e, ModelCalled)]
    assert sum(e.prompt_tokens + e.completion_tokens for e in paid) > 0
    (tokens, _), (source_tokens, _) = (
        _sql(db, "SELECT tokens, cost_usd FROM runs WHERE run_id = ?", (run,))[0]
        for run in (forked, original)
    )
    own = [e for e in log if isinstance(e, ModelCalled) and e.seq > said.seq]
    assert tokens == sum(e.prompt_tokens + e.completion_tokens for e in own) < source_tokens

    code, out = await _verify(capsys, db, forked)
    assert code == 0, out
    assert f"(a fork of {original}: its source's events through {said.through_seq} checked)" in out

    # The source's events rewritten with every hash made again: its own chain holds, but it
    # no longer holds what the fork was made from.
    _rewritten(db, original)
    assert (await _verify(capsys, db, original))[0] == 0
    code, out = await _verify(capsys, db, forked)
    assert code == 1, out
    assert f"{forked}: event {said.seq} edited: it is a fork of {original}" in out
    assert "no longer holds the events it was rebuilt from" in out

    # The fork's trace: marked a fork, linked to its source, every span inside its run's.
    builder = TraceBuilder(events=log)
    for event in log:
        builder.take(event)
    spans = builder.finish()
    [root] = [span for span in spans if span.parent is None]
    assert root.attributes is not None and root.attributes["loopdeck.fork.source"] == original
    assert [link.context.trace_id for link in root.links] == [digest(original, 16)]
    assert all(span.start_time >= root.start_time for span in spans)  # type: ignore[operator]
    assert all(span.end_time <= root.end_time for span in spans)  # type: ignore[operator]
    copied = [s for s in spans if s.attributes and s.attributes.get(FROM_SOURCE)]
    chats = [s for s in copied if s.name.startswith("chat")]
    assert len(chats) == 5 and all(s.attributes["loopdeck.cost_usd"] == 0 for s in chats)  # type: ignore[index]


async def test_a_fork_whose_source_changed_before_a_worker_took_it_is_not_rebuilt(
    tmp_path: Path,
) -> None:
    """Checked again on the worker: the source's events rewritten (every hash made again)
    after the fork was queued, the fork ends `crashed` saying so, nothing of it run."""
    from loopdeck.core.events import RunStopped

    db, original = await _source(tmp_path)
    forked = await fork(db, original, "c5", script="other-address")
    _rewritten(db, original)
    store = await open_store(db)
    try:
        await run_to_end(db, store, forked)
        log = await stored(store, forked)
    finally:
        await store.close()
    [stopped] = [e for e in log if isinstance(e, RunStopped)]
    assert stopped.stop_reason.value == "crashed", stopped.detail
    assert "its source no longer holds the events it was forked from" in stopped.detail
    assert not any(isinstance(e, RunForked) for e in log)


async def test_a_forks_deadline_counts_from_its_own_start_not_its_sources(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A fork is a new run: the agent time its source spent before the fork point is the
    source's, as its tokens and cost are. A source that used 540 of its 600 s leaves its fork
    its whole deadline, not 60 s."""
    from loopdeck.core.budgets import BudgetLedger, Cap
    from loopdeck.core.events import BudgetUpdated, RunStopped

    db, root = tmp_path / "s.db", tmp_path / "shared"
    store = await open_store(db)
    try:
        source = await submit(db, options(root, budget_overrides={"deadline": 600}))
        with monkeypatch.context() as slow:  # the source's agent: nine of its ten minutes
            elapsed = BudgetLedger.elapsed
            slow.setattr(BudgetLedger, "elapsed", lambda ledger: elapsed(ledger) + 540.0)
            await run_to_end(db, store, source)
        spent = [e.usage[Cap.DEADLINE] for e in await stored(store, source)
                 if isinstance(e, BudgetUpdated)]  # fmt: skip
        assert spent and spent[-1][0] >= 540.0 and spent[-1][1] == 600
        forked = await fork(db, source, "c5", script="other-address")
        await run_to_end(db, store, forked)
        log = await stored(store, forked)
    finally:
        await store.close()
    said = next(e for e in log if isinstance(e, RunForked))
    own = [e.usage[Cap.DEADLINE] for e in log if isinstance(e, BudgetUpdated) and e.seq > said.seq]
    assert own and all(limit == 600 for _, limit in own)
    assert max(used for used, _ in own) < 540.0, own
    assert isinstance(log[-1], RunStopped) and log[-1].stop_reason.value != "deadline"
