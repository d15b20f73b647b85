"""Keeping a conversation inside the model's window.

The head (the system prompt and the task or plan) is pinned. Past half the window the oldest
tool results are shortened to one line, then the oldest turns are dropped whole: a turn is an
assistant message with everything up to the next one, so a message with tool calls never
loses its results, and no result outlives its call. One marker after the head counts what was
dropped. `ContextWindow` keeps a running estimate: each call counts only the new messages.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loopdeck.core.prompts import DATA_LABEL
from loopdeck.core.text import json_text

Message = dict[str, Any]
TokenCounter = Callable[[list[Message]], int]

PINNED = 2  # the system prompt and the original task (or plan) are never trimmed
TRIGGER = 0.5  # compact once the prompt passes half of the window
TARGET = 0.35  # down to about a third of it: a real chunk, so it does not fire every call
COMPACTED = "[compacted] "
_DROPPED = re.compile(r"\[compacted\] ([0-9,]+) earlier turns? (?:was|were) dropped")
_ENVELOPE_HEAD = f"{DATA_LABEL}\n<tool_result>\n"
_ENVELOPE_TAIL = "\n</tool_result>"


@dataclass(frozen=True)
class Compaction:
    """What one compaction did: the prompt's estimate before and after, and how."""

    tokens_before: int
    tokens_after: int
    results_shortened: int
    turns_dropped: int


def dropped_turns(message: Message) -> int:
    """How many turns the marker message says were dropped (0 for any other message)."""
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, str):
        return 0
    if not content.startswith(COMPACTED):
        return 0
    found = _DROPPED.match(content)
    return int(found.group(1).replace(",", "")) if found else 0


def _marker(turns: int, tools: Counter[str]) -> Message:
    named = ", ".join(f"{name} x{count:,}" for name, count in tools.most_common(5))
    calls = f" (their calls: {named}{', …' if len(tools) > 5 else ''})" if tools else ""
    verb = "was" if turns == 1 else "were"
    text = (
        f"{COMPACTED}{turns:,} earlier turn{'' if turns == 1 else 's'} {verb} dropped to keep "
        f"the prompt inside the model's window{calls}. The task above still holds."
    )
    return {"role": "user", "content": text}


def _result_line(payload: Any) -> str | None:
    if not isinstance(payload, dict) or "ok" not in payload:
        return None
    error = payload.get("error")
    if not payload.get("ok", True) and isinstance(error, dict):
        return f"failed ({error.get('code', 'ERROR')}): {str(error.get('message', ''))[:80]}"
    data = json_text(payload.get("data"))
    return f"ok: {data[:100]}" + ("…" if len(data) > 100 else "")


def shortened(message: Message) -> Message | None:
    """A tool result (native, or as fenced data for a model without tools) in one line; None
    if the message is no result or is short already."""
    content = message.get("content")
    if not isinstance(content, str):
        return None
    role = message.get("role")
    fenced = role == "user" and content.startswith(_ENVELOPE_HEAD)
    if role != "tool" and not fenced:
        return None
    body = content[len(_ENVELOPE_HEAD) : -len(_ENVELOPE_TAIL)] if fenced else content
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    if isinstance(payload, dict) and "tool_result" in payload:
        payload = payload["tool_result"]
    line = _result_line(payload)
    if line is None:
        return None
    text = COMPACTED + line
    if len(text) >= len(body):
        return None
    if fenced:
        text = f"{_ENVELOPE_HEAD}{text}{_ENVELOPE_TAIL}"
    return {**message, "content": text}


def _turn_starts(messages: list[Message], start: int) -> list[int]:
    """Where each turn begins: at every assistant message (and at `start`)."""
    starts = [start]
    for i in range(start + 1, len(messages)):
        if messages[i].get("role") == "assistant":
            starts.append(i)
    return starts


def _tool_names(turn: list[Message]) -> list[str]:
    names = []
    for message in turn:
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                names.append(str(function.get("name", "?"))[:64])
    return names


