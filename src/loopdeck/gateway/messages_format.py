"""Anthropic Messages (`/v1/messages`: Claude Code, the `anthropic` SDK): asked upstream with
LiteLLM's Anthropic interface (`litellm.anthropic_interface.messages.acreate`: Anthropic's own
API passed through, any other provider through LiteLLM's adapter), an answer's tool uses its
`tool_use` blocks, streamed as LiteLLM fakes a stream of a whole message
(`FakeAnthropicMessagesStreamIterator`), kept alive by `ping` events."""

from __future__ import annotations

import json
from typing import Any

from loopdeck.gateway.answer import (
    Body,
    Replace,
    ToolResult,
    ToolUse,
    Usage,
    Verdict,
    parsed_input,
    present,
    result_text,
    sse,
)
from loopdeck.gateway.chat_format import final_response
from loopdeck.llm.loader import litellm_module

NOT_PASSED = frozenset({"model", "stream"})
THINKING = frozenset({"thinking", "redacted_thinking"})
PROMPT_FIELDS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
USAGE_FIELDS = (*PROMPT_FIELDS, "output_tokens")


class MessagesFormat:
    name = "messages"

    async def call(self, litellm: Any, body: Body, upstream: dict[str, Any]) -> Body:
        litellm_module()
        from litellm.anthropic_interface import messages

        kwargs = {k: v for k, v in body.items() if k not in NOT_PASSED}
        answer = await messages.acreate(**kwargs, **upstream, stream=False)
        copied: Body = json.loads(json.dumps(answer, default=str))
        return copied

    def refused(self, body: Body) -> str | None:
        return None

    def refused_answer(self, answer: Body) -> str | None:
        return None

    def tool_uses(self, answer: Body) -> list[ToolUse]:
        return [
            ToolUse(str(block.get("id")), str(block.get("name")), parsed_input(block.get("input")))
            for block in answer.get("content") or []
            if block.get("type") == "tool_use"
        ]

    def schemas(self, body: Body) -> dict[str, Any]:
        return {
            str(tool["name"]): tool.get("input_schema")
            for tool in body.get("tools") or []
            if isinstance(tool, dict) and tool.get("name")
        }

    def unseen(self, body: Body, uses: list[ToolUse]) -> frozenset[str]:
        return frozenset()  # no prompt kept upstream: the request declares every tool

    def decided(self, answer: Body, verdicts: dict[str, Verdict]) -> Body:
        answer = json.loads(json.dumps(answer))
        content, uses = [], 0
        for block in answer.get("content") or []:
            verdict = (
                verdicts.get(str(block.get("id"))) if block.get("type") == "tool_use" else None
            )
            if isinstance(verdict, Replace):
                content.append({"type": "text", "text": verdict.text})
                continue
            if verdict is not None and verdict.edited is not None:
                block["input"] = verdict.edited
            uses += block.get("type") == "tool_use"
            content.append(block)
        answer["content"] = content
        if not uses and answer.get("stop_reason") == "tool_use":
            answer["stop_reason"] = "end_turn"
        return answer

    def retold(self, body: Body, answer: Body, results: dict[str, str]) -> Body:
        turn = {"role": "assistant", "content": [present(b) for b in answer.get("content") or []]}
        answered = [
            {"type": "tool_result", "tool_use_id": use_id, "content": text, "is_error": True}
            for use_id, text in results.items()
        ]
        messages = [*(body.get("messages") or []), turn, {"role": "user", "content": answered}]
        return {**body, "messages": messages}

    def prefixed(self, answer: Body, text: str) -> Body:
        """`text` first, after the thinking an answer must start with."""
        answer = json.loads(json.dumps(answer))
        content = answer.get("content") or []
        at = next((i for i, b in enumerate(content) if b.get("type") not in THINKING), len(content))
        answer["content"] = [*content[:at], {"type": "text", "text": text}, *content[at:]]
        return answer

    def usage(self, answer: Body) -> Usage | None:
        said = answer.get("usage") or {}
        if not any(isinstance(said.get(name), int) for name in USAGE_FIELDS):
            return None
        read = [said.get(name) for name in PROMPT_FIELDS]  # the cache's apart from the rest
        prompt = sum(n for n in read if isinstance(n, int))
        output = said.get("output_tokens")
        return Usage(prompt, output if isinstance(output, int) else 0)

    def said(self, answer: Body) -> str:
        texts = [
            b.get("text") or "" for b in answer.get("content") or [] if b.get("type") == "text"
        ]
        return "\n".join(t for t in texts if t)

    def results(self, body: Body) -> list[ToolResult]:
        found = []
        for message in body.get("messages") or []:
            if not isinstance(message, dict) or message.get("role") != "user":
                continue
            content = message.get("content")
            if not isinstance(content, list):
                continue
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    found.append(
                        ToolResult(str(block.get("tool_use_id")), result_text(block.get("content")),
                                   bool(block.get("is_error")))
                    )  # fmt: skip
        return found

    def ran(self, answer: Body) -> list[ToolResult]:
        return []  # the upstream runs none of the agent's calls

    def ran_unasked(self, answer: Body) -> list[tuple[ToolUse, ToolResult]]:
        return []

    def final(self, text: str, model: str) -> Body:
        litellm_module()
        from litellm.llms.anthropic.messages.adapters.transformation import (
            LiteLLMAnthropicMessagesAdapter,
        )

        made = LiteLLMAnthropicMessagesAdapter().translate_openai_response_to_anthropic(
            response=final_response(text, model)
        )
        answer: Body = json.loads(json.dumps(made, default=str))
        return answer

    def frames(self, answer: Body) -> list[bytes]:
        litellm_module()
        from litellm.llms.anthropic.messages.native.fake_stream_iterator import (
            FakeAnthropicMessagesStreamIterator,
        )

        return list(FakeAnthropicMessagesStreamIterator(answer).chunks)

    def keepalive(self) -> bytes:
        return sse({"type": "ping"}, "ping")

    def error(self, status: int, kind: str, message: str, code: str | None = None) -> Body:
        return {"type": "error", "error": {"type": kind, "message": message}}

    def stream_error(self, kind: str, message: str, code: str | None = None) -> bytes:
        return sse(self.error(0, kind, message), "error")
