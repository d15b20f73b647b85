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
  (`before_tool`), until the operator was waited on (`forget`: whatever happened
  meanwhile, a receipt is checked against the state as it is then), or until the env says it
  changed on its own (`forget` from any thread, `Environment.watch_state`: an MCP server's
  `notifications/resources/updated`; a read begun before that is not kept). The MCP kind's
  default (`[mcp] state_changes`).

A run whose loop is a kind's own (an ACP agent, which changes its working copy itself) reads
on every look, whatever its env says: its changes never pass through the dispatcher.

The read before a call is begun as the model's decision to call is read (`read_ahead`, on
the env thread while the loop records the decision) and taken by `state_hash`: still a read
after the model replied, the state the call is proposed on (not begun when a stop or a pause
came meanwhile). One begun before a `forget` (a pause held between, the env saying it
changed) is not taken: the state is read again.

A read takes the snapshot and its hash together, on the env thread; an env that writes its
own `fingerprint()` has it called for every fingerprint, as before. A snapshot must be a dict
of JSON data: what the run records and hashes is what the env returned. Anything else (an
object, a set, a date, NaN, a list) stops the run `crashed`, as a snapshot that raises does,
naming where (`snapshot() returned a dict that is not JSON data: ["obj"] is of type object
(env.py:52, in snapshot)`).

The goal check (`unmet`, on a snapshot) is bounded by the env's `goal_check_timeout_s` (a
Python env's class may set it; 60 s unless it does; an env whose check is a `goal_check`
command has the scenario's, and its command stops itself at it): past it the run stops
`tool_failure` naming it, the check abandoned as a hanging tool is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from loopdeck.core.canonical import NotCanonical, data_hash
from loopdeck.core.control import StopRun
from loopdeck.core.env_faults import home_of
from loopdeck.core.env_thread import EnvThread, Then
from loopdeck.core.environment import Environment, StateChanges
from loopdeck.core.states import StopReason
from loopdeck.core.text import capped
from loopdeck.core.tools import ToolSpec

Snapshot = dict[str, Any]
Read = tuple[Snapshot, str]  # a snapshot and its hash (`short_hash`)
Interruptible = Callable[[Awaitable[Any]], Awaitable[Any]]
# A goal check's bound when its env says none (the scenario's `goal_check_timeout_s` default).
GOAL_CHECK_S = 60.0
# A `goal_check` command stops itself at the bound, in its own words: the runtime's comes later.
COMMAND_GRACE_S = 5.0


def goal_check_bound(env: Environment) -> float:
    """How long the env's goal check may run: its `goal_check_timeout_s` (else 60 s), and a
    grace for a `goal_check` command, which stops itself at that bound."""
    bound = float(getattr(env, "goal_check_timeout_s", None) or GOAL_CHECK_S)
    return bound + COMMAND_GRACE_S if getattr(env, "goal_check", None) else bound


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


def not_json_data(env: Environment, snapshot: object) -> str | None:
    """Why `snapshot` (what `env.snapshot()` returned) cannot be the run's state, with the
    line of the env's `snapshot`; None when it is a dict of JSON data."""
    if not isinstance(snapshot, dict):
        said = f"snapshot() returned {type(snapshot).__name__}, not a dict of JSON data"
    elif (key := next((k for k in snapshot if not isinstance(k, str)), None)) is not None:
        said = (
            f"snapshot() returned a dict that is not JSON data: its key {capped(repr(key), 60)}"
            " is not a str"
        )
    else:
        try:
            data_hash(snapshot)
            return None
        except NotCanonical as exc:
            said = f"snapshot() returned a dict that is not JSON data: {capped(str(exc), 300)}"
    return said + _where_snapshot(env)


