"""The store's side of the CLI: recorded runs, and supervising them from another process."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from loopdeck.core.outcome import RunOutcome
from loopdeck.core.text import capped, visible
from loopdeck.operator.launch import RunOptions, prepare_run
from loopdeck.store import deciding, queries
from loopdeck.store.approver import StoreAnswerer, StoreApprover
from loopdeck.store.base import RUN_ID_SHOWN, Location, Store, StoreError
from loopdeck.store.opening import open_store
from loopdeck.store.runner import RecordedRun
from loopdeck.store.writer import EventWriter

if TYPE_CHECKING:
    from loopdeck.stop_signals import StopSignals


def operator() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except OSError:
        return "cli"


def _say_notes(store: Store) -> None:
    for note in store.notes:  # spilled events brought back, or kept for later
        print(f"loopdeck: {note}", file=sys.stderr)


async def check_store(path: Location | None) -> None:
    store = await open_store(path)
    await store.close()


async def run_recorded_headless(
    options: RunOptions, db: Location | None, signals: StopSignals | None = None
) -> RunOutcome:
    """One run recorded to the store; a stop signal (`signals`, installed by the caller)
    kills it, and a second one abandons it (`RecordedRun.abandon`)."""
    store = await open_store(db)
    _say_notes(store)
    try:
        writer = EventWriter(store, approve_mode=options.approve or "auto")
        wait = options.approve == "wait"
        if wait:
            options = RunOptions(**{**options.__dict__, "approve": None})
        prepared = prepare_run(
            options,
            approver=StoreApprover(store, writer) if wait else None,
            answerer=StoreAnswerer(store, writer) if wait else None,
        )
        run_id = prepared.runtime.config.run_id
        # Said as it starts, so another terminal can attach, approve or stop it by id.
        print(
            f"run {run_id} started · watch: loopdeck attach {run_id} --db {store.path}",
            file=sys.stderr,
        )
        if wait:
            print(
                f"run {run_id}: writes wait for `loopdeck approve {run_id} CALL_ID` "
                f"(db {store.path})",
                file=sys.stderr,
            )
        recorded = RecordedRun(store, prepared.runtime, writer)
        if signals is not None:
            signals.aim(recorded.kill, lambda by: _harder(recorded, by))
        try:
            return await recorded.run()
        finally:
            prepared.cleanup()
            for note in recorded.notes:  # other runners' spills brought back
                print(f"loopdeck: {note}", file=sys.stderr)
            if recorded.persist_error:
                print(f"loopdeck: {recorded.persist_error}", file=sys.stderr)
    finally:
        await store.close()


def _harder(recorded: RecordedRun, by: str) -> None:
    if not recorded.abandon(by):
        print(f"loopdeck: {by}: the run has stopped; its last events are being written",
              file=sys.stderr)  # fmt: skip


def _print(value: Any, as_json: bool, table: Table | None = None, text: str = "") -> None:
    if as_json:
        print(json.dumps(value, default=str))
    elif table is not None:
        Console().print(table)
    elif text:
        print(text)


async def _store_command(args: argparse.Namespace) -> int:
    # Reading or deciding never creates a store: a mistyped path is named, not made empty.
    store = await open_store(args.db, create=False)
    _say_notes(store)
    try:
        return await _dispatch(store, args)
    finally:
        await store.close()


def _tell(message: str) -> None:
    """A decision waiting for the store says so on stderr (and again when it lands)."""
    print(f"loopdeck: {message}", file=sys.stderr, flush=True)


async def _known_run(store: Store, run_id: str) -> dict[str, Any]:
    row = await queries.run_row(store, run_id)
    if row is None:
        shown = capped(run_id, RUN_ID_SHOWN)  # a mistyped id may be a pasted page
        raise StoreError(f"{store.path}: no run {shown!r} (see `loopdeck runs`)")
    return row


async def _dispatch(store: Store, args: argparse.Namespace) -> int:
    command = args.command
    if command == "runs":
        runs = await queries.list_runs(store)
        table = Table(title=f"runs in {store.path}")
        columns: tuple[str, ...] = ("run_id", "env", "script", "model", "state", "stop_reason")
        columns += ("started_at",)
        columns += ("tokens", "cost_usd", "runner")
        for column in columns:
            table.add_column(column)
        table.add_column("outcome unknown")
        for run in runs:
            shown = dict(run)
            if run["paused"]:
                shown["state"] = f"paused ({run['state']})"
            shown["started_at"] = queries.local_time(run["started_at"])
            shown["runner"] = f"{run['host']}:{run['pid']}" if run["host"] else None
            if run["cost_usd"] is not None:
                shown["cost_usd"] = f"{run['cost_usd']:.4f}"
            if run["tokens"] is not None:
                shown["tokens"] = f"{run['tokens']:,}"
            cells = ["-" if shown[c] is None else str(shown[c]) for c in columns]
            cells.append(", ".join(run["outcome_unknown"]) or "-")
            table.add_row(*(Text(visible(cell)) for cell in cells))  # never markup
        _print(runs, args.json, table)
        return 0
    if command == "pending":
        pending = await queries.pending_approvals(store)
        questions = await queries.pending_questions(store)
        for question in questions:
            run_id = visible(question["run_id"])
            print(
                f"{run_id} asks ({visible(question['question_id'])}): "
                f"{visible(question['question'])}  → loopdeck answer {run_id} TEXT",
                file=sys.stderr,
            )
        table = Table(title="writes waiting for approval")
        for column in ("run_id", "call_id", "tool", "args", "expires_at"):
            table.add_column(column)
        for item in pending:
            said = (item["run_id"], item["call_id"], item["tool"], json.dumps(item["args"]))
            table.add_row(*(Text(visible(cell)) for cell in (*said, item["expires_at"])))
        _print(pending, args.json, table)
        return 0
    if command in ("approve", "reject"):
        await _known_run(store, args.run_id)
        approved = command == "approve"
        won = await deciding.decide(
            store, args.run_id, args.call_id, approved=approved, by=operator(),
            reason="" if approved else args.reason, tell=_tell,
        )  # fmt: skip
        state = await queries.approval_state(store, args.run_id, args.call_id)
        result = {
            "run_id": args.run_id,
            "call_id": args.call_id,
            "decided": won,
            "state": state and state["state"],
        }
        if not won:
            message = (
                "no such pending call"
                if state is None
                else f"already decided: {state['state']} by {state['decided_by']}"
            )
            result["message"] = message
            print(f"loopdeck: {args.call_id}: {message}", file=sys.stderr)
        _print(result, args.json, text=f"{args.call_id}: {command.rstrip('e')}ed" if won else "")
        return 0 if won else 1
    if command == "answer":
        await _known_run(store, args.run_id)
        won = await deciding.answer(store, args.run_id, args.text, operator(), tell=_tell)
        if not won:
            print(f"loopdeck: run {args.run_id} has no question waiting", file=sys.stderr)
        _print(
            {"run_id": args.run_id, "answered": won},
            args.json,
            text=f"{args.run_id}: answered" if won else "",
        )
        return 0 if won else 1
    if command in ("cancel", "pause", "resume"):
        run = await _known_run(store, args.run_id)
        if run["state"] not in queries.LIVE_STATES:
            message = (
                f"run {args.run_id} already ended ({run['stop_reason']}): nothing to {command}"
            )
            print(f"loopdeck: {message}", file=sys.stderr)
            _print({"run_id": args.run_id, "command": None, "message": message}, args.json)
            return 1
        verb = command if command != "cancel" else ("kill" if args.now else "cancel")
        await queries.send_command(store, args.run_id, verb, operator())
        _print(
            {"run_id": args.run_id, "command": verb}, args.json, text=f"{args.run_id}: {verb} sent"
        )
        return 0
    if command == "export":
        await _known_run(store, args.run_id)
        seq = 0
        while batch := await queries.events_after(store, args.run_id, seq):
            for row in batch:
                sys.stdout.write(row["body"] + "\n")
            seq = batch[-1]["seq"]
        return 0
    raise AssertionError(command)


def run_store_command(args: argparse.Namespace) -> int:
    if args.command in ("attach", "replay"):
        from loopdeck.tui.remote import open_remote_console

        code: int = open_remote_console(args)
        return code
    return asyncio.run(_store_command(args))
