"""`loopdeck runs`, `pending`, `approve`, `reject`, `answer`, `message`, `cancel`, `pause`,
`resume`, `export`, `attach` and `replay` (and, from `cli/decision_commands.py`, `grants`,
`revoke` and `resolve`; from `cli/verify_command.py`, `verify`): supervising recorded runs
from another process, one function a command, each reaching the store through
`operator/records.py`. Those two modules are imported by the commands that use them: what
`loopdeck runs` loads is what it needs (issue 43: `runs` at 1,000 runs in 0.3 s)."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from collections.abc import Awaitable, Callable

from rich.console import Console, RenderableType
from rich.text import Text

from loopdeck.cli import tables
from loopdeck.core.text import visible
from loopdeck.operator import records
from loopdeck.operator.records import Store

Command = Callable[[Store, argparse.Namespace], Awaitable[int]]


def operator() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except OSError:
        return "cli"


def run_store_command(args: argparse.Namespace) -> int:
    if args.command in ("attach", "replay"):
        from loopdeck.cli.remote import open_remote_console

        return open_remote_console(args)
    if args.command == "verify" and args.export is not None:  # a file, not a store
        from loopdeck.cli import verify_command

        return verify_command.verify_export(args)
    return asyncio.run(_store_command(args))


async def _store_command(args: argparse.Namespace) -> int:
    async with records.opened(args.db, notes=_tell) as store:
        if getattr(args, "run_id", None):  # a unique prefix names its run from here on
            try:
                args.run_id = (await records.named_run(store, args.run_id)).run_id
            except records.StoreError:
                if (queued := await _queued(store, args.run_id)) is None:
                    raise
                return _on_queued(args, queued)
        return await COMMANDS[args.command](store, args)


async def _queued(store: Store, run_id: str) -> str | None:
    """The id of the run submitted and not started yet that `run_id` names (itself, or the
    one such id it starts), else None: it has no row, and no event, until a worker starts it."""
    waiting = [run.run_id for run in await records.runs(store) if run.state == "queued"]
    if run_id in waiting:
        return run_id
    starting = [queued for queued in waiting if queued.startswith(run_id)]
    return starting[0] if len(starting) == 1 else None


def _on_queued(args: argparse.Namespace, run_id: str) -> int:
    """A queued run has nothing to export yet (an empty export: exit 0, nothing written or
    sent); any other command on it is refused as before (exit 2), saying why."""
    said = f"run {run_id} is queued: no worker has started it, so it has no events yet"
    if args.command == "export":
        print(f"loopdeck: {visible(said)}; nothing exported", file=sys.stderr)
        return 0
    print(f"loopdeck: {visible(said)}: nothing to {args.command} (see `loopdeck runs`)",
          file=sys.stderr)  # fmt: skip
    return 2


def _tell(message: str) -> None:
    """The store's notes, and a decision waiting for it (said again when it lands)."""
    print(f"loopdeck: {message}", file=sys.stderr, flush=True)


Json = dict[str, object] | list[dict[str, object]]  # what `--json` prints: one value


def _print(
    value: Json, as_json: bool, table: Callable[[int], RenderableType] | None = None, text: str = ""
) -> None:
    """One JSON value, else the table (made for the terminal's width: only when it is
    printed), else the text."""
    if as_json:
        print(json.dumps(value, default=str))
    elif table is not None:
        console = Console()
        console.print(table(console.width))
    elif text:
        print(text)


async def _runs(store: Store, args: argparse.Namespace) -> int:
    runs = await records.runs(store)
    title = Text(f"runs in {visible(str(store.path))}, newest first")
    # Ids and times never cut; the other columns give way to the terminal's width.
    listed: Json = [run.as_json() for run in runs] if args.json else []
    _print(listed, args.json, lambda width: tables.runs_table(title, runs, width))
    return 0


