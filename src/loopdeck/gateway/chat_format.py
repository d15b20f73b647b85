"""OpenAI Chat Completions (`/v1/chat/completions`: opencode, pydantic-ai, the `openai` SDK's
`chat.completions`): asked upstream with `litellm.acompletion`, an answer's tool uses the
`tool_calls` of its message, streamed as LiteLLM fakes a stream of a whole answer
(`convert_model_response_to_streaming`: one chunk, then `[DONE]`).

Only one answer is decided a call: `n` above 1 (several choices, each with its own tool calls)
is refused by name, and so are the legacy `functions` and `function_call` (a
`message.function_call` the gateway would not see as a tool use); an answer is sent with its
first choice alone."""

from __future__ import annotations

import json
from typing import Any

from loopdeck.gateway.answer import (
    SSE_COMMENT,
    Body,
    Replace,
    ToolResult,
    ToolUse,
    Usage,
    Verdict,
    input_text,
    parsed_input,
    present,
    result_text,
    split_usage,
    sse,
)
from loopdeck.llm.loader import litellm_module

NOT_PASSED = frozenset({"model", "stream", "stream_options"})
LEGACY = ("functions", "function_call")  # before `tools`: a call the gateway cannot decide


class ChatFormat:
    name = "chat"

    async def call(self, litellm: Any, body: Body, upstream: dict[str, Any]) -> Body:
        kwargs = {k: v for k, v in body.items() if k not in NOT_PASSED}
        response = await litellm.acompletion(**kwargs, **upstream, stream=False)
        answer: Body = response.model_dump(exclude_none=True)
        answer["choices"] = (answer.get("choices") or [])[:1]  # the one decided (`n` is 1)
        return answer

    def refused(self, body: Body) -> str | None:
        n = body.get("n")
        if n is not None and n != 1:
            return (f"loopdeck: `n` {n!r} is refused: the gateway decides the tool calls of one "
                    "answer a call, so ask for one choice (`n` 1 or unset)")  # fmt: skip
        if said := [name for name in LEGACY if body.get(name) is not None]:
            names = " and ".join(f"`{name}`" for name in said)
            return (f"loopdeck: {names} (the legacy function calling) refused: the gateway "
                    "decides only `tools` and their `tool_calls`")  # fmt: skip
        return None

    def refused_answer(self, answer: Body) -> str | None:
        return None

    def tool_uses(self, answer: Body) -> list[ToolUse]:
        uses = []
        for call in _message(answer).get("tool_calls") or []:
            if call.get("type") == "custom":
                custom = call.get("custom") or {}
                uses.append(ToolUse(str(call.get("id")), str(custom.get("name")),
                                    str(custom.get("input") or "")))  # fmt: skip
                continue
            function = call.get("function") or {}
            raw = parsed_input(function.get("arguments"))
            uses.append(ToolUse(str(call.get("id")), str(function.get("name")), raw))
        return uses

    def schemas(self, body: Body) -> dict[str, Any]:
        found = {}
        for tool in body.get("tools") or []:
            function = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(function, dict) and function.get("name"):
                found[str(function["name"])] = function.get("parameters")
        return found

    def unseen(self, body: Body, uses: list[ToolUse]) -> frozenset[str]:
        return frozenset()  # no prompt kept upstream: the request declares every tool

    def decided(self, answer: Body, verdicts: dict[str, Verdict]) -> Body:
        answer = json.loads(json.dumps(answer))
        message = _message(answer)
        kept, texts = [], []
        for call in message.get("tool_calls") or []:
            verdict = verdicts.get(str(call.get("id")))
            if isinstance(verdict, Replace):
                texts.append(verdict.text)
                continue
            if verdict is not None and verdict.edited is not None:
                if call.get("type") == "custom":
                    call["custom"]["input"] = input_text(verdict.edited)
                else:
                    call["function"]["arguments"] = input_text(verdict.edited)
            kept.append(call)
        if texts:
            message["content"] = "\n\n".join([t for t in [message.get("content")] if t] + texts)
        if kept:
            message["tool_calls"] = kept
        else:
            message.pop("tool_calls", None)
            if answer["choices"] and answer["choices"][0].get("finish_reason") == "tool_calls":
                answer["choices"][0]["finish_reason"] = "stop"
        return answer

    def retold(self, body: Body, answer: Body, results: dict[str, str]) -> Body:
        message = _message(answer)
        calls = [present(call) for call in message.get("tool_calls") or []]
        turn = {"role": "assistant", "content": message.get("content"), "tool_calls": calls}
        answered = [
            {"role": "tool", "tool_call_id": use_id, "content": text}
            for use_id, text in results.items()
        ]
        return {**body, "messages": [*(body.get("messages") or []), turn, *answered]}

    def prefixed(self, answer: Body, text: str) -> Body:
        answer = json.loads(json.dumps(answer))
        message = _message(answer)
        said = message.get("content")
        message["content"] = f"{text}\n\n{said}" if isinstance(said, str) and said else text
        return answer

    def usage(self, answer: Body) -> Usage | None:
        said = answer.get("usage") or {}  # `prompt_tokens` counts the cached ones too
        parts = ("prompt_tokens", "completion_tokens", "total_tokens")
        return split_usage(*(said.get(k) for k in parts))

    def said(self, answer: Body) -> str:
        content = _message(answer).get("content")
        return content if isinstance(content, str) else result_text(content)

    def results(self, body: Body) -> list[ToolResult]:
        found = []
        for message in body.get("messages") or []:
            if isinstance(message, dict) and message.get("role") == "tool":
                found.append(
                    ToolResult(
                        str(message.get("tool_call_id")), result_text(message.get("content"))
                    )
                )
        return found

    def ran(self, answer: Body) -> list[ToolResult]:
        return []  # the upstream runs none of the agent's calls

    def ran_unasked(self, answer: Body) -> list[tuple[ToolUse, ToolResult]]:
        return []

    def final(self, text: str, model: str) -> Body:
        answer: Body = final_response(text, model).model_dump(exclude_none=True)
        return answer

    def frames(self, answer: Body) -> list[bytes]:
        litellm_module()
        from litellm.llms.base_llm.base_model_iterator import convert_model_response_to_streaming
        from litellm.types.utils import ModelResponse

        chunk = convert_model_response_to_streaming(ModelResponse(**answer))
        return [sse(chunk.model_dump(mode="json", exclude_none=True)), sse("[DONE]")]

    def keepalive(self) -> bytes:
        return SSE_COMMENT

    def error(self, status: int, kind: str, message: str, code: str | None = None) -> Body:
        return {"error": {"message": message, "type": kind, "param": None, "code": code or kind}}

    def stream_error(self, kind: str, message: str, code: str | None = None) -> bytes:
        return sse(self.error(0, kind, message, code))


def _message(answer: Body) -> dict[str, Any]:
    choices = answer.get("choices") or [{}]
    message: dict[str, Any] = choices[0].setdefault("message", {})
    return message


def final_response(text: str, model: str) -> Any:
    """A whole text answer as LiteLLM's chat type (what the other formats translate)."""
    litellm_module()
    from litellm.types.utils import Choices, Message, ModelResponse, Usage

    message = Message(role="assistant", content=text)
    return ModelResponse(
        model=model,
        choices=[Choices(index=0, finish_reason="stop", message=message)],
        usage=Usage(prompt_tokens=0, completion_tokens=0, total_tokens=0),
    )
