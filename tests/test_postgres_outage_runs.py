"""Runs under way when their PostgreSQL server goes away (issue 24): five headless runs wait
for an approval (`--approve wait`) and two stream events, then the server restarts
(`pg_ctl restart -m fast`) or stops for ten seconds. Every run rides it out: nothing it
recorded is lost or doubled, no write runs unrecorded, `cancel --now` reaches it afterwards,
and the fleet says the store was unreachable, then shows every run as it really is."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import fresh_pg_database, pg_cluster
from store_helpers import last_json, loopdeck, start_runner

from loopdeck.operator.fleet import Fleet
from loopdeck.store.base import Store, StoreUnavailable
from loopdeck.store.opening import open_store

pytestmark = pytest.mark.slow

OUTAGE_ENV = Path(__file__).parent / "envs" / "outage"
WAITING, STREAMING = 5, 2
DOWN_S = 10.0  # the second case: the server is stopped this long (the fault, not a wait)
BOUND_S = 180.0  # a condition not met by then is a failure


async def _until(check: Any, what: str) -> None:
    end = time.monotonic() + BOUND_S
    while not await check():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.1)


async def _rows(store: Store, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """Rows, or none while the store is unreachable (the test reads through it too)."""
    try:
        return await store.fetchall(sql, params)
    except StoreUnavailable:
        return []


class FleetWatch:
    """A fleet refreshed in the background, as the console's home does, noting what it said
    about the store."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.fleet = Fleet()
        self.said: list[str] = []
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        store = await open_store(self.url)
        self.task = asyncio.create_task(self.follow(store))

    async def follow(self, store: Store) -> None:
        try:
            while not self.stop.is_set():
                await self.fleet.refresh(store)
                if self.fleet.outage.text:
                    self.said.append(self.fleet.outage.text)
                await store.wait_for_change(0.1)
        finally:
            await store.close()


@pytest.mark.parametrize("fault", ["restart", "stopped-10s"])
async def test_runs_ride_out_their_postgresql_server(fault, monkeypatch, tmp_path) -> None:
    cluster = pg_cluster()
    url = fresh_pg_database(monkeypatch)
    writes_log = tmp_path / "writes.log"
    monkeypatch.setenv("OUTAGE_LOG", str(writes_log))
    runners = [start_runner(OUTAGE_ENV, "wait-write", url, "--approve", "wait")
               for _ in range(WAITING)]  # fmt: skip
    runners += [start_runner(OUTAGE_ENV, "stream", url) for _ in range(STREAMING)]
    reader: Store | None = None
    watch = FleetWatch(url)
    try:
        reader = await open_store(url)
        waiting, streams = await _runs_under_way(reader)
        await watch.start()

        if fault == "restart":
            await asyncio.to_thread(cluster.restart)
        else:
            await asyncio.to_thread(cluster.stop_server)
            try:
                await _until(lambda: _true(bool(watch.said)), "the fleet saying the store is down")
                await asyncio.sleep(DOWN_S)  # the outage itself
                assert all(runner.poll() is None for runner in runners), "a runner gave up"
            finally:
                await asyncio.to_thread(cluster.start_server)
            assert watch.said[0].startswith("store unreachable since")
            assert watch.said[0].endswith(", retrying")
        back = time.time()

        async def writing_again() -> bool:
            beats = await _rows(reader, "SELECT run_id FROM runs WHERE heartbeat_at > ?", (back,))
            fresh = await _rows(
                reader,
                "SELECT DISTINCT run_id FROM events WHERE kind = 'tool_finished' AND at > ?",
                (_iso(back),),
            )
            return {r[0] for r in beats} >= set(waiting + streams) and {r[0] for r in fresh} >= set(
                streams
            )

        await _until(writing_again, "every runner recording again")
        recovered_s = time.time() - back
        print(f"\n{fault}: every runner recording again {recovered_s:.1f} s after the server")

        # The operator acts after the outage: approvals reach the waiting runs, a kill the
        # streaming ones (their command pollers read through a new connection).
        pending = await _pending(reader, waiting)
        approvals = [_cli("approve", run_id, call_id, db=url) for run_id, call_id in pending]
        kills = [_cli("cancel", run_id, "--now", db=url) for run_id in streams]
        for done in await asyncio.gather(*approvals, *kills):
            assert done.returncode == 0, done.stderr
        outputs = await asyncio.gather(*(asyncio.to_thread(_finish, r) for r in runners))
        summaries = {summary["run_id"]: summary for summary in outputs}
        assert set(summaries) == set(waiting + streams)

        lost, doubled = 0, 0
        for run_id, summary in summaries.items():
            expected = "goal_met" if run_id in waiting else "killed"
            lost += await _check_record(reader, run_id, summary, expected)
        doubled = await _check_writes(reader, writes_log, waiting, streams)
        print(f"{fault}: events lost {lost}, writes doubled {doubled}")
        assert lost == 0 and doubled == 0

        async def fleet_true() -> bool:
            rows = watch.fleet.rows
            return (
                not watch.fleet.outage.text
                and all(run in rows and not rows[run].live for run in summaries)
                and watch.fleet.waiting == 0
            )

        await _until(fleet_true, "the fleet showing every run as stopped")
        for run_id, summary in summaries.items():
            assert watch.fleet.rows[run_id].stop_reason == summary["stop_reason"]
    finally:
        watch.stop.set()
        if watch.task is not None:
            await watch.task
        for runner in runners:
            if runner.poll() is None:
                runner.kill()
                runner.communicate()
        if reader is not None:
            await reader.close()