async def _workers(store: Store, args: argparse.Namespace) -> int:
    """`workers`: each worker the store heard of in the last day, running, silent or stopped."""
    from loopdeck.cli import workers_listing
    from loopdeck.operator.waking import seen_workers

    workers, now = await seen_workers(store)
    if not workers and not args.json:
        print(workers_listing.none_words(store))
        return 0
    listed: Json = [worker.as_json(now) for worker in workers]
    _print(listed, args.json,
           lambda width: workers_listing.workers_table(store, workers, now, width))  # fmt: skip
    return 0


async def _pending(store: Store, args: argparse.Namespace) -> int:
    """What waits for the operator: the writes (an expired one marked so: it takes no
    decision, the run asks again), the questions with the answers they take
    and the unknown outcomes (those two on stderr in the table's form). `--json`: one list,
    each entry's `kind` saying what it is: the writes first (`"write"`, as they always were
    but for that field), then the unknown outcomes (`"outcome"`, `"outcome_unknown": true`),
    then the questions (`"question"`)."""
    from loopdeck.cli import decision_commands, question_commands

    pending, questions = await records.pending(store)
    # What has expired, the same in the table and in `--json`, on the clock a decision is
    # judged on (the server's, on PostgreSQL).
    now = await records.store_now(store)
    unknown = await decision_commands.print_unknown(store)
    question_commands.print_questions(questions)
    decision_commands.print_diffs(pending)
    listed = [{**write.as_json(now), "kind": "write"} for write in pending]
    listed += [{**item.as_json(), "kind": "outcome", "outcome_unknown": True} for item in unknown]
    listed += [question_commands.question_json(question) for question in questions]
    if pending or args.json:
        _print(listed, args.json, lambda width: tables.pending_table(pending, now, width))
    else:
        print("no writes waiting for approval")
    return 0


async def _decide(store: Store, args: argparse.Namespace) -> int:
    """`approve` or `reject`: exit 1 if it will not be carried out (the run ended, another
    decision came first, nothing was pending, the request expired or was asked again), 2 if
    it cannot be taken as written (an edit the call cannot carry out, arguments its schema
    refuses). A run that ended is said first: nothing of it will act on any decision."""
    from loopdeck.cli import decision_commands

    await records.named_run(store, args.run_id)  # not there: said by name
    approved = args.command == "approve"
    reason = "" if approved else args.reason
    asked = await records.asked(store, args.run_id, args.call_id)
    edited, grant = decision_commands.approve_terms(args, asked) if approved else (None, None)
    ended = ""  # an expired asking is the store's to refuse, on its clock, not this host's
    try:
        decision = await records.decide(
            store, args.run_id, args.call_id, approved=approved, by=operator(), reason=reason,
            tell=_tell, args=edited, grant=grant, asked_at=asked.requested_at if asked else None,
        )  # fmt: skip
    except records.RunEnded as exc:
        ended = str(exc)
        state, by = (asked.state, asked.by) if asked else (None, None)
        decision = records.Decision(False, state, by)
    if not decision.won and decision.state == "pending" and not decision.question:
        return _refused(args, await _pending_words(store, args, asked))
    result: dict[str, object] = {
        "run_id": args.run_id,
        "call_id": args.call_id,
        "decided": decision.won,
        "state": decision.state,
    }
    if not decision.won:
        result["message"] = message = _not_decided(args, decision, ended)
        print(f"loopdeck: {visible(args.call_id + ': ' + message)}", file=sys.stderr)
    done = f"{args.call_id}: rejected"
    if approved:
        done = decision_commands.decided_words(args, grant)
    done = done if decision.won else ""
    _print(result, args.json, text=done)
    return 0 if decision.won else 1


async def _pending_words(
    store: Store, args: argparse.Namespace, asked: records.Asked | None
) -> str:
    """Why a decision on a request still pending was not taken: its asking expired before
    it landed (the run asks again, or did: the decision is never applied to the new one)."""
    from loopdeck.cli import decision_commands

    now = await records.asked(store, args.run_id, args.call_id)
    if now is not None and asked is not None and now.expires_at != asked.expires_at:
        return decision_commands.asked_again_words(args, now)
    if now is not None and await records.expired_unanswered(store, args.run_id, args.call_id):
        return decision_commands.expired_words(args, now)
    return "its request is pending but did not take your decision: nothing was decided"


