"""In-process models for runtime tests: replies chosen by the test, no LiteLLM, no network."""

from __future__ import annotations

import json
from typing import Any

from loopdeck.core.model import ModelReply, ModelRequest, RawToolCall

FINAL = json.dumps({"type": "final", "message": "done", "reason_code": "DONE"})


def calls(*spec: tuple[str, Any], content: str | None = None) -> ModelReply:
    """One reply with several native tool calls: (tool, arguments) pairs; arguments that are
    not a string are sent as JSON."""
    raw = [
        RawToolCall(id=f"call_{i}", name=name, arguments=a if isinstance(a, str) else json.dumps(a))
        for i, (name, a) in enumerate(spec)
    ]
    return ModelReply(model="fake", content=content, tool_calls=raw)


class ReplayModel:
    """Plays the executor replies in order, then a final decision; the planner gets `plan`."""

    name = "fake"
    context_window: int | None = None

    def __init__(self, replies: list[ModelReply], plan: str = "1. Do it.") -> None:
        self.replies = list(replies)
        self.plan = plan
        self.requests: list[ModelRequest] = []

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.requests.append(request)
        if request.role == "planner":
            return ModelReply(model="fake", content=self.plan, prompt_tokens=1)
        if self.replies:
            return self.replies.pop(0)
        return ModelReply(model="fake", content=FINAL, prompt_tokens=1)
