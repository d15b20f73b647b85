"""A tool call the agent started before its input was known, held until it is.

Claude Code sends its `tool_call` as the model's tool use starts to stream: a generic title
("Read File"), `rawInput {}`; opencode's shell call first says only `{"cwd": …}`. The input
comes later, in `tool_call_update`s (the whole rawInput again each time it grows, the real
title, locations, the diff), or in a permission request's `toolCall`. A call keyed or
approved on that first message would be keyed on nothing: two reads of different files, or
two different commands, would look like a repeat, an approval would bind none of the input.
So every pending call is held, each update merged into it, and proposed only once its input
is as complete as it will be (`AcpCalls`): at a permission request for it, or once the agent
says it runs or ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PENDING = (None, "pending")
# ACP's updates replace a field they carry and leave the others as they were.
MERGED = ("kind", "title", "raw_input", "content", "locations", "status")


@dataclass
class HeldCall:
    """What the agent has said of one tool call so far; reads as an ACP tool call does."""

    tool_call_id: str
    kind: Any = None
    title: Any = None
    raw_input: Any = None
    content: Any = None
    locations: Any = None
    status: Any = None

    @classmethod
    def of(cls, update: Any) -> HeldCall:
        held = cls(str(update.tool_call_id))
        held.merge(update)
        return held

    def merge(self, update: Any) -> HeldCall:
        for name in MERGED:
            value = getattr(update, name, None)
            if value is not None:
                setattr(self, name, value)
        return self

    @property
    def input_unknown(self) -> bool:
        """Pending: the agent has not said it runs, and its input may still grow (Claude
        Code's `{}` while its model's input streams; opencode's shell call says only its
        `cwd` before its command). Held until the call is asked about, runs or ends."""
        return self.status in PENDING

    @property
    def under_way(self) -> bool:
        """Running or ended: its input is as complete as it will be."""
        return self.status not in PENDING
