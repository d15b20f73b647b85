"""The loopback Anthropic Messages API (`anthropic_loopback.py`) with one more kind of reply:
several blocks in one answer (`Blocks`: text and tool uses, as the model sends a Read and a
Write together), streamed as the API streams them. The gateway decides an answer's tool uses
together, so a test needs an answer holding a read it releases and a write it holds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from anthropic_loopback import (
    AnthropicLoopback,
    Handler,
    LoopbackHandler,
    Text,
    ToolUse,
    _blocks,
    _message,
    check_body,
    is_main,
    side_reply,
    sse_events,
    turn_of,
)


@dataclass(frozen=True)
class Blocks:
    """One answer of several blocks, in order (its stop reason `tool_use` when one is a tool
    use)."""

    parts: tuple[Text | ToolUse, ...]


def blocks_of(parts: tuple[Text | ToolUse, ...]) -> tuple[list[dict[str, Any]], str]:
    blocks = [block for part in parts for block in _blocks(part)[0]]
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return blocks, stop


def blocks_events(model: str, parts: tuple[Text | ToolUse, ...]) -> list[tuple[str, Any]]:
    """The answer as the API streams it: each part's block events (from `sse_events` for the
    part alone), numbered in the answer's order, between one start and one end."""
    head = sse_events(model, parts[0])[:2]  # message_start, ping
    middle: list[tuple[str, Any]] = []
    for index, part in enumerate(parts):
        for name, data in sse_events(model, part):
            if name.startswith("content_block_"):
                middle.append((name, {**data, "index": index}))
    _, stop = blocks_of(parts)
    tail = sse_events(model, Text(""))[-2:]  # message_delta, message_stop
    delta = {**tail[0][1], "delta": {"stop_reason": stop, "stop_sequence": None}}
    return [*head, *middle, ("message_delta", delta), tail[1]]


class BlocksHandler(Handler):
    def do_POST(self) -> None:
        body, seen = self.read_body()
        if not self.path.startswith("/v1/messages"):
            return self.not_found()
        if "count_tokens" in self.path:
            return self.send_json(200, {"input_tokens": 120})
        reply = self.model_reply(body, seen, check_body, is_main, turn_of, side_reply)
        if reply is None:
            return
        parts = reply.parts if isinstance(reply, Blocks) else (reply,)
        model = str(body["model"])
        if body.get("stream"):
            frames = [
                f"event: {name}\ndata: {json.dumps(data)}\n\n"
                for name, data in blocks_events(model, parts)
            ]
            headers = {
                "content-type": "text/event-stream; charset=utf-8",
                "cache-control": "no-cache",
            }
            return self.send_stream(headers, frames)
        blocks, stop = blocks_of(parts)
        self.send_json(200, _message(model, blocks, stop))


class BlocksLoopback(AnthropicLoopback):
    def handler(self) -> type[LoopbackHandler]:
        return BlocksHandler
