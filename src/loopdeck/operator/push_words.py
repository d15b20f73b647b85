"""What a push says: the run, its env, each decision it carries (what is asked, the tool, its
risk, until when it stays valid, its one-time link or the CLI command that decides it), and
where the budgets stand.

Arguments, the model's words, a question's text and the guard's or a budget's evidence go in
only with `--notify-content` (as OTLP's `--otlp-content`): the channels are someone else's
servers. Never a secret from loopdeck's environment: the value of every variable whose name
says it is one (`*_KEY`, `*TOKEN*`, `*SECRET*`, `*PASSWORD*`, …) is put out of any push,
content or not.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from loopdeck.core.push_events import DecisionsPushed, Push, PushedWhat, PushFailed
from loopdeck.core.text import capped, moment_words, visible
from loopdeck.operator.entries import answer_forms
from loopdeck.operator.push_channels import UNCONFIRMED
from loopdeck.store.base import Location, is_postgres, shown_location

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASS|AUTH|CREDENTIAL|PRIVATE|COOKIE|SESSION", re.I)
SHORTEST_SECRET = 6  # shorter values are words, not secrets ("1", "true")
CONTENT_CAP = 600  # characters of one decision's content in a push
BODY_CAP = 3500  # a push's whole body (ntfy's JSON limit is 4 KiB; Slack's far more)


@dataclass(frozen=True)
class Asked:
    """One decision as a push says it. `content`: what is said only with --notify-content
    (label, text); `answers`: the choices a question takes (empty: any words)."""

    call_id: str
    what: PushedWhat
    headline: str  # loopdeck's own words: "approve write_file (write)"
    valid_until: datetime | None
    content: tuple[tuple[str, str], ...] = ()
    answers: tuple[str, ...] = ()
    link: str = ""


@dataclass(frozen=True)
class RunAbout:
    """The run a push is about."""

    run_id: str
    env: str
    store: str = ""  # the store's location as `--db` takes it ("" unrecorded): `db_words`
    budgets: dict[str, tuple[float, float]] = field(default_factory=dict)


def secret_values(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Values of the environment's secrets, by the variable that holds them."""
    environ = os.environ if environ is None else environ
    return {
        value: name
        for name, value in environ.items()
        if SECRET_NAME.search(name) and len(value.strip()) >= SHORTEST_SECRET
    }


def without_secrets(text: str, secrets: Mapping[str, str]) -> str:
    for value in sorted(secrets, key=len, reverse=True):
        if value in text:
            text = text.replace(value, f"[{secrets[value]} left out]")
    return text


def budget_words(budgets: Mapping[str, tuple[float, float]]) -> str:
    """`turns 4/30 · tokens 1200/80000 · cost $0.01/$0.50 · deadline 12s/300s`: each cap
    with what was spent of it."""
    said = []
    for name, (used, cap) in budgets.items():
        if name.startswith("cost"):
            said.append(f"cost ${used:.2f}/${cap:.2f}")
        elif name.endswith("_s"):
            said.append(f"{name.removesuffix('_s')} {used:.0f}s/{cap:.0f}s")
        else:
            said.append(f"{name.replace('_', ' ')} {_number(used)}/{_number(cap)}")
    return " · ".join(said)


def _number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def db_words(location: Location | None) -> str:
    """The store as a push's `--db` says it, to be run from any folder: a file by its absolute
    path, a PostgreSQL URL as given but never with its password."""
    if location is None or is_postgres(location):
        return shown_location(location)
    return str(Path(location).expanduser().resolve())


def command(run: RunAbout, asked: Asked) -> str:
    """The CLI command that decides it, from any terminal on the store."""
    db = f" --db {shlex.quote(run.store)}" if run.store else ""
    run_id, call_id = shlex.quote(run.run_id), shlex.quote(asked.call_id)
    if asked.what == "approval":
        return f"loopdeck approve {run_id} {call_id}{db}  (or: loopdeck reject … --reason TEXT)"
    if asked.what == "outcome":
        return f"loopdeck resolve {run_id} {call_id} applied|not-applied{db}"
    choice = "|".join(answer_forms(asked.answers)) if asked.answers else "TEXT"
    # Named: a question asked after this push is never the one this command answers.
    return f"loopdeck answer {run_id} {shlex.quote(choice)} --question {call_id}{db}"


