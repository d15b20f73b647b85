"""A run's decisions pushed to the operator where they are (`--notify`): a subscriber of the
run's bus, in the run's own process, so each decision is pushed by the one process that
knows when it is asked and taken.

It follows what the run waits on from its events: a write's approval (each ask of it), a
question (the agent's, the guard's, a budget's pause), a write whose outcome is unknown. When
to push is `PushPlan`'s; what a push says is `push_words`'; the channels are Apprise's
(`Channels`). A push is sent by a thread of its own, one at a time, each bounded, so the run
never waits on a channel; what it did is recorded by the run's loop as the run's
`DecisionsPushed` (the channels that took it, those that did not and why), or `PushFailed`
when no channel took it. A push carries each
decision's one-time link when a `loopdeck serve --url` answers the run's store on this
machine (`link_tokens.registered`), else the CLI command that decides it. Once the run stops
nothing more is pushed and its links decide nothing (`operator/link_decisions.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from loopdeck.core.events import (
    ApprovalDecided,
    ApprovalRequested,
    ApprovalWithdrawn,
    BudgetUpdated,
    CallStatus,
    DecisionsPushed,
    Event,
    EventBus,
    OutcomeResolved,
    PushFailed,
    QuestionAnswered,
    QuestionAsked,
    RunStarted,
    RunStopped,
    ToolFinished,
)
from loopdeck.core.push_events import Push, PushedDecision
from loopdeck.core.replay_events import RunForked
from loopdeck.core.scenario import ScenarioError
from loopdeck.operator.link_tokens import OUTCOME_ASK, LinkServer, ask_of_request, registered
from loopdeck.operator.notify_config import NotifySettings
from loopdeck.operator.push_channels import BadChannel, Channels, Delivery
from loopdeck.operator.push_plan import PushPlan, Waiting
from loopdeck.operator.push_words import Asked, RunAbout, args_text, db_words, push_text
from loopdeck.store.approver import Recording
from loopdeck.store.base import Location

LINK_LIFE_S = 12 * 3600.0  # a link to a decision that never expires (a question, an outcome)
log = logging.getLogger("loopdeck.notify")
Clock = Callable[[], float]
# Where the run is recorded, asked when a push is made (None: not recorded).
StoreOf = Callable[[], Location | None]


def asked_write(e: ApprovalRequested) -> Asked:
    risk = f"write, {e.risk_source}" if e.risk_source else "write"
    content = [("arguments", args_text(e.args))]
    content += [("why", e.rationale)] if e.rationale else []
    content += [("diff", e.diff)] if e.diff else []
    headline = f"approve {e.tool} ({risk})"
    if e.asked_again:
        headline += f", asked again: {e.asked_again}"
    return Asked(e.call_id, "approval", headline, e.expires_at, tuple(content))


def asked_question(e: QuestionAsked, now: datetime) -> Asked:
    if e.topic == "ask_user":
        headline = "answer the agent's question"
    else:
        headline = f"{'the guard asks' if e.topic == 'loop' else 'a budget pause'}: {e.title}"
    content = [("question", e.question), *e.evidence]
    until = e.acts_at or now + timedelta(seconds=LINK_LIFE_S)
    return Asked(e.question_id, "question", headline, until, tuple(content), tuple(e.choices))


def asked_outcome(e: ToolFinished, now: datetime) -> Asked:
    headline = f"say whether {e.tool} took effect (its outcome is unknown)"
    until = now + timedelta(seconds=LINK_LIFE_S)
    return Asked(e.call_id, "outcome", headline, until, (("result", args_text(e.result)),))


class Notifier:
    """The pushes of one run. `take` is its bus subscriber; `tick` pushes what is due (called
    by a timer on the run's loop, or by a test on its own clock). `inline`: each push sent
    and recorded at once, on the caller's thread (a test's simulated day)."""

    def __init__(
        self,
        settings: NotifySettings,
        channels: Channels,
        *,
        store_of: StoreOf = lambda: None,
        emit: Callable[..., Any] | None = None,
        clock: Clock = time.monotonic,
        inline: bool = False,
    ) -> None:
        self.settings = settings
        self.channels = channels
        self.plan = PushPlan(settings.after_s)
        self.store_of = store_of
        self.emit = emit
        self.clock = clock
        self.inline = inline
        self.run = RunAbout(run_id="", env="")
        self.stopped = False
        self.deliveries: list[Delivery] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._outbox: queue.Queue[Callable[[], None]] | None = None
        self._in_flight = 0  # pushes handed to the sender, not recorded yet
        self._recording = False  # its own `DecisionsPushed` or `PushFailed` is on the bus
        self._all_recorded: list[asyncio.Future[None]] = []  # `recorded`'s waits
        self._holding_pushes = False  # while `recorded` waits
        self._reading_log = False  # `read_log`

    def owes(self) -> bool:
        """A decision waits that is not pushed yet (nor given up on), or a push is on its
        way: a worker keeps the run until it has gone (`operator/parking.py`)."""
        if self.stopped:
            return False
        return self._in_flight > 0 or any(not w.pushed for w in self.plan.waiting.values())

    def take(self, event: Event) -> None:
        if self.stopped:
            return
        now, wall = self.clock(), datetime.now(UTC)
        match event:
            case RunStarted():
                env = event.env + (f"/{event.script}" if event.script else "")
                self.run = RunAbout(event.run_id, env)
            case BudgetUpdated():
                self.run = RunAbout(self.run.run_id, self.run.env, budgets=dict(event.usage))
            case ApprovalRequested() if event.grant_id is None:
                ask = ask_of_request(event.call_id, event.args_sha256, event.state_hash,
                                     event.requested_at)  # fmt: skip
                since = self._made_on_clock(event.requested_at, now, wall)
                self.plan.add(f"{event.call_id}:{ask}", asked_write(event), ask, since)
            case QuestionAsked():
                asked = asked_question(event, wall)
                since = self._made_on_clock(event.at, now, wall)
                self.plan.add(event.question_id, asked, event.question_id, since)
            case ToolFinished() if event.status is CallStatus.OUTCOME_UNKNOWN:
                self.plan.add(f"outcome:{event.call_id}", asked_outcome(event, wall),
                              OUTCOME_ASK, self._made_on_clock(event.at, now, wall))  # fmt: skip
            case ApprovalDecided() | ApprovalWithdrawn() | OutcomeResolved():
                self.plan.settle(event.call_id)
            case QuestionAnswered():
                self.plan.settle(event.question_id)
            case RunForked():  # its source's unknown outcomes are the restored state's
                for call_id in event.settled:
                    self.plan.settle(call_id)
            case DecisionsPushed() if not self._recording:  # another's: a worker before this
                self.plan.pushed_before(event.decisions, self._made_on_clock(event.at, now, wall))
            case PushFailed() if not self._recording:
                self.plan.failed_before(event.decisions, self._made_on_clock(event.at, now, wall))
            case RunStopped():
                self.stop()
                return
            case _:
                return
        self._arm()

    async def recorded(self, within_s: float) -> bool:
        """Until every push handed to the sender is recorded (`within_s` a push at most), none
        sent meanwhile: a run leaving its worker takes the record of what was pushed with it.
        True if none is left unrecorded; a stop ends the wait (nothing is recorded after it)."""
        if self._in_flight == 0:
            return True
        if self.stopped:
            return False
        self._holding_pushes = True  # nothing more goes out
        done = asyncio.get_running_loop().create_future()
        self._all_recorded.append(done)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(done), within_s * self._in_flight)
        finally:
            self._all_recorded.remove(done)
            self._holding_pushes = False
            self._arm()  # what fell due meanwhile (nothing once stopped)
        return self._in_flight == 0 and not self.stopped

    def read_log(self, log: list[Event]) -> None:
        """A run taken up from its log (another worker's before this one): each event taken as
        of when it was made, so a decision owed is due `--notify-after` after it was asked, not
        after the move, and the pushes' gap is kept from the last push made. Events heard live
        (a fork's rebuild among them, stamped with its source's times) are as of now."""
        self._reading_log = True
        try:
            for event in log:
                self.take(event)
        finally:
            self._reading_log = False

    def _made_on_clock(self, at: datetime, now: float, wall: datetime) -> float:
        """When `at` was on this notifier's clock, for an event of the log read (one from a
        clock ahead of this one's: now); for any other, now."""
        if not self._reading_log:
            return now
        return now - max(0.0, (wall - at).total_seconds())

    def stop(self) -> None:
        """Nothing more is pushed or recorded: the run stopped, and its links with it."""
        self.stopped = True
        if self._timer is not None:
            self._timer.cancel()
        if self._outbox is not None:
            self._outbox.put(_END)
        self._waits_over()

    def _waits_over(self) -> None:
        for waiting in self._all_recorded:
            if not waiting.done():
                waiting.set_result(None)

    def tick(self) -> None:
        """Push what is due now, then wait for what is next."""
        self._timer = None
        if self.stopped or self._holding_pushes:
            return
        now = self.clock()
        batch = self.plan.batch(now)
        if batch:
            self.plan.sending(batch, now)
            self._push(batch)
        self._arm()

    def _arm(self) -> None:
        if self.inline or self.stopped:
            return
        if self._loop is None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # a bus driven with no loop (a test of the words): no timer
        if self._timer is not None:
            self._timer.cancel()
        wake = self.plan.wake()
        self._timer = None
        if wake is not None:
            self._timer = self._loop.call_later(max(0.0, wake - self.clock()), self.tick)

    def _push(self, batch: list[Waiting]) -> None:
        """The push of `batch`: made and sent by the sender's thread (its links need the
        server's files read), told back to the run's loop."""
        run = self.run

        def send() -> None:
            if self.stopped:  # queued behind a push that was on its way as the run left
                self._sent(batch, [], Delivery((), ("not sent: the run left",)), "")
                return
            try:
                pushed, title, body, where = self._made(run, batch)
                delivery = self.channels.send(title, body)
            except Exception as exc:  # said; recorded as a push no channel took, tried again
                log.exception("loopdeck notify: a push could not be made")
                pushed = [PushedDecision(call_id=w.asked.call_id, what=w.asked.what,
                                         ask=w.ask) for w in batch]  # fmt: skip
                where = ""
                delivery = Delivery(took=(), failed=(f"not made: {type(exc).__name__}: {exc}",))
            self._sent(batch, pushed, delivery, where)

        if self.inline:
            send()
            return
        self._in_flight += 1
        self._outbox_put(send)

    def _made(
        self, about: RunAbout, batch: list[Waiting]
    ) -> tuple[list[PushedDecision], str, str, str]:
        """What the push says (each decision with its link, when a server answers the
        store's links), and what is recorded of it."""
        store = self.store_of()
        server = _server(store)
        run = RunAbout(about.run_id, about.env, db_words(store), about.budgets)
        asked, pushed = [], []
        for waiting in batch:
            one, until = waiting.asked, waiting.asked.valid_until
            link = ""
            if server is not None and until is not None and until.timestamp() > time.time():
                claim = server.claim(run.run_id, one.call_id, waiting.ask, one.what,
                                     int(until.timestamp()))  # fmt: skip
                link = server.link(claim)
            asked.append(Asked(one.call_id, one.what, one.headline, until, one.content,
                               one.answers, link))  # fmt: skip
            pushed.append(PushedDecision(call_id=one.call_id, what=one.what,
                                         link_until=until if link else None,
                                         ask=waiting.ask))  # fmt: skip
        title, body = push_text(run, asked, content=self.settings.content)
        return pushed, title, body, server.url if server is not None else ""

    def _sent(
        self, batch: list[Waiting], pushed: list[PushedDecision], delivery: Delivery, where: str
    ) -> None:
        """What a push did, on the run's loop: the plan told, the push recorded."""
        if not self.inline:
            loop = self._loop
            if loop is None or loop.is_closed():
                return
            # the loop may close as the push goes: the run has ended
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._record, batch, pushed, delivery, where)
            return
        self._record(batch, pushed, delivery, where)

    def _record(
        self, batch: list[Waiting], pushed: list[PushedDecision], delivery: Delivery, where: str
    ) -> None:
        self.deliveries.append(delivery)
        self._in_flight = max(self._in_flight - 1, 0)  # inline: never counted
        try:
            self._recorded(batch, pushed, delivery, where)
        finally:
            if self._in_flight == 0:
                self._waits_over()

    def _recorded(
        self, batch: list[Waiting], pushed: list[PushedDecision], delivery: Delivery, where: str
    ) -> None:
        if self.stopped:
            return  # the run's last event is its stop
        self.plan.sent(batch, self.clock(), took=delivery.sent)
        if self.emit is not None and delivery.sent:
            self._own(DecisionsPushed, decisions=pushed, channels=list(delivery.took),
                      failed=list(delivery.failed), server=where)  # fmt: skip
        elif self.emit is not None:  # no channel took it: recorded as what happened
            self._own(PushFailed, decisions=pushed, failed=list(delivery.failed), server=where)
        self._arm()

    def _own(self, kind: type[Push], **fields: Any) -> None:
        """The push recorded on the run's bus, which this notifier hears too (its own)."""
        assert self.emit is not None
        self._recording = True
        try:
            self.emit(kind, run_id=self.run.run_id, **fields)
        finally:
            self._recording = False

    def _outbox_put(self, send: Callable[[], None]) -> None:
        if self._outbox is None:
            self._outbox = queue.Queue()
            threading.Thread(
                target=_sender, args=(self._outbox,), name="loopdeck-notify", daemon=True
            ).start()
        self._outbox.put(send)


