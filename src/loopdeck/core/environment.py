"""The shape of an environment: tools, a snapshot of goal-relevant state, a goal check."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from loopdeck.core.canonical import short_hash
from loopdeck.core.finding_events import RiskRaised
from loopdeck.core.states import StopReason
from loopdeck.core.text import capped
from loopdeck.core.tools import NoArgs, Risk, ToolSpec
from loopdeck.core.write_diff import write_diff

F = TypeVar("F", bound=Callable[..., Any])

_MARK = "__loopdeck_tool__"


def tool(
    method: F | None = None,
    *,
    args: type[BaseModel] = NoArgs,
    risk: Risk = "read",
    timeout_s: float = 10.0,
    exempt: bool = False,
    idempotency_fields: tuple[str, ...] | None = None,
) -> Any:
    """Mark an Environment method as a tool (`@tool` or `@tool(...)`). The docstring is what
    the model reads. A wrong setting is refused where it is written (its line in env.py)."""
    if risk not in ("read", "write"):
        raise ValueError(f"@tool(risk={risk!r}): a tool's risk is 'read' or 'write'")
    if not (isinstance(args, type) and issubclass(args, BaseModel)):
        raise TypeError(f"@tool(args={args!r}): args is a pydantic BaseModel class")
    if not timeout_s > 0:
        raise ValueError(f"@tool(timeout_s={timeout_s!r}): a timeout is a number of seconds > 0")

    def mark(fn: F) -> F:
        setattr(
            fn,
            _MARK,
            {
                "args_model": args,
                "risk": risk,
                "timeout_s": timeout_s,
                "exempt_from_guard": exempt,
                "idempotency_fields": idempotency_fields,
            },
        )
        return fn

    return mark(method) if method is not None else mark


# When an env's state may change: `any_time` (on its own, or by any tool: read on every look)
# or `by_writes` (only by the tools that are not read-only: read again once per change).
StateChanges = Literal["any_time", "by_writes"]


class Environment:
    """Subclass this in an env's `env.py` and expose it as `make_env(workdir, data)`.

    `snapshot()` returns only the state the goal is defined on: anything that changes on
    every call (timestamps, counters) would make the no-progress guard blind.
    """

    # A Python env's tools default to `read` risk, which says nothing about the state they
    # leave alone: it says `by_writes` itself when only its write tools change its state.
    state_changes: StateChanges = "any_time"

    def __init__(self, workdir: Path, data: dict[str, Any]) -> None:
        self.workdir = workdir
        self.data = data

    def leaves_state(self, spec: ToolSpec) -> bool:
        """Whether running this tool leaves the state as it was (no read after it under
        `by_writes`)."""
        return spec.risk == "read"

    def snapshot(self) -> dict[str, Any]:
        raise NotImplementedError(
            f"{type(self).__name__} has no snapshot(self): an env returns the state its goal is"
            " defined on"
        )

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        """The reasons the goal is not met in this snapshot; empty means met."""
        raise NotImplementedError(
            f"{type(self).__name__} has no unmet(self, snapshot): an env says why its goal is"
            " not met in a snapshot (a list of reasons, [] when met)"
        )

    def goal_reasons(self, snapshot: dict[str, Any]) -> list[str]:
        """`unmet`'s reasons, checked: a list of strings (anything else is not read as met)."""
        reasons = self.unmet(snapshot)
        if not isinstance(reasons, (list, tuple)) or not all(isinstance(r, str) for r in reasons):
            raise TypeError(
                f"{type(self).__name__}.unmet returned {capped(repr(reasons), 80)}: it returns"
                " a list of the reasons the goal is not met, as strings ([] when met)"
            )
        return list(reasons)

    def watch(self, fail: Callable[[StopReason, str], None]) -> None:
        """As the run starts: `fail(reason, detail)`, from any thread, stops it at once,
        whatever it waits for (an MCP server the state lives in died). Most envs have nothing
        outside the run to watch."""

    def report_findings(self, found: Callable[[str, RiskRaised | None], None]) -> None:
        """As the run starts: `found(text, raised)`, from any thread, makes what the env's
        outside said for the operator a finding of the run (`Finding`: live, stored, replayed,
        exported), as long as the run lasts: an MCP server's warnings. `raised`: the tool it
        says was made a write (its spec told through `watch_tools`). Most envs have none."""

    def watch_tools(self, changed: Callable[[dict[str, ToolSpec]], None]) -> None:
        """As the run starts: `changed(specs)`, from any thread, makes these tools' specs the
        run's from then on (an MCP server that marks a tool less safe mid-run: a write). Only
        tools the run has: its allowlist is fixed as it starts. Most envs' tools never change."""

    def risk_raised_again(self, raised: RiskRaised) -> dict[str, ToolSpec]:
        """A run rebuilt from its log, where a finding said `raised.tool` was made a write:
        made one again, whatever the outside says now; its spec for the run to take ({}: it
        is a write already, or not the env's). Only envs that report `raised` have any."""
        return {}

    def watch_state(self, changed: Callable[[], None]) -> None:
        """As the run starts: `changed()`, from any thread, says the state may have changed
        with no tool run (an MCP server's `notifications/resources/updated`): under
        `by_writes`, the next look reads it. Most envs have nothing to say it."""

    def write_diff(self, call_id: str, args: dict[str, Any]) -> str:
        """What a write would change, as the operator deciding on it is shown it (its
        request's `diff`: `loopdeck pending`, the approval dialog): the diff its arguments'
        file content makes in the working copy (`core/write_diff.py`; "" when it writes no
        file), unless the env's kind knows the change otherwise (an ACP agent's diffs and
        edits, by the call they were shown for). Run off the event loop: it reads files."""
        return write_diff(self.workdir, args)

    def close(self) -> None:
        """The run is over: release what the env holds (an MCP env stops its server)."""

    def not_reopenable(self) -> str | None:
        """Why another worker could not find this env's state if this one were lost (a run
        then ends `crashed` naming it); None when it can: the env has `reopen(run_id)`,
        which rebuilds the state where it lives (a folder both hosts see, a server)."""
        if callable(getattr(self, "reopen", None)):
            return None
        return (
            f"its env ({type(self).__name__}) keeps its state in its worker's memory: it has"
            " no reopen(run_id) for another worker to find it"
        )

    def fingerprint(self) -> str:
        return short_hash(self.snapshot())

    def tools(self) -> list[ToolSpec]:
        specs = []
        for name, member in inspect.getmembers(type(self)):
            meta = getattr(member, _MARK, None)
            if meta is None:
                continue
            doc = inspect.getdoc(member) or name
            specs.append(ToolSpec(name=name, description=doc, fn=getattr(self, name), **meta))
        return specs