def push_text(
    run: RunAbout,
    asked: Sequence[Asked],
    *,
    content: bool,
    secrets: Mapping[str, str] | None = None,
) -> tuple[str, str]:
    """The push's title and body."""
    secrets = secret_values() if secrets is None else secrets
    many = f"{len(asked)} decisions wait" if len(asked) > 1 else "a decision waits"
    title = f"loopdeck: {many} · run {run.run_id} ({run.env})"
    lines = [f"run {run.run_id} · {run.env}"]
    for number, one in enumerate(asked, 1):
        until = moment_words(one.valid_until) if one.valid_until else ""
        lines.append(f"{number}. {one.headline} [{one.call_id}]")
        if until:
            lines.append(f"   valid until {until}")
        if one.answers:
            lines.append(f"   answers: {', '.join(one.answers)}")
        if content:
            for label, text in one.content:
                lines.append(f"   {label}: {capped(visible(text), CONTENT_CAP)}")
        if one.link:
            lines.append(f"   decide: {one.link}")
        decide = "or" if one.link else "decide from any terminal"
        lines.append(f"   {decide}: {command(run, one)}")
    if run.budgets:
        lines.append(f"budgets: {budget_words(run.budgets)}")
    body = capped("\n".join(lines), BODY_CAP)
    return without_secrets(title, secrets), without_secrets(body, secrets)


def args_text(args: object) -> str:
    return json.dumps(args, ensure_ascii=False, sort_keys=True, default=str)


def pushed_notes(e: Push) -> dict[str, str]:
    """Each decision of a push, what is said of it beside it (the call panel, the inbox):
    `pushed via ntfy, json at 12:03:04 UTC+01:00, link until 12:08:00 UTC+01:00` or `push
    failed at …: why` (a `PushFailed`, or a push recorded before it was, with no channel).
    Its times as the push's text and the link's page say them (`moment_words`)."""
    when = moment_words(e.at)
    if isinstance(e, PushFailed) or not e.channels:
        failed = "; ".join(e.failed) or "no channel took it"
        said = "pushed, never confirmed," if _unconfirmed(e) else "push failed"
        return {d.call_id: f"{said} at {when}: {failed}" for d in e.decisions}
    said = f"pushed via {', '.join(e.channels)} at {when}"
    notes = {}
    for decision in e.decisions:
        until = decision.link_until
        link = f", link until {moment_words(until)}" if until else ""
        notes[decision.call_id] = said + link
    return notes


def take_push(
    e: Push, pushed: dict[str, str], decided: dict[str, str], row: Callable[[str], object]
) -> None:
    """A run view's take of a push (`RunView.pushed`, `decided`): said beside each decision
    while it waits, and after it with who took it (its `row`, if the view shows the call)."""
    for call_id, said in pushed_notes(e).items():
        before, pushed[call_id] = pushed.get(call_id), said
        if row(call_id) is not None and decided.get(call_id, "") in ("", before):
            decided[call_id] = said


def pushed_entry(e: DecisionsPushed) -> tuple[str, str, str]:
    """The transcript's entry of a push: what it carried, where it went, what did not go."""
    return _push_entry(e)


def failed_push_entry(e: PushFailed) -> tuple[str, str, str]:
    """The transcript's entry of a push no channel took: what it was to carry, and why."""
    return _push_entry(e)


def _push_entry(e: Push) -> tuple[str, str, str]:
    ids = ", ".join(f"{d.call_id} ({d.what})" for d in e.decisions)
    if isinstance(e, DecisionsPushed) and e.channels:
        title = f"pushed · {ids} · via {', '.join(e.channels)}"
    elif _unconfirmed(e):
        title = f"pushed, never confirmed · {ids}"
    else:
        title = f"push failed · {ids}"
    body = [f"one-time links to {e.server}" if e.server else "the CLI commands that decide"]
    body += [f"{'' if UNCONFIRMED in why else 'not sent: '}{why}" for why in e.failed]
    return "note", title, "\n".join(body)


def _unconfirmed(e: Push) -> bool:
    """A channel's receiver took the push and never answered: it may have arrived."""
    return any(UNCONFIRMED in why for why in e.failed)
