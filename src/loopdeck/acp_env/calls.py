"""An ACP agent's tool calls as loopdeck's: each recorded as it is proposed (`CallProposed`:
once its input is known; a call started without it is held, `held_calls.py`) and as it ends
(`ToolFinished`), keyed by the guard on (kind and title, canonical input, the working copy's
hash when it is proposed; every form the agent says the input in, `_another_form`); a repeat
blocked unless the agent already runs it (then its end is recorded as the agent says); a
blocked call has one end, recorded when the agent reports it (blocked, or run although
blocked) or, never reported, when its turn ends; its permission asked of the operator like
any write (`WriteApprovals`, the receipt bound to the input and the state), answered with the
agent's allow-once option or its reject option, never allow-always; a file the agent asks
loopdeck to write, a write loopdeck gates and runs once per path, content and state: written
unasked only with the very content a permitted call showed the operator for it, once, in its
turn (`permitted_writes.py`), anything else asked on its own; a permitted call's files, when
it ends, held to that content (`ChangeWatch`); and a terminal the agent asks loopdeck to run,
a write loopdeck gates (unless a permitted call named its command) and starts once
(`terminal_calls.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loopdeck.acp_env.agent_process import AgentProcess
from loopdeck.acp_env.bridge import Bridge, FileWriteAsked, OutsideWorkdir, TerminalAsked
from loopdeck.acp_env.call_input import (
    NOTHING_TO_JUDGE,
    diff_text,
    judged,
    key_form,
    named_paths,
    not_taken,
    past_cap,
    raw_input_of,
)
from loopdeck.acp_env.call_results import failed, result_of
from loopdeck.acp_env.file_writes import write_file
from loopdeck.acp_env.held_calls import HeldCall
from loopdeck.acp_env.permission_options import no_allow_once, option
from loopdeck.acp_env.permitted_writes import held_to
from loopdeck.acp_env.terminal_calls import TerminalCalls, commands_named
from loopdeck.core.canonical import canonical_args, canonical_json
from loopdeck.core.decided_by import refused_words
from loopdeck.core.events import CallStatus
from loopdeck.core.outcome import CallRecord
from loopdeck.core.run_host import RunHost
from loopdeck.core.text import capped
from loopdeck.core.tools import ErrorCode
from loopdeck.core.workspace_changes import Changes, ChangeWatch, commanded_words
from loopdeck.core.write_approvals import Approved, Rejected
from loopdeck.workdir.volatile import steady

REPEATED = "repeated with the same input and no change to the working copy"


class AcpCalls:
    def __init__(
        self,
        host: RunHost,
        agent: AgentProcess,
        bridge: Bridge,
        volatile: frozenset[str] = frozenset(),
        shown_calls: dict[str, tuple[Any, ...]] | None = None,
    ) -> None:
        self.host = host
        self.agent = agent
        self.bridge = bridge
        self.volatile = volatile  # the agent's own list of fields it renews per call
        self.records: dict[str, CallRecord] = {}  # the agent's tool call id -> its record
        self.held: dict[str, HeldCall] = {}  # the agent's calls whose input is not known yet
        # Repeats blocked: each recorded as it ends (`progress`), or as its turn ends.
        self.blocked: set[str] = set()
        # Repeats caught while the agent already ran them: blocked only if they still ask.
        self.caught: set[str] = set()
        self.repeats: set[str] = set()  # every call the guard caught (its say given)
        self.forms: dict[str, set[str]] = {}  # the agent's id -> the forms of it keyed
        self.tripped: str | None = None
        # The files a permitted call may have loopdeck write for it, each once, with the
        # content its permission showed (a file whose content cannot be told is not here).
        self.permitted_writes: dict[Path, set[str]] = {}
        self.shown: dict[str, HeldCall] = {}  # the agent's id -> the call as proposed
        # loopdeck's call id -> the call as its permission showed it: its request's diff
        self.shown_calls = {} if shown_calls is None else shown_calls
        self.written: set[str] = set()
        self.notes: list[str] = []
        self.unknown_updates = 0
        self.diffs: dict[str, str] = {}  # the agent's id -> its diffs, for the operator
        self.past_cap: dict[str, str] = {}  # the agent's id -> why its input is not taken
        self.first_of: dict[str, str] = {}  # fingerprint -> the call that first had it
        self.nudged = False  # the operator's nudge cut this turn: the next prompt carries it
        self.cutting = False  # this turn is being cancelled (set back as each turn starts)
        self.watch = ChangeWatch()  # the working copy as last seen, and what explains changes
        self._own = 0
        self.terminals = TerminalCalls(self)

    def take_notes(self) -> list[str]:
        taken, self.notes = self.notes, []
        return taken

    async def look(self, after: str) -> None:
        """The working copy looked at: a change no permitted call explains is named, and
        stops a guarded run (`RunHost.unrequested`)."""
        changes = self.watch.look(await self.host.snapshot())
        self.said_beside(after, changes)
        if changes:
            self.host.unrequested(after, changes)

    def said_beside(self, after: str, changes: Changes) -> None:
        """What a look found beside what is unrequested, each a finding: the files changed
        unchecked, what changed while a command was open."""
        if changes.unchecked:
            self.host.finding(
                f"changed after {after}, unchecked: {', '.join(changes.unchecked)}; the"
                " permission showed no content it could be checked against (no diff, no"
                " content, or one that did not apply), so whatever the agent wrote stands"
            )
        if changes.commanded:
            self.host.finding(commanded_words(after, changes))

    # -- proposals and progress -----------------------------------------------------------
    async def proposed(self, update: Any) -> CallRecord | None:
        """A `tool_call`: proposed now, or held while its input is not known yet (pending,
        no rawInput: `held_calls.py`); a `tool_call` again for a known call is an update."""
        acp_id = str(update.tool_call_id)
        if acp_id in self.records or acp_id in self.held:
            await self.progress(update)
            return self.records.get(acp_id)
        call = HeldCall.of(update)
        if call.input_unknown:
            self.held[acp_id] = call
            return None
        record = await self._propose(call)
        if call.under_way:  # started already running or ended: its end recorded too
            await self.progress(update)
        return record

    async def _propose(self, call: HeldCall, own: bool = False) -> CallRecord:
        """`CallProposed` with the call's whole input (or what it shows, when it sends none;
        past the cap, its digest: `past_cap`) and latest title and kind, keyed by the guard on
        the working copy as it is now (nothing known: on its own id)."""
        acp_id = call.tool_call_id
        host = self.host
        kind = call.kind if call.kind in host.tools else "other"
        title = capped(str(call.title or kind), 200)
        whole, keyed = judged(call, host.workdir, self.volatile)
        args = self._canonical(kind, whole)
        key = self._key(kind, keyed) if keyed else {"nothing_known": acp_id}
        if (too_long := past_cap(args)) is not None:
            self.past_cap[acp_id], args = too_long, not_taken(args, too_long)
        record, admitted = await host.propose(kind, title, args, "the agent's tool kind", key)
        self.records[acp_id] = record
        self.shown[acp_id] = call
        self.forms[acp_id] = {canonical_json(key)}
        self.diffs[acp_id] = diff_text(call, host.workdir) or ("" if whole else NOTHING_TO_JUDGE)
        if not admitted:
            await self._repeat(acp_id, record, call.under_way, record.fingerprint, own)
        else:
            self.first_of.setdefault(record.fingerprint, record.call_id)
        return record

    def _canonical(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        try:
            return canonical_args(self.host.tools[kind].args_model, data)
        except ValueError:
            return {"input": capped(str(data), 2000)}

    def _key(self, kind: str, keyed: dict[str, Any]) -> dict[str, Any]:
        return key_form(self._canonical(kind, keyed))

    async def _another_form(self, acp_id: str, record: CallRecord, raw: Any, runs: bool) -> None:
        """The agent said a proposed call's input in another form (opencode: `{command}` in
        its permission, `{command, description, cwd}` in its updates, in either order, as
        its messages race): that form keyed too, so a later call said in either form is the
        repeat it is, whichever message came first."""
        if acp_id in self.repeats or record.status in DONE or not isinstance(raw, dict):
            return
        keyed = steady(raw, self.volatile)
        kind, _, title = record.tool.partition(": ")
        if not keyed or kind not in self.host.tools:
            return
        key = self._key(kind, keyed)
        form, forms = canonical_json(key), self.forms.setdefault(acp_id, set())
        if form in forms:
            return
        forms.add(form)
        fingerprint, admitted = self.host.keyed_also(record, kind, title, key)
        if admitted:
            self.first_of.setdefault(fingerprint, record.call_id)
        else:
            await self._repeat(acp_id, record, runs, fingerprint)

    async def _repeat(
        self, acp_id: str, record: CallRecord, runs: bool, key: str, own: bool = False
    ) -> None:
        """The guard saw this call from this state before. An attached operator has a say
        (`loop_say`): `allow` lets it run once; `nudge TEXT` blocks it, cancels the turn and
        sends TEXT with the next prompt; `stop`, or nobody answering: blocked, the turn
        cancelled (a permission for it refused), the run stopped `no_progress` after it.
        A call the agent says already runs (`runs`) is not blocked: it is past stopping, and
        its end is recorded as the agent reports it; should it still ask, it is refused. A
        blocked call of the agent's is recorded once, as it ends (`progress`); loopdeck's own
        (`own`: a file, a terminal) at once: it never runs."""
        self.host.guard_tripped(record)
        self.repeats.add(acp_id)
        earlier = self.first_of.get(key)
        # Once this turn is being cut (a nudge, a stop), a later repeat in it is just blocked.
        cut = ("cut", "", "")
        say, nudge, by = cut if self.cutting else await self.host.loop_say(record, earlier)
        if say == "allow":
            return  # runs once, as the operator said (recorded in question_answered)
        if runs:
            self.caught.add(acp_id)
        else:
            self._block(acp_id, record, now=own)
        if say == "cut":
            return
        self.cutting = True
        if say == "nudge":
            self.notes.append(f"The operator says: {nudge}")
            self.nudged = True
        else:
            stopped = f"; stopped by {by}" if say == "stop" else ""
            self.tripped = f"{record.tool} {REPEATED} ({record.call_id}){stopped}"
        await self.agent.conn.cancel(session_id=self.agent.session_id)

    def _block(self, acp_id: str, record: CallRecord, now: bool = False) -> None:
        """Blocked: its permission refused. Its one end is recorded `now` (loopdeck's own
        call), else as the agent reports it, or as the turn ends (`settle_blocked`)."""
        self.blocked.add(acp_id)
        if now:
            self._blocked_end(record)

    def _blocked_end(self, record: CallRecord) -> None:
        self.finish(record, CallStatus.BLOCKED_REPEAT, failed(ErrorCode.REPEATED_CALL, REPEATED))

    def settle_blocked(self) -> None:
        """The turn is over: a blocked call the agent never reported ended is recorded
        blocked (it did not run, as far as anyone was told)."""
        for acp_id in sorted(self.blocked):
            if (record := self.records.get(acp_id)) is not None and record.status not in DONE:
                self._blocked_end(record)

    async def progress(self, update: Any) -> None:
        """A `tool_call_update`: merged into a held call, which is proposed once it runs or
        ended (a call that ends with no input at all is proposed with `{}`); another form of
        a proposed call's input keyed too; a call's end recorded once, as the agent reports
        it (one the guard blocked: blocked if it failed, run although blocked if the agent
        says it completed; one end either way)."""
        acp_id = str(update.tool_call_id)
        if (held := self.held.get(acp_id)) is not None:
            if not held.merge(update).under_way:
                return
            del self.held[acp_id]
            await self._propose(held)
        record = self.records.get(acp_id)
        if record is None:
            self.unknown_updates += 1  # an update for a call the agent never started
            return
        if update.raw_input is not None:
            await self._another_form(acp_id, record, update.raw_input, True)
        if update.status == "in_progress" and record.status is CallStatus.PROPOSED:
            self.host.running(record)  # the agent runs it: cut short, it was interrupted
        if update.status not in ("completed", "failed"):
            return
        if record.status in DONE:
            return
        result = result_of(update, self.terminals.shown)
        if acp_id in self.blocked:
            if update.status != "completed":
                self._blocked_end(record)
                return
            result["data"]["ran_although_blocked"] = True  # the agent ran it all the same
        self.host.tool_ran()
        status = CallStatus.EXECUTED if update.status == "completed" else CallStatus.FAILED
        self.finish(record, status, result)
        self.watch.ended(record.call_id)
        await self.look(f"{record.call_id} {record.tool}")

    def finish(
        self, record: CallRecord, status: CallStatus, result: dict[str, Any], ms: float = 0.0
    ) -> None:
        self.host.finish(record, status, result, ms)

    # -- permissions -----------------------------------------------------------------------
    async def permission(self, tool_call: Any, options: list[Any]) -> Any:
        from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

        acp_id = str(tool_call.tool_call_id)
        record = self.records.get(acp_id)
        if record is None:  # held (or never said): the request carries the whole input
            held = self.held.pop(acp_id, None)
            record = await self._propose(held.merge(tool_call) if held else HeldCall.of(tool_call))
        else:
            await self._another_form(acp_id, record, tool_call.raw_input, False)
        if acp_id in self.caught and record.status not in DONE and acp_id not in self.blocked:
            self._block(acp_id, record)  # it asks: it had not run, and now it will not
        said = f"{record.call_id} {record.tool}"
        await self.look(said)  # the agent wrote before it asked: nobody approved that
        reject = option(options, "reject_once", "reject_always")
        too_long = self.past_cap.get(acp_id) or past_cap(raw_input_of(tool_call))
        if acp_id in self.blocked:
            chosen = reject
        elif too_long is not None or (allow := option(options, "allow_once")) is None:
            self._refuse(record, too_long or no_allow_once(options))
            chosen = reject
        else:
            diff = self.diffs.get(acp_id) or diff_text(tool_call, self.host.workdir)
            self.shown_calls[record.call_id] = (self.shown.get(acp_id), tool_call)
            chosen = allow if await self.approved(record, diff) is not None else reject
            await self.look(said)  # nor while it waited for the answer
        if chosen is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        if chosen is not reject:
            self._permit(record, tool_call)
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id)
        )

    def _refuse(self, record: CallRecord, why: str) -> None:
        """Refused by loopdeck, nobody asked (no allow-once option; an input past the cap;
        outside the working copy), its reason recorded and said with the next prompt."""
        said = f"refused by loopdeck: {why}"
        self.host.refuse(record, said)
        self.notes.append(f"{record.tool}: {said}")
        self.finish(record, CallStatus.REJECTED, failed(ErrorCode.REJECTED, said))

    def _permit(self, record: CallRecord, tool_call: Any) -> None:
        """What a permitted call may change: the files it names (as proposed and as asked),
        each to the content shown for it (`permitted_writes.py`; not told: unchecked), or
        anything while it runs (a command, a call that names no file)."""
        workdir, root = self.host.workdir, self.host.workdir.resolve()
        raw = tool_call.raw_input
        proposal = self.shown.get(str(tool_call.tool_call_id))
        named = named_paths(tool_call, workdir, raw)
        if proposal is not None:
            named |= named_paths(proposal, workdir, proposal.raw_input)
        kind = record.tool.split(":")[0]
        if kind == "execute" or not named:
            self.watch.permit(record.call_id, None)
        else:
            expected, also, writes = held_to(workdir, root, named, proposal, tool_call)
            self.permitted_writes.update(writes)
            self.watch.permit(record.call_id, named | expected.keys(), expected, also)
        self.terminals.permitted(commands_named(raw), record)

    async def approved(self, record: CallRecord, why: str) -> Approved | None:
        """Asked of the operator (or the run's approver) until an approval covers the call in
        the state it runs in (None: rejected); a rejection's reason goes to the agent with
        the next prompt."""

        async def carry_out(got: Approved) -> Approved:
            return got  # the agent carries it out, once its permission is answered

        got = await self.host.until_held(record, why, carry_out)
        if isinstance(got, Rejected):
            self.notes.append(refused_words(record.tool, record.decided_by, got.reason))
            self.finish(record, CallStatus.REJECTED, failed(ErrorCode.REJECTED, got.reason))
            return None
        self.host.running(record)
        return got

    # -- files the agent asks loopdeck to write ---------------------------------------------
    async def write(self, asked: FileWriteAsked | TerminalAsked) -> Any:
        """A file to write or a command to run for the agent: a write loopdeck gates."""
        if isinstance(asked, TerminalAsked):
            return await self.terminals.create(asked)
        return await write_file(self, asked)

    async def proposed_own(self, kind: str, title: str, raw: dict[str, Any]) -> CallRecord:
        """A call loopdeck itself makes for the agent (a file written, a terminal), proposed
        as the agent's own calls are; its input past the cap is refused by loopdeck, never
        asked (`RequestError`: the agent's request's error)."""
        from acp import RequestError

        self._own += 1
        call = HeldCall(f"{kind}-{self._own}", kind=kind, title=title, raw_input=raw)
        record = await self._propose(call, own=True)
        if (too_long := self.past_cap.get(call.tool_call_id)) is not None:
            if record.status not in DONE:  # not a repeat the guard blocked already
                self._refuse(record, too_long)
            raise RequestError(-32000, f"{record.tool}: refused by loopdeck: {too_long}")
        return record

    async def refused_own(
        self, kind: str, title: str, raw: dict[str, Any], why: OutsideWorkdir
    ) -> None:
        """A write the agent asked loopdeck for that loopdeck refuses without asking (outside
        the working copy): proposed, and refused by loopdeck with its reason, as recorded as
        any other refusal."""
        record = await self.proposed_own(kind, capped(title, 200), raw)
        if record.status not in DONE:  # not a repeat the guard blocked already
            self._refuse(record, str(why))


DONE = frozenset({CallStatus.EXECUTED, CallStatus.FAILED, CallStatus.REJECTED,
                  CallStatus.BLOCKED_REPEAT})  # fmt: skip
