"""The run's reads of its env's state: read once per change, not once per look.

The state (`Environment.snapshot()`, env code, read on the env thread) is looked at before
every call (its hash keys the guard and binds receipts), after every executed call (the goal
check), at the start and the end of each round. Each look was a read: for an MCP server's
state a round trip to the server, for a Python env a hand-over to the env thread.

An env says how its state changes, by its `state_changes`:

- `"any_time"`: a job that finishes, a clock, a read tool that counts its calls; every look
  is a read, as before. The default of an env whose `env.py` does not say (a Python tool's
  risk is `read` unless it says otherwise, which says nothing of what it leaves alone).
- `"by_writes"`: only a tool that is not read-only changes it. Which tools leave the state
  alone, the env says (`leaves_state(spec)`: an MCP env, those its server marks
  `readOnlyHint` and the scenario does not make writes); an env that does not say, its tools
  whose risk is `read`. The state last read stands until another tool is dispatched
  (`before_tool`), or until the operator was waited on (`forget`: whatever happened
  meanwhile, a receipt is checked against the state as it is then). The MCP kind's default
  (`[mcp] state_changes`).

A run whose loop is a kind's own (an ACP agent, which changes its working copy itself) reads
on every look, whatever its env says: its changes never pass through the dispatcher.

A read takes the snapshot and its hash together, on the env thread; an env that writes its
own `fingerprint()` has it called for every fingerprint, as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from loopdeck.core.canonical import short_hash
from loopdeck.core.env_thread import EnvThread, Then
from loopdeck.core.environment import Environment, StateChanges
from loopdeck.core.tools import ToolSpec

Snapshot = dict[str, Any]
Read = tuple[Snapshot, str]  # a snapshot and its hash (`short_hash`)
Interruptible = Callable[[Awaitable[Any]], Awaitable[Any]]


def state_changes_of(env: Environment) -> StateChanges:
    """What `env` says of its state (`any_time` when it says nothing); a value that is
    neither is a `ValueError` naming the env's class and the value."""
    said: str = env.state_changes  # an env.py may set any value: checked here
    if said == "by_writes":
        return "by_writes"
    if said == "any_time":
        return "any_time"
    raise ValueError(
        f'{type(env).__name__}.state_changes is {said!r}: it is "any_time" (the state may '
        'change with no tool run) or "by_writes" (only tools that are not read-only change it)'
    )


class StateReads:
    def __init__(
        self,
        env: Environment,
        env_thread: EnvThread,
        interruptible: Interruptible,
        *,
        own_loop: bool = False,
    ) -> None:
        self.env = env
        self.env_thread = env_thread
        self.interruptible = interruptible
        self.changes: StateChanges = "any_time" if own_loop else state_changes_of(env)
        self._leaves_state: Callable[[ToolSpec], bool] = env.leaves_state
        # An env that writes its own fingerprint has it called: it may differ from the hash.
        self._own_fingerprint = type(env).fingerprint is not Environment.fingerprint
        self._known: Read | None = None  # the state last read, while nothing may change it
        self.reads = 0  # how many times env code was run to read the state

    @property
    def then(self) -> Then:
        """The read taken on the env thread straight after a sync tool (`EnvThread.call`'s
        `then`), for `after_tool` to take without a hand-over of its own."""
        return ("snapshot", self.read)

    def read(self) -> Read:
        """Env code, on the env thread: the snapshot and its hash."""
        snapshot = self.env.snapshot()
        return snapshot, short_hash(snapshot)

    def forget(self) -> None:
        """The state may have changed since it was read: the next look reads it."""
        self._known = None

    def _keep(self, read: Read) -> Read:
        self.reads += 1
        if self.changes == "by_writes":
            self._known = read
        return read

    async def _read_now(self, label: str) -> Read:
        read: Read = await self.interruptible(self.env_thread.call(label, self.read))
        return self._keep(read)

    async def snapshot(self) -> Snapshot:
        if self._known is not None:
            return self._known[0]
        return (await self._read_now("snapshot"))[0]

    async def state_hash(self) -> str:
        """The state's fingerprint (the guard's key, a receipt's binding)."""
        if self._own_fingerprint:
            self.reads += 1
            fingerprint: str = await self.interruptible(
                self.env_thread.call("fingerprint", self.env.fingerprint)
            )
            return fingerprint
        if self._known is not None:
            return self._known[1]
        return (await self._read_now("fingerprint"))[1]

    def before_tool(self, spec: ToolSpec, then: Then | None) -> Then | None:
        """A tool is about to be dispatched: if it may change the state, what was read is
        forgotten and `then` (the read after it) is kept; if it cannot, `then` is not run."""
        if self._known is not None and self._leaves_state(spec):
            return None
        self._known = None
        return then

    async def after_tool(self) -> Read:
        """The state after an executed call: as known, if the call could not change it;
        else the read its `then` took (or a read now, if none ran)."""
        if self._known is not None:
            return self._known
        label, read = self.then
        taken: Read = await self.interruptible(self.env_thread.after(label, read))
        return self._keep(taken)