def _where_snapshot(env: Environment) -> str:
    """` (env.py:52, in snapshot)`: where the env's own `snapshot` is ("" if loopdeck's)."""
    code = getattr(getattr(type(env), "snapshot", None), "__code__", None)
    home = home_of(type(env))
    if code is None or home is None:
        return ""
    try:
        path = Path(code.co_filename).resolve().relative_to(home)
    except (ValueError, OSError):
        return ""
    return f" ({path.as_posix()}:{code.co_firstlineno}, in snapshot)"


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
        # `forget`s so far, and as the last read began: a read begun before one is not kept.
        self._forgotten = 0
        self._read_after = 0
        self._lock = threading.Lock()
        self.reads = 0  # how many times env code was run to read the state
        # A fingerprint's read begun early (`read_ahead`): the `forget`s as it began.
        self._ahead: int | None = None

    @property
    def then(self) -> Then:
        """The read taken on the env thread straight after a sync tool (`EnvThread.call`'s
        `then`), for `after_tool` to take without a hand-over of its own."""
        return ("snapshot", self.read)

    def read(self) -> Read:
        """Env code, on the env thread: the snapshot and its hash. One that is not a dict of
        JSON data stops the run (`crashed`), naming where."""
        self._read_after = self._forgotten
        snapshot = self.env.snapshot()
        if isinstance(snapshot, dict) and all(isinstance(key, str) for key in snapshot):
            try:
                return snapshot, data_hash(snapshot)
            except NotCanonical:
                pass
        raise StopRun(StopReason.CRASHED, not_json_data(self.env, snapshot) or "")

    async def goal_check(self, snapshot: Snapshot) -> list[str]:
        """The reasons the goal is not met in `snapshot` (`goal_reasons`), on the env thread,
        bounded (`goal_check_bound`): past it the run stops `tool_failure`, naming it."""
        bound, began = goal_check_bound(self.env), time.monotonic()
        call = self.env_thread.call("goal check", self.env.goal_reasons, snapshot, timeout_s=bound)
        try:
            reasons: list[str] = await self.interruptible(call)
        except TimeoutError:
            if time.monotonic() - began < bound:
                raise  # the env's own code raised it: said as any exception of its is
            raise StopRun(
                StopReason.TOOL_FAILURE,
                f"goal check: {type(self.env).__name__}.unmet did not return within {bound:g}s"
                " (its goal_check_timeout_s); abandoned, still running",
            ) from None
        return reasons

    def forget(self) -> None:
        """The state may have changed since it was read: the next look reads it. From any
        thread: a read under way as it is said is not kept (`_keep`)."""
        with self._lock:
            self._forgotten += 1
            self._known = None

    def _keep(self, read: Read) -> Read:
        self.reads += 1
        with self._lock:
            if self.changes == "by_writes" and self._read_after == self._forgotten:
                self._known = read
        return read

    async def _read_now(self, label: str) -> Read:
        read: Read = await self.interruptible(self.env_thread.call(label, self.read))
        return self._keep(read)

    async def snapshot(self) -> Snapshot:
        if self._known is not None:
            return self._known[0]
        return (await self._read_now("snapshot"))[0]

    def read_ahead(self) -> None:
        """The model replied with calls: the read of the state they are proposed on, which
        `state_hash` takes next, begun now on the env thread, while the loop records the
        reply. It is a read after the reply, as a read at `state_hash` is; one begun before a
        `forget` (a pause, the env saying it changed) is not taken: read again."""
        if self._own_fingerprint or self._known is None:
            fn = self.env.fingerprint if self._own_fingerprint else self.read
            began = self.env_thread.start("fingerprint", fn)
            self._ahead = self._forgotten if began else None

    async def state_hash(self) -> str:
        """The state's fingerprint (the guard's key, a receipt's binding)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead != self._forgotten:
            ahead = None  # begun before a `forget`: the call drops it
        if self._own_fingerprint:
            self.reads += 1
            fingerprint: str = await self.interruptible(
                self.env_thread.after("fingerprint", self.env.fingerprint)
                if ahead is not None
                else self.env_thread.call("fingerprint", self.env.fingerprint)
            )
            return fingerprint
        if self._known is not None:
            return self._known[1]
        if ahead is not None:
            read: Read = await self.interruptible(self.env_thread.after("fingerprint", self.read))
            return self._keep(read)[1]
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