def _refused(args: argparse.Namespace, why: str) -> int:
    """A decision on a request whose asking expired (or was asked again): exit 1."""
    print(f"loopdeck: {visible(why)}", file=sys.stderr)
    refused = {"decided": False, "state": "expired", "message": why}
    _print({"run_id": args.run_id, "call_id": args.call_id, **refused}, args.json)
    return 1


def _not_decided(args: argparse.Namespace, decision: records.Decision, ended: str = "") -> str:
    """Why nothing was decided; `ended`: the run ended (said unless the call was decided)."""
    if decision.state in ("approved", "rejected"):
        return f"already decided: {decision.state} by {decision.by}"
    if decision.state == records.INVALIDATED:
        return (
            f"approved by {decision.by}, and the approval no longer held (the call's state or"
            " arguments moved since): the run asks again, or stopped after its last ask"
        )
    if ended and decision.state == "withdrawn":
        return f"{ended}; its request was withdrawn when the run stopped"
    if ended:
        return ended
    if decision.state == "withdrawn":
        return "its request was withdrawn (the run stopped waiting for it): nothing was decided"
    if decision.state is None:
        return "no such pending call"
    if decision.question:
        return (
            f"is a question the run asked, not a write: answer it with "
            f"`loopdeck answer {args.run_id} TEXT --question {args.call_id}`"
            if decision.state == "pending"
            else f"is a question, already {decision.state} by {decision.by}"
        )
    return f"already decided: {decision.state} by {decision.by}"


async def _answer(store: Store, args: argparse.Namespace) -> int:
    """Exit 1 if no question waits (or not the one `--question` names) or the run ended; 2
    (`NotOffered`, from `records`) if the question does not take it (empty, none of its
    choices, a cap its run would refuse)."""
    from loopdeck.cli import question_commands

    return await question_commands.answer(store, args, operator(), _tell)


async def _ended(store: Store, args: argparse.Namespace) -> bool:
    """Whether the run already ended (said, as the command's refusal): nothing to send."""
    run = await records.named_run(store, args.run_id)
    if run.live:
        return False
    message = f"run {args.run_id} already ended ({run.stop_reason}): nothing to {args.command}"
    print(f"loopdeck: {visible(message)}", file=sys.stderr)
    _print({"run_id": args.run_id, "command": None, "message": message}, args.json)
    return True


async def _message(store: Store, args: argparse.Namespace) -> int:
    """`message`: the operator's words, heard by the model before its next turn (TEXT `-`:
    read from stdin); exit 1 if the run already ended, 2 if there is nothing to say or no
    runner will hear it (gone, stranded on its lost worker: said by name, nothing recorded)."""
    text = sys.stdin.read() if args.text == "-" else args.text
    if not text.strip():
        what = "is empty" if not text else "is nothing but whitespace"
        print(f"loopdeck: message: stdin {what}: nothing to say to the agent", file=sys.stderr)
        return 2
    if await _ended(store, args):
        return 1
    from loopdeck.core.operator_messages import MESSAGE_CAP

    await records.send_message(store, args.run_id, text, operator(), _tell)
    cut = len(text) > MESSAGE_CAP  # the run keeps (and the model hears) its first part
    size = f"{len(text):,} characters" + (f", cut to {MESSAGE_CAP:,}" if cut else "")
    done = f"{args.run_id}: message sent ({size}); the model hears it next turn"
    from loopdeck.operator.waking import waking_words  # a run no worker holds: once one does

    said: dict[str, object] = {
        "run_id": args.run_id, "command": "message", "chars": len(text), "cut": cut
    }  # fmt: skip
    if waits := await waking_words(store, args.run_id, "message", f"message sent ({size})"):
        done = visible(waits)
        said = {**said, "held": False, "message": done}
    _print(said, args.json, text=done)
    return 0


