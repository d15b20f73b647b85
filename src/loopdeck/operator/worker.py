"""`loopdeck worker`: claims queued runs from a store and runs them, as many at once as it has
slots, each under a lease (`store/leases.py`) its heartbeat renews.

The heartbeat is a thread with a connection of its own (`Renewal`): a busy loop or env code
cannot starve it, and a process stopped (SIGSTOP) or dead renews nothing, so its leases run
out and other workers take its runs. Every lease is checked before each model call and each
tool (`Lease.ensure`): a lease the store no longer confirms (another worker holds the run)
stops the run here at once, acting on nothing, and its writer keeps nothing more (the store's
fence refuses it anyway); one no renewal reached the store for waits for the store's word.
The same beat keeps the worker's own row (`store/presence.py`), a worker holding no run too:
`loopdeck workers` lists it, and a command to a run no worker holds says whether one runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from loopdeck.llm.loader import litellm_module
from loopdeck.operator.leased_run import LeasedRun
from loopdeck.operator.notify_config import NotifySettings
from loopdeck.operator.run_lease import Lease
from loopdeck.store import deciding, leases, presence, queries
from loopdeck.store.base import Beats, Location, Store, StoreError
from loopdeck.store.opening import open_store

CLAIM_GAP_S = 0.2  # an empty claim is not tried again sooner
CLAIM_POLL_S = 0.5  # nor later, when nothing announced a change
COMMANDS_GAP_S = 0.1  # the commands of this worker's runs read at most this often
HAND_BACK_WAIT_S = 30.0  # a stopping worker waits this long for its runs' tools to finish
HAND_BACK_POLL_S = 0.05
Say = Callable[[str], None]


class Renewal:
    """The heartbeat of every lease this worker holds, in one statement every quarter lease,
    and of the worker's own row (`store/presence.py`: `itself`, its row as of a beat)."""

    def __init__(
        self,
        store: Store,
        holder: str,
        hold_s: float,
        held: dict[str, Lease],
        itself: Callable[[float, float], Sequence[Any]],
    ):
        self.store, self.holder, self.hold_s, self.held = store, holder, hold_s, held
        self.itself = itself
        self.failing: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="loopdeck-leases", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _renew(self) -> None:
        try:
            beats = self.store.open_beats(self.hold_s / 4)
        except Exception as exc:
            self.failing = f"{type(exc).__name__}: {exc}"
            return
        try:
            while not self._stop.wait(self.hold_s / 4):
                self.once(beats)
        finally:
            beats.close()

    def once(self, beats: Beats) -> None:
        began = time.monotonic()
        try:
            at = time.time()
            until = at + self.hold_s
            held = set(beats.renew(self.holder, until, at, self.itself(at, until)))
        except Exception as exc:  # unreachable or locked for a moment: `ensure` waits
            self.failing = f"{type(exc).__name__}: {exc}"
            return
        self.failing = None
        for lease in list(self.held.values()):
            if lease.since > began:
                continue  # claimed after this renewal began: its claim is its lease
            if (lease.run_id, lease.epoch) in held:
                lease.renewed(began)
            else:
                lease.lose("the store names another holder (its lease expired and moved)")


