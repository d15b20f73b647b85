"""Credentials that stop working (issue 37): a PostgreSQL role's password changed under an open
store and under a run waiting for an approval. The login the server refuses is told apart
from a server out of reach and said by name; the waiting run holds, then stops
`policy_block` at its `store_hold_s` naming the refusal; a decision for it is refused by name,
with the old password as with the new one (its runner could not hear it)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import HARNESS, pg_cluster, prepare
from psycopg import sql
from store_helpers import last_json, loopdeck, start_runner, wait_for_pending

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.states import StopReason
from loopdeck.operator.fleet import Fleet
from loopdeck.store.base import Store, StoreRefused, StoreUnavailable
from loopdeck.store.opening import open_store

OUTAGE_ENV = Path(__file__).parent / "envs" / "outage"
BOUND_S = 120.0  # a condition not met by then is a failure
OLD, NEW = "old-secret", "new-secret"
REFUSED_WORDS = "the store refuses loopdeck's login: password authentication failed for user"
_roles = itertools.count(1)


def _role() -> str:
    """A role of its own owning a database of the same name: the session's cluster serves every
    other test as `loopdeck`, whose password stays as it is."""
    cluster = pg_cluster()
    name = f"cred{next(_roles)}_{os.getpid()}"
    with psycopg.connect(cluster.url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
            sql.Identifier(name), sql.Literal(OLD)))  # fmt: skip
        admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(
            sql.Identifier(name), sql.Identifier(name)))  # fmt: skip
    return name


def _url(role: str, password: str) -> str:
    return f"postgresql://{role}:{password}@127.0.0.1:{pg_cluster().port}/{role}"


def _change_password(role: str, password: str) -> None:
    """What an administrator does: a new password, and the role's sessions ended."""
    with psycopg.connect(pg_cluster().url, autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
            sql.Identifier(role), sql.Literal(password)))  # fmt: skip
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
        )


async def _until(check: Any, what: str) -> None:
    end = time.monotonic() + BOUND_S
    while not await check():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.05)


async def _works(store: Store) -> bool:
    try:
        await store.fetchall("SELECT 1")
    except StoreUnavailable:
        return False
    return True


async def _in_a_transaction(store: Store) -> None:
    async with store.transaction("r1") as tx:
        await tx.execute("SELECT 1")


class Waiting:
    """An approver whose decision comes only when the test gives it (`decide`)."""

    def __init__(self) -> None:
        self.asked: list[ApprovalRequest] = []
        self.decision: asyncio.Future[ApprovalDecision] | None = None

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        self.decision = asyncio.get_running_loop().create_future()
        self.asked.append(request)
        return await self.decision


async def _asked(approver: Waiting) -> bool:
    return bool(approver.asked)


DETAIL = f'postgresql://r@db/d: {REFUSED_WORDS} "r"'


async def test_a_run_told_its_login_is_refused_stops_at_its_bound_while_it_waits() -> None:
    """A run waiting for a decision it can no longer hear (its runner's reads are refused)
    holds, said once by name, and stops `policy_block` at `store_hold_s`, its write never run."""
    approver = Waiting()
    prepared, rec = prepare(HARNESS, "note", approver=approver)
    runtime = prepared.runtime
    runtime.config = runtime.config.model_copy(update={"store_hold_s": 0.3})
    try:
        task = asyncio.create_task(runtime.run())
        await _until(lambda: _asked(approver), "the write waiting for its approval")
        runtime.recording.refused("login refused", DETAIL)
        runtime.recording.refused("login refused", DETAIL)  # every refused read says it
        outcome = await task
    finally:
        prepared.cleanup()
    assert outcome.stop_reason is StopReason.POLICY_BLOCK
    assert outcome.detail == (
        f"the store refuses loopdeck's login for 0.3 s ({DETAIL}): stopped rather than act"
        " unrecorded"
    )
    held = rec.kinds("recording_held")
    assert [(h.cause, h.detail, h.bound_s) for h in held] == [("login refused", DETAIL, 0.3)]
    assert len(outcome.recording_held) == 1
    assert outcome.recording_held[0].startswith("the store refuses loopdeck's login since")
    assert outcome.recording_held[0].endswith("stopped")
    assert [e.status.value for e in rec.kinds("tool_finished")] == ["withdrawn"]


async def test_a_login_accepted_again_ends_the_hold_and_the_run_goes_on() -> None:
    approver = Waiting()
    prepared, rec = prepare(HARNESS, "note", approver=approver)
    runtime = prepared.runtime
    runtime.config = runtime.config.model_copy(update={"store_hold_s": 0.3})
    try:
        task = asyncio.create_task(runtime.run())
        await _until(lambda: _asked(approver), "the write waiting for its approval")
        runtime.recording.refused("login refused", DETAIL)
        runtime.recording.accepted()
        runtime.recording.accepted()  # every read that works says it
        decision = approver.decision
        assert decision is not None
        approved = ApprovalDecision(call_id=approver.asked[0].call_id, approved=True, by="test")
        # Decided only past the bound that no longer holds: a stop armed still would come first.
        asyncio.get_running_loop().call_later(0.6, decision.set_result, approved)
        outcome = await task
    finally:
        prepared.cleanup()
    assert outcome.stop_reason is StopReason.GOAL_MET
    assert [e.cause for e in rec.kinds("recording_resumed")] == ["login refused"]
    assert outcome.recording_held[0].endswith("resumed")


