"""OpenAI Responses (`/v1/responses`: Codex, the `openai` SDK's `responses`): asked upstream
with `litellm.aresponses`, an answer's tool uses its `function_call`, `custom_tool_call` and
`local_shell_call` output items, streamed as LiteLLM fakes a stream of a whole response
(`build_synthetic_response_events`), each event named by its type."""

from __future__ import annotations

import json
import uuid
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
from loopdeck.gateway.chat_format import final_response
from loopdeck.llm.loader import litellm_module

NOT_PASSED = frozenset({"model", "stream", "stream_options"})
CALLS = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
OUTPUT_OF = {kind: f"{kind}_output" for kind in CALLS}  # a call's kind -> its output's
OUTPUTS = frozenset(OUTPUT_OF.values())
LOCAL_SHELL = "local_shell"  # a `local_shell_call`'s tool, its input the call's `action`
CHUNK = 1 << 20  # text sent in one delta: the answer is whole, nothing is gained by slicing


class ResponsesFormat:
    name = "responses"

    async def call(self, litellm: Any, body: Body, upstream: dict[str, Any]) -> Body:
        kwargs = {k: v for k, v in body.items() if k not in NOT_PASSED}
        response = await litellm.aresponses(**kwargs, **upstream, stream=False)
        answer: Body = response.model_dump(mode="json", exclude_none=True)
        return answer

    def tool_uses(self, answer: Body) -> list[ToolUse]:
        uses = []
        for item in answer.get("output") or []:
            kind = item.get("type")
            if kind == "function_call":
                raw = parsed_input(item.get("arguments"))
                uses.append(ToolUse(str(item.get("call_id")), str(item.get("name")), raw))
            elif kind == "custom_tool_call":
                text = str(item.get("input") or "")
                uses.append(ToolUse(str(item.get("call_id")), str(item.get("name")), text))
            elif kind == "local_shell_call":
                action = item.get("action") if isinstance(item.get("action"), dict) else {}
                uses.append(ToolUse(str(item.get("call_id")), LOCAL_SHELL, dict(action)))
        return uses

    def schemas(self, body: Body) -> dict[str, Any]:
        return {
            str(tool["name"]): tool.get("parameters")
            for tool in body.get("tools") or []
            if isinstance(tool, dict) and tool.get("type") == "function" and tool.get("name")
        }

    def decided(self, answer: Body, verdicts: dict[str, Verdict]) -> Body:
        answer = json.loads(json.dumps(answer))
        output = []
        for item in answer.get("output") or []:
            verdict = verdicts.get(str(item.get("call_id"))) if item.get("type") in CALLS else None
            if isinstance(verdict, Replace):
                output.append(_text_item(verdict.text))
                continue
            if verdict is not None and verdict.edited is not None:
                _edit(item, verdict.edited)
            output.append(item)
        answer["output"] = output
        return answer

    def retold(self, body: Body, answer: Body, results: dict[str, str]) -> Body:
        """The answer's items and an output for each call. A conversation the upstream keeps
        (`previous_response_id`) goes on from the answer; any other is sent whole again."""
        items = [present(item) for item in answer.get("output") or []]
        kinds = {str(item.get("call_id")): item.get("type") for item in items}
        outputs = [
            {"type": OUTPUT_OF.get(str(kinds.get(use_id)), "function_call_output"),
             "call_id": use_id, "output": text}
            for use_id, text in results.items()
        ]  # fmt: skip
        if body.get("previous_response_id") and answer.get("id"):
            return {**body, "previous_response_id": answer["id"], "input": outputs}
        asked = body.get("input")
        earlier = asked if isinstance(asked, list) else [{"role": "user", "content": asked or ""}]
        return {**body, "input": [*earlier, *items, *outputs]}

    def prefixed(self, answer: Body, text: str) -> Body:
        """`text` as a message first, after the reasoning an answer starts with."""
        answer = json.loads(json.dumps(answer))
        output = answer.get("output") or []
        at = next((i for i, item in enumerate(output) if item.get("type") != "reasoning"),
                  len(output))  # fmt: skip
        answer["output"] = [*output[:at], _text_item(text), *output[at:]]
        return answer

    def usage(self, answer: Body) -> Usage | None:
        said = answer.get("usage") or {}  # `input_tokens` counts the cached ones too
        parts = ("input_tokens", "output_tokens", "total_tokens")
        return split_usage(*(said.get(k) for k in parts))

    def said(self, answer: Body) -> str:
        texts = []
        for item in answer.get("output") or []:
            if item.get("type") == "message":
                texts += [p.get("text") or "" for p in item.get("content") or []]
        return "\n".join(t for t in texts if t)

    def results(self, body: Body) -> list[ToolResult]:
        items = body.get("input")
        found = []
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and item.get("type") in OUTPUTS:
                found.append(ToolResult(str(item.get("call_id")), result_text(item.get("output"))))
        return found

    def final(self, text: str, model: str) -> Body:
        litellm_module()
        from litellm.responses.litellm_completion_transformation.transformation import (
            LiteLLMCompletionResponsesConfig,
        )

        made = LiteLLMCompletionResponsesConfig.transform_chat_completion_response_to_responses_api_response(  # noqa: E501
            request_input="", responses_api_request={},
            chat_completion_response=final_response(text, model),
        )  # fmt: skip
        answer: Body = made.model_dump(mode="json", exclude_none=True)
        return answer

    def frames(self, answer: Body) -> list[bytes]:
        litellm_module()
        from litellm.responses.streaming_iterator import build_synthetic_response_events
        from litellm.types.llms.openai import ResponsesAPIResponse

        whole = ResponsesAPIResponse.model_validate(answer)
        events = build_synthetic_response_events(
            transformed=whole, logging_obj=None, chunk_size=CHUNK
        )
        frames = []
        for event in events:
            data = event.model_dump(mode="json", exclude_none=True)
            frames.append(sse(data, str(data.get("type"))))
        return frames

    def keepalive(self) -> bytes:
        return SSE_COMMENT

    def error(self, status: int, kind: str, message: str) -> Body:
        return {"error": {"message": message, "type": kind, "param": None, "code": kind}}

    def stream_error(self, kind: str, message: str) -> bytes:
        event = {"type": "error", "code": kind, "message": message, "param": None}
        return sse(event, "error")


def _text_item(text: str) -> Body:
    return {
        "type": "message", "id": f"msg_{uuid.uuid4().hex}", "status": "completed",
        "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}],
    }  # fmt: skip


def _edit(item: Body, edited: dict[str, Any] | str) -> None:
    kind = item.get("type")
    if kind == "function_call":
        item["arguments"] = input_text(edited)
    elif kind == "custom_tool_call":
        item["input"] = edited if isinstance(edited, str) else input_text(edited)
    elif kind == "local_shell_call" and isinstance(edited, dict):
        item["action"] = edited
