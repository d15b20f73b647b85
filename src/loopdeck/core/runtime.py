"""One supervised run under budgets: its start, its stop and outcome, the review at the end
of each round and the goal check after each change; the turns themselves are the agent's loop
(`core/agent_loop.py`), the questions to the operator `core/questions.py`'s.

The runtime owns the state machine, the ledger, the guard and the conversation. Operators
reach it only through `cancel`, `kill`, `pause`, `resume` and `message`; observers only
through events.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from loopdeck.core.agent_loop import AgentLoop
from loopdeck.core.approvals import Answer, Answerer, Approver
from loopdeck.core.budget_pause import BudgetPause
from loopdeck.core.budgets import BudgetExhausted, BudgetLedger, Cap
from loopdeck.core.calls import CallHandler
from loopdeck.core.canonical import short_hash
from loopdeck.core.config import RunConfig
from loopdeck.core.control import Interrupted, RunControl, StopRun, from_anywhere
from loopdeck.core.dispatcher import Dispatcher
from loopdeck.core.env_faults import described, home_of
from loopdeck.core.env_thread import EnvBusy, EnvThread, Then
from loopdeck.core.environment import Environment
from loopdeck.core.events import (
    BudgetUpdated,
    E,
    EventBus,
    P,
    ReviewVerdict,
    RunStarted,
    RunStopped,
    StateChanged,
)
from loopdeck.core.finding_events import RiskRaised, listed
from loopdeck.core.model import ModelClient
from loopdeck.core.model_calls import MESSAGE_EVENT_CAP, ModelCaller
from loopdeck.core.operator_messages import OperatorMessages
from loopdeck.core.outcome import CallRecord, RunOutcome
from loopdeck.core.policy_gate import PolicyGate
from loopdeck.core.questions import AGENT_ASKS, Asking, Questions
from loopdeck.core.recording import Journal, RecordingHold
from loopdeck.core.review import Verdict, review
from loopdeck.core.run_host import RunHost
from loopdeck.core.run_kind import LoopMaker
from loopdeck.core.state_reads import StateReads
from loopdeck.core.states import RunState, StateMachine, StopReason
from loopdeck.core.text import capped, escape_surrogates
from loopdeck.core.write_approvals import WriteApprovals

__all__ = ["Journal", "RunConfig", "Runtime"]


T = TypeVar("T")


class Runtime:
    def __init__(
        self,
        config: RunConfig,
        env: Environment,
        model: ModelClient,
        approver: Approver,
        bus: EventBus | None = None,
        dispatcher: Dispatcher | None = None,
        answerer: Answerer | None = None,
        agent_loop: LoopMaker | None = None,
        policy: PolicyGate | None = None,
    ) -> None:
        self.config = config
        self.env = env
        self.model = model
        self.bus = bus or EventBus()
        self.machine = StateMachine()
        self.ledger = BudgetLedger(config.budget)
        self.control = RunControl(self.emit, config.run_id, self.operator_time)
        self.messages = OperatorMessages(self.emit, config.run_id)
        self.model_calls = ModelCaller(self)
        self._deadline: asyncio.TimerHandle | None = None
        # Who answers the model's questions; None: `ask_user` stops the run, as headless.
        self.answerer = answerer
        self.questions = Questions(self)
        self.budget_pause = BudgetPause(self)
        self.tools = {spec.name: spec for spec in env.tools()}
        self.tool_schemas = [spec.json_schema() for spec in self.tools.values()]
        self.env_thread = EnvThread(config.env_stray_wait_s)
        # The env's state, read once per change (a kind's own loop: on every look).
        self.state_reads = StateReads(
            env, self.env_thread, self.interruptible, own_loop=agent_loop is not None
        )
        dispatcher = dispatcher or Dispatcher()
        dispatcher.env_thread = self.env_thread
        dispatcher.state_reads = self.state_reads
        self.calls = CallHandler(self, WriteApprovals(self, approver, policy), dispatcher)
        # The agent's loop: loopdeck's own (a model's turns), or a kind's own, which reaches
        # the run only through its `RunHost`.
        self.agent = AgentLoop(self) if agent_loop is None else agent_loop(RunHost(self))
        self._checked_hash: str | None = None
        self.findings: list[str] = []
        self.round = 0
        self.plan: list[str] = []
        self.outcome: RunOutcome | None = None
        self.journal: Journal | None = None
        self.recording = RecordingHold(self)
        self._stop: StopRun | None = None

    # -- the operator's controls -------------------------------------------------------
    def cancel(self, after_current_tools: bool = True, by: str = "operator") -> None:
        if after_current_tools:
            self.control.request_cancel(by)
        else:
            self.kill(by)

    def kill(self, by: str = "operator") -> None:
        self.control.request_kill(by)

    def pause(self, by: str = "operator") -> None:
        self.control.pause(by)

    def resume(self, by: str = "operator") -> None:
        self.control.resume(by)

    def message(self, text: str, by: str = "operator") -> bool:
        """The operator's message to the model, heard before its next turn; False once the
        run has stopped (nobody is left to hear it)."""
        if self.outcome is not None or self.machine.is_terminal:
            return False
        self.messages.say(text, by)
        return True

    def resolve(self, call_id: str, applied: bool, by: str = "operator") -> None:
        """The operator's word on a write whose outcome is unknown (`core/unknown_outcomes`);
        raises `Unresolvable` when the call has none."""
        self.messages.note(self.calls.unknown.resolve(call_id, applied, by))

    def revoke(self, grant_id: str, by: str = "operator") -> str | None:
        """A standing grant withdrawn: None, or why not (no such grant, already revoked)."""
        return self.calls.approvals.grants.revoke(grant_id, by)

    # -- plumbing ----------------------------------------------------------------------
    def emit(self, make: Callable[P, E], /, *args: P.args, **kwargs: P.kwargs) -> None:
        """The event of class `make` with these fields, made with the bus's next number."""
        self.bus.emit(make, *args, **kwargs)

    async def env_call(self, label: str, fn: Callable[..., T], *args: Any) -> T:
        """Env code on the env thread; a kill, a stop or the deadline stop the wait at once."""
        return await self.interruptible(self.env_thread.call(label, fn, *args))

    async def snapshot(self) -> dict[str, Any]:
        return await self.state_reads.snapshot()

    async def state_hash(self) -> str:
        return await self.state_reads.state_hash()

    @property
    def snapshot_after_tool(self) -> Then:
        """Taken on the env thread straight after a sync tool returns, in the same hand-over
        (`EnvThread.call(then=...)`); `check_goal_after` takes it from there."""
        return self.state_reads.then

    async def check_goal_after(self, record: CallRecord) -> None:
        """A call that changed the env's snapshot is followed by the goal check: a met goal
        stops the run at once, not only at the end of the round."""
        after, after_hash = await self.state_reads.after_tool()
        if after_hash == self._checked_hash:
            return
        self._checked_hash = after_hash
        if await self.state_reads.goal_check(after):
            return
        self.move(RunState.REVIEWING)
        self.emit(
            ReviewVerdict,
            run_id=self.config.run_id,
            round=self.round,
            verdict="pass",
            reasons=[],
            before_hash=record.state_hash,
            after_hash=after_hash,
        )
        raise StopRun(
            StopReason.GOAL_MET, f"the goal check passed after {record.tool} ({record.call_id})"
        )

    async def review_round(self, before: dict[str, Any]) -> Verdict:
        """The end of a round: the goal checked, the state's change judged (`review`)."""
        if self.machine.state is not RunState.REVIEWING:
            self.move(RunState.REVIEWING)
        after = await self.snapshot()
        unmet = await self.state_reads.goal_check(after)
        self._checked_hash = short_hash(after)
        verdict = review(before, after, lambda _: unmet)
        self.emit(
            ReviewVerdict,
            run_id=self.config.run_id,
            round=self.round,
            verdict=verdict.kind,
            reasons=list(verdict.reasons),
            before_hash=short_hash(before),
            after_hash=short_hash(after),
        )
        self.findings.extend(listed(self.round, reason) for reason in verdict.reasons)
        return verdict

    def move(self, target: RunState) -> None:
        source = self.machine.move(target)
        self.emit(StateChanged, run_id=self.config.run_id, source=source, target=target)

    def publish_budget(self) -> None:
        self.emit(
            BudgetUpdated,
            run_id=self.config.run_id,
            usage=self.ledger.usage(),
            unreported=dict(self.ledger.unreported),
            operator_s=round(self.ledger.operator_s(), 3),
            held=self.ledger.held,
            window_used=self.ledger.window[0] if self.ledger.window else None,
            window_size=self.ledger.window[1] if self.ledger.window else None,
        )

    def rearm_deadline(self) -> None:
        if self.ledger.held is None:
            self._arm_deadline()

    def _arm_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        remaining = max(self.ledger.remaining_time(), 0.0)
        self._deadline = asyncio.get_running_loop().call_later(
            remaining, self.control.fire_deadline
        )

    @contextlib.contextmanager
    def operator_time(self, why: str) -> Iterator[None]:
        """The operator is being waited on: the agent's deadline stops until this ends."""
        # Whatever happened while the operator was waited on, the state is read again.
        if self.ledger.held is not None or self._deadline is None:
            try:
                yield
            finally:
                self.state_reads.forget()
            return
        self.ledger.hold(why)
        self._deadline.cancel()
        self.publish_budget()
        try:
            yield
        finally:
            self.state_reads.forget()
            self.ledger.release()
            self._arm_deadline()
            self.publish_budget()

    async def flush_journal(self) -> None:
        """Before a write: its approval must be durable, or the write does not run; a store
        that cannot take writes for now holds the run (`RecordingHold`)."""
        await self.recording.flush()

    async def hold_while_unavailable(self) -> None:
        """Before a model call: while the store cannot record, the run does not act."""
        if self.journal is not None and self.journal.outage is not None:
            await self.recording.wait()

    async def ask_operator(
        self,
        question: str,
        topic: str = "ask_user",
        timeout_s: float | None = None,
        asking: Asking = AGENT_ASKS,
    ) -> Answer | None:
        """`awaiting_answer`: the run waits for the operator's answer (`Questions.ask`)."""
        return await self.questions.ask(question, topic, timeout_s, asking)

    async def interruptible(self, awaitable: Awaitable[T], *, by_cancel: bool = False) -> T:
        return await self.control.interruptible(awaitable, by_cancel=by_cancel)

    async def check_budget_pause(self) -> None:
        """Past `--pause-at`: an attached operator says whether the run goes on."""
        await self.budget_pause.check()

    def _found(self, text: str, raised: RiskRaised | None) -> None:
        """What the env's outside said for the operator (an MCP server's warning), while the
        run lasts: a finding, made as a kind's loop makes one."""
        if not self.machine.is_terminal:
            RunHost(self).finding(text, raised)

    # -- the run -----------------------------------------------------------------------
    async def run(self) -> RunOutcome:
        try:
            await self._prepare_model()
        except Interrupted as interrupted:
            # Killed while its model loaded (a signal, the kill key): the record still has
            # the run's start before its stop.
            self._announce()
            self._stop = interrupted.as_stop()
            return self._finish()
        self.ledger.start_clock()
        self._announce()
        self.publish_budget()
        self._arm_deadline()
        self.env.watch(self.control.fail_from_anywhere())
        self.env.report_findings(from_anywhere(self._found))
        self.env.watch_tools(from_anywhere(self.tools.update))
        self.env.watch_state(self.state_reads.forget)  # from any thread (`StateReads`)
        try:
            await self.agent.run()
        except StopRun as stop:
            self._stop = stop
        except BudgetExhausted as exhausted:
            self._stop = StopRun(exhausted.stop_reason, str(exhausted))
        except Interrupted as interrupted:
            self._stop = interrupted.as_stop()
        except EnvBusy as busy:
            self._stop = StopRun(
                StopReason.TOOL_FAILURE, f"{busy}; no other env code may start while it runs"
            )
        except Exception as exc:  # a bug or an env that broke: the run still gets its stop
            said = described(exc, home_of(type(self.env)), "the run")
            self._stop = StopRun(StopReason.CRASHED, capped(said, MESSAGE_EVENT_CAP))
        finally:
            if self._deadline is not None:
                self._deadline.cancel()
        return self._finish()

    def _announce(self) -> None:
        cfg = self.config
        self.emit(
            RunStarted,
            run_id=cfg.run_id,
            env=cfg.env,
            script=cfg.script,
            model=cfg.model,
            mode=cfg.mode,
            goal=cfg.goal,
            budget=cfg.budget.model_dump(),
            context_window=getattr(self.model, "context_window", None),
        )

    async def _prepare_model(self) -> None:
        """Load the model's client library before the clock starts: an import is not the
        agent's time, and it must not eat the first call's timeout."""
        prepare = getattr(self.model, "prepare", None)
        if prepare is not None:
            await self.interruptible(prepare())

    def _finish(self) -> RunOutcome:
        stop = self._stop or StopRun(StopReason.CRASHED, "the loop ended without a stop reason")
        stray = self.env_thread.stray
        # An EnvBusy stop already names the stray call; say it once.
        if stray is not None and stray.split(" (")[0] not in stop.detail:
            note = f"env code still running was abandoned, its result discarded: {stray}"
            stop = StopRun(stop.reason, f"{stop.detail}; {note}" if stop.detail else note)
        self.env_thread.close()
        self.calls.withdraw_pending(stop.detail)
        if stop.reason is StopReason.GOAL_MET:
            self.move(RunState.COMPLETE)
        elif not self.machine.is_terminal:
            self.move(RunState.STOPPED)
        self.publish_budget()
        self.emit(
            RunStopped,
            run_id=self.config.run_id,
            state=self.machine.state,
            stop_reason=stop.reason,
            detail=escape_surrogates(stop.detail),
            unheard=self.messages.unheard(),
        )
        # A run with any call that did not say its tokens or price has those unknown, never
        # a partial sum (`CapUsage.used` is None).
        caps = self.ledger.caps()
        self.outcome = RunOutcome(
            run_id=self.config.run_id,
            env=self.config.env,
            script=self.config.script,
            model=self.config.model,
            mode=self.config.mode,
            state=self.machine.state,
            stop_reason=stop.reason,
            detail=stop.detail,
            rounds=self.round,
            model_calls=self.ledger.turns,
            tool_calls=self.ledger.tool_calls,
            tokens=None if (tokens := caps[Cap.TOKENS].used) is None else int(tokens),
            cost_usd=caps[Cap.COST].used,
            cost_unknown_calls=self.ledger.unreported_calls(Cap.COST),
            elapsed_s=round(self.ledger.elapsed(), 3),
            operator_wait_s=round(self.ledger.operator_s(), 3),
            findings=list(self.findings),
            calls=self.calls.records,
            stray=stray,
            context_window=getattr(self.model, "context_window", None),
            compactions=self.model_calls.compactions,
            recording_held=list(self.recording.held),
            budget=caps,
        )
        return self.outcome
