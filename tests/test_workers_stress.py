"""Issue 42's stress: worker processes on one store, runs of a resumable env (its orders in a
folder every worker sees), some waiting for approval or an answer. The busiest worker is
killed (kill -9): each of its runs goes on in another within 30 s; no write runs twice, no
decision or answer is lost, each run's events stay one contiguous chain. A worker stopped
(SIGSTOP) until its leases move, then continued, appends nothing and runs nothing."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import fresh_pg_database
from worker_helpers import BOUND_S, options, stored, writes

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.events import ApprovalDecided, QuestionAnswered, RunMoved, RunStopped
from loopdeck.operator.placement import submit
from loopdeck.store import deciding, outcome_queries, queries
from loopdeck.store.base import Location, Store, StoreError
from loopdeck.store.opening import open_store
from loopdeck.store.verification import verify_run

pytestmark = pytest.mark.slow
LEASE_S = "4"
RESUMED_WITHIN_S = 30.0


def start_worker(db: Location, host: str, slots: int = 40) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "loopdeck", "worker", "--db", str(db), "--slots", str(slots)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "LOOPDECK_HOST": host, "LOOPDECK_LEASE_S": LEASE_S},
    )  # fmt: skip


class Operator:
    """Approves every write that waits and answers every question, as they come, keeping
    what it decided."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.approved: set[tuple[str, str]] = set()
        self.answered: set[tuple[str, str]] = set()
        self.stop = asyncio.Event()

    async def decide(self) -> None:
        while not self.stop.is_set():
            try:
                for item in await queries.pending_approvals(self.store):
                    decision = ApprovalDecision(call_id=item["call_id"], approved=True,
                                                by="operator")  # fmt: skip
                    if await deciding.decide(self.store, item["run_id"], decision):
                        self.approved.add((item["run_id"], item["call_id"]))
                for asked in await queries.pending_questions(self.store):
                    if await deciding.answer(self.store, asked["run_id"], "ORD-1042", "operator",
                                             question_id=asked["question_id"]):  # fmt: skip
                        self.answered.add((asked["run_id"], asked["question_id"]))
            except StoreError:
                pass
            await asyncio.sleep(0.3)


async def until(check: Any, what: str, bound: float = BOUND_S) -> None:
    end = time.monotonic() + bound
    while not await check():
        assert time.monotonic() < end, f"never happened: {what}"
        await asyncio.sleep(0.1)


async def holders(store: Store) -> dict[str, int]:
    rows = await store.fetchall(
        "SELECT host, COUNT(*) FROM leases WHERE state = 'held' GROUP BY host"
    )
    return {str(row[0]): int(row[1]) for row in rows}


async def all_ended(store: Store, ids: list[str]) -> bool:
    rows = await store.fetchall("SELECT COUNT(*) FROM leases WHERE state = 'ended'")
    return int(rows[0][0]) == len(ids)


async def submit_runs(db: Location, root: Path, solve: int, waiting: int, asking: int) -> list[str]:
    ids = []
    step = ["data.step_s=1.0"]
    for count, script, approve in ((solve, "solve", "auto"), (waiting, "solve", "wait"),
                                   (asking, "ask-first", "wait")):  # fmt: skip
        for _ in range(count):
            run = options(root, script, approve)
            run.settings += step
            ids.append(await submit(db, run))
    return ids


async def check_every_run(store: Store, root: Path, ids: list[str], operator: Operator) -> None:
    """No write ran twice; no decision or answer lost; each log one contiguous chain."""
    for run_id in ids:
        log = await stored(store, run_id)
        assert [e.seq for e in log] == list(range(1, len(log) + 1)), run_id
        proof = await verify_run(store, run_id)
        assert proof.broken is None, (run_id, proof.broken)
        assert isinstance(log[-1], RunStopped), run_id
        unknown = await outcome_queries.outcome_unknown(store, run_id)
        assert log[-1].stop_reason.value == "goal_met" or unknown, (run_id, log[-1].detail)
        ran = collections.Counter(
            (w["tool"], json.dumps(w["args"], sort_keys=True)) for w in writes(root, run_id)
        )
        assert all(n == 1 for n in ran.values()), (run_id, ran)
        decided = collections.Counter(
            e.call_id for e in log if isinstance(e, ApprovalDecided) and e.by == "operator"
        )
        mine = {call for run, call in operator.approved if run == run_id}
        assert set(decided) == mine and all(n == 1 for n in decided.values()), run_id
        heard = {e.question_id for e in log if isinstance(e, QuestionAnswered)}
        assert {q for run, q in operator.answered if run == run_id} <= heard, run_id
    rows = await store.fetchall("SELECT COUNT(*) FROM approvals WHERE state = 'pending'")
    assert int(rows[0][0]) == 0


def stop_all(workers: dict[str, subprocess.Popen[str]]) -> None:
    for process in workers.values():
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.terminate()
    for process in workers.values():
        try:
            process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


