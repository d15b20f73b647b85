"""What an attached console sends its run through the store (`StoreLink`'s commands): each in a
task of its own, kept until it ends; a store out of reach waited out (the link's `Outage` says
it meanwhile). A stop, a kill and a message go through the checks `loopdeck cancel` and
`loopdeck message` make (`store/deciding.py`): a message no runner will hear (its runner gone,
or stranded on its lost worker) is refused by name, nothing recorded; a stop or a kill of a
stranded run is recorded and said as what becomes of the run. Each failure is told to the
`on_failure` listeners, what came of a command sent to the `on_told` ones."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from loopdeck.operator.outage import Outage
from loopdeck.store import deciding, queries
from loopdeck.store.base import Store, StoreUnavailable

# A command in the operator's words, and what its failure means for the run.
COMMAND_WORDS = {"cancel": "stop", "kill": "kill", "pause": "pause", "resume": "resume"}
UNSENT_MEANS = {"resume": "the run stays paused", "message": "the model does not hear it"}
# What a checked command that landed means, said once it did.
SENT_WORDS = {
    "cancel": "stop sent: the run stops after the current tools",
    "kill": "kill sent: the run stops now",
    queries.MESSAGE: "message sent: the model hears it before its next turn",
}
NOT_FOLLOWING = "this console no longer follows the store"  # its drive ended
# Told of a command that was not sent: what failed ("stop not sent: …"), what it means.
FailureListener = Callable[[str, str], None]
ToldListener = Callable[[str], None]
log = logging.getLogger(__name__)


class LinkCommands:
    """The commands of one attached run: `store` is the link's while it follows the store
    (None after), `closing` whether the link is leaving, `wait` until the store changed."""

    def __init__(
        self,
        run_id: str,
        outage: Outage,
        store: Callable[[], Store | None],
        closing: Callable[[], bool],
        wait: Callable[[Store], Awaitable[None]],
    ) -> None:
        self.run_id = run_id
        self.outage = outage
        self._store, self._closing, self._wait = store, closing, wait
        self.sending: set[asyncio.Task[None]] = set()  # on their way to the store
        self._failure_listeners: list[FailureListener] = []
        self._told_listeners: list[ToldListener] = []

    def on_failure(self, listener: FailureListener) -> Callable[[], None]:
        listeners = self._failure_listeners
        listeners.append(listener)
        return lambda: listeners.remove(listener) if listener in listeners else None

    def on_told(self, listener: ToldListener) -> Callable[[], None]:
        listeners = self._told_listeners
        listeners.append(listener)
        return lambda: listeners.remove(listener) if listener in listeners else None

    def failed(self, command: str, why: str, live: str = "") -> None:
        failed = f"{COMMAND_WORDS.get(command, command)} not sent: {why}"
        means = live + UNSENT_MEANS.get(command, "the run goes on")
        if not self._failure_listeners:
            log.warning("%s — %s", failed, means)
        for listener in list(self._failure_listeners):
            listener(failed, means)

    def _told(self, said: str) -> None:
        for listener in list(self._told_listeners):
            listener(said)

    def send(self, command: str, by: str, said: Any = None) -> None:
        """On its way in a task of its own, kept until it ends; its failure is told. A
        message or a revoke (`said`) travels as a command with its words."""
        store = self._store()
        if store is None:  # the link stopped following the store (its drive ended)
            self.failed(command, NOT_FOLLOWING, live="if it is still live, ")
            return
        task = asyncio.get_running_loop().create_task(
            self._deliver(store, command, by, said), name=f"loopdeck-{command}-{self.run_id}"
        )
        self.sending.add(task)
        task.add_done_callback(partial(self._sent, command))

    def _sent(self, command: str, task: asyncio.Task[None]) -> None:
        self.sending.discard(task)
        if task.cancelled():  # the console is leaving
            return
        error = task.exception()
        if error is not None:
            self.failed(command, f"{type(error).__name__}: {error}")

    async def _deliver(self, store: Store, command: str, by: str, said: Any) -> None:
        """A command given while the store cannot be reached is sent once it can, unless the
        console leaves first."""
        while not self._closing():
            try:
                told = await self._checked(store, command, by, said)
            except StoreUnavailable as exc:
                self.outage.failed(exc)
                await self._wait(store)
                continue
            if told:
                self._told(told)
            return

    async def _checked(self, store: Store, command: str, by: str, said: Any) -> str:
        """The command sent, checked as the CLI checks it; what came of it ("" for a command
        said where it was given). A refusal raises (`deciding`'s errors, told as failures)."""
        run_id = self.run_id
        if command in ("cancel", "kill"):
            held = await deciding.stop(store, run_id, command, by)
            return (
                SENT_WORDS[command]
                if held is None
                else f"{COMMAND_WORDS[command]} recorded; {held.words}"
            )
        if command == queries.MESSAGE:
            await deciding.send_message(store, run_id, said, by)
            return SENT_WORDS[command]
        await queries.send_command(store, run_id, command, by, said)
        return ""
