"""An ACP run's environment: the working copy the agent works in (`workdir/working_copy.py`:
its state the tree of the working copy, its goal check `goal_check` or an `env.py`'s `unmet`).

The agent's tool calls are not loopdeck's to run: they are recorded, keyed by the guard and,
when they write, approved. They are known by their ACP kind, each a tool spec here: reads
(`read`, `search`, `think`, `fetch`, `switch_mode`) and writes (everything else, and the
client's own `fs/write_text_file` and `terminal/create`, loopdeck's to gate and run: a
policy's rule may name each from the start).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loopdeck.acp_env.call_input import diff_text
from loopdeck.acp_env.permitted_writes import shown_diff
from loopdeck.acp_env.terminals import TERMINAL_SPEC
from loopdeck.core.schema_args import args_model_for
from loopdeck.core.tools import ToolSpec
from loopdeck.workdir.working_copy import WorkingCopy

READ_KINDS = ("read", "search", "think", "fetch", "switch_mode")
WRITE_KINDS = ("edit", "delete", "move", "execute", "other")
FS_WRITE = "fs_write_text_file"  # the agent asking loopdeck to write a file for it
# Why an operator's edit of an agent's own call is not offered: the agent runs its input.
AGENTS_OWN_INPUT = (
    "the agent runs its own input: an edit of its call cannot be applied; reject it and tell"
    " the agent what to do instead"
)


def _agents_own(_: Any) -> Any:
    raise RuntimeError("an ACP agent runs its own tools; loopdeck records and approves them")


class WorkspaceEnvironment(WorkingCopy):
    no_check = "this ACP env has no goal_check: nothing can say the goal is met"

    def __init__(self, workdir: Path, data: dict[str, Any]) -> None:
        super().__init__(workdir, data)
        # The agent's call as each permission showed it (its proposal, its request), by
        # loopdeck's call id (`AcpCalls`): what the request's diff is made from.
        self.shown_calls: dict[str, tuple[Any, ...]] = {}

    def write_diff(self, call_id: str, args: dict[str, Any]) -> str:
        """A permission's change as the agent showed it: each file it tells the whole content
        of, against the file as it is now (`permitted_writes.shown_diff`); else its diffs as
        sent (`call_input.diff_text`). A write loopdeck makes for the agent: its content."""
        calls = self.shown_calls.get(call_id)
        if calls is None:
            return super().write_diff(call_id, args)
        sent = (diff_text(call, self.workdir) for call in reversed(calls) if call is not None)
        return shown_diff(self.workdir, *calls) or next((d for d in sent if d), "")

    def tools(self) -> list[ToolSpec]:
        specs = []
        for kind in (*READ_KINDS, *WRITE_KINDS, FS_WRITE):
            risk = "read" if kind in READ_KINDS else "write"
            specs.append(
                ToolSpec(
                    name=kind,
                    description=f"the agent's {kind} tool calls",
                    args_model=args_model_for(kind, {"type": "object"}),
                    risk=risk,
                    risk_source="the agent's tool kind",
                    fn=_agents_own,
                    # A file loopdeck writes for the agent is written as approved, edits too.
                    not_editable="" if kind == FS_WRITE else AGENTS_OWN_INPUT,
                )
            )
        return [*specs, TERMINAL_SPEC]  # loopdeck's client always offers terminals
