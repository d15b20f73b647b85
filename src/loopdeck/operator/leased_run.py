"""One run a worker claimed: prepared from its submitted options, rebuilt from its log when it
has one (`operator/resume.py`), recorded under its lease (every commit fenced by the lease's
epoch), until it stops, its lease is lost, or the worker lets it go (handed back, parked).

A lost lease stops the run at once: its writer keeps nothing more, it acts on nothing more
(the model wrapper and the dispatcher check the lease first: `Lease.ensure`), and its runtime
is killed here without a word of it reaching the store: the run is another worker's.

A run is decided under the policy it recorded (its log's `PolicyInForce`, else the text its
options keep), never under what the policy files say when it is claimed again: a file edited
meanwhile changes nothing of it (a log that asked with no `PolicyInForce`: it had none); a
run queued before its policy's text was kept with it, and whose log cannot say, is refused
(`placement.unrecorded_policy`). A recorded rule today's load would refuse is evaluated as the
run evaluated it only while the run is rebuilt from its log; once live, it fails closed
(`policy/gate.RunPolicy.rebuilding`). A run that cannot be rebuilt all the same ends
`crashed`, saying why in words; a write it had asked for and that was decided while it was
away, never taken by it, is recorded as not run (not an outcome nobody knows).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from loopdeck.core.events import ApprovalRequested, Event, StateChanged
from loopdeck.core.recorded_inputs import ReplayBus, record_inputs
from loopdeck.core.replay_events import RunForked, RunMoved
from loopdeck.core.replay_log import ReplayLog
from loopdeck.core.runtime import Runtime
from loopdeck.core.scenario import ScenarioError
from loopdeck.core.states import RunState
from loopdeck.operator import worker_pushes
from loopdeck.operator.approving import deciders
from loopdeck.operator.crashed_run import diverged_words, withdraw_untaken
from loopdeck.operator.fork import recorded_policy, restored, source_of, unforkable
from loopdeck.operator.fork import went_live as fork_live
from loopdeck.operator.launch import prepare_run
from loopdeck.operator.notify_config import NotifySettings
from loopdeck.operator.parking import Parking
from loopdeck.operator.placement import run_options, unrecorded_policy
from loopdeck.operator.resume import Refreshed, load_log, record_stop, stopped, unresumable
from loopdeck.operator.run_lease import ENSURE_POLL_S, Lease
from loopdeck.store import deciding, leases, queries
from loopdeck.store.approver import StoreApprover
from loopdeck.store.base import Store, StoreError
from loopdeck.store.runner import apply_command
from loopdeck.store.writer import EventWriter
from loopdeck.tuning.loop_idle import nothing_else_due

Say = Callable[[str], None]


class LeasedRun:
    """A claimed run on this worker; `store` and `writer` are what its approvers ask."""

    def __init__(
        self, store: Store, claim: leases.Claim, lease: Lease, worker: leases.WorkerName, say: Say,
        notify: NotifySettings | None = None,
    ) -> None:  # fmt: skip
        self._store = store
        self.notify = notify  # its worker's `--notify`: its decisions pushed from here
        self.notifier: Any = None
        self.forking = False
        self.claim = claim
        self.lease = lease
        self.worker = worker
        self.say = say
        self._writer: EventWriter | None = None
        self.runtime: Runtime | None = None
        self.let_go_as: str | None = None  # handed back or parked: how it left this worker
        self.ran_out = False  # its runtime returned here: it ends here, never let go
        self.live = False  # its runtime takes commands from other terminals
        # Live, and the commands that waited for it taken: its worker reads it the rest.
        self.hears = False
        self._catching: asyncio.Task[None] | None = None
        self._settled = False  # the commands it caught up on landed before its first act
        self.handing_back: str | None = None  # its worker stops: let go once at rest, why
        self.bus: ReplayBus | None = None
        self.unmovable: str | None = None  # why no other worker could go on with it
        self.started = asyncio.Event()  # its start stored (rebuilt: it runs), or it left
        lease.on_lost = self._lost

    @property
    def store(self) -> Store:
        return self._store

    @property
    def writer(self) -> EventWriter:
        if self._writer is None:
            raise RuntimeError("the run is not being recorded yet")
        return self._writer

    @property
    def run_id(self) -> str:
        return self.claim.run_id

    def at_rest(self) -> bool:
        """Nothing of it in flight that another worker could not take over: it is rebuilt
        from its log, or it is not running a reply's tools (a write approved is carried out
        and recorded here, never left to the next worker as an outcome nobody knows)."""
        runtime = self.runtime
        return not self.live or runtime is None or runtime.machine.state is not RunState.EXECUTING

    async def run(self) -> str:
        """The run here until it stops or leaves this worker; what became of it, in words."""
        try:
            return await self._run()
        finally:
            self.started.set()

    async def _run(self) -> str:
        log = [] if self.claim.first else await load_log(self.store, self.run_id)
        if stopped(log):
            await self._end("it had stopped")
            return "had stopped already: its lease ended"
        forked = self.claim.options.get("fork")
        if forked is not None and any(isinstance(e, RunForked) for e in log):
            forked = None  # the fork went live: it goes on from its own log, as any run
        replay = ReplayLog(log) if log else None
        if forked is not None:  # rebuilt from its source, past what its log has already
            replay = await source_of(self.store, forked)
        options = run_options(self.claim.options, self.run_id)
        options.notify, self.forking = self.notify, forked is not None
        recorded = None if forked is not None else recorded_policy(log)
        if recorded is not None:
            options.policy_levels = recorded  # decided under its own, whatever its files say
        elif forked is None and (unrecorded := unrecorded_policy(self.claim.options)):
            return await self._crash(unrecorded)  # never under today's files in its stead
        bus = self.bus = ReplayBus(forward=forked is not None, already=log[-1].seq if log else 0)
        try:
            chosen = deciders(options.approve, model=options.model or "", console=False,
                              recording=self)  # fmt: skip
            approver = chosen.approver
            if log and isinstance(approver, StoreApprover):
                approver = Refreshed(self, {e.call_id for e in log
                                            if isinstance(e, ApprovalRequested)})  # fmt: skip
            prepared = prepare_run(options, approver=approver, answerer=chosen.answerer,
                                   bus=bus, recording=self)  # fmt: skip
        except Exception as exc:  # its env or model cannot be made on this worker
            return await self._crash(f"could not be prepared on {self.worker.host}: {exc}")
        self.lease.outage_s = max(prepared.runtime.config.store_hold_s, self.lease.hold_s)
        self.notifier = prepared.notifier
        for warning in prepared.warnings:  # a user policy's rule naming a tool it has not
            self.say(f"run {self.run_id}: {warning}")
        self.unmovable = unresumable(prepared.runtime)
        try:
            if forked is not None and replay is not None:
                if (why := unforkable(prepared.runtime, replay, forked)) is not None:
                    return await self._crash(why)
            elif replay is not None and self.unmovable is not None:
                return await self._crash(
                    f"its worker was lost and it cannot go on: {self.unmovable}"
                )
            if self.unmovable is not None:  # said in its lease: nobody waits on it in vain
                await leases.pin(self.store, self.run_id, self.claim.epoch, self.unmovable)
            try:
                await self._open(prepared.runtime, bus, replay, forked, log)
            except ScenarioError as exc:  # a fork this host's env cannot start where it was
                if forked is None:
                    raise
                return await self._crash(f"it cannot be forked: {exc}")
            return await self._drive(prepared.runtime, log, replay)
        finally:
            prepared.cleanup()

    async def _open(
        self, runtime: Runtime, bus: ReplayBus, replay: ReplayLog | None,
        forked: dict[str, Any] | None, own: list[Event],
    ) -> None:  # fmt: skip
        """Its env reopened where its state is (a fork's restored to its source's), its
        inputs recorded and, from a log (`own`: its own), served until it has no more."""
        self.runtime = runtime
        # A worker's loop drives all its runs: quick env code is waited for only when none of
        # the others has work due (a run's wait would hold up every other run's turn).
        runtime.env_thread.only_when_idle = nothing_else_due
        reopen = getattr(runtime.env, "reopen", None)
        if callable(reopen):  # on the run's own env thread, never queued behind other runs'
            await runtime.env_thread.call("reopen", reopen, self.run_id)
        if replay is not None:
            bus.follow(replay)
            if forked is not None:
                same = await restored(runtime, replay)
                replay.on_live.append(lambda: fork_live(runtime, replay, forked, same))
                replay.on_live.append(self._goes_live)
            else:
                replay.on_live.append(lambda: self._went_live(runtime, replay))
            # Its recorded policy evaluated as the run evaluated it, until it goes live.
            rebuilding = getattr(runtime.calls.approvals.policy.gate, "rebuilding", None)
            if callable(rebuilding):
                replay.on_live.append(rebuilding(replay.events, own))
        record_inputs(runtime, replay, self._may_act)

    async def _drive(self, runtime: Runtime, log: list[Event], replay: ReplayLog | None) -> str:
        writer = self._writer = EventWriter(
            self.store, approve_mode=str(self.claim.options.get("approve") or ""),
            fence=(self.run_id, self.claim.epoch),
        )  # fmt: skip
        if log:
            last = next((e for e in reversed(log) if isinstance(e, StateChanged)), None)
            asked = {e.call_id for e in log if isinstance(e, ApprovalRequested)}
            writer.resume_from(None if last is None else last.target.value, asked)
        writer.on_lease_lost = lambda exc: self._lost(str(exc))
        unsubscribe = runtime.bus.subscribe(writer)
        runtime.journal = writer
        writer.start()
        if replay is None:  # no command waited at its claim: none to catch up on at once
            self._goes_live(caught_up=not self.claim.sent)
            writer.on_first_commit = self.started.set  # its start is in the store
        else:
            self.started.set()
        wait = self.claim.options.get("approve") == "wait"  # its decisions wait in the store
        parking = Parking(runtime, replay, self.worker.host, self.let_go, decisions=wait)
        unwatch = runtime.bus.subscribe(parking.seen)
        worker_pushes.pushing(self.notifier, parking, replay, self.forking)
        # A run that cannot move is never parked: no other worker could rebuild it where its
        # decision or resume lands; it holds its slot while it waits.
        watching = None if self.unmovable else asyncio.create_task(parking.watch())
        try:
            outcome = await runtime.run()
        finally:
            unwatch()
            self.live, self.ran_out = False, True
            if watching is not None:
                watching.cancel()
            await self._close(writer)
            unsubscribe()
        if replay is not None and replay.diverged is not None:
            return await self._crash(diverged_words(runtime, replay))
        if self.let_go_as is not None:
            return self.let_go_as
        if writer.lost is not None or self.lease.lost is not None:
            return f"left: {writer.lost or self.lease.lost}"
        await self._end(f"{outcome.stop_reason.value} on {self.worker.host}")
        return f"{outcome.stop_reason.value}: {outcome.detail}"

    def _went_live(self, runtime: Runtime, replay: ReplayLog) -> None:
        """The log has no more: the run goes on here, its move recorded first."""
        claim = self.claim
        runtime.emit(RunMoved, run_id=self.run_id, host=self.worker.host, was=claim.was,
                     epoch=claim.epoch, note=claim.note, after_seq=replay.last_seq)  # fmt: skip
        self._goes_live()

    def _goes_live(self, caught_up: bool = False) -> None:
        """It takes commands from now on: first those that waited for it (`_catch_up`)."""
        self.live, self.hears = True, caught_up  # its worker reads the rest once it hears
        if not caught_up:
            self._catching = asyncio.get_running_loop().create_task(self._catch_up())

    def take(self, command: dict[str, Any]) -> bool:
        """A command from another terminal (the worker reads them for all its runs); False
        when the run is not live here any more (the caller gives it back: `deciding.give_back`)."""
        if self.runtime is None or not self.live or self.let_go_as is not None:
            return False
        apply_command(self.runtime, command, self.say)
        return True

    async def _may_act(self) -> None:
        """Before each model call and tool: its worker stopping, the run is handed back at
        the first of them it reaches at rest (a model call's, once a reply's tools are done)."""
        if self.handing_back is not None and self.at_rest():
            await self.let_go(leases.QUEUED, self.handing_back, still=self.at_rest)
        await self.lease.ensure()
        if self._catching is not None and not self._settled and (runtime := self.runtime):
            await asyncio.shield(self._catching)
            # Before a model call, as at its checkpoint; a reply's tools run first, as a
            # live run's would (a write approved is carried out, never left in between).
            if runtime.machine.state is not RunState.EXECUTING:
                self._settled = True
                await runtime.control.settle()

    async def _catch_up(self) -> None:
        """Gone live: the commands sent while no worker ran it (or while it was rebuilt)
        taken, as a live run would have taken them at its last checkpoint (its first model
        call waits for them: a stop or a pause among them lands before it); then its worker
        reads it the rest. A store that cannot be read for now is tried again while it is live."""
        failing = False
        while self.live:
            try:
                commands = await queries.take_commands(self.store, self.run_id)
            except StoreError as exc:
                if not failing:
                    self.say(f"run {self.run_id}: its commands cannot be read now: {exc}")
                failing = True
                await asyncio.sleep(ENSURE_POLL_S)
                continue
            missed = [c["id"] for c in commands if not self.take(c)]
            with contextlib.suppress(StoreError):
                await deciding.give_back(self.store, missed)
            self.hears = True
            return

    def _lost(self, why: str) -> None:
        """The run is not this worker's any more: nothing more of it is kept or done here."""
        self.lease.lose(why)
        self.live = False
        if self._writer is not None:
            self._writer.taking = False
        if self.runtime is not None and self.let_go_as is None:
            self._stop(f"worker {self.worker.host}: lease lost")

    async def let_go(
        self, state: str, note: str, until: float | None = None,
        still: Callable[[], bool] = lambda: True,
    ) -> bool:  # fmt: skip
        """The run leaves this worker where it is (`queued`: handed back; `parked`), if
        `still` holds now: it acts on nothing more, what it did is committed, the lease let
        go, then its runtime is stopped here without a word of it reaching the store."""
        if self.let_go_as is not None or self.lease.lost is not None or not still():
            return False
        await worker_pushes.recorded(self.notifier)  # the run may move meanwhile: asked again
        if self.let_go_as or self.lease.lost or self.ran_out or not still():
            return False
        self.let_go_as, self.live = note, False
        if self.notifier is not None:  # in this step: no push goes that its log would miss
            self.notifier.stop()
        self.lease.lose(note)
        writer = self._writer
        if writer is not None:
            writer.taking = False
            with contextlib.suppress(StoreError):
                await writer.flush()
        await leases.let_go(self.store, self.run_id, self.claim.epoch, state, note, until=until)
        self._stop(f"worker {self.worker.host}: {note}")
        return True

    def _stop(self, by: str) -> None:
        """The runtime killed here, nothing of it kept (nor checked against its log), nothing
        more of it pushed (the worker that takes it up pushes what is owed then)."""
        if self.notifier is not None:
            self.notifier.stop()
        if self.bus is not None:
            self.bus.drop()
        if self.runtime is not None:
            self.runtime.kill(by=by)

    async def _close(self, writer: EventWriter) -> None:
        """What is left committed; a store that cannot take it for now: spilled under the
        lease's epoch (brought back by the next process to open the store, if the lease has
        not moved by then), said."""
        try:
            await writer.close()
        except StoreError as exc:
            spilled = writer.spill()
            where = f"kept in {spilled}" if spilled is not None else "lost: nowhere took them"
            self.say(f"run {self.run_id}: its last events could not be written ({exc}); {where}")

    async def _end(self, why: str) -> None:
        """The run's lease ended; commands sent it that it never took (they came as it ended,
        or it ended before it went live) are said not carried out, in its note and here,
        never left looking sent."""
        with contextlib.suppress(StoreError):
            if untaken := await queries.take_commands(self.store, self.run_id):
                said = ", ".join(f"{c['command']} from {c['by']}" for c in untaken)
                why = f"{why}; not carried out (the run had ended): {said}"
                self.say(f"run {self.run_id}: {said} not carried out: the run had ended")
            await leases.let_go(self.store, self.run_id, self.claim.epoch, leases.ENDED, why)

    async def _crash(self, detail: str) -> str:
        """The run ends `crashed` here, saying why, under its lease, after what it has."""
        options = dict(self.claim.options)
        log = await load_log(self.store, self.run_id)
        try:
            approve = str(options.get("approve") or "")
            if log and await withdraw_untaken(self.store, self.run_id, self.claim.epoch, log,
                                              approve, "it crashed"):  # fmt: skip
                log = await load_log(self.store, self.run_id)
            await record_stop(self.store, self.run_id, self.claim.epoch, log, detail, options)
        except leases.LeaseLost as exc:
            return f"left: {exc}"
        await self._end(f"crashed: {detail}")
        return f"crashed: {detail}"
