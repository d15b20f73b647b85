"""Decisions beyond yes and no from any terminal (issue 27), against a runner in another
process, on SQLite and PostgreSQL: two operators editing one call (one wins), a grant from
the CLI and its listing, `resolve` on a live run and on an ended one."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from store_helpers import last_json, loopdeck, open_existing, start_runner, wait_for_pending

from loopdeck.store.base import SCHEMA_VERSION, Location

DECISIONS = Path(__file__).parent / "envs" / "decisions"


async def _pending_call(db: Location, call_id: str) -> str:
    """The run id once `call_id` waits for approval."""
    return str((await wait_for_pending(db, 60.0, call_id))["run_id"])


async def _events(db: Location, run_id: str, kind: str) -> list[dict[str, Any]]:
    store = await open_existing(db)
    assert store is not None
    try:
        rows = await store.fetchall(
            "SELECT body FROM events WHERE run_id = ? AND kind = ? ORDER BY seq", (run_id, kind)
        )
    finally:
        await store.close()
    return [json.loads(row["body"]) for row in rows]


async def _until_event(db: Location, run_id: str, kind: str) -> list[dict[str, Any]]:
    for _ in range(600):
        if found := await _events(db, run_id, kind):
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} never recorded {kind}")


def _finished(runner: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = runner.communicate(timeout=60)
    assert runner.returncode is not None, err
    return dict(last_json(out))


def _approve_at_once(db: Location, run_id: str, edits: list[dict[str, Any]]) -> list[Any]:
    """`loopdeck approve --args` from several terminals at the same moment."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loopdeck",
                "approve",
                run_id,
                "c1",
                "--args",
                json.dumps(edit),
                "--json",
                "--db",
                str(db),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for edit in edits
    ]
    return [(p, *p.communicate(timeout=120)) for p in procs]


@pytest.mark.slow  # seconds of runners in other processes: `make stress` (CI runs it)
async def test_two_operators_edit_the_same_call_and_one_wins(db: Location) -> None:
    runner = start_runner(DECISIONS, "files", db, "--approve", "wait")
    try:
        run_id = await _pending_call(db, "c1")
        refused = loopdeck("approve", run_id, "c1", "--args", '{"path": 1, "content": "x"}', db=db)
        assert refused.returncode == 2
        assert "path: 1 is not of type 'string'" in refused.stderr
        assert "nothing was decided" in refused.stderr
        edits = [{"path": f"src/{who}.txt", "content": who} for who in ("one", "two")]
        results = _approve_at_once(db, run_id, edits)
        codes = sorted(p.returncode for p, _, _ in results)
        assert codes == [0, 1], [(p.returncode, err) for p, _, err in results]
        winner = next(i for i, (p, _, _) in enumerate(results) if p.returncode == 0)
        loser_err = next(err for p, _, err in results if p.returncode == 1)
        assert "already decided: approved by cli:" in loser_err
        for call in ("c2", "c3", "c4", "c5", "c6"):
            await _pending_call(db, call)
            assert loopdeck("approve", run_id, call, db=db).returncode == 0
        summary = _finished(runner)
    finally:
        runner.kill()
    assert summary["stop_reason"] == "goal_met"
    [decided] = [e for e in await _events(db, run_id, "approval_decided") if e["call_id"] == "c1"]
    assert decided["args"] == edits[winner]
    assert decided["changes"][0].startswith('content: "a" → ')
    finished = await _events(db, run_id, "tool_finished")
    assert finished[0]["status"] == "executed"


@pytest.mark.slow
async def test_a_grant_from_the_cli_approves_the_next_calls_and_is_listed(db: Location) -> None:
    runner = start_runner(DECISIONS, "files", db, "--approve", "wait")
    try:
        run_id = await _pending_call(db, "c1")
        bad = loopdeck("approve", run_id, "c1", "--grant", "everything", db=db)
        assert bad.returncode == 2 and "expected exact, tool or FIELD=GLOB" in bad.stderr
        bad = loopdeck("approve", run_id, "c1", "--uses", "2", db=db)
        assert bad.returncode == 2 and "give --grant with them" in bad.stderr
        given = loopdeck("approve", run_id, "c1", "--grant", "path=src/*", "--uses", "3", db=db)
        assert given.returncode == 0, given.stderr
        assert "granted for path=src/*, 3 uses" in given.stdout
        await _pending_call(db, "c5")  # c2, c3, c4 by the grant; c5 asks
        late = loopdeck("reject", run_id, "c3", db=db)  # a granted call is never pending
        assert late.returncode == 1 and "already decided: approved by grant g1" in late.stderr
        listed = last_json(loopdeck("grants", run_id, "--json", db=db).stdout)
        assert [(g["grant_id"], g["used"], g["uses_left"], g["state"]) for g in listed] == [
            ("g1", ["c2", "c3", "c4"], 0, "used up")
        ]
        spent = loopdeck("revoke", run_id, "g1", db=db)
        assert spent.returncode == 1 and "is used up: nothing to revoke" in spent.stderr
        exact = loopdeck("approve", run_id, "c5", "--grant", "exact", db=db)
        assert exact.returncode == 0, exact.stderr
        await _pending_call(db, "c6")
        revoked = loopdeck("revoke", run_id, "g2", db=db)
        assert revoked.returncode == 0, revoked.stderr
        await _until_event(db, run_id, "grant_revoked")
        assert loopdeck("approve", run_id, "c6", db=db).returncode == 0
        summary = _finished(runner)
    finally:
        runner.kill()
    assert summary["stop_reason"] == "goal_met"
    listed = last_json(loopdeck("grants", "--json", db=db).stdout)
    assert [g["state"] for g in listed] == ["used up", "revoked by " + listed[1]["by"]]
    table = loopdeck("grants", run_id, db=db)
    assert "g1" in table.stdout and "path=src/*" in table.stdout