async def _send(store: Store, args: argparse.Namespace) -> int:
    """`cancel` (`--now`: kill), `pause` or `resume`: exit 1 if the run already ended, or
    would do nothing with it (a pause of a paused run, a resume of one not paused); 2 if no
    runner will take it (said by name). A cancel or kill a runner cannot take at once (stranded
    on its lost worker, or its heartbeat silent) is recorded, and said as what will happen."""
    if await _ended(store, args):
        return 1
    verb = args.command if args.command != "cancel" else ("kill" if args.now else "cancel")
    if verb in ("pause", "resume"):  # said when the run would do nothing with it
        if why := await records.pause_or_resume(store, args.run_id, verb, operator(), _tell):
            print(f"loopdeck: {visible(why)}", file=sys.stderr)
            _print({"run_id": args.run_id, "command": verb, "sent": False, "message": why},
                   args.json)  # fmt: skip
            return 1
    elif held := await records.send_command(store, args.run_id, verb, operator(), _tell):
        said = visible(f"{args.run_id}: {verb} recorded; {held.words}")
        _print({"run_id": args.run_id, "command": verb, "sent": True, "ends": held.ends,
                "message": said}, args.json, text=said)  # fmt: skip
        return 0
    sent: dict[str, object] = {"run_id": args.run_id, "command": verb, "sent": True}
    done = f"{args.run_id}: {verb} sent"
    from loopdeck.operator.waking import waking_words  # a run no worker holds: once one does

    if (waits := await waking_words(store, args.run_id, verb, f"{verb} sent")) is not None:
        done = visible(waits)
        sent = {**sent, "held": False, "message": done}
    _print(sent, args.json, text=done)
    return 0


async def _export(store: Store, args: argparse.Namespace) -> int:
    """The run's events as JSON lines, each with its hash in the run's chain (`loopdeck
    verify --export FILE` checks them), or (`--otlp URL`) sent as one OpenTelemetry trace:
    one line, its trace id and spans; exit 2 naming the URL if it was not taken."""
    await records.named_run(store, args.run_id)
    if args.otlp_content and not args.otlp:
        print("loopdeck: --otlp-content goes with --otlp URL", file=sys.stderr)
        return 2
    if args.otlp:
        from loopdeck.operator import otel_export  # the OpenTelemetry SDK: only for this

        try:
            sent = await otel_export.export_run(
                store, args.run_id, args.otlp, content=args.otlp_content
            )
        except otel_export.ExportFailed as exc:
            print(f"loopdeck: {visible(str(exc))}", file=sys.stderr)
            return 2
        print(f"trace {sent.trace_id}: {sent.spans} spans sent to {sent.endpoint}")
        return 0
    async for body in records.event_bodies(store, args.run_id):
        sys.stdout.write(body + "\n")
    return 0


async def _grants(store: Store, args: argparse.Namespace) -> int:
    from loopdeck.cli import decision_commands

    return await decision_commands.grants(store, args)


async def _revoke(store: Store, args: argparse.Namespace) -> int:
    from loopdeck.cli import decision_commands

    return await decision_commands.revoke(store, args, operator())


async def _resolve(store: Store, args: argparse.Namespace) -> int:
    from loopdeck.cli import decision_commands

    return await decision_commands.resolve(store, args, operator(), _tell)


async def _verify(store: Store, args: argparse.Namespace) -> int:
    from loopdeck.cli import verify_command

    return await verify_command.verify(store, args)


COMMANDS: dict[str, Command] = {
    "runs": _runs,
    "pending": _pending,
    "approve": _decide,
    "reject": _decide,
    "answer": _answer,
    "message": _message,
    "cancel": _send,
    "pause": _send,
    "resume": _send,
    "export": _export,
    "grants": _grants,
    "revoke": _revoke,
    "resolve": _resolve,
    "verify": _verify,
    "workers": _workers,
}