@dataclass
class ContextWindow:
    """A running estimate of the prompt of the conversation being sent, and its compaction.

    `overhead` is what a request adds beyond its messages (tools, the output contract, the
    provider's framing), learnt from the prompt tokens the provider reports."""

    window: int
    count: TokenCounter
    overhead: int = 0
    _conversation: list[Message] | None = None
    _sizes: list[int] = field(default_factory=list)
    _total: int = 0
    _sent: int = 0
    _empty: int = 0
    _dropped: Counter[str] = field(default_factory=Counter)  # the tools of turns dropped

    @property
    def trigger(self) -> int:
        return int(self.window * TRIGGER)

    @property
    def target(self) -> int:
        return int(self.window * TARGET)

    def _size(self, message: Message) -> int:
        return max(0, self.count([message]) - self._empty)

    def tracks(self, conversation: list[Message]) -> bool:
        return conversation is self._conversation

    def estimate(self, conversation: list[Message]) -> int:
        """The prompt's tokens; only messages added since the last estimate are counted."""
        if conversation is not self._conversation or len(conversation) < len(self._sizes):
            self._conversation = conversation
            self._empty = self.count([])
            self._sizes, self._total = [], 0
            self._dropped = Counter()
        for message in conversation[len(self._sizes) :]:
            size = self._size(message)
            self._sizes.append(size)
            self._total += size
        self._sent = self._total
        return self._total + self.overhead

    def observe(self, conversation: list[Message], prompt_tokens: int) -> None:
        """The provider's count of the prompt just sent: what it adds beyond the messages."""
        if conversation is self._conversation and prompt_tokens > 0:
            self.overhead = max(0, prompt_tokens - self._sent)

    def fit(self, conversation: list[Message], *, force: bool = False) -> Compaction | None:
        """Compact in place when the prompt is past the trigger (or `force`d: the provider
        said it overflowed); None when nothing was made shorter."""
        before = self.estimate(conversation)
        if before <= self.trigger and not force:
            return None
        messages, sizes = list(conversation), list(self._sizes)
        # Forced, the provider counts more than the estimate: at least halve the prompt.
        goal = min(self.target, before // 2) if force else self.target
        total, budget = self._total, goal - self.overhead
        last = _turn_starts(messages, PINNED)[-1]  # the newest turn stays whole
        shortened_count = 0
        for i in range(PINNED, last):
            if total <= budget:
                break
            short = shortened(messages[i])
            if short is not None:
                size = self._size(short)
                if size < sizes[i]:
                    total += size - sizes[i]
                    messages[i], sizes[i] = short, size
                    shortened_count += 1
        dropped = 0
        if total > budget:
            messages, sizes, total, dropped = self._drop_oldest(messages, sizes, total, budget)
        if total >= self._total:
            return None
        conversation[:] = messages
        self._sizes, self._total = sizes, total
        self._sent = total
        return Compaction(before, total + self.overhead, shortened_count, dropped)

    def _drop_oldest(
        self, messages: list[Message], sizes: list[int], total: int, budget: int
    ) -> tuple[list[Message], list[int], int, int]:
        """Drop whole turns, oldest first, all but the newest; the marker after the head
        counts every turn dropped from this conversation so far."""
        entry_total, start = total, PINNED
        earlier = dropped_turns(messages[PINNED]) if len(messages) > PINNED else 0
        if earlier:
            start = PINNED + 1  # the marker of earlier drops: replaced below
        total -= sum(sizes[PINNED:start])
        cut, turns, tools = start, earlier, Counter(self._dropped)
        marker_size = self._size(_marker(turns + 1, tools))
        for begin, end in itertools.pairwise(_turn_starts(messages, start)):  # not the newest
            if total + marker_size <= budget:
                break
            turn = messages[begin:end]
            tools.update(_tool_names(turn))
            turns += sum(1 for m in turn if m.get("role") == "assistant")
            total -= sum(sizes[begin:end])
            cut = end
        marker = _marker(turns, tools)
        size = self._size(marker)
        if cut == start or total + size >= entry_total:
            return messages, sizes, entry_total, 0
        dropped, self._dropped = turns - earlier, tools
        kept = [*messages[:PINNED], marker, *messages[cut:]]
        kept_sizes = [*sizes[:PINNED], size, *sizes[cut:]]
        return kept, kept_sizes, total + size, dropped
