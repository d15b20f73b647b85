"""The agent's loop, in its mode: planner / executor / reviewer rounds, or one ReAct loop.
Each executor turn is one model call turned into one decision: a batch of calls, a question
to the operator, a handoff or the final answer. The run around it (budgets, stops, review,
the outcome) is the `Runtime`'s, reached through `AgentHost`."""

from __future__ import annotations

from typing import Any, Protocol

from loopdeck.core.approvals import Answer, Answerer
from loopdeck.core.budget_pause import BudgetPause
from loopdeck.core.budgets import BudgetLedger
from loopdeck.core.calls import CallHandler
from loopdeck.core.config import RunConfig
from loopdeck.core.control import RunControl, StopRun
from loopdeck.core.decisions import Decision, InvalidDecision, read_decision
from loopdeck.core.events import DecisionInvalid, DecisionMade, Emit, PlanWritten
from loopdeck.core.model import ModelRequest
from loopdeck.core.model_calls import MESSAGE_EVENT_CAP, ModelCaller
from loopdeck.core.operator_messages import OperatorMessages
from loopdeck.core.prompts import (
    answer_message,
    executor_messages,
    findings_message,
    operator_says,
    parse_plan,
    planner_messages,
    react_messages,
)
from loopdeck.core.questions import ANSWER_CAP
from loopdeck.core.review import Verdict, findings_or_stop
from loopdeck.core.state_reads import StateReads
from loopdeck.core.states import RunState, StopReason
from loopdeck.core.text import capped
from loopdeck.core.tools import ToolSpec


class AgentHost(Protocol):
    """What the agent's loop needs from the run it drives."""

    config: RunConfig
    round: int
    plan: list[str]
    tools: dict[str, ToolSpec]
    tool_schemas: list[dict[str, Any]]
    ledger: BudgetLedger
    control: RunControl
    budget_pause: BudgetPause
    model_calls: ModelCaller
    calls: CallHandler
    state_reads: StateReads
    answerer: Answerer | None
    messages: OperatorMessages

    def move(self, target: RunState) -> None: ...
    @property
    def emit(self) -> Emit: ...
    async def snapshot(self) -> dict[str, Any]: ...
    async def review_round(self, before: dict[str, Any]) -> Verdict: ...
    async def ask_operator(
        self, question: str, topic: str = "ask_user", timeout_s: float | None = None
    ) -> Answer | None: ...


class AgentLoop:
    def __init__(self, host: AgentHost) -> None:
        self.rt = host

    async def run(self) -> None:
        """Turns until a stop (`StopRun`, a budget, an interruption) ends the loop."""
        if self.rt.config.mode == "rounds":
            await self._rounds()
        else:
            await self._react()

    async def _rounds(self) -> None:
        rt = self.rt
        last_findings: list[str] = []
        while True:
            rt.ledger.start_round()
            rt.round = rt.ledger.rounds
            rt.move(RunState.PLANNING)
            before = await self._plan(last_findings)  # the state the round starts from
            rt.move(RunState.DECIDING)
            conversation = executor_messages(
                "\n".join(f"{i}. {s}" for i, s in enumerate(rt.plan, 1)), rt.messages.heard
            )
            await self._executor_turns(conversation)
            last_findings = findings_or_stop(await rt.review_round(before))

    async def _react(self) -> None:
        rt = self.rt
        first = await rt.snapshot()  # what the model is shown is the first round's start
        conversation = react_messages(rt.config.goal, first)
        while True:
            rt.ledger.start_round()
            rt.round = rt.ledger.rounds
            before = first if rt.round == 1 else await rt.snapshot()
            rt.move(RunState.DECIDING)
            tripped = await self._executor_turns(conversation)
            if tripped:
                rt.move(RunState.REVIEWING)
                raise StopRun(StopReason.NO_PROGRESS, "a call repeated with no state change")
            findings = findings_or_stop(await rt.review_round(before))
            conversation.append(findings_message(findings))

    async def _plan(self, findings: list[str]) -> dict[str, Any]:
        """The round's plan, made on the state as the round starts: that state, returned
        (the round's review compares the state at its end with it)."""
        rt = self.rt
        snapshot = await rt.snapshot()
        rt.messages.take()  # the planner hears every message so far, the executor the rest
        messages = planner_messages(rt.config.goal, snapshot, findings, rt.messages.heard)
        reply = await rt.model_calls.call(
            ModelRequest(role="planner", round=rt.round, messages=messages)
        )
        steps = parse_plan(reply.content or "")
        if not steps:
            raise StopRun(StopReason.INVALID_DECISION, "the planner returned an empty plan")
        rt.plan = steps
        rt.emit(PlanWritten, run_id=rt.config.run_id, round=rt.round, steps=steps)
        return snapshot

    async def _executor_turns(self, conversation: list[dict[str, Any]]) -> bool:
        """Run model turns until a final decision or a guard trip; True if the guard tripped."""
        rt = self.rt
        # One request for the round's turns, built unvalidated: the conversation is ours and
        # grows in place every turn; nothing else in it changes within a round.
        request = ModelRequest.model_construct(
            role="executor",
            round=rt.round,
            messages=conversation,
            tools=rt.tool_schemas,
            timeout_s=rt.config.model_timeout_s,
            examples=rt.config.examples,
        )
        while True:
            await rt.control.checkpoint()
            await rt.budget_pause.check()
            decision = await self._next_decision(request)
            if decision.type == "final":
                return False
            if decision.type == "ask_user":
                if rt.answerer is None:
                    raise StopRun(StopReason.ASK_USER, capped(decision.message, MESSAGE_EVENT_CAP))
                question = capped(decision.message, ANSWER_CAP)
                answer = await rt.ask_operator(question)
                conversation.append(answer_message(question, answer.text if answer else ""))
                continue
            if decision.type == "handoff":
                raise StopRun(StopReason.HANDOFF, capped(decision.message, MESSAGE_EVENT_CAP))
            await rt.control.checkpoint()
            tripped = await rt.calls.run_batch(conversation, decision)
            if tripped:
                return True

    async def _next_decision(self, request: ModelRequest) -> Decision:
        """The next decision; `request.messages` is the conversation, grown in place."""
        rt = self.rt
        conversation = request.messages
        while True:
            # The operator's messages since the last turn; every tool call has its result.
            if said := rt.messages.take():
                conversation.extend(operator_says(text) for text in said)
            rt.model_calls.keep_in_window(conversation)
            reply = await rt.model_calls.call(request)
            conversation.append(reply.as_message())
            try:
                decision = read_decision(reply, rt.tools)
            except InvalidDecision as invalid:
                rt.emit(
                    DecisionInvalid,
                    run_id=rt.config.run_id,
                    round=rt.round,
                    error=str(invalid),
                    corrections_used=rt.ledger.corrections + 1,
                )
                rt.ledger.record_correction()
                conversation.extend(rt.calls.corrections_for(reply, str(invalid)))
                continue
            # The state the calls are proposed on, read while the decision is recorded;
            # not when a stop or a pause came meanwhile: the next checkpoint takes it first.
            if decision.type == "tool_call" and rt.control.acts_next:
                rt.state_reads.read_ahead()
            rt.emit(
                DecisionMade,
                run_id=rt.config.run_id,
                round=rt.round,
                decision=decision.type,
                reason_code=capped(decision.reason_code, 200),
                message=capped(decision.message, MESSAGE_EVENT_CAP),
                via=decision.via,
                plan_step=decision.plan_step,
            )
            return decision
