"""One model call of the agent's, in its run's task: the results of the tool uses released
before it recorded (`ToolFinished`) and the workspace looked at (a change no released write
explains is an `unrequested_change`); the run's stops and pauses taken and the turn counted
against the caps before it goes upstream; the answer asked whole, its tokens and cost spent
(past a cap: this call is refused and the run stops naming the cap), the calls its upstream
ran recorded (approved ones' results; one run unasked, `ToolUses.ran_unasked`); its tool
uses decided (`tool_uses.py`); the decided answer settled for the agent (an answer adding a
tool a request would be refused for is refused instead, none of it delivered, the run told,
what ran of it already recorded as run). A call the run cannot answer (it stops on the way)
is left unsettled: the loop's end answers it as the door closes (a final message, or a
refusal naming why).

An answer whose every tool use was taken out (rejected by the operator, a repeat put back to
the model) would reach the agent as text only, and an agent such as `claude -p` ends on that:
the model would never read why. So the gateway tells the model itself: it asks the upstream
again with the answer as the model's turn and each tool use answered by what became of it
(the operator's reason), counted as any model call, and the agent gets that follow-up,
decided as any answer, with the gateway's words said first. At most `RETELLS` times a call.

An upstream keeping the conversation (Responses' `previous_response_id`) still holds the
calls replaced in the agent's copy: their outputs (the reason) are added to the agent's next
request that goes on from that answer (`owed`), and kept until the upstream has answered one
(a failed call or an agent gone mid-call leaves them owed to its retry).

A call stopped while it is upstream counts as a model call whose tokens and cost are unknown
(never 0). A call whose agent went away (its connection closed) is not asked upstream, and an
answer being decided for it is not delivered (`tool_uses.Undelivered`); an answer settled and
then lost on the way (`lost`: the server tells it) is recorded as not delivered too. An
upstream's failure is recorded with its status and type, and what the agent was told of it.
"""

from __future__ import annotations

import time

from loopdeck.core.control import StopRun
from loopdeck.core.events import CallStatus, ModelRetry
from loopdeck.core.run_host import RunHost
from loopdeck.core.states import RunState, StopReason
from loopdeck.core.text import capped
from loopdeck.core.tools import ErrorCode
from loopdeck.gateway.answer import Body, Release, Replace, ToolResult, ToolUse, Verdict
from loopdeck.gateway.config import RETELLS, GatewaySettings
from loopdeck.gateway.door import ModelCall, Outcome
from loopdeck.gateway.responses_format import ResponsesFormat
from loopdeck.gateway.tool_uses import LOST, ToolUses, Undelivered, failed
from loopdeck.gateway.upstream import UPSTREAM_FAILED, Upstream, UpstreamFailed

RESULT_CAP = 2000
MAX_FAILURES = 5  # upstream failures in a row that stop the run
OWED_KEPT = 64  # answers whose owed outputs are kept (the agent goes on from its latest)
RETELL_FAILED = "the agent got the answer as decided, the reasons as its text (the model not told)"