async def test_a_refused_login_is_said_by_name_not_as_unreachable() -> None:
    role = _role()
    store = await open_store(_url(role, OLD))
    try:
        await asyncio.to_thread(_change_password, role, NEW)
        for attempt in (store.fetchall("SELECT 1"), store.execute("SELECT 1"),
                        _in_a_transaction(store)):  # fmt: skip
            with pytest.raises(StoreRefused, match=REFUSED_WORDS) as raised:
                await attempt
            assert raised.value.cause == StoreUnavailable.REFUSED
            assert "unreachable" not in str(raised.value) and OLD not in str(raised.value)
        fleet = Fleet()
        await fleet.refresh(store)
        assert fleet.outage.text.startswith("the store refuses loopdeck's login since")
        assert f'(password authentication failed for user "{role}"), retrying' in (
            fleet.outage.text
        )
        with pytest.raises(StoreRefused, match=REFUSED_WORDS):
            await open_store(_url(role, OLD))
        await asyncio.to_thread(_change_password, role, OLD)  # put right: the store answers
        await _until(lambda: _works(store), "a statement once the password is right again")
    finally:
        await store.close()


@pytest.mark.slow
async def test_a_run_whose_login_is_refused_holds_then_stops_by_name() -> None:
    role = _role()
    old, new = _url(role, OLD), _url(role, NEW)
    hold_s = 2
    runner = start_runner(
        OUTAGE_ENV, "wait-write", old, "--approve", "wait", "--set", f"store_hold_s={hold_s}"
    )
    try:
        pending = await wait_for_pending(old, timeout=BOUND_S)
        run_id, call_id = pending["run_id"], pending["call_id"]
        await asyncio.to_thread(_change_password, role, NEW)
        done = await asyncio.to_thread(loopdeck, "approve", run_id, call_id, db=old)
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert REFUSED_WORDS in done.stderr and "Traceback" not in done.stderr

        out, err = await asyncio.to_thread(runner.communicate, timeout=BOUND_S)
        summary = last_json(out)
        assert summary["stop_reason"] == "policy_block", (summary, err[-2000:])
        detail = summary["detail"]
        assert detail.startswith(f"the store refuses loopdeck's login for {hold_s} s (")
        assert REFUSED_WORDS in detail and OLD not in detail and NEW not in detail
        assert summary["recording_held"][0].startswith("the store refuses loopdeck's login since")
        assert summary["recording_held"][0].endswith("stopped")
        assert all(call["status"] != "executed" for call in summary["calls"])

        store = await open_store(new)  # its spilled record is brought back as it opens
        try:
            rows = await store.fetchall(
                "SELECT kind, body FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
            )
            state = await store.fetchall("SELECT state FROM approvals WHERE run_id = ?", (run_id,))
        finally:
            await store.close()
        held = [json.loads(body) for kind, body in rows if kind == "recording_held"]
        assert [h["cause"] for h in held] == ["login refused"]
        assert REFUSED_WORDS in held[0]["detail"] and held[0]["bound_s"] == hold_s
        assert rows[-1][0] == "run_stopped" and json.loads(rows[-1][1])["detail"] == detail
        assert [row[0] for row in state] == ["withdrawn"]
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.communicate()


@pytest.mark.slow
async def test_a_decision_its_runner_cannot_hear_is_refused() -> None:
    """With the right password: the decision would land, but the runner, its login refused,
    would never read it (and the write would read later as one whose outcome is unknown)."""
    role = _role()
    old, new = _url(role, OLD), _url(role, NEW)
    silence_s = 2.0
    runner = start_runner(
        OUTAGE_ENV, "wait-write", old, "--approve", "wait", "--set", "store_hold_s=600"
    )
    try:
        pending = await wait_for_pending(old, timeout=BOUND_S)
        run_id, call_id = pending["run_id"], pending["call_id"]
        await asyncio.to_thread(_change_password, role, NEW)
        store = await open_store(new)
        try:

            async def silent() -> bool:
                beat = await store.fetchall("SELECT heartbeat_at FROM runs")
                return time.time() - beat[0][0] > silence_s + 0.5

            await _until(silent, "the runner's heartbeat silent")
            done = await asyncio.to_thread(
                loopdeck, "approve", run_id, call_id, db=new,
                env={"LOOPDECK_CRASH_SILENCE_S": str(silence_s)},
            )  # fmt: skip
            assert done.returncode == 2, (done.stdout, done.stderr)
            assert "Traceback" not in done.stderr
            said = " ".join(done.stderr.split())
            assert f"run {run_id}'s runner (pid {runner.pid} on " in said
            assert "has not reached the store for" in said
            assert "the store may refuse its login" in said
            assert f"it cannot hear your approval of {call_id}, so nothing was recorded" in said
            state = await store.fetchall("SELECT state FROM approvals WHERE run_id = ?", (run_id,))
            assert [row[0] for row in state] == ["pending"]
        finally:
            await store.close()
        assert runner.poll() is None  # still holding: its bound is far off
    finally:
        runner.kill()
        runner.communicate()