async def _true(value: bool) -> bool:
    return value


def _iso(stamp: float) -> str:
    """A time as events store theirs."""
    return datetime.fromtimestamp(stamp, UTC).isoformat()


async def _runs_under_way(reader: Store) -> tuple[list[str], list[str]]:
    """The waiting runs once each waits for its write, the streaming ones once each has
    recorded ten tool results."""
    waiting: list[str] = []
    streams: list[str] = []

    async def under_way() -> bool:
        nonlocal waiting, streams
        pending = await _rows(reader, "SELECT run_id FROM approvals WHERE state = 'pending'")
        waiting = sorted({row[0] for row in pending})
        busy = await _rows(
            reader,
            "SELECT e.run_id FROM events e JOIN runs r ON r.run_id = e.run_id"
            " WHERE r.script = 'stream' AND e.kind = 'tool_finished'"
            " GROUP BY e.run_id HAVING COUNT(*) >= 10",
        )
        streams = sorted(row[0] for row in busy)
        return len(waiting) == WAITING and len(streams) == STREAMING

    await _until(under_way, "five runs waiting and two streaming")
    return waiting, streams


async def _pending(reader: Store, waiting: list[str]) -> list[tuple[str, str]]:
    rows = await reader.fetchall("SELECT run_id, call_id FROM approvals WHERE state = 'pending'")
    pending = sorted((row[0], row[1]) for row in rows)
    assert [run for run, _ in pending] == waiting, "each waiting run still waits, once"
    return pending


async def _cli(*argv: str, db: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(loopdeck, *argv, db=db, timeout=BOUND_S)


def _finish(runner: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = runner.communicate(timeout=BOUND_S)
    assert out.strip(), f"runner printed nothing; stderr: {err[-2000:]}"
    return dict(last_json(out))


async def _check_record(reader: Store, run_id: str, summary: dict[str, Any], stop: str) -> int:
    """The run's record is whole: seqs 1..n, each once, one stop, last, with the runner's
    own reason; every call the runner says it executed is there. Returns events missing."""
    rows = await reader.fetchall(
        "SELECT seq, kind, body FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
    )
    seqs = [row[0] for row in rows]
    assert seqs == list(range(1, len(seqs) + 1)), f"{run_id}: a gap or a double in {seqs[-20:]}"
    assert all(json.loads(row[2])["seq"] == row[0] for row in rows)
    kinds = [row[1] for row in rows]
    assert kinds.count("run_stopped") == 1 and kinds[-1] == "run_stopped", run_id
    stopped = json.loads(rows[-1][2])
    assert stopped["stop_reason"] == summary["stop_reason"] == stop, (run_id, stopped)
    run = (await reader.fetchall("SELECT stop_reason FROM runs WHERE run_id = ?", (run_id,)))[0]
    assert run[0] == stop
    executed = {c["call_id"] for c in summary["calls"] if c["status"] == "executed"}
    recorded = {
        json.loads(row[2])["call_id"]
        for row in rows
        if row[1] == "tool_finished" and json.loads(row[2])["status"] == "executed"
    }
    return len(executed - recorded)


async def _check_writes(
    reader: Store, writes_log: Path, waiting: list[str], streams: list[str]
) -> int:
    """Each waiting run's write ran once, after its approval was recorded, and its result is
    recorded; the streams wrote nothing. Returns writes that ran more than once."""
    pids = {
        row[0]: row[1] for row in await reader.fetchall("SELECT run_id, pid FROM runs")
    }  # fmt: skip
    ran = Counter(int(line.split()[0]) for line in writes_log.read_text().splitlines())
    doubled = sum(count - 1 for count in ran.values() if count > 1)
    for run_id in waiting:
        assert ran[pids[run_id]] >= 1, f"{run_id}: its write never ran"
        rows = await reader.fetchall(
            "SELECT seq, kind, body FROM events WHERE run_id = ? AND kind IN"
            " ('approval_decided', 'tool_finished') ORDER BY seq",
            (run_id,),
        )
        decided = [json.loads(r[2]) for r in rows if r[1] == "approval_decided"]
        finished = [json.loads(r[2]) for r in rows if r[1] == "tool_finished"]
        assert len(finished) == ran[pids[run_id]], f"{run_id}: a write ran unrecorded"
        for result in finished:
            approval = [d for d in decided if d["call_id"] == result["call_id"]]
            assert approval and approval[0]["approved"] and approval[0]["seq"] < result["seq"]
    for run_id in streams:
        assert ran[pids[run_id]] == 0
    return doubled