class Worker:
    """Claims and runs queued runs, `slots` at a time, until `stop` is set."""

    def __init__(
        self, location: Location, *, slots: int = 4, say: Say = print,
        notify: NotifySettings | None = None,
    ) -> None:  # fmt: skip
        self.location = location
        self.notify = notify  # `--notify`: its runs' decisions pushed (`worker_pushes.py`)
        self.slots = slots
        self.say = say
        self.name = leases.WorkerName.here()
        self.hold_s = leases.lease_s()
        self.held: dict[str, Lease] = {}
        self.runs: dict[str, asyncio.Task[None]] = {}
        self.leased: dict[str, LeasedRun] = {}
        self._freed = asyncio.Event()
        self.store: Store | None = None

    async def run(self, stop: asyncio.Event) -> None:
        store = self.store = await open_store(self.location)
        name, started = self.name, time.time()

        def itself(at: float, until: float) -> Sequence[Any]:
            return presence.beat_params(name.holder, name.host, name.pid, self.slots, started,
                                        at, until)  # fmt: skip

        try:
            await presence.arrive(store, name.holder, name.host, name.pid, self.slots, self.hold_s)
        except StoreError as exc:  # its next beat lists it
            self.say(f"worker {name.holder}: not listed in the store yet: {exc}")
        renewal = Renewal(store, name.holder, self.hold_s, self.held, itself)
        renewal.start()
        # The model library loaded before the first claim: no claimed run waits on it.
        await asyncio.to_thread(litellm_module)
        self.say(f"worker {self.name.holder}: {self.slots} slots on {store.path}")
        commands = asyncio.create_task(self._commands(store, stop))
        try:
            await self._claiming(store, stop)
        finally:
            # It claims no more: not counted on for a run (else silent once its beats end).
            with contextlib.suppress(StoreError):
                await presence.leave(store, name.holder)
            await commands
            try:
                await self._hand_back(store)
            finally:
                renewal.stop()
                await store.close()

    async def _claiming(self, store: Store, stop: asyncio.Event) -> None:
        unreachable = False
        while not stop.is_set():
            claimed = None
            if len(self.runs) < self.slots:
                try:
                    claimed = await leases.claim(store, self.name, self.hold_s)
                    if unreachable:
                        self.say(f"worker {self.name.holder}: the store answers again: claiming")
                    unreachable = False
                except StoreError as exc:
                    if not unreachable:
                        self.say(f"worker {self.name.holder}: cannot claim for now: {exc}")
                    unreachable = True
            if claimed is not None:
                # The next claim once this run's start is in the store (a rebuilt run's: once
                # it runs): a worker takes no more runs than it can start and record, and the
                # rest stay in the queue for the others.
                await self._until(self._start(store, claimed).started, stop, self.hold_s)
                continue
            await self._wait(store, stop)

    @staticmethod
    async def _until(started: asyncio.Event, stop: asyncio.Event, bound_s: float) -> None:
        """Until the run started (its start in the store), the worker stops, or `bound_s`:
        a stop is never held up by a first commit the store does not take for now."""
        waits = {asyncio.ensure_future(started.wait()), asyncio.ensure_future(stop.wait())}
        try:
            await asyncio.wait(waits, timeout=bound_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()

    async def _commands(self, store: Store, stop: asyncio.Event) -> None:
        """Commands from other terminals (cancel, kill, pause, message…) to this worker's
        runs, read for all of them at once and taken by each once it hears them (live, and
        what waited for it taken before its first act: `LeasedRun._catch_up`); a store that
        cannot be read is said once and tried again."""
        failing = False
        while not stop.is_set():
            live = {run_id: run for run_id, run in self.leased.items()
                    if run.live and run.hears}  # fmt: skip
            try:
                taken = await queries.take_commands_of(store, list(live))
                # a run no longer live here by now gives its commands back, never drops them
                missed = [c["id"] for c in taken if not live[c["run_id"]].take(c)]
                await deciding.give_back(store, missed)
                if failing:
                    self.say(f"worker {self.name.holder}: commands read again")
                failing = False
            except StoreError as exc:
                if not failing:
                    self.say(f"worker {self.name.holder}: commands cannot be read now: {exc}")
                failing = True
            await asyncio.sleep(COMMANDS_GAP_S)
            await store.wait_for_change(COMMANDS_GAP_S)

    async def _wait(self, store: Store, stop: asyncio.Event) -> None:
        await asyncio.sleep(CLAIM_GAP_S)
        self._freed.clear()
        waits = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._freed.wait()),
                 asyncio.ensure_future(store.wait_for_change(CLAIM_POLL_S))}  # fmt: skip
        try:
            await asyncio.wait(waits, timeout=CLAIM_POLL_S, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()

    def _start(self, store: Store, claimed: leases.Claim) -> LeasedRun:
        lease = self.held[claimed.run_id] = Lease(claimed.run_id, claimed.epoch, self.hold_s)
        self.say(f"run {claimed.run_id}: {claimed.note} (epoch {claimed.epoch})")
        run = LeasedRun(store, claimed, lease, self.name, self.say, self.notify)
        self.leased[claimed.run_id] = run
        task = asyncio.create_task(self._run(run), name=f"loopdeck-leased-{claimed.run_id}")
        self.runs[claimed.run_id] = task
        return run

    async def _run(self, run: LeasedRun) -> None:
        run_id = run.claim.run_id
        try:
            said = await run.run()
        except Exception as exc:  # a bug: said, and the run is left to its lease
            said = f"failed here ({type(exc).__name__}: {exc}); its lease runs out"
        finally:
            self.held.pop(run_id, None)
            self.runs.pop(run_id, None)
            self.leased.pop(run_id, None)
            self._freed.set()
        self.say(f"run {run_id}: {said}")

    async def _hand_back(self, store: Store) -> None:
        """Stopping: each run this worker holds goes back to the queue, where it is, for
        another worker to go on with; a run whose tools are running is let go once they
        have finished (up to `HAND_BACK_WAIT_S`), so that a write in flight is carried out
        and recorded here, not left to the next worker as an outcome nobody knows. A run
        that cannot move is stopped here instead (`_stop_unmovable`)."""
        leased = list(self.leased.values())
        if not all(run.at_rest() for run in leased):
            self.say(f"worker {self.name.holder}: stopping once the tools running finish"
                     f" (up to {HAND_BACK_WAIT_S:.0f} s)")  # fmt: skip
        await asyncio.gather(*(self._let_go(run) for run in leased))
        runs = [task for task in self.runs.values() if not task.done()]
        if runs:
            await asyncio.wait(runs)

    async def _let_go(self, run: LeasedRun) -> None:
        if run.unmovable is not None and run.runtime is not None:
            return self._stop_unmovable(run, run.unmovable)
        note = run.handing_back = f"handed back by {self.name.host} (its worker stopped)"
        until = time.monotonic() + HAND_BACK_WAIT_S
        task = self.runs.get(run.run_id)

        def at_rest() -> bool:
            return run.at_rest() or time.monotonic() > until

        while task is not None and not task.done():
            if at_rest():
                with contextlib.suppress(StoreError):
                    if await run.let_go(leases.QUEUED, note, still=at_rest):
                        return
                if run.let_go_as is not None or run.lease.lost is not None:
                    return
            await asyncio.sleep(HAND_BACK_POLL_S)

    def _stop_unmovable(self, run: LeasedRun, why: str) -> None:
        """A run no other worker could go on with is not handed back (the next worker would
        end it crashed, "its worker was lost"): it stops here after its current tools, a
        write in flight carried out and recorded, one waiting withdrawn, saying why. Not
        kept until it ends: one waiting on its operator would hold the stop for as long."""
        self.say(f"run {run.run_id}: cannot move ({why}): stopped after its current tools")
        assert run.runtime is not None
        by = f"{self.name.host}: its worker stopped, and it cannot move ({why})"
        run.runtime.cancel(after_current_tools=True, by=by)