class GatewayCalls:
    def __init__(self, host: RunHost, settings: GatewaySettings) -> None:
        self.host = host
        self.upstream = Upstream(settings.model, settings.api_base, settings.upstream_timeout_s)
        self.uses = ToolUses(host, settings)
        self.cost_so_far = 0.0  # the known costs' sum (the ledger takes the latest figure)
        self.failures = 0  # upstream failures in a row
        self.current: ModelCall | None = None
        self.quiet = False  # the last answer held no tool use: the agent may be done
        self.owed: dict[str, list[Body]] = {}  # an answer's id -> the outputs it still lacks

    def unsettled(self) -> list[ModelCall]:
        """The call being decided when the run stopped, if it was left unanswered (and its
        agent still waits for it)."""
        call = self.current
        waits = call is not None and not call.answered.done() and not call.gone.is_set()
        return [call] if call is not None and waits else []

    async def take(self, call: ModelCall) -> None:
        """The call decided and settled; raises what stops the run (the call then unsettled)."""
        self.current, self.quiet = call, False
        if call.gone.is_set():  # nobody waits for its answer
            return
        if reserved := self.upstream.reserved(call.body):
            said = ", ".join(reserved)
            call.refuse(f"loopdeck: not the agent's to set (its upstream is loopdeck's): {said}",
                        400, "invalid_request_error")  # fmt: skip
            return
        if (refused := call.api.refused(call.body)) is not None:
            call.refuse(refused, 400, "invalid_request_error")
            return
        earlier = str(call.body.get("previous_response_id"))
        if (owed := self.owed.get(earlier)) is not None:
            call.body = ResponsesFormat.paid(call.body, owed)
        await self._results(call)
        try:
            answer = await self._asked(call, call.body)
        except UpstreamFailed as failure:  # the agent's retry still owes them
            kind = failure.kind or UPSTREAM_FAILED
            call.refuse(failure.message, failure.status, kind, failure.headers, failure.code)
            self._failed(failure, _told(failure))
            return
        self.owed.pop(earlier, None)  # the upstream took them
        await self._decided(call, answer)

    async def _asked(self, call: ModelCall, body: Body) -> Body:
        """One model call: a stop or a pause taken first, the turn counted against the caps
        before it goes upstream, what it spent after (past a cap: raises). A stop while it is
        upstream abandons it: the agent is answered as the door closes."""
        host = self.host
        await host.checkpoint()
        host.turn_started()  # a cap already reached refuses the call before it goes upstream
        started = time.perf_counter()
        asking = self.upstream.ask(call.api, body, call.headers)
        try:
            answer = await host.interruptible(asking, by_cancel=True)
        except UpstreamFailed:
            raise
        except BaseException:  # stopped while upstream: a call made, its spend unknown
            host.turn_ended(tokens=None, cost_usd=None, said="",
                            latency_ms=(time.perf_counter() - started) * 1000)  # fmt: skip
            raise
        self.failures = 0
        for result in call.api.ran(answer):  # a remote MCP call the agent approved, run
            self._ended(result)
        for use, result in call.api.ran_unasked(answer):  # ... one nobody was asked about
            await self.uses.ran_unasked(use, result)
        usage = call.api.usage(answer)
        tokens = None if usage is None else usage.total
        # An answer that says no usage has no price either (LiteLLM would say $0 for it).
        cost = None if tokens is None else self.upstream.cost(answer)
        if cost is not None:
            self.cost_so_far += cost
        written = 0 if usage is None else usage.completion
        host.turn_ended(tokens=tokens, completion_tokens=written, cost_usd=cost,
                        said=call.api.said(answer),
                        latency_ms=(time.perf_counter() - started) * 1000)  # fmt: skip
        await host.spent(tokens=tokens, cost_usd=self.cost_so_far if cost is not None else None)
        return answer

    async def _decided(self, call: ModelCall, answer: Body) -> None:
        api, body, told = call.api, call.body, []
        decided, released = answer, list[ToolUse]()  # what the agent gets, what it runs
        for retell in range(RETELLS + 1):
            if (refused := api.refused_answer(answer)) is not None:  # none of it delivered
                self.host.finding(refused)
                call.refuse(refused)
                return
            uses = api.tool_uses(answer)
            if not uses:
                decided, released = answer, []
                break
            try:
                unseen = api.unseen(call.body, uses)
                verdicts = await self.uses.decide(uses, api.schemas(call.body), call.gone, unseen)
            except Undelivered:
                self.uses.undelivered()
                return
            decided = api.decided(answer, verdicts)
            released = [use for use in uses if isinstance(verdicts.get(use.use_id), Release)]
            if call.gone.is_set():  # decided for nobody: nothing of it is carried out
                self.uses.undelivered()
                return
            self._owe(api, answer, verdicts)
            self.uses.released(released, verdicts)  # counted against the tool-call cap first
            if released or self.uses.stop_after is not None or retell == RETELLS:
                break
            replaced = {k: v.text for k, v in verdicts.items() if isinstance(v, Replace)}
            body = api.retold(body, answer, replaced)
            try:
                answer = await self._asked(call, body)
            except UpstreamFailed as failure:  # the agent gets the text it would have had
                self._failed(failure, RETELL_FAILED)
                break
            told.append(api.said(decided))
        if told:
            decided = api.prefixed(decided, "\n\n".join(t for t in told if t))
        self.quiet = not released
        call.released = [use.use_id for use in released]
        call.settle(Outcome(answer=decided))
        if released:
            self.host.move(RunState.EXECUTING)
        if self.uses.stop_after is not None:
            raise self.uses.stop_after

    def _owe(self, api: object, answer: Body, verdicts: dict[str, Verdict]) -> None:
        """The outputs an upstream keeping `answer` lacks (its replaced calls'), kept for the
        request that goes on from it; a retold answer's are told already."""
        replaced = {k: v.text for k, v in verdicts.items() if isinstance(v, Replace)}
        if isinstance(api, ResponsesFormat) and replaced and answer.get("id"):
            self.owed[str(answer["id"])] = api.owed(answer, replaced)
            while len(self.owed) > OWED_KEPT:
                self.owed.pop(next(iter(self.owed)))

    async def _results(self, call: ModelCall) -> None:
        """What the agent's tools did, as its request says, recorded once each; then the
        workspace looked at."""
        ended = [said for r in call.api.results(call.body) if (said := self._ended(r))]
        await self.uses.look(f"the results of {', '.join(ended)}" if ended else "a model call")

    def lost(self, call: ModelCall) -> None:
        """The agent's connection closed once its answer was settled, before the answer
        reached it: the calls it released recorded as not delivered (`ToolUses.lost`), and
        the run says so."""
        outcome = call.answered.result() if call.answered.done() else None
        if outcome is None or outcome.answer is None:  # a refusal: nothing was to be run
            return
        withdrawn = self.uses.lost(call.released)
        said = f"; {', '.join(withdrawn)} withdrawn" if withdrawn else ""
        self.host.finding(f"{LOST}{said}")

    def _ended(self, result: ToolResult) -> str | None:
        """A released call's result recorded, once: its call id (None: not one waiting)."""
        record = self.uses.result_came(result.use_id)
        if record is None:
            return None
        text = capped(result.text, RESULT_CAP)
        if result.is_error:
            self.host.finish(record, CallStatus.FAILED, failed(ErrorCode.TOOL_ERROR, text))
        else:
            self.host.finish(record, CallStatus.EXECUTED, {"ok": True, "data": {"output": text}})
        self.uses.watch.ended(record.call_id)
        return record.call_id

    def _failed(self, failure: UpstreamFailed, told: str) -> None:
        """The upstream's failure, and what the agent was told of it (`told`): recorded as
        loopdeck's own runs record a failed model call (`ModelRetry`, the failures in a row its
        attempt, no delay of loopdeck's: the agent retries what it retries); a run whose
        upstream fails call after call is stopped, naming it."""
        self.failures += 1
        failed = capped(failure.said(), 300)
        said = f"the upstream ({self.upstream.model}) failed a call: {failed}; {told}"
        host = self.host
        host.emit(ModelRetry, run_id=host.run_id, attempt=self.failures, error=said, delay_s=0.0)
        host.finding(said)
        if self.failures >= MAX_FAILURES:
            said = capped(failure.said(), 500)
            raise StopRun(
                StopReason.PROVIDER_FAILURE,
                f"the upstream failed {self.failures} calls in a row: {said}",
            )


def _told(failure: UpstreamFailed) -> str:
    """What the agent was told of the upstream's failure: the same, in its format."""
    waits = failure.headers.get("retry-after")
    after = f", retry-after {waits}" if waits else ""
    return f"the agent was told so (HTTP {failure.status}{after})"