async def test_the_busiest_worker_killed_its_runs_go_on_elsewhere(monkeypatch, tmp_path) -> None:
    db = fresh_pg_database(monkeypatch)
    root = tmp_path / "shared"
    workers = {f"host-{i}": start_worker(db, f"host-{i}") for i in range(3)}
    operator_task = None
    store = await open_store(db)
    try:
        ids = await submit_runs(db, root, solve=40, waiting=12, asking=8)
        operator = Operator(store)
        operator_task = asyncio.create_task(operator.decide())

        async def spread() -> bool:  # every run under way, on the three workers
            return len(await holders(store)) == 3 and await started(store, ids)

        await until(spread, "every run claimed by the three workers")
        held = await holders(store)
        busiest = max(held, key=lambda host: held[host])
        mine = [str(r[0]) for r in await store.fetchall(
            "SELECT run_id FROM leases WHERE state = 'held' AND host = ?", (busiest,))]  # fmt: skip
        workers[busiest].kill()  # kill -9
        killed_at = time.time()
        await until(lambda: all_ended(store, ids), "every run ended")
        operator.stop.set()
        took: list[float] = []
        for run_id in mine:
            log = await stored(store, run_id)
            moves = [e for e in log if isinstance(e, RunMoved) and e.was == busiest]
            if not moves:  # it ended before the kill reached it
                assert isinstance(log[-1], RunStopped) and log[-1].at.timestamp() <= killed_at + 1
                continue
            assert moves[0].host != busiest
            took.append(moves[0].at.timestamp() - killed_at)
            assert took[-1] <= RESUMED_WITHIN_S, (run_id, took[-1])
        assert took, f"none of {busiest}'s runs was under way when it was killed"
        await check_every_run(store, root, ids, operator)
        unknown = sum([bool(await outcome_queries.outcome_unknown(store, r)) for r in ids])
        print(
            f"\n{busiest} killed holding {len(mine)} runs: {len(took)} went on elsewhere,"
            f" the last {max(took):.1f}s after the kill; {len(operator.approved)} approvals,"
            f" {len(operator.answered)} answers; {unknown} writes in flight left unknown"
        )
    finally:
        if operator_task is not None:
            operator_task.cancel()
        stop_all(workers)
        await store.close()


async def started(store: Store, ids: list[str], events: int = 6) -> bool:
    """Every run has made `events` events (it is well under way, or done)."""
    rows = await store.fetchall(
        "SELECT run_id FROM events GROUP BY run_id HAVING COUNT(*) >= ?", (events,)
    )
    return len(rows) == len(ids)


async def _ended(store: Store) -> int:
    rows = await store.fetchall("SELECT COUNT(*) FROM leases WHERE state = 'ended'")
    return int(rows[0][0])


async def test_a_stopped_worker_continued_after_its_leases_moved_acts_on_nothing(
    monkeypatch, tmp_path
) -> None:
    db = fresh_pg_database(monkeypatch)
    root = tmp_path / "shared"
    stopped = start_worker(db, "host-stopped")
    workers = {"host-stopped": stopped}
    store = await open_store(db)
    try:
        ids = await submit_runs(db, root, solve=6, waiting=0, asking=0)

        async def under_way() -> bool:
            return (await holders(store)).get("host-stopped") == len(ids) and await started(
                store, ids
            )

        await until(under_way, "the first worker holding every run")
        stopped.send_signal(signal.SIGSTOP)
        workers["host-other"] = start_worker(db, "host-other")

        async def moved() -> bool:  # every run the stopped one held now another's, or ended
            rows = await store.fetchall("SELECT host FROM leases WHERE host = 'host-stopped'")
            return not rows

        await until(moved, "every lease moved off the stopped worker")
        continued_at = time.time()
        stopped.send_signal(signal.SIGCONT)
        await until(lambda: all_ended(store, ids), "every run ended")
        stopped.terminate()
        _, said = stopped.communicate(timeout=60)
        for run_id in ids:
            late = [c for c in _calls(root, run_id)
                    if c["host"] == "host-stopped" and c["at"] > continued_at]  # fmt: skip
            assert late == [], (run_id, late)
            log = await stored(store, run_id)
            assert [e.seq for e in log] == list(range(1, len(log) + 1))
            assert (await verify_run(store, run_id)).broken is None
            assert log[-1].stop_reason.value == "goal_met"  # type: ignore[attr-defined]
            assert [e.host for e in log if isinstance(e, RunMoved)] == ["host-other"]
        assert said.count("left:") + said.count("lease lost") >= 1, said
    finally:
        stop_all(workers)
        await store.close()


def _calls(root: Path, run_id: str) -> list[dict[str, Any]]:
    log = root / run_id / "calls.log"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


async def test_one_host_on_sqlite_a_new_worker_goes_on_after_kill_9(tmp_path) -> None:
    db = tmp_path / "s.db"
    root = tmp_path / "shared"
    store = await open_store(db)  # made first: a worker refuses a store that is not there
    first = start_worker(db, "host-one", slots=10)
    workers = {"first": first}
    try:
        ids = await submit_runs(db, root, solve=6, waiting=2, asking=2)
        operator = Operator(store)
        operator_task = asyncio.create_task(operator.decide())

        async def under_way() -> bool:
            return await started(store, ids)

        await until(under_way, "the worker holding every run")
        first.kill()
        workers["second"] = start_worker(db, "host-one", slots=10)
        await until(lambda: all_ended(store, ids), "every run ended")
        operator.stop.set()
        operator_task.cancel()
        await check_every_run(store, root, ids, operator)
        moved = [run_id for run_id in ids
                 if any(isinstance(e, RunMoved) for e in await stored(store, run_id))]  # fmt: skip
        assert moved, "no run was under way when its worker was killed"
    finally:
        stop_all(workers)
        await store.close()
