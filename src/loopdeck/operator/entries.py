"""What the store holds for the operator, as the typed entries every front end reads: a run
as listed (`RunEntry`, with where a worker holds it), a write waiting for approval
(`PendingWrite`), a question (`PendingQuestion`), a write whose outcome is unknown
(`PendingOutcome`). One type per fact: the console's inbox (`operator/inbox.py`) and the
command line (`loopdeck runs`, `pending`, `approve`, `answer`, through `operator/records.py`)
read the same ones, built here from the store's rows (`store/queries.py`: rows read by name,
never copied into dicts), each with the JSON the command line prints.

Timestamps the command line prints as the store has them (a run's start and end) stay text:
a stamp the reader cannot parse is shown as it is, never refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, ClassVar

from loopdeck.caps import Cap
from loopdeck.core.budget_answer import read_answer, takes_no_words
from loopdeck.core.text import capped
from loopdeck.store import outcome_queries, queries
from loopdeck.store.base import Store
from loopdeck.store.leases import PARKED, QUEUED

JsonObject = dict[str, Any]  # what `--json` prints of an entry


@dataclass(frozen=True)
class Placement:
    """Where a submitted run is (`loopdeck submit`, `store/leases.py`): `queued` for a worker,
    `held` by one, `parked` (waiting on its operator, no worker's slot); the host that holds
    or last held it, its last move in words and when it was submitted."""

    state: str
    host: str | None
    note: str
    submitted: datetime
    lapsed: bool = False  # held, its lease past its expiry: nobody renews it

    @classmethod
    def from_row(cls, row: Any) -> Placement:
        return cls(
            state=row["state"], host=row["host"], note=row["note"] or row["state"],
            submitted=datetime.fromtimestamp(float(row["submitted_at"]), UTC),
            lapsed=isinstance(row, dict) and bool(row.get("lapsed")),
        )  # fmt: skip

    def as_json(self) -> JsonObject:
        return {
            "state": self.state, "host": self.host, "note": self.note,
            "submitted_at": self.submitted.isoformat(),
        }  # fmt: skip


@dataclass(frozen=True)
class RunEntry:
    """A run as `loopdeck runs` lists it: its row's facts, whether it is paused (only a live
    run is), the writes whose outcome is unknown, and where a worker holds it (None: a run of
    its own process). A queued run has no row yet: its facts are its submitted options."""

    run_id: str
    env: str | None
    script: str | None
    model: str | None
    state: str
    stop_reason: str | None
    started_at: str | None  # ISO 8601 text as stored
    ended_at: str | None
    tokens: int | None
    cost_usd: float | None
    host: str | None
    pid: int | None
    paused: bool
    outcome_unknown: tuple[str, ...] = ()
    placement: Placement | None = None

    @property
    def live(self) -> bool:
        return self.state in queries.LIVE_STATES

    @property
    def runner(self) -> str:
        """Where it runs: host:pid of its process, else its lease's host; "-": none does."""
        if self.placement is not None and self.placement.state in (PARKED, QUEUED):
            return "-"  # parked, or handed back: its last worker is named in its note
        if self.host:
            return f"{self.host}:{self.pid}"
        if self.placement is not None and self.placement.host:
            return self.placement.host
        return "-"

    @property
    def shown_state(self) -> str:
        """Its state in a word: `parked` or `queued` when a worker will take it up, `lease
        expired` when its worker stopped renewing it (none has taken it up yet), `paused`
        when its operator paused it, else its state."""
        if self.placement is not None and self.placement.state in (PARKED, QUEUED):
            return self.placement.state
        if self.placement is not None and self.placement.lapsed:
            return "lease expired"
        return "paused" if self.paused else self.state

    @classmethod
    def from_row(
        cls, row: Any, unknown: Sequence[str] = (), placement: Placement | None = None
    ) -> RunEntry:
        return cls(
            run_id=row["run_id"], env=row["env"], script=row["script"], model=row["model"],
            state=row["state"], stop_reason=row["stop_reason"], started_at=row["started_at"],
            ended_at=row["ended_at"], tokens=row["tokens"], cost_usd=row["cost_usd"],
            host=row["host"], pid=row["pid"],
            paused=row["state"] in queries.LIVE_STATES and bool(row["paused"]),
            outcome_unknown=tuple(unknown), placement=placement,
        )  # fmt: skip

    @classmethod
    def queued(cls, row: Any) -> RunEntry:
        """A submitted run no worker has started: what it was submitted with (not started:
        no start; when it was submitted is its placement's)."""
        options = json.loads(row["options"])
        return cls(
            run_id=row["run_id"], env=options.get("env"), script=options.get("script"),
            model=options.get("model"), state=QUEUED, stop_reason=None,
            started_at=None, ended_at=None, tokens=None, cost_usd=None,
            host=None, pid=None, paused=False, placement=Placement.from_row(row),
        )  # fmt: skip

    def as_json(self) -> JsonObject:
        said: JsonObject = {
            "run_id": self.run_id, "env": self.env, "script": self.script, "model": self.model,
            "state": self.state, "stop_reason": self.stop_reason, "started_at": self.started_at,
            "ended_at": self.ended_at, "tokens": self.tokens, "cost_usd": self.cost_usd,
            "host": self.host, "pid": self.pid, "paused": self.paused,
            "outcome_unknown": list(self.outcome_unknown),
        }  # fmt: skip
        if self.placement is not None:  # only a submitted run has one
            said["placement"] = self.placement.as_json()
        return said


