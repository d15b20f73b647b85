"""An ACP agent's run: the `Runtime`'s loop when the scenario names an `[agent]`. The goal is
the first prompt; each prompt turn is a round: its plan, tool calls and usage become the run's
events as they come; a tool call is keyed by the guard on (kind, title, canonical input, the
working copy's hash); a permission the agent asks is loopdeck's approval, bound to that state;
a file the agent asks loopdeck to write is a write loopdeck gates and runs once. When a turn
ends the goal check runs on the working copy: met, `goal_met`; unchanged, `stalled`; else its
findings are the next prompt, up to `max_rounds`. With no goal check the operator judges the
turn (`unchecked_goal.py`). The agent's own claim never ends a run.

The working copy is looked at before the agent starts, after its start-up, through its turns
(`calls.py`), and once it has been stopped; the goal check runs with the agent held still
(`workdir/freeze.py`), so no write of its can land while the check runs.

Everything the agent sends is taken by the run's own task, in order (`bridge.py`), so stops,
budgets and approvals work as in any run; a stop cancels the turn (`session/cancel`, every
waiting request answered cancelled) and the agent is stopped at the end, whatever the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from loopdeck.acp_env.agent_process import AgentFailed, AgentProcess, agent_words
from loopdeck.acp_env.bridge import (
    Asked,
    Bridge,
    FileWriteAsked,
    Incoming,
    PermissionAsked,
    TerminalAsked,
    Updated,
)
from loopdeck.acp_env.calls import AcpCalls
from loopdeck.acp_env.config import AgentConfig
from loopdeck.acp_env.unchecked_goal import operator_judges
from loopdeck.core.control import StopRun
from loopdeck.core.review import Verdict, findings_or_stop
from loopdeck.core.run_host import RunHost
from loopdeck.core.states import StopReason
from loopdeck.core.text import capped
from loopdeck.core.workspace_changes import changes_between, files_of
from loopdeck.workdir.freeze import Frozen, freeze

GOAL_CHECK = "the goal check"  # what explains the changes the goal check itself makes


class AcpLoop:
    def __init__(
        self,
        host: RunHost,
        agent: AgentProcess,
        config: AgentConfig,
        unchecked: str | None = None,
        shown_calls: dict[str, tuple[Any, ...]] | None = None,  # the workspace's, for diffs
    ) -> None:
        self.host = host
        self.agent = agent
        self.config = config
        self.bridge = Bridge(host.workdir)
        volatile = frozenset(config.volatile)
        self.calls = AcpCalls(host, agent, self.bridge, volatile, shown_calls)
        self.said: list[str] = []  # the agent's words this turn
        self.cost_seen: float | None = None  # the session's cost so far, as the agent says
        self.cost_before = 0.0  # ... as it was when this turn started
        self.turn_tokens: int | None = None  # this turn's tokens, from its usage
        self.turn_written = 0  # ... of them, what the model wrote (its output)
        self.acted = False  # the agent said or did something this turn: its model ran
        # Nothing checks the goal: why, said when nobody can be asked to judge a turn.
        self.unchecked = unchecked
        self.stopping = False  # the agent's end is loopdeck's doing from here on
        # The prompt in flight, from its sending until its reply is taken.
        self.turn: asyncio.Future[Any] | None = None
        self.watcher: asyncio.Future[None] | None = None  # the agent's process, waited on

    async def run(self) -> None:
        """The agent started, its turns until a stop; the agent stopped at any end, a start
        that failed or was killed included (its process and stderr file gone). An agent
        that dies on its own stops the run at once, whatever it waits for."""
        try:
            # What the folder was before the agent ran at all: a write in its start-up
            # (initialize, session/new, its mode) is unrequested, never the baseline.
            await self.calls.look("the start")
            try:
                await self.host.interruptible(self.agent.start(self.bridge, self.config))
            except AgentFailed as failed:
                raise StopRun(StopReason.TOOL_FAILURE, str(failed)) from None
            await self.calls.look("the agent's start-up")
            self.watcher = asyncio.ensure_future(self._watch_agent())
            await self._turns()
        except BaseException as stop:
            await self._stopped(stop)
            raise

    async def _stopped(self, stop: BaseException) -> None:
        """The agent and its commands stopped, then the folder looked at once more: a write
        made as the agent was stopped (a SIGTERM or atexit handler, a daemon's last act) is
        recorded `unrequested_change`. It becomes the run's stop (`policy_block`, in a
        guarded run) only when the run would otherwise end `goal_met`, which it may have
        raced; any other stop already says why the run ended and is kept, the change
        recorded beside it (`stops` false)."""
        self.stopping = True
        self.calls.settle_blocked()
        if self.watcher is not None:
            self.watcher.cancel()
        await self.calls.terminals.close()  # its commands end with the run, not after it
        await self.agent.stop()
        if not isinstance(stop, Exception) or self.agent.proc is None:
            return  # the task itself cancelled, or no agent ever ran: nothing to look at
        watch, after = self.calls.watch, "the agent's stop"
        watch.turn_ended()  # no permission outlives the agent
        try:
            changes = watch.look(await self.host.snapshot())
        except Exception:  # the run's own end is what is said
            return
        self.calls.said_beside(after, changes)
        if not changes:
            return
        if isinstance(stop, StopRun) and stop.reason is StopReason.GOAL_MET:
            self.host.unrequested(after, changes)  # a guarded run: raised, the stop now
            return
        self.host.unrequested(after, changes, stops=False)  # recorded beside the run's stop

    async def _watch_agent(self) -> None:
        proc = self.agent.proc
        if proc is None:
            return
        status = await proc.wait()
        if not self.stopping:
            # Said alike whichever notices first: this wait or the turn's broken connection.
            # A turn whose reply was not taken yet is mid-turn, its connection broken or not.
            mid_turn = self.turn is not None
            what = f"went away mid-turn (exit status {status})" if mid_turn else None
            what = what or f"exited (status {status})"
            self.host.fail(
                StopReason.TOOL_FAILURE, self.agent.said(what, "it is gone, nothing it asked runs")
            )

    async def _turns(self) -> None:
        host = self.host
        prompt = host.config.goal
        while True:
            round_no = await host.start_round()
            # The first look sets what the working copy was; a later one catches a write
            # made between turns.
            await self.calls.look(f"turn {round_no - 1}")
            before = await host.snapshot()
            stop = await self._turn(prompt)
            self.calls.settle_blocked()  # a blocked call never said ended: blocked, once
            self.calls.watch.turn_ended()  # no permission outlives its turn
            self.calls.permitted_writes.clear()  # nor a write it let loopdeck do unasked
            await self.calls.look(f"turn {round_no}")
            if self.calls.tripped:
                raise StopRun(StopReason.NO_PROGRESS, self.calls.tripped)
            if stop == "refusal":
                raise StopRun(StopReason.POLICY_BLOCK, "the agent refused the prompt")
            if self.calls.nudged:  # the operator's word on a loop, not a finished turn
                self.calls.nudged = False
                prompt = self._next_prompt([])
                continue
            if self.unchecked is not None:
                said = "".join(self.said)
                left = await operator_judges(host, before, stop, said, self.unchecked)
                prompt = "\n".join([left, self._next_prompt([])]).strip()
                continue
            verdict = await self._checking(round_no, before)
            prompt = self._next_prompt(findings_or_stop(verdict))

    async def _checking(self, round_no: int, before: dict[str, Any]) -> Verdict:
        """The goal check, with the agent (and every command of its) stopped (SIGSTOP, below
        their guardians) from the look before it to the look after it: nothing the agent
        does can land while the check runs (a fix timed into it would pass it and be taken
        for the check's). A process that cannot be stopped stops the run, named. A terminal
        command's timeout keeps counting while it is stopped (the check's time is its)."""
        proc = self.agent.proc
        guardians = [] if proc is None else [proc.pid]
        guardians += [
            guardian.pid for guardian in self.calls.terminals.terminals.guardians.values()
        ]
        frozen = Frozen()  # thawed whatever happens, a cancel amid the freeze included
        try:
            moving = await asyncio.to_thread(freeze, guardians, frozen)
            if moving:
                raise StopRun(
                    StopReason.TOOL_FAILURE,
                    self.agent.said(
                        "could not be held still for the goal check",
                        f"processes {', '.join(map(str, sorted(moving)))} did not stop",
                    ),
                )
            await self.calls.look(f"turn {round_no}")  # what it did before it was stopped
            try:
                return await self.host.review_round(before)
            finally:
                await self._checked(round_no)
        finally:
            frozen.thaw()

    async def _checked(self, round_no: int) -> None:
        """The look after the goal check, which runs in the working copy with the agent held
        still: what changed since the look just before it is the check's doing (a report, a
        cache it writes), recorded as the check's, never blamed on the agent."""
        watch = self.calls.watch
        seen = dict(watch.seen or {})
        watch.permit(GOAL_CHECK, None)
        watch.ended(GOAL_CHECK)
        snapshot = await self.host.snapshot()
        watch.look(snapshot)
        changes = changes_between(seen, files_of(snapshot))
        if changes:
            self.host.finding(
                f"the goal check after turn {round_no} changed the working copy (its own"
                f" doing, not the agent's): {changes.said()}"
            )

    def _next_prompt(self, findings: list[str]) -> str:
        lines = ["The goal is not met yet. The goal check says:"] if findings else []
        lines += [f"- {capped(reason, 500)}" for reason in findings[:20]]
        lines += self.calls.take_notes()
        lines += [f"The operator says: {text}" for text in self.host.operator_messages()]
        return "\n".join(lines)

    async def _turn(self, text: str) -> str:
        from acp import RequestError, text_block

        host = self.host
        host.turn_started()
        started, self.said, self.turn_tokens = time.perf_counter(), [], None
        self.turn_written, self.acted = 0, False
        self.cost_before = self.cost_seen or 0.0
        self.calls.cutting = False
        turn = self.turn = asyncio.ensure_future(
            self.agent.conn.prompt(session_id=self.agent.session_id, prompt=[text_block(text)])
        )
        try:
            while (item := await host.interruptible(self._next(turn), by_cancel=True)) is not None:
                await self._take(item)
        except (ConnectionError, OSError) as exc:
            self._turn_done(started)  # its tokens unknown, never 0
            raise self._went_away(exc) from None
        except BaseException:
            self._turn_done(started)  # a cut turn's tokens are unknown, never 0
            await self._cancel_turn(turn)
            raise
        try:
            response = turn.result()
        except (ConnectionError, OSError) as exc:
            self._turn_done(started)
            raise self._went_away(exc) from None
        except RequestError as refused:  # e.g. Claude Code's "API Error: 400" after its retries
            said = self.agent.said("failed its turn", agent_words(refused))
            raise StopRun(StopReason.TOOL_FAILURE, said) from None
        self._usage_of(response)
        self._turn_done(started)
        self.turn = None
        await host.spent(tokens=self.turn_tokens)
        return str(response.stop_reason)

    def _usage_of(self, response: Any) -> None:
        """The turn's own usage: all it spent, and of it what the model wrote (`written`). A
        turn whose model ran (it said or did something) reporting 0 in all (opencode's turn
        cut by a cancel) reports nothing known: unknown, never 0."""
        usage = getattr(response, "usage", None)
        if usage is None:
            return
        total = int(usage.total_tokens)
        if total == 0 and (self.acted or str(response.stop_reason) == "cancelled"):
            return
        self.turn_tokens = total
        self.turn_written = min(written(usage), total)

    def _went_away(self, exc: BaseException) -> StopRun:
        proc = self.agent.proc
        status = None if proc is None else proc.returncode
        what = "went away mid-turn" + ("" if status is None else f" (exit status {status})")
        return StopRun(StopReason.TOOL_FAILURE, self.agent.said(what, str(exc)))

    async def _next(self, turn: asyncio.Future[Any]) -> Incoming | None:
        """The agent's next message, or None once its turn ended and all it sent is taken."""
        queue = self.bridge.queue
        if not queue.empty():
            return queue.get_nowait()
        getter = asyncio.ensure_future(queue.get())
        try:
            await asyncio.wait({getter, turn}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not getter.done():
                getter.cancel()
        if getter.done() and not getter.cancelled():
            return getter.result()
        return queue.get_nowait() if not queue.empty() else None

    async def _take(self, item: Incoming) -> None:
        from acp import RequestError

        match item:
            case Updated(update=update):
                await self._update(update)
            case PermissionAsked(tool_call=tool_call, options=options):
                self.acted = True
                self._answer(item, await self.calls.permission(tool_call, options))
            case FileWriteAsked() | TerminalAsked():
                self.acted = True
                try:
                    self._answer(item, await self.calls.write(item))
                except RequestError as refused:  # said to the agent as its request's error
                    if not item.answer.done():
                        item.answer.set_exception(refused)

    @staticmethod
    def _answer(item: Asked, answer: Any) -> None:
        if not item.answer.done():
            item.answer.set_result(answer)

    async def _update(self, update: Any) -> None:
        from acp.schema import (
            AgentMessageChunk,
            AgentPlanUpdate,
            AgentThoughtChunk,
            ToolCallProgress,
            ToolCallStart,
            UsageUpdate,
        )

        said = (AgentMessageChunk, AgentThoughtChunk, AgentPlanUpdate, ToolCallStart)
        if isinstance(update, (*said, ToolCallProgress)):
            self.acted = True  # its model ran this turn
        match update:
            case AgentPlanUpdate():
                steps = [capped(str(entry.content), 500) for entry in update.entries][:50]
                self.host.write_plan(steps)
            case AgentMessageChunk():
                text = getattr(update.content, "text", None)
                if text:
                    self.said.append(text)
            case ToolCallStart():
                await self.calls.proposed(update)
            case ToolCallProgress():
                await self.calls.progress(update)
            case UsageUpdate():
                await self._usage(update)

    async def _usage(self, update: Any) -> None:
        """`used` of `size` is the context window's fill, not tokens spent: shown apart. The
        cost is the session's so far."""
        self.host.window(int(update.used), int(update.size))
        if update.cost is not None:
            self.cost_seen = float(update.cost.amount)
            await self.host.spent(cost_usd=self.cost_seen)  # past a cap: stopped mid-turn

    def _turn_done(self, started: float) -> None:
        cost = None if self.cost_seen is None else max(self.cost_seen - self.cost_before, 0.0)
        self.host.turn_ended(
            tokens=self.turn_tokens,
            cost_usd=cost,
            latency_ms=(time.perf_counter() - started) * 1000,
            said="".join(self.said),
            completion_tokens=self.turn_written if self.turn_tokens is not None else 0,
        )

    async def _cancel_turn(self, turn: asyncio.Future[Any]) -> None:
        """`session/cancel`, every waiting request answered cancelled, the turn's end waited
        for (bounded); the agent is stopped afterwards in any case."""
        from acp.schema import DeniedOutcome, RequestPermissionResponse

        cancelled = RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        with contextlib.suppress(Exception):
            await self.agent.conn.cancel(session_id=self.agent.session_id)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.config.cancel_wait_s):
                while not turn.done():
                    self.bridge.cancel_all(cancelled)
                    await asyncio.wait({turn}, timeout=0.05)
        if not turn.done():
            turn.cancel()
        with contextlib.suppress(BaseException):
            await turn


def written(usage: Any) -> int:
    """What a turn's model wrote, of all it spent: its output and its thoughts. ACP counts
    `thoughtTokens` apart from `outputTokens` (Gemini's thinking, a reasoning model's), and
    its `totalTokens` sums them all: a thought is spent as the model's writing, never its
    prompt's."""
    parts = (usage.output_tokens, getattr(usage, "thought_tokens", None))
    return sum(max(int(part or 0), 0) for part in parts)
