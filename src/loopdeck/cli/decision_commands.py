"""The decisions beyond yes and no, from any terminal: `approve --args` (an edit) and
`--grant` (a standing grant), `grants`, `revoke`, `resolve`, and the unknown outcomes
`pending` lists. Each reaches the store through `operator/records.py`."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from loopdeck.core.grant_rules import GrantRule, GrantRuleError
from loopdeck.core.text import visible
from loopdeck.operator import records
from loopdeck.operator.arg_edits import check_edit, told_instead_of
from loopdeck.operator.grant_book import GrantRow
from loopdeck.operator.records import Asked, PendingOutcome, PendingWrite, Store


class BadDecision(ValueError):
    """An edit or a grant that cannot be taken as written (exit 2, nothing decided)."""


def approve_terms(
    args: argparse.Namespace, asked: Asked | None
) -> tuple[dict[str, Any] | None, GrantRule | None]:
    """`approve`'s edit (`--args`) checked against the tool's schema (refused where the call
    cannot carry an edit out), and its grant."""
    edited: dict[str, Any] | None = None
    if args.args is not None:
        text = sys.stdin.read() if args.args == "-" else args.args
        if asked is not None and asked.not_editable:
            raise BadDecision(_not_editable(args, asked.not_editable, text))
        edited, problem = check_edit(text, asked.args_schema if asked else {})
        if edited is None:
            raise BadDecision(f"approve {args.call_id} --args: {problem}; nothing was decided")
    if args.grant is None:
        if args.uses is not None or args.for_s is not None:
            raise BadDecision("--uses and --for shape a grant: give --grant with them")
        return edited, None
    tool, names = (asked.tool, asked.arg_names) if asked else ("", None)
    try:
        grant = GrantRule.parse(args.grant, args.uses, args.for_s, tool=tool, names=names)
    except GrantRuleError as exc:
        raise BadDecision(f"approve {args.call_id} --grant: {exc}; nothing was decided") from None
    return edited, grant


def _not_editable(args: argparse.Namespace, why: str, text: str) -> str:
    """`--args` on a call that cannot carry an edit out: what to do instead, the edit made
    into the rejection that tells the agent (as the console makes it)."""
    edited, _ = check_edit(text, {})
    reason = "Run it with this input instead: JSON"
    if edited is not None:
        reason = told_instead_of(args.call_id, edited, why, "cli").reason
    command = f"loopdeck reject {shlex.quote(args.run_id)} {shlex.quote(args.call_id)}"
    return (
        f"approve {args.call_id} --args: {args.call_id} cannot be approved with other input: "
        f"{why}; nothing was decided. Reject it and tell the agent what to do instead: "
        f"{command} --reason {shlex.quote(reason)}"
    )


def expired_words(args: argparse.Namespace, asked: Asked) -> str:
    """Why a decision on this request was refused: it expired unanswered (on the store's
    clock), and the run takes no decision on it any more (the store refuses one, approval or
    rejection: the run asks again, and only the new request's decision reaches it)."""
    from loopdeck.core.write_approvals import MAX_APPROVAL_ASKS as ASKS

    when = records.local_time(asked.expires_at.isoformat())
    return (
        f"{args.call_id}'s approval request expired unanswered at {when}: nothing was decided;"
        f" the run will ask again (it stops after {ASKS} unanswered asks): decide the new"
        f" request (`loopdeck pending`, then `loopdeck {args.command} {args.run_id}"
        f" {args.call_id}`)"
    )


def asked_again_words(args: argparse.Namespace, asked: Asked) -> str:
    """Why a decision made on one asking is not taken: the run asked again since (the store
    never applies it to a later asking than the one decided)."""
    when = records.local_time(asked.expires_at.isoformat())
    return (
        f"the run asked again (its new request expires at {when}) before your {args.command}"
        f" landed: nothing was decided; check the new request and decide it"
        f" (`loopdeck {args.command} {args.run_id} {args.call_id}`)"
    )


def decided_words(args: argparse.Namespace, grant: GrantRule | None) -> str:
    done = f"{args.call_id}: approved"
    if args.args is not None:
        done += " with your arguments"
    if grant is not None:
        done += f"; granted for {grant.words()} (see `loopdeck grants {args.run_id}`)"
    return done


async def grants(store: Store, args: argparse.Namespace) -> int:
    """Each grant in two lines (a table would cut the rule or the run id at 80 columns)."""
    if args.run_id is not None:
        args.run_id = (await records.named_run(store, args.run_id)).run_id
    rows = await records.grants(store, args.run_id)
    if args.json:
        print(json.dumps([_grant_json(row) for row in rows], default=str))
        return 0
    if not rows:
        print("no grants" + (f" in run {visible(args.run_id)}" if args.run_id else ""))
    for row in rows:
        given = records.local_time(row.given_at.isoformat())
        print(visible(f"{row.grant_id}  run {row.run_id}  {row.tool}: {row.rule}"))
        print(visible(f"    {row.uses_text()} · granted by {row.by} at {given} · {row.state()}"))
    return 0


def _grant_json(row: GrantRow) -> dict[str, object]:
    return {
        "run_id": row.run_id,
        "grant_id": row.grant_id,
        "tool": row.tool,
        "covers": row.rule,
        "used": row.used,
        "uses_left": row.uses_left,
        "expires_at": row.expires_at,
        "by": row.by,
        "state": row.state(),
    }


async def revoke(store: Store, args: argparse.Namespace, by: str) -> int:
    """Exit 1 if the grant is not there or no longer active."""
    args.run_id = (await records.named_run(store, args.run_id)).run_id
    why = await records.revoke(store, args.run_id, args.grant_id, by)
    if why:
        print(f"loopdeck: {visible(why)}", file=sys.stderr)
    result = {"run_id": args.run_id, "grant_id": args.grant_id, "revoked": why is None}
    if args.json:
        print(json.dumps(result))
    elif why is None:
        print(f"{args.grant_id}: revoke sent; the run's next write it covered asks you")
    return 0 if why is None else 1


async def resolve(store: Store, args: argparse.Namespace, by: str, tell: records.Tell) -> int:
    """Exit 1 if the call's outcome is not unknown (already resolved, never asked)."""
    run = await records.named_run(store, args.run_id)
    args.run_id = run.run_id
    applied = args.outcome == "applied"
    why = await records.resolve(store, args.run_id, args.call_id, applied=applied, by=by, tell=tell)
    if why:
        print(f"loopdeck: {visible(why)}", file=sys.stderr)
    result = {"run_id": args.run_id, "call_id": args.call_id, "resolved": why is None}
    if args.json:
        print(json.dumps({**result, "outcome": args.outcome}))
    elif why is None:
        then = (
            "recorded as executed" if applied
            else "recorded as failed; the model may propose it again" if run.live
            else "recorded as failed"  # a run that ended proposes nothing more
        )  # fmt: skip
        print(f"{args.call_id}: {args.outcome} ({then})")
    return 0 if why is None else 1


async def print_unknown(store: Store) -> list[PendingOutcome]:
    """`pending`'s writes whose outcome is unknown, each with the command that resolves it
    (on stderr: stdout keeps its one table or JSON value)."""
    unknown = await records.unknown_outcomes(store)
    for item in unknown:
        run_id, call_id = visible(item.run_id), visible(item.call_id)
        why = UNKNOWN_BECAUSE.get(item.outcome or "", f" ({visible(item.outcome or '')})")
        print(
            f"{run_id} {call_id} {visible(item.tool)}: outcome unknown{why}"
            f"  → loopdeck resolve {run_id} {call_id} applied|not-applied",
            file=sys.stderr,
        )
    return unknown


# Why a write's outcome is unknown, by its recorded outcome ("": none recorded); an
# `outcome_unknown` one says nothing more than "outcome unknown" already does.
UNKNOWN_BECAUSE = {
    "outcome_unknown": "",
    "interrupted": " (interrupted as it ran)",
    "": " (never recorded as ended: its run stopped first)",
}


def print_diffs(writes: Sequence[PendingWrite]) -> None:
    """`pending`'s file writes, each as the diff it makes to the working copy (on stderr:
    stdout keeps its one table or JSON value)."""
    for item in writes:
        if item.diff:
            said = f"{item.run_id} {item.call_id} {item.tool} would change:"
            print(visible(said), file=sys.stderr)
            for line in item.diff.splitlines():
                print(f"    {visible(line)}", file=sys.stderr)
