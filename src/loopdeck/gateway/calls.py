"""One model call of the agent's, in its run's task: the results of the tool uses released
before it recorded (`ToolFinished`) and the workspace looked at (a change no released write
explains is an `unrequested_change`); the turn counted against the caps before it goes
upstream; the answer asked whole, its tokens and cost spent (past a cap: this call is refused
and the run stops naming the cap); its tool uses decided (`tool_uses.py`); the decided answer
settled for the agent. A call the run cannot answer (it stops on the way) is left unsettled:
the loop's end answers it as the door closes (a final message, or a refusal naming why).
"""

from __future__ import annotations

import time

from loopdeck.core.control import StopRun
from loopdeck.core.events import CallStatus
from loopdeck.core.run_host import RunHost
from loopdeck.core.states import RunState, StopReason
from loopdeck.core.text import capped
from loopdeck.core.tools import ErrorCode
from loopdeck.gateway.answer import Body, Release
from loopdeck.gateway.config import GatewaySettings
from loopdeck.gateway.door import ModelCall, Outcome
from loopdeck.gateway.tool_uses import ToolUses, failed
from loopdeck.gateway.upstream import UPSTREAM_FAILED, Upstream, UpstreamFailed

RESULT_CAP = 2000
MAX_FAILURES = 5  # upstream failures in a row that stop the run


class GatewayCalls:
    def __init__(self, host: RunHost, settings: GatewaySettings) -> None:
        self.host = host
        self.upstream = Upstream(settings.model, settings.api_base, settings.upstream_timeout_s)
        self.uses = ToolUses(host, settings)
        self.cost_so_far = 0.0  # the known costs' sum (the ledger takes the latest figure)
        self.failures = 0  # upstream failures in a row
        self.current: ModelCall | None = None
        self.quiet = False  # the last answer held no tool use: the agent may be done

    def unsettled(self) -> list[ModelCall]:
        """The call being decided when the run stopped, if it was left unanswered."""
        call = self.current
        return [call] if call is not None and not call.answered.done() else []

    async def take(self, call: ModelCall) -> None:
        """The call decided and settled; raises what stops the run (the call then unsettled)."""
        host = self.host
        self.current, self.quiet = call, False
        if reserved := self.upstream.reserved(call.body):
            said = ", ".join(reserved)
            call.refuse(f"loopdeck: not the agent's to set (its upstream is loopdeck's): {said}",
                        400, "invalid_request_error")  # fmt: skip
            return
        await self._results(call)
        host.turn_started()  # a cap already reached refuses the call before it goes upstream
        started = time.perf_counter()
        try:
            answer = await host.interruptible(self.upstream.ask(call.api, call.body, call.headers))
        except UpstreamFailed as failure:
            self._failed(call, failure)
            return
        self.failures = 0
        tokens, cost = call.api.tokens(answer), self.upstream.cost(answer)
        if cost is not None:
            self.cost_so_far += cost
        host.turn_ended(tokens=tokens, cost_usd=cost, said=call.api.said(answer),
                        latency_ms=(time.perf_counter() - started) * 1000)  # fmt: skip
        await host.spent(tokens=tokens, cost_usd=self.cost_so_far if cost is not None else None)
        await self._decided(call, answer)

    async def _decided(self, call: ModelCall, answer: Body) -> None:
        uses = call.api.tool_uses(answer)
        if not uses:
            self.quiet = True
            call.settle(Outcome(answer=answer))
            return
        verdicts = await self.uses.decide(uses, call.api.schemas(call.body))
        decided = call.api.decided(answer, verdicts)
        released = [use for use in uses if isinstance(verdicts.get(use.use_id), Release)]
        self.uses.released(released, verdicts)  # counted against the tool-call cap first
        self.quiet = not released
        call.settle(Outcome(answer=decided))
        if released:
            self.host.move(RunState.EXECUTING)
        if self.uses.stop_after is not None:
            raise self.uses.stop_after

    async def _results(self, call: ModelCall) -> None:
        """What the agent's tools did, as its request says, recorded once each; then the
        workspace looked at."""
        ended = []
        for result in call.api.results(call.body):
            record = self.uses.pending.pop(result.use_id, None)
            if record is None:
                continue
            text = capped(result.text, RESULT_CAP)
            if result.is_error:
                self.host.finish(record, CallStatus.FAILED, failed(ErrorCode.TOOL_ERROR, text))
            else:
                self.host.finish(
                    record, CallStatus.EXECUTED, {"ok": True, "data": {"output": text}}
                )
            self.uses.watch.ended(record.call_id)
            ended.append(record.call_id)
        await self.uses.look(f"the results of {', '.join(ended)}" if ended else "a model call")

    def _failed(self, call: ModelCall, failure: UpstreamFailed) -> None:
        """The upstream's failure goes back to the agent, which retries what it retries; a
        run whose upstream fails call after call is stopped, naming it."""
        self.failures += 1
        call.refuse(failure.message, failure.status, UPSTREAM_FAILED)
        self.host.finding(f"the upstream failed a call: {capped(failure.message, 300)}")
        if self.failures >= MAX_FAILURES:
            said = capped(failure.message, 500)
            raise StopRun(
                StopReason.PROVIDER_FAILURE,
                f"the upstream failed {self.failures} calls in a row: {said}",
            )
