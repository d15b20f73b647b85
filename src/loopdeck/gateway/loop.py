"""A gateway run's loop, reaching its run only through `RunHost`: the gateway's door opened
(its own server on 127.0.0.1, or a shared one's), the folder looked at, the agent started with
the door as its endpoint, and its model calls taken in order by the run's task until the agent
exits; then the goal check decides (`judge.py`). The agent's own claim never ends a run.

However the run ends the door closes first: a stop (`cancel`, the guard, an unrequested
change) answers the agent's next calls, and the one being decided, with a final message telling
it to end; a budget's cap or a deadline refuses every further call, naming why. Either way the
agent is given `grace_s` to exit on its own (to show what it was told), then its process group
is ended. A kill refuses every call and ends the group at once. No agent process outlives the
run.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from loopdeck.core.budgets import BudgetExhausted
from loopdeck.core.control import Interrupted, StopRun
from loopdeck.core.run_host import RunHost
from loopdeck.core.states import StopReason
from loopdeck.gateway.agent_process import AgentFailed, AgentProcess, agent_environment
from loopdeck.gateway.calls import GatewayCalls
from loopdeck.gateway.config import GatewaySettings
from loopdeck.gateway.door import Closing, Door, Lost, ModelCall
from loopdeck.gateway.judge import judged
from loopdeck.gateway.server import GatewayServer

# Stops whose calls are refused (the agent must not go on), not answered with a final message;
# all but a kill give the agent its grace to exit on its own first.
REFUSING = frozenset({
    StopReason.KILLED, StopReason.TURN_LIMIT, StopReason.TOOL_CALL_LIMIT, StopReason.TOKEN_LIMIT,
    StopReason.COST_LIMIT, StopReason.DEADLINE,
})  # fmt: skip
ENDED = "loopdeck: this run has ended; the gateway takes no more calls for it"


@dataclass(frozen=True)
class Exited:
    status: int


class GatewayLoop:
    def __init__(
        self,
        host: RunHost,
        settings: GatewaySettings,
        unchecked: str | None,
        server: GatewayServer | None = None,
        token: str | None = None,
    ) -> None:
        self.host = host
        self.settings = settings
        self.unchecked = unchecked  # why nothing checks the goal, or None
        self.calls = GatewayCalls(host, settings)
        self.door = Door(settings.model, token)
        self.server = server  # a shared server (`loopdeck gateway serve`); None: its own
        # None: a served run's agent, started elsewhere (its end is its quiet: `idle_s`).
        self.agent = AgentProcess(settings.command, host.workdir) if settings.command else None
        self._own_server = server is None

    async def run(self) -> None:
        host = self.host
        closing = Closing(ENDED)
        try:
            server = await self._server()
            server.open_door(self.door)
            await host.start_round()
            before = await host.snapshot()
            await self.calls.uses.look("the start")  # what the folder was
            if self.agent is not None:
                env = agent_environment(server.url, self.door.token, self.settings.env)
                try:
                    await host.interruptible(self.agent.start(env))
                except AgentFailed as failed:
                    raise StopRun(StopReason.TOOL_FAILURE, str(failed)) from None
            status = await self._calls()
            # A released command whose result never came explains nothing past the agent's
            # end; a released call naming files explains those files at this last look.
            self.calls.uses.watch.drop_open()
            await self.calls.uses.look("the agent's end")
            await judged(host, before, status, self.agent, self.unchecked)
        except BaseException as stop:
            closing = closing_for(stop)
            raise
        finally:
            await self._wind_down(closing)

    async def _server(self) -> GatewayServer:
        if self.server is None:
            self.server = GatewayServer(self.settings.keepalive_s)
            await self.server.start()
        return self.server

    async def _calls(self) -> int:
        """Each call the agent makes, taken in order, until it exits (a served run's: until
        it is quiet): its exit status."""
        if self.agent is None:
            exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        else:
            exited = asyncio.ensure_future(self.agent.exited())
            exited.add_done_callback(self._gone)
        try:
            while True:
                item = await self.host.interruptible(self._next(exited), by_cancel=True)
                if isinstance(item, Exited):
                    for call in self.door.losses():  # told before it exited
                        self.calls.lost(call)
                    return item.status
                if isinstance(item, Lost):
                    self.calls.lost(item.call)
                    continue
                await self.calls.take(item)
        finally:
            exited.cancel()

    def _gone(self, exited: asyncio.Future[int]) -> None:
        """The agent exited while a call of its was being decided (held for the operator):
        nobody is left to answer, the run stops at once."""
        if exited.cancelled() or not self.calls.unsettled() or self.agent is None:
            return
        said = self.agent.said(f"exited (status {exited.result()}) while its model call was held")
        self.host.fail(StopReason.TOOL_FAILURE, said)

    async def _next(self, exited: asyncio.Future[int]) -> ModelCall | Lost | Exited:
        queue = self.door.queue
        if exited.done():  # what it asked before it exited has nobody to answer
            return Exited(exited.result())
        if not queue.empty():
            return queue.get_nowait()
        getter = asyncio.ensure_future(queue.get())
        waited: set[asyncio.Future[Any]] = {getter, exited}
        quiet = self.settings.idle_s if self.agent is None and self.calls.quiet else None
        try:
            await asyncio.wait(waited, timeout=quiet, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not getter.done():
                getter.cancel()
        if getter.done() and not getter.cancelled():
            return getter.result()
        return Exited(exited.result() if exited.done() else 0)  # a served agent gone quiet

    async def _wind_down(self, closing: Closing) -> None:
        """The door closed (the call being decided answered too), the agent given its grace
        to exit on its own or ended at once, the server stopped when it is the run's."""
        self.door.close(closing)
        for call in self.calls.unsettled():
            closing.answer(call, self.door.model)
        if self.agent is not None:
            proc = self.agent.proc
            try:
                if closing.grace and proc is not None and proc.returncode is None:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.settings.grace_s):
                            await proc.wait()
            finally:  # a cancel during the grace cuts it short, never the agent's end
                await self.agent.stop()
        if self.server is not None:
            self.server.close_door(self.door)
            if self._own_server:
                await self.server.stop()


def closing_for(stop: BaseException) -> Closing:
    """How the door answers once the run stops this way."""
    if isinstance(stop, BudgetExhausted):
        return Closing(f"loopdeck: {stop}; the run has stopped", grace=True)
    if isinstance(stop, StopRun | Interrupted):
        said = f"loopdeck: the run has stopped ({stop.reason.value}: {stop.detail})"
        if stop.reason in REFUSING:
            return Closing(said, grace=stop.reason is not StopReason.KILLED)
        if stop.reason is StopReason.GOAL_MET:
            return Closing(ENDED, grace=True)
        return Closing(
            f"{said}. Stop now: call no more tools and end your turn.", final=True, grace=True
        )
    return Closing(f"loopdeck: the run has stopped ({type(stop).__name__})")