@dataclass(frozen=True)
class PendingWrite:
    """A write of a run that waits for the operator's approval."""

    run_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    env: str  # "env/script" of its run
    expires: datetime
    rationale: str = ""
    plan_step: str = ""
    asked_again: str = ""
    # The tool's argument schema, from the request: what an edit is checked against.
    args_schema: dict[str, Any] = field(default_factory=dict)
    # Why the call cannot run an edit ("" when it can): an edit is told to the agent instead.
    not_editable: str = ""
    pushed: str = ""  # its push to the operator's channels (`--notify`), "" if none
    requested: datetime | None = None
    diff: str = ""  # a file write's change to the working copy, "" for others
    asked_by: dict[str, Any] | None = None  # the rule that sent it to the operator (`DecidedBy`)

    @property
    def key(self) -> str:
        return f"{self.run_id}/{self.call_id}"

    def expired(self, now: datetime) -> bool:
        """Past its expiry: an approval would no longer cover the call."""
        return now >= self.expires

    def as_json(self, now: datetime) -> JsonObject:
        return {
            "run_id": self.run_id, "call_id": self.call_id, "tool": self.tool, "args": self.args,
            "requested_at": None if self.requested is None else self.requested.isoformat(),
            "expires_at": self.expires.isoformat(), "expired": self.expired(now),
            "diff": self.diff, "asked_by": self.asked_by,
        }  # fmt: skip


@dataclass(frozen=True)
class PendingQuestion:
    """A question the run asked the operator; it never expires. `choices`: the answers it
    takes (empty: any words); a budget's pause names its `cap` and what it had `used`."""

    run_id: str
    call_id: str  # the question's id
    question: str
    env: str  # "env/script" of its run
    choices: tuple[str, ...] = ()
    pushed: str = ""
    cap: Cap | None = None
    used: float | None = None
    tool: ClassVar[str] = queries.QUESTION
    plan_step: ClassVar[str] = ""

    @property
    def key(self) -> str:
        return f"{self.run_id}/{self.call_id}"

    def refusal(self, text: str) -> str:
        """Why `text` is not an answer this question takes ("" when it is)."""
        return not_offered(self.choices, text, self.cap, self.used)


@dataclass(frozen=True)
class PendingOutcome:
    """An approved write whose outcome nobody knows (it timed out, raised or was cut short):
    the operator says whether it took effect. `live`: its run still goes on."""

    run_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    env: str  # "env/script" of its run
    live: bool
    pushed: str = ""
    plan_step: ClassVar[str] = ""
    outcome: str | None = None  # `outcome_unknown`, `interrupted`, None: never recorded
    decided_at: str | None = None  # when it was approved, as stored
    run_state: str = ""

    @property
    def key(self) -> str:
        return f"{self.run_id}/{self.call_id}"

    def as_json(self) -> JsonObject:
        return {
            "run_id": self.run_id, "call_id": self.call_id, "tool": self.tool, "args": self.args,
            "decided_at": self.decided_at, "outcome": self.outcome, "state": self.run_state,
            "live": self.live,
        }  # fmt: skip


InboxEntry = PendingWrite | PendingQuestion | PendingOutcome


async def run_entries(store: Store) -> list[RunEntry]:
    """Every run, newest first: the runs submitted and not started yet (newest submitted
    first), then every run the store has a row of, each with its unknown outcomes and where
    a worker holds it. Three reads, whatever the number of runs."""
    rows = await queries.list_runs(store)
    unknown = await outcome_queries.outcomes_unknown(store)
    placed = {row["run_id"]: row for row in await queries.placements(store)}
    listed = []
    for row in rows:
        lease = placed.pop(row["run_id"], None)
        where = None if lease is None else Placement.from_row(lease)
        listed.append(RunEntry.from_row(row, unknown.get(row["run_id"], ()), where))
    waiting = sorted(placed.values(), key=lambda row: -float(row["submitted_at"]))
    return [RunEntry.queued(row) for row in waiting] + listed


async def run_entry(store: Store, run_id: str) -> RunEntry | None:
    """The run named by its exact id (None: the store has no row of it; a run queued and
    not started has none yet)."""
    row = await queries.run_row(store, run_id)
    if row is None:
        return None
    placed = await queries.placements(store, run_id)
    unknown = await outcome_queries.outcome_unknown(store, run_id)
    return RunEntry.from_row(row, unknown, Placement.from_row(placed[0]) if placed else None)


Envs = dict[str, str]  # run id -> "env/script"


async def run_envs(store: Store) -> Envs:
    """Each run's "env/script", as the inbox names a run (read once for all its entries)."""
    return {
        run["run_id"]: f"{run['env'] or ''}/{run['script'] or ''}"
        for run in await queries.all_runs(store)
    }


