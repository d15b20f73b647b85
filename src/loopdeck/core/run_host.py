"""`RunHost`: the one door through which a kind's own loop (an ACP agent's, a gateway's)
reaches the run it drives. It proposes a call (recorded, keyed by the guard), asks for a write
(the one approval loop, `WriteApprovals.until_held`), records what a call did and what a turn
spent, and names a change of the workspace that no approved call explains. It never hands out
the runtime's parts: the ledger, the guard and the approvals stay the runtime's.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from loopdeck.core.approvals import Answer, Answerer
from loopdeck.core.budgets import BudgetLedger, Cap
from loopdeck.core.calls import CallHandler
from loopdeck.core.config import RunConfig
from loopdeck.core.control import RunControl, StopRun
from loopdeck.core.decisions import Decision, ToolCall
from loopdeck.core.environment import Environment
from loopdeck.core.events import (
    CallProposed,
    CallStatus,
    Emit,
    Finding,
    GuardTripped,
    ModelCalled,
    PlanWritten,
    ToolFinished,
    UnrequestedChange,
)
from loopdeck.core.finding_events import RiskRaised, listed
from loopdeck.core.guard import GuardKey, guard_key
from loopdeck.core.loop_say import Repeat, Say, operator_on_loop
from loopdeck.core.operator_messages import OperatorMessages
from loopdeck.core.outcome import CallRecord
from loopdeck.core.questions import Asking
from loopdeck.core.review import Verdict
from loopdeck.core.states import RunState, StateMachine, StopReason
from loopdeck.core.text import capped
from loopdeck.core.tools import ToolSpec
from loopdeck.core.workspace_changes import Changes
from loopdeck.core.write_approvals import Approved, AskAgain, Rejected

T = TypeVar("T")
R = TypeVar("R")
TEXT_CAP = 4000  # a turn's words kept in its `ModelCalled`


class HostedRun(Protocol):
    """The runtime as its host sees it."""

    config: RunConfig
    env: Environment
    round: int
    plan: list[str]
    tools: dict[str, ToolSpec]
    ledger: BudgetLedger
    machine: StateMachine
    control: RunControl
    calls: CallHandler
    messages: OperatorMessages
    answerer: Answerer | None
    findings: list[str]

    @property
    def emit(self) -> Emit: ...
    def move(self, target: RunState) -> None: ...
    def publish_budget(self) -> None: ...
    async def snapshot(self) -> dict[str, Any]: ...
    async def state_hash(self) -> str: ...
    async def review_round(self, before: dict[str, Any]) -> Verdict: ...
    async def interruptible(self, awaitable: Awaitable[T], *, by_cancel: bool = False) -> T: ...
    async def ask_operator(
        self, question: str, topic: str = ..., timeout_s: float | None = ..., asking: Asking = ...
    ) -> Answer | None: ...
    async def check_budget_pause(self) -> None: ...


class RunHost:
    def __init__(self, rt: HostedRun) -> None:
        self._rt = rt
        self._count = 0

    # -- what the loop may read ------------------------------------------------------------
    @property
    def config(self) -> RunConfig:
        return self._rt.config

    @property
    def run_id(self) -> str:
        return self._rt.config.run_id

    @property
    def workdir(self) -> Path:
        return self._rt.env.workdir

    @property
    def tools(self) -> dict[str, ToolSpec]:
        return self._rt.tools

    @property
    def round(self) -> int:
        return self._rt.round

    @property
    def state(self) -> RunState:
        return self._rt.machine.state

    @property
    def ended(self) -> bool:
        return self._rt.machine.is_terminal

    @property
    def has_operator(self) -> bool:
        """Someone can be asked (a console, `--approve wait`)."""
        return self._rt.answerer is not None

    def add_tool(self, spec: ToolSpec) -> None:
        """A tool the kind learns of once it runs (an ACP terminal)."""
        self._rt.tools.setdefault(spec.name, spec)

    # -- the run's clock, state and operator -----------------------------------------------
    def move(self, target: RunState) -> None:
        if self._rt.machine.state is not target:
            self._rt.move(target)

    async def start_round(self) -> int:
        """A new round: counted (a cap may stop the run), stops and pauses taken."""
        rt = self._rt
        rt.ledger.start_round()
        rt.round = rt.ledger.rounds
        await rt.control.checkpoint()
        await rt.check_budget_pause()
        return rt.round

    async def checkpoint(self) -> None:
        """Before each model call of the kind's loop: a stop asked for lands here, a pause
        holds the run here until it is resumed (the agent's clock stopped meanwhile)."""
        await self._rt.control.checkpoint()

    def fail(self, reason: StopReason, detail: str) -> None:
        """From outside the run's task (its agent's process died): the run stops at once."""
        self._rt.control.fail(reason, detail)

    async def interruptible(self, awaitable: Awaitable[T], *, by_cancel: bool = False) -> T:
        return await self._rt.interruptible(awaitable, by_cancel=by_cancel)

    async def snapshot(self) -> dict[str, Any]:
        return await self._rt.snapshot()

    async def state_hash(self) -> str:
        return await self._rt.state_hash()

    async def review_round(self, before: dict[str, Any]) -> Verdict:
        return await self._rt.review_round(before)

    async def ask_operator(self, question: str, topic: str, asking: Asking) -> Answer | None:
        return await self._rt.ask_operator(question, topic, None, asking)

    def operator_messages(self) -> list[str]:
        """The operator's messages not yet heard, taken for the next prompt."""
        return self._rt.messages.take()

    def finding(self, text: str, raised: RiskRaised | None = None) -> None:
        """Something the operator must see: its event (`Finding`: live, in the store, a replay
        and an export) and its line in the run's outcome, made here together."""
        rt = self._rt
        rt.findings.append(listed(rt.round, text))
        rt.emit(Finding, run_id=self.run_id, round=rt.round, text=text, raised=raised)

    @property
    def emit(self) -> Emit:
        """For the events a kind's loop says itself (a review's verdict it judged)."""
        return self._rt.emit

    def write_plan(self, steps: list[str]) -> None:
        self._rt.plan = steps
        self._rt.emit(PlanWritten, run_id=self.run_id, round=self._rt.round, steps=steps)

    # -- calls -----------------------------------------------------------------------------
    async def propose(
        self,
        tool: str,
        label: str,
        args: dict[str, Any],
        risk_source: str = "",
        keyed: dict[str, Any] | None = None,
        write: bool = False,
    ) -> tuple[CallRecord, bool]:
        """A call recorded as proposed (`label` is how it is shown), keyed by the guard on
        (tool and label, its canonical input, the state now); False: a repeat. `keyed`: the
        input as the guard keys it when that is not all of `args` (an agent's per-call ids);
        `write`: this call is a write whatever its tool's risk (`risk_source` says why)."""
        rt = self._rt
        state_hash = await rt.state_hash()
        key = guard_key(f"{tool} {label}", args if keyed is None else keyed, state_hash)
        self._count += 1
        spec = rt.tools[tool]
        record = CallRecord(
            call_id=f"c{self._count}", round=rt.round, tool=f"{tool}: {label}", args=args,
            risk="write" if write else spec.risk, fingerprint=key.fingerprint,
            state_hash=state_hash, risk_source=risk_source or spec.risk_source,
        )  # fmt: skip
        rt.calls.records.append(record)
        rt.emit(
            CallProposed, run_id=self.run_id, call_id=record.call_id, round=record.round,
            tool=record.tool, args=args, risk=record.risk, fingerprint=record.fingerprint,
            state_hash=state_hash, risk_source=record.risk_source,
        )  # fmt: skip
        return record, rt.calls.guard.admit(key)

    def edited(
        self,
        record: CallRecord,
        tool: str,
        label: str,
        args: dict[str, Any],
        keyed: dict[str, Any] | None = None,
    ) -> str:
        """The operator's edit of a proposed call, carried out as edited: the record runs with
        `args`, and the guard keys the edited call as well (keyed as `propose` keys one, on
        `keyed` when that is not all of `args`), so the same call from the same state is a
        repeat; the edited call's fingerprint."""
        record.args = args
        key = guard_key(f"{tool} {label}", args if keyed is None else keyed, record.state_hash)
        self._rt.calls.guard.admit(key)
        return key.fingerprint

    def keyed_also(
        self, record: CallRecord, tool: str, label: str, keyed: dict[str, Any]
    ) -> tuple[str, bool]:
        """Another form in which the agent said a proposed call's input, keyed by the guard
        too, in the state the call was proposed in: its fingerprint, and False when an
        earlier call had it."""
        key = guard_key(f"{tool} {label}", keyed, record.state_hash)
        return key.fingerprint, self._rt.calls.guard.admit(key)

    def guard_tripped(self, record: CallRecord) -> None:
        self._rt.emit(
            GuardTripped, run_id=self.run_id, call_id=record.call_id, tool=record.tool,
            fingerprint=record.fingerprint,
        )  # fmt: skip

    async def loop_say(self, record: CallRecord, earlier: str | None) -> tuple[Say, str, str]:
        """The operator's say on a call the guard caught (`loop_say`)."""
        repeat = Repeat(
            call=f"{record.call_id} {record.tool}", fingerprint=record.fingerprint,
            state_hash=record.state_hash, earlier=earlier,
        )  # fmt: skip
        return await operator_on_loop(self._rt, repeat)

    async def until_held(
        self,
        record: CallRecord,
        why: str,
        carry_out: Callable[[Approved], Awaitable[R | AskAgain]],
    ) -> R | Rejected:
        """Asked of the operator (or the run's approver) until an approval covers the call as
        `carry_out` carries it out: the runtime's one approval loop."""
        approvals = self._rt.calls.approvals
        result = await approvals.until_held(record, *_asked(record, why), carry_out)
        self.move(RunState.DECIDING)
        return result

    def refuse(self, record: CallRecord, why: str) -> Rejected:
        """A call loopdeck refuses without asking anyone: a decision by loopdeck, its reason
        kept."""
        call, _ = _asked(record, why)
        return self._rt.calls.approvals.refuse(record, call, why)

    def withdraw(self) -> None:
        """The approval asked now is withdrawn (its call will not run), as a stop withdraws
        it."""
        self._rt.calls.approvals.withdraw()

    def forget(self, key: GuardKey) -> None:
        """A call the agent never got: the same call from the same state is no repeat."""
        self._rt.calls.guard.forget(key)

    def running(self, record: CallRecord) -> None:
        record.status = CallStatus.RUNNING
        self._rt.calls.started[record.call_id] = time.monotonic()  # how long, if cut short

    def finish(
        self, record: CallRecord, status: CallStatus, result: dict[str, Any], ms: float = 0.0
    ) -> None:
        record.status, record.result = status, result
        self._rt.emit(
            ToolFinished, run_id=self.run_id, call_id=record.call_id, tool=record.tool,
            status=status, result=result, duration_ms=ms,
        )  # fmt: skip

    def tool_ran(self) -> None:
        """A call of the agent's ended: counted against the tool-call cap."""
        ledger = self._rt.ledger
        ledger.before_tool_call()
        ledger.record_tool_call()
        self._rt.publish_budget()

    def tool_withdrawn(self) -> None:
        """A call counted by `tool_ran` never reached the agent (withdrawn, not delivered):
        taken back off the tool-call cap, as it did not run."""
        self._rt.ledger.withdraw_tool_call()
        self._rt.publish_budget()

    def unrequested(self, after: str, changes: Changes, stops: bool | None = None) -> None:
        """A change of the workspace no approved call explains: named; a guarded run stops
        (`policy_block`) before anything (a goal check) can take it for progress. `stops=False`:
        one seen as the run ends on another stop (after the agent's), recorded beside it."""
        stops = self._rt.config.stop_on_unrequested if stops is None else stops
        # Its event is the `UnrequestedChange` below; the outcome lists it among the findings.
        self._rt.findings.append(
            listed(self._rt.round, f"unrequested change after {after}: {changes.said()}")
        )
        self._rt.emit(
            UnrequestedChange, run_id=self.run_id, after=after, added=changes.added,
            changed=changes.changed, removed=changes.removed, stops=stops,
        )  # fmt: skip
        if stops:
            raise StopRun(
                StopReason.POLICY_BLOCK,
                f"unrequested change after {after}: {changes.said()}; no approved call explains it",
            )

    # -- turns and what they spend ---------------------------------------------------------
    def turn_started(self) -> None:
        self._rt.ledger.before_model_call()
        self.move(RunState.DECIDING)

    async def spent(self, tokens: int | None = None, cost_usd: float | None = None) -> None:
        """What the agent says it spent: a turn's tokens (added), the session's cost so far
        (its latest figure); a cap past its limit stops the run here."""
        ledger = self._rt.ledger
        if tokens is not None:
            ledger.tokens += tokens
        if cost_usd is not None:
            ledger.cost_usd = cost_usd
        self._rt.publish_budget()
        ledger.after_model_call()
        await self._rt.check_budget_pause()

    def window(self, used: int, size: int) -> None:
        """The agent's context window as it says it: its fill, shown apart, never spent."""
        self._rt.ledger.window = (used, size)
        self._rt.publish_budget()

    def turn_ended(
        self,
        *,
        tokens: int | None,
        cost_usd: float | None,
        latency_ms: float,
        said: str,
        completion_tokens: int = 0,
    ) -> None:
        """A turn counted; tokens or cost it never reported stay unknown, never 0. `tokens`:
        all it spent, `completion_tokens` of them what it wrote (the rest its prompt's)."""
        rt = self._rt
        ledger = rt.ledger
        ledger.turns += 1
        if cost_usd is None:
            ledger.not_reported(Cap.COST)
        if tokens is None:
            ledger.not_reported(Cap.TOKENS)
        # What it wrote is part of what it spent (an agent's figures that say otherwise are
        # read as all spent, none of it more than once).
        spent, written = (0, 0) if tokens is None else (tokens, min(completion_tokens, tokens))
        rt.emit(
            ModelCalled, run_id=self.run_id, role="agent", round=rt.round,
            model=rt.config.model, prompt_tokens=spent - written, completion_tokens=written,
            cost_usd=cost_usd, latency_ms=latency_ms, content=capped(said, TEXT_CAP),
            tokens_unknown=tokens is None,
        )  # fmt: skip
        rt.publish_budget()


def _asked(record: CallRecord, why: str) -> tuple[ToolCall, Decision]:
    """The call as the approval loop asks about it, and the words the operator sees."""
    call = ToolCall(provider_id=None, tool=record.tool.split(":")[0], args=record.args)
    words = f"{record.tool}\n{why}" if why else record.tool
    return call, Decision(type="tool_call", calls=[call], message=words)
