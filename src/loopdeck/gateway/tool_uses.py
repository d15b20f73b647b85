"""The tool uses of one answer, decided before the agent sees it. Each is recorded as a call
(`CallProposed`, its risk and where that came from), keyed by the guard on (tool and label,
its input less the fields the agent renews per call, the folder's hash). A repeat from an
unchanged folder is put to the operator (`loop_say`): allowed, it goes on as any call; else it
is replaced by text telling the model so (a `stop`, or nobody answering, stops the run
`no_progress` once the answer is out). A read is released; a write is held for the operator
through the run's one approval loop (`RunHost.until_held`, the receipt bound to its input and
the folder's hash): approved, released as it was; edited, released with the operator's input
(recorded with both); rejected, replaced by text carrying the reason in the words of whoever
decided (`rejected_words`). Every tool use of the answer is decided before the answer is
released, together. A tool use the same answer holds twice is one call: the first copy is
decided, the second replaced by text saying so and what became of the first
(`refused_duplicate`, no repeat: nothing has run from that state yet), the run going on.

An agent whose connection closed while its answer was being decided (its client timed out)
gets nothing: the write held for the operator is withdrawn (`ApprovalWithdrawn`) and each call
of the answer recorded `withdrawn`, not delivered (`Undelivered`); the guard forgets them, so
the client's retry of the request is no repeat. One whose connection closed once the answer
was settled, before it reached the agent, is told to the run (`lost`): each call the answer
released is recorded `withdrawn` likewise, its permit let go, forgotten by the guard and taken
back off the tool-call cap (it never ran).

A released write permits the files it names to change (any file, for a command or a patch
that names none, each such change listed as a finding) until the agent sends its result
(`ChangeWatch`); a command's permit whose result never came is withdrawn when the agent exits,
so what changed after its last request is unrequested; a write naming files explains what
they hold at the look after the agent's exit (it ran the write and exited, as `claude -p
--max-turns` does on its last turn).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any

from loopdeck.core.canonical import canonical_args
from loopdeck.core.control import StopRun
from loopdeck.core.decided_by import refused_words
from loopdeck.core.events import CallStatus
from loopdeck.core.guard import GuardKey, guard_key
from loopdeck.core.outcome import CallRecord
from loopdeck.core.run_host import RunHost
from loopdeck.core.schema_args import args_model_for
from loopdeck.core.states import RunState, StopReason
from loopdeck.core.text import capped
from loopdeck.core.tools import ErrorCode, ToolSpec
from loopdeck.core.workspace_changes import ChangeWatch, commanded_words
from loopdeck.core.write_approvals import Approved, Rejected
from loopdeck.gateway.answer import Release, Replace, ToolResult, ToolUse, Verdict
from loopdeck.gateway.config import GatewaySettings
from loopdeck.gateway.evidence import diff_of, label, named_paths
from loopdeck.gateway.workspace import tool_spec
from loopdeck.workdir.volatile import renewed, steady

REPEATED = "repeats a call made from this same state of the folder"
DECIDED = frozenset({CallStatus.REJECTED, CallStatus.BLOCKED_REPEAT, CallStatus.REFUSED_DUPLICATE})
UNDELIVERED = "not delivered: the agent's connection closed while its answer was decided"
UNSEEN = (
    "a tool the request does not declare (its stored prompt's, or one an earlier answer loaded"
    " in a conversation the upstream keeps): a write whatever its name, until `--tool"
    " NAME=read` says otherwise"
)
RAN_UNASKED = "run by the upstream before loopdeck saw its answer: nobody was asked"
LOST = "not delivered: the agent's connection closed after its answer was decided, before it got it"


class Undelivered(Exception):
    """The agent went away before its answer was decided: nothing of it is released."""


class ToolUses:
    def __init__(self, host: RunHost, settings: GatewaySettings) -> None:
        self.host = host
        self.settings = settings
        self.watch = ChangeWatch()
        self.pending: dict[str, CallRecord] = {}  # released, its result not sent yet
        self.first_of: dict[str, str] = {}  # fingerprint -> the call that first had it
        self.stop_after: StopRun | None = None  # the guard's stop, once the answer is out
        self._records: dict[str, tuple[CallRecord, ToolUse]] = {}
        self._keys: dict[str, list[GuardKey]] = {}  # a call of this answer's -> its guard keys
        self._sent_keys: dict[str, list[GuardKey]] = {}  # ... of a released call, till it ends

    async def look(self, after: str) -> None:
        """A change of the folder that no released write explains: named (`unrequested`)."""
        changes = self.watch.look(await self.host.snapshot())
        if changes.commanded:
            self.host.finding(commanded_words(after, changes))
        if changes:
            self.host.unrequested(after, changes)

    async def decide(
        self,
        uses: list[ToolUse],
        schemas: dict[str, Any],
        gone: asyncio.Event | None = None,
        unseen: frozenset[str] = frozenset(),
    ) -> dict[str, Verdict]:
        """Each use's verdict; `Undelivered` once `gone` is set while a write is held.
        `unseen`: tools the request brought without declaring them (`ApiFormat.unseen`)."""
        verdicts: dict[str, Verdict] = {}
        first: dict[str, tuple[CallRecord, str]] = {}  # fingerprint -> its first call, use
        for use in uses:
            record, admitted = await self._propose(use, schemas, use.name in unseen)
            self._records[use.use_id] = (record, use)
            if not admitted and record.fingerprint in first:
                earlier, earlier_use = first[record.fingerprint]
                verdicts[use.use_id] = self._duplicate(record, earlier, verdicts[earlier_use])
            elif not admitted and (replaced := await self._repeat(record)) is not None:
                verdicts[use.use_id] = replaced
            elif record.risk == "read":
                verdicts[use.use_id] = Release()
            else:
                verdicts[use.use_id] = await self._held(use, record, gone)
            first.setdefault(record.fingerprint, (record, use.use_id))
        return verdicts

    def undelivered(self) -> None:
        """The answer being decided never reaches the agent: its calls withdrawn, forgotten
        by the guard."""
        for use_id, (record, _) in self._records.items():
            if record.status not in DECIDED:  # no code: neither refused nor run
                said = {"ok": False, "data": None, "error": {"message": UNDELIVERED}}
                self.host.finish(record, CallStatus.WITHDRAWN, said)
            for key in self._keys.get(use_id, []):
                self.host.forget(key)
        self._records.clear()
        self._keys.clear()

    def released(self, uses: list[ToolUse], verdicts: dict[str, Verdict]) -> None:
        """Counted against the tool-call cap (past it: raises, the answer never goes out),
        then marked running; a write permits what it names."""
        for _ in uses:
            self.host.tool_ran()
        for use in uses:
            record, _ = self._records.pop(use.use_id)
            verdict = verdicts[use.use_id]
            given = verdict.edited if isinstance(verdict, Release) and verdict.edited else use.input
            self._sent_keys[use.use_id] = self._keys.pop(use.use_id, [])
            self.host.running(record)
            self.pending[use.use_id] = record
            if record.risk == "write":
                self.watch.permit(record.call_id, named_paths(given, self.host.workdir))
        self._records.clear()
        self._keys.clear()

    def result_came(self, use_id: str) -> CallRecord | None:
        """The released call `use_id` names, its result come (None: none waits for one)."""
        self._sent_keys.pop(use_id, None)
        return self.pending.pop(use_id, None)

    def lost(self, use_ids: list[str]) -> list[str]:
        """The released calls of an answer that never reached the agent (its connection
        closed once it was settled): each whose result has not come recorded `withdrawn`,
        not delivered, its permit let go and the guard forgetting it (the client's retry is
        no repeat); their call ids."""
        withdrawn = []
        for use_id in use_ids:
            keys = self._sent_keys.pop(use_id, [])
            if (record := self.pending.pop(use_id, None)) is None:
                continue  # its result came: it did reach the agent
            said = {"ok": False, "data": None, "error": {"message": LOST}}
            self.host.finish(record, CallStatus.WITHDRAWN, said)
            self.host.tool_withdrawn()  # counted as released, it never ran
            self.watch.permits.pop(record.call_id, None)
            for key in keys:
                self.host.forget(key)
            withdrawn.append(record.call_id)
        return withdrawn

    async def ran_unasked(self, use: ToolUse, result: ToolResult) -> None:
        """A call the upstream ran before loopdeck saw the answer (a remote MCP server that
        runs its calls unasked): recorded as it happened, a write proposed and executed (or
        failed) with what its run said, never refused, and the operator told plainly."""
        host = self.host
        if use.name not in host.tools:
            risk, source = self.settings.risks.risk_of(use.name)
            host.add_tool(tool_spec(use.name, None, risk, source, use.fixed))
        args, keyed = self._args(host.tools[use.name], use.input)
        record, _ = await host.propose(use.name, label(use.input), args, RAN_UNASKED, keyed, True)
        text = capped(result.text, 2000)
        if result.is_error:
            host.finish(record, CallStatus.FAILED, failed(ErrorCode.TOOL_ERROR, text))
        else:
            host.finish(record, CallStatus.EXECUTED, {"ok": True, "data": {"output": text}})
        server, _, tool = use.name.removeprefix("mcp__").partition("__")
        given = capped(json.dumps(use.input) if isinstance(use.input, dict) else use.input, 500)
        outcome = "it failed" if result.is_error else "it ran"
        host.finding(
            f"{record.call_id} RAN upstream: OpenAI ran the remote MCP server `{server}`'s tool"
            f" `{tool}` with {given} on its own servers before loopdeck saw the answer (the"
            f" server runs its calls unasked); nobody decided it and it cannot be undone;"
            f" {outcome}: {capped(text, 300)}"
        )

    async def _propose(
        self, use: ToolUse, schemas: dict[str, Any], unseen: bool
    ) -> tuple[CallRecord, bool]:
        """The use recorded as a call. A tool the request does not declare (`unseen`: a stored
        prompt's, an earlier answer's) is a write, whatever loopdeck's defaults say of its
        name, unless the operator named it."""
        host = self.host
        if use.name not in host.tools:
            risk, source = self.settings.risks.risk_of(use.name)
            host.add_tool(tool_spec(use.name, schemas.get(use.name), risk, source, use.fixed))
        spec = host.tools[use.name]
        args, keyed = self._args(spec, use.input)
        held = unseen and spec.risk == "read" and use.name not in self.settings.risks.overrides
        record, admitted = await host.propose(
            use.name, label(use.input), args, UNSEEN if held else spec.risk_source, keyed, held
        )
        if admitted:
            self.first_of.setdefault(record.fingerprint, record.call_id)
            said = f"{use.name} {label(use.input)}"
            key = guard_key(said, args if keyed is None else keyed, record.state_hash)
            self._keys[use.use_id] = [key]
        return record, admitted

    def _args(
        self, spec: ToolSpec, value: dict[str, Any] | str
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The input as shown, approved and recorded (all of it), and as the guard keys it
        when that differs: less what the agent renews per call (None: keyed as shown)."""
        if not isinstance(value, dict):
            return self._judged(spec, {"input": value}), None
        keyed = steady(value, self.settings.volatile)
        whole = self._judged(spec, value)
        return whole, (None if keyed == value else self._judged(spec, keyed))

    @staticmethod
    def _judged(spec: ToolSpec, data: dict[str, Any]) -> dict[str, Any]:
        """A freeform tool's text as `input`; checked by the tool's declared schema where it
        passes."""
        for model in (spec.args_model, args_model_for(spec.name, None)):
            try:
                return canonical_args(model, data)
            except ValueError:
                continue
        return {"input": capped(str(data), 4000)}

    async def _repeat(self, record: CallRecord) -> Verdict | None:
        """The operator's say on a repeat; None when they allow it once."""
        host = self.host
        host.guard_tripped(record)
        say, nudge, by = await host.loop_say(record, self.first_of.get(record.fingerprint))
        if say == "allow":
            return None
        said = f"{record.tool} {REPEATED}"
        host.finish(record, CallStatus.BLOCKED_REPEAT, failed(ErrorCode.REPEATED_CALL, said))
        if say != "nudge":
            stopped = f"; stopped by {by}" if say == "stop" else ""
            self.stop_after = StopRun(StopReason.NO_PROGRESS, f"{said} ({record.call_id}){stopped}")
        text = f"loopdeck: {said}; it was not run: from the same state it cannot do anything new."
        return Replace(text + (f" The operator says: {nudge}" if say == "nudge" else ""))

    def _duplicate(self, record: CallRecord, first: CallRecord, decided: Verdict) -> Verdict:
        """The second copy of a call in one answer, said by what became of the first."""
        said = f"{record.tool} is the same call as {first.call_id} in this same answer"
        host = self.host
        host.finish(record, CallStatus.REFUSED_DUPLICATE, failed(ErrorCode.REPEATED_CALL, said))
        if isinstance(decided, Release):
            return Replace(f"loopdeck: {said}; only {first.call_id} is carried out.")
        fate = first.status.value.replace("_", " ")
        return Replace(
            f"loopdeck: {said}; neither is carried out ({first.call_id} was not: {fate})."
        )

    async def _held(self, use: ToolUse, record: CallRecord, gone: asyncio.Event | None) -> Verdict:
        """A write, asked of the operator (or the run's approver) until an approval holds."""
        diff = diff_of(use.input)  # a patch's text; an edit's diff is the approval's own

        async def carry_out(got: Approved) -> Approved:
            return got  # the agent carries it out, once the answer is released

        got = await self._unless_gone(self.host.until_held(record, diff, carry_out), gone)
        if isinstance(got, Rejected):
            host = self.host
            host.finish(record, CallStatus.REJECTED, failed(ErrorCode.REJECTED, got.reason))
            return Replace(rejected_words(record, got.reason))
        if not got.changes:
            return Release()
        if isinstance(use.input, str):
            said = got.args.get("input")
            edited: dict[str, Any] | str = said if isinstance(said, str) else str(said)
        else:
            edited = {**renewed(use.input, self.settings.volatile), **got.args}
        # The call is now the edited one: recorded so, and keyed by the guard as proposed.
        spec = self.host.tools[use.name]
        args, keyed = self._args(spec, edited)
        fingerprint = self.host.edited(record, use.name, label(edited), args, keyed)
        self.first_of.setdefault(fingerprint, record.call_id)
        said = f"{use.name} {label(edited)}"
        key = guard_key(said, args if keyed is None else keyed, record.state_hash)
        self._keys.setdefault(use.use_id, []).append(key)
        return Release(edited)

    async def _unless_gone(
        self, holding: Awaitable[Approved | Rejected], gone: asyncio.Event | None
    ) -> Approved | Rejected:
        """The approval loop's result; `Undelivered` (the pending approval withdrawn) once
        `gone` is set first. Whatever stops the wait, the loop has unwound when it returns."""
        if gone is None:
            return await holding
        held = asyncio.ensure_future(holding)
        waiting = asyncio.ensure_future(gone.wait())
        try:
            await asyncio.wait({held, waiting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
            if not held.done():
                held.cancel()
                await asyncio.wait({held})
        if held.cancelled() and gone.is_set():
            self.host.withdraw()
            self.host.move(RunState.DECIDING)
            raise Undelivered
        return held.result()


def rejected_words(record: CallRecord, reason: str) -> str:
    """What the model is told of a rejected write, by who decided it (`decided_by`): the
    operator's reason as theirs; anyone else's (a policy rule, `--approve deny`, loopdeck) as
    the runtime tells its own model, the decider's words (`denied by policy rule RULE: WHY`)."""
    return f"loopdeck: {refused_words(record.tool, record.decided_by, reason)}"


def failed(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"ok": False, "data": None, "error": {"code": code.value, "message": message}}