def _END() -> None:
    """Told to the sender: the run stopped, nothing more goes."""


def _sender(outbox: queue.Queue[Callable[[], None]]) -> None:
    """Sends the run's pushes one at a time; a push still going when the run stops is left
    to finish on its own (a daemon thread: it holds no exit)."""
    while (send := outbox.get()) is not _END:
        try:
            send()
        except Exception:  # said, never silent; the next push still goes
            log.exception("loopdeck notify: a push failed")


def _server(store: Location | None) -> LinkServer | None:
    if store is None:
        return None
    try:
        return registered(store)
    except OSError as exc:
        log.warning("loopdeck notify: decision links are off (%s)", exc)
        return None


def watch_run(bus: EventBus, settings: NotifySettings, recording: Recording | None) -> Notifier:
    """`--notify` on a run being prepared: its pushes, the links to its store's server. A URL
    Apprise cannot read refuses the run (`ScenarioError`: exit 2), naming it."""
    try:
        channels = Channels(settings.urls)
    except BadChannel as exc:
        raise ScenarioError(str(exc)) from None

    def store_of() -> Location | None:
        if recording is None:
            return None
        try:
            return recording.store.path
        except RuntimeError:  # not open yet: nothing is asked before it is
            return None

    notifier = Notifier(settings, channels, store_of=store_of, emit=bus.emit)
    bus.subscribe(notifier.take)
    return notifier
