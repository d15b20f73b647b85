"""The control channel: stop after current tools, kill now, pause, and the deadline timer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Literal, TypeVar, TypeVarTuple

from loopdeck.core.events import Emit, OperatorCommand
from loopdeck.core.states import StopReason

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class StopRun(Exception):
    """Ends the run with a reason from the closed set."""

    def __init__(self, reason: StopReason, detail: str = "") -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


class Interrupted(Exception):
    """An in-flight call was cancelled by the kill switch, a stop or the deadline."""

    def __init__(self, reason: StopReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail

    def as_stop(self) -> StopRun:
        return StopRun(self.reason, self.detail)


Hold = Callable[[str], AbstractContextManager[None]]


def _no_hold(why: str) -> AbstractContextManager[None]:
    return contextlib.nullcontext()


def from_anywhere(act: Callable[[*Ts], None]) -> Callable[[*Ts], None]:
    """`act` for a thread that is not the run's (an env's on its server's connection): it
    lands on the loop this is asked on, the run's; once that loop is closed, the run is over
    and it does nothing."""
    loop = asyncio.get_running_loop()

    def on_the_runs_loop(*said: *Ts) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the run is over
            loop.call_soon_threadsafe(act, *said)

    return on_the_runs_loop


class RunControl:
    def __init__(self, emit: Emit, run_id: str, hold: Hold = _no_hold) -> None:
        self._emit = emit
        self._run_id = run_id
        self.hold = hold  # the agent's clock stops while a pause holds the run
        self.cancel_requested_by: str | None = None
        self._interrupt: tuple[StopReason, str] | None = None
        # The run's task while it waits in `interruptible`, and whether a stop cancelled it.
        self._inflight: asyncio.Task[object] | None = None
        self._inflight_cancellable = False
        self._cancelled_inflight = False
        self._resumed: asyncio.Event | None = None
        # Held by a pause where stops land (nothing in flight); told to `on_pause_hold` as
        # each such hold begins.
        self._holding = False
        self.on_pause_hold: list[Callable[[], None]] = []

    @property
    def paused(self) -> bool:
        return self._resumed is not None and not self._resumed.is_set()

    @property
    def acts_next(self) -> bool:
        """The next checkpoint lets the run act at once: no stop came, no pause holds."""
        return self._interrupt is None and self.cancel_requested_by is None and not self.paused

    @property
    def pause_holds(self) -> bool:
        """Held by a pause where stops land, and nothing taken since ends the hold (a
        resume, a cancel, a kill): a worker may park it. A command is taken at once, while
        the hold's own wait ends a step of the loop later."""
        ended = self._interrupt is not None or self.cancel_requested_by is not None
        return self._holding and self.paused and not ended

    def _record(self, command: Literal["cancel", "kill", "pause", "resume"], by: str) -> None:
        self._emit(OperatorCommand, run_id=self._run_id, command=command, by=by)

    def _interrupt_now(self, reason: StopReason, detail: str) -> None:
        if self._interrupt is None:
            self._interrupt = (reason, detail)
        task = self._inflight
        if task is None or self._cancelled_inflight:
            return
        self._cancelled_inflight = True
        task.cancel()

    def request_cancel(self, by: str) -> None:
        if self.cancel_requested_by is not None:
            return
        self.cancel_requested_by = by
        self._record("cancel", by)
        # Waiting for an approval or in a pause is not a tool: stop waiting at once.
        if self._inflight_cancellable:
            self._interrupt_now(StopReason.CANCELLED, f"stopped after current tools by {by}")

    def request_kill(self, by: str) -> None:
        self._record("kill", by)
        self._interrupt_now(StopReason.KILLED, f"killed by {by}")

    def fail(self, reason: StopReason, detail: str) -> None:
        """Something outside the run's task ended it (its agent's process died): the wait
        in flight, or the next checkpoint, stops the run with this reason."""
        self._interrupt_now(reason, detail)

    def fail_from_anywhere(self) -> Callable[[StopReason, str], None]:
        """`fail` for a thread that is not the run's (an env's watch on its server's process):
        it lands on the loop this is asked on, the run's; once that loop is closed, the run is
        over and it does nothing."""
        loop = asyncio.get_running_loop()

        def fail(reason: StopReason, detail: str) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the run is over
                loop.call_soon_threadsafe(self.fail, reason, detail)

        return fail

    def fire_deadline(self) -> None:
        self._interrupt_now(StopReason.DEADLINE, "wall-clock deadline reached")

    def pause(self, by: str) -> None:
        if self.paused:
            return
        self._resumed = asyncio.Event()
        self._record("pause", by)

    def resume(self, by: str) -> None:
        if not self.paused or self._resumed is None:
            return
        self._resumed.set()
        self._record("resume", by)

    async def checkpoint(self) -> None:
        """The point before a model call where stops land and pauses hold."""
        # Yield once, so an operator's keys are served even when model and tools never block.
        await asyncio.sleep(0)
        self._landed(cancel=StopRun)
        if await self._hold_while_paused():
            await self.checkpoint()

    async def settle(self) -> None:
        """Before acting where no checkpoint came after the commands just taken (a moved
        run's first act, after those sent while no worker held it): a kill or a cancel
        lands now, as on a run waiting for its operator (nothing of it is in flight), and a
        pause holds here."""
        self._landed(cancel=Interrupted)
        if await self._hold_while_paused():
            await self.settle()

    def _landed(self, cancel: type[StopRun] | type[Interrupted]) -> None:
        """A stop that came, raised: a kill, a failure or the deadline as `Interrupted`; the
        operator's cancel as `cancel` (`StopRun` at a checkpoint, where the run's tools are
        done; `Interrupted` where it cuts a wait short)."""
        if self._interrupt is not None:
            raise Interrupted(*self._interrupt)
        if self.cancel_requested_by is not None:
            raise cancel(
                StopReason.CANCELLED, f"stopped after current tools by {self.cancel_requested_by}"
            )

    async def _hold_while_paused(self) -> bool:
        """Held here while a pause lasts (the agent's clock stopped); whether it was, and so
        whether a stop sent meanwhile is to be looked for again."""
        if self._resumed is None or self._resumed.is_set():
            return False
        self._holding = True
        for then in self.on_pause_hold:
            then()
        try:
            with self.hold("paused"):
                await self.interruptible(self._resumed.wait(), by_cancel=True)
        finally:
            self._holding = False
        return True

    async def interruptible(self, awaitable: Awaitable[T], *, by_cancel: bool = False) -> T:
        if self._interrupt is not None or (by_cancel and self.cancel_requested_by is not None):
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            self._landed(cancel=Interrupted)
        # A stop cancels the run's own task while it waits here, as `asyncio.timeout` does,
        # rather than a task made for each wait: a step makes four waits, and a task each
        # cost two more turns of the loop apiece.
        task = asyncio.current_task()
        assert task is not None, "interruptible waits run in a task"
        outer = self._inflight, self._inflight_cancellable  # a wait within a wait
        self._inflight = task
        self._inflight_cancellable = by_cancel
        try:
            result = await awaitable
        except asyncio.CancelledError:
            if self._cancelled_inflight:
                self._cancelled_inflight = False
                if task.uncancel() == 0 and self._interrupt is not None:
                    raise Interrupted(*self._interrupt) from None
            raise  # somebody else cancelled the run as well: theirs goes on up
        finally:
            self._inflight, self._inflight_cancellable = outer
        if self._cancelled_inflight:
            await self._settle_late_stop(task)
        return result

    async def _settle_late_stop(self, task: asyncio.Task[object]) -> None:
        """A stop landed as the wait ended: what was awaited swallowed the cancellation, or
        the run's task cancelled itself (a kill from its own code) and it is still to come.
        The result stands; the stop is taken at the next checkpoint or wait."""
        self._cancelled_inflight = False
        try:
            await asyncio.sleep(0)  # a cancellation still to come arrives here
        except asyncio.CancelledError:
            if task.uncancel() > 0:
                raise  # somebody else cancelled the run as well
            return
        task.uncancel()