async def pending_writes(
    store: Store, run_id: str | None = None, envs: Envs | None = None
) -> list[PendingWrite]:
    """The writes waiting for approval (of one run, or of every run), oldest asked first,
    each with what its request event says (rationale, plan step, schema, diff, who asked)."""
    envs = await run_envs(store) if envs is None else envs
    writes = []
    for item in await queries.pending_approvals(store, run_id):
        request = await queries.approval_request(store, item["run_id"], item["call_id"]) or {}
        writes.append(
            PendingWrite(
                run_id=item["run_id"], call_id=item["call_id"], tool=item["tool"] or "",
                args=item["args"], env=envs.get(item["run_id"], "/"),
                expires=datetime.fromisoformat(item["expires_at"]),
                rationale=request.get("rationale") or "",
                plan_step=request.get("plan_step") or "",
                asked_again=request.get("asked_again") or "",
                args_schema=request.get("args_schema") or {},
                not_editable=request.get("not_editable") or "",
                requested=_when(item["requested_at"]),
                diff=str(request.get("diff") or ""), asked_by=request.get("asked_by"),
            )
        )  # fmt: skip
    return writes


def _when(stamp: str | None) -> datetime | None:
    return datetime.fromisoformat(stamp) if stamp else None


async def pending_questions(
    store: Store, run_id: str | None = None, envs: Envs | None = None
) -> list[PendingQuestion]:
    """The questions waiting for an answer, oldest first, with the answers each takes (a
    budget's with its cap and what it had used: its question read again, only for it)."""
    envs = await run_envs(store) if envs is None else envs
    questions = []
    for q in await queries.pending_questions(store, run_id):
        question = PendingQuestion(
            run_id=q["run_id"],
            call_id=q["question_id"],
            question=q["question"],
            env=envs.get(q["run_id"], "/"),
            choices=tuple(q["choices"]),
        )
        if RAISE in question.choices:
            asked = await queries.question_asked(store, question.run_id, question.call_id) or {}
            question = replace(question, **paused_cap(asked))
        questions.append(question)
    return questions


def paused_cap(asked: JsonObject) -> JsonObject:
    """A budget question's cap and what it had used, from its `question_asked` event's body
    (left out, as unknown, when it has none: a question asked before they were recorded)."""
    cap, used = asked.get("cap"), asked.get("used")
    return {
        "cap": Cap.named(cap) if isinstance(cap, str) else None,
        "used": float(used) if isinstance(used, int | float) else None,
    }


async def unknown_outcomes(
    store: Store, run_id: str | None = None, envs: Envs | None = None
) -> list[PendingOutcome]:
    """Approved writes whose outcome nobody knows, oldest approved first."""
    envs = await run_envs(store) if envs is None else envs
    return [
        PendingOutcome(
            run_id=row["run_id"],
            call_id=row["call_id"],
            tool=row["tool"] or "",
            args=json.loads(row["args"] or "{}"),
            env=envs.get(row["run_id"], "/"),
            live=row["state"] in queries.LIVE_STATES,
            outcome=row["outcome"],
            decided_at=row["decided_at"],
            run_state=row["state"],
        )
        for row in await outcome_queries.unknown_outcomes(store, run_id)
    ]


class NotOffered(ValueError):
    """An answer the question does not take: it offers fixed choices and this is none."""


# The fixed choices that take words after them, and what: the question's own text says so
# ("`nudge TEXT`", "`raise N`"), the console's question dialog opens a box for them.
CHOICE_WORDS = {"nudge": "TEXT", "raise": "N"}
RAISE = "raise"  # a budget's choice: its answers are read as the run reads them


def answer_forms(choices: Sequence[str]) -> list[str]:
    """Each choice as it is answered: `stop`, `nudge TEXT`."""
    return [f"{c} {CHOICE_WORDS[c]}" if c in CHOICE_WORDS else c for c in choices]


def not_offered(
    choices: Sequence[str], text: str, cap: Cap | None = None, used: float | None = None
) -> str:
    """Why `text` is not an answer the question takes ("" when it is): never an empty one; a
    budget's (it offers `raise`) as its run reads it (`core/budget_answer.py`: `raise N` above
    what the cap had `used`, when known); another question with fixed choices takes one of
    them (first word, any case), with the words it needs and none after one that takes none;
    one without choices any words."""
    if RAISE in choices:
        said = read_answer(text, cap, used)
        return said if isinstance(said, str) else ""
    if not choices:
        return "" if text.strip() else "the answer is empty: the run would get nothing"
    words = text.strip().split(maxsplit=1)
    first = words[0].lower() if words else ""
    offered = ", ".join(f"`{form}`" for form in answer_forms(choices))
    if first not in choices:
        said = repr(capped(text.strip(), 80)) if first else "an empty answer"
        return f"it offers only {offered}; {said} is not one of them"
    needs = CHOICE_WORDS.get(first)
    if needs is None:  # words after it would be recorded and never carried out
        return "" if len(words) == 1 else takes_no_words(first)
    if len(words) == 2:
        return ""
    return f"`{first}` needs its {needs}: answer `{first} {needs}` (one argument)"