@pytest.mark.slow
async def test_resolve_not_applied_on_a_live_run_lets_the_retry_run_once(db: Location) -> None:
    runner = start_runner(DECISIONS, "retry", db, "--approve", "wait")
    try:
        run_id = await _pending_call(db, "c1")
        assert loopdeck("approve", run_id, "c1", db=db).returncode == 0
        await _pending_call(db, "c2")
        pending = loopdeck("pending", db=db)
        assert f"loopdeck resolve {run_id} c1 applied|not-applied" in pending.stderr
        early = loopdeck("resolve", run_id, "c2", "applied", db=db)
        assert early.returncode == 1 and "c2 is not an approved write" in early.stderr
        done = loopdeck("resolve", run_id, "c1", "not-applied", db=db)
        assert done.returncode == 0, done.stderr
        again = loopdeck("resolve", run_id, "c1", "applied", db=db)
        assert again.returncode == 1 and "outcome is not unknown: it is failed" in again.stderr
        await _until_event(db, run_id, "outcome_resolved")
        for call in ("c2", "c3", "c5"):
            await _pending_call(db, call)
            assert loopdeck("approve", run_id, call, db=db).returncode == 0
        summary = _finished(runner)
    finally:
        runner.kill()
    assert summary["stop_reason"] == "goal_met", summary
    statuses = [(e["call_id"], e["status"]) for e in await _events(db, run_id, "tool_finished")]
    assert statuses == [
        ("c1", "outcome_unknown"), ("c2", "executed"), ("c3", "executed"),
        ("c4", "refused_duplicate"), ("c5", "executed"),
    ]  # fmt: skip
    [resolved] = await _events(db, run_id, "outcome_resolved")
    assert (resolved["applied"], resolved["by"].startswith("cli")) == (False, True)


@pytest.mark.slow  # seconds: `make stress` runs it (CI too)
async def test_resolve_an_ended_runs_unknown_outcome_from_the_cli(db: Location) -> None:
    ran = loopdeck("run", str(DECISIONS), "--script", "retry", "--headless", "--json", db=db)
    run_id = last_json(ran.stdout)["run_id"]
    [listed] = last_json(loopdeck("runs", "--json", db=db).stdout)
    assert listed["outcome_unknown"] == ["c1"]
    unknown = last_json(loopdeck("pending", "--json", db=db).stdout)
    assert [(u["call_id"], u["outcome_unknown"]) for u in unknown] == [("c1", True)]
    done = loopdeck("resolve", run_id, "c1", "applied", "--json", db=db)
    assert done.returncode == 0, done.stderr
    assert last_json(done.stdout) == {
        "run_id": run_id, "call_id": "c1", "resolved": True, "outcome": "applied"
    }  # fmt: skip
    [listed] = last_json(loopdeck("runs", "--json", db=db).stdout)
    assert listed["outcome_unknown"] == []
    [resolved] = await _events(db, run_id, "outcome_resolved")
    assert resolved["applied"] is True
    exported = loopdeck("export", run_id, db=db).stdout.splitlines()
    assert json.loads(exported[-1])["kind"] == "outcome_resolved"


async def test_a_version_2_store_gains_the_decision_columns_when_opened(db: Location) -> None:
    from loopdeck.store.opening import open_store

    store = await open_store(db, create=True)
    try:
        for column in ("edited_args", "grant_rule"):
            await store.execute(f"ALTER TABLE approvals DROP COLUMN {column}")
        await store.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    finally:
        await store.close()
    listed = loopdeck("pending", "--json", db=db)
    assert listed.returncode == 0, listed.stderr
    store = await open_store(db)
    try:
        [version] = await store.fetchall("SELECT value FROM meta WHERE key = 'schema_version'")
        row = await store.fetchall("SELECT edited_args, grant_rule FROM approvals")
    finally:
        await store.close()
    assert version[0] == str(SCHEMA_VERSION) and row == []
