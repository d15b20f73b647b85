"""A test playing the agent through the gateway, in-process, in one of the three formats,
streamed or not: the official `openai` SDK's async client for Chat Completions and Responses,
raw HTTP for Anthropic Messages (its SDK is not installed here), read as the SDK reads it. The
conversation is kept as the agent keeps it: each answer appended, tool results sent back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from gateway_agent import TOOLS, streamed_message

MODEL = "agent-model"


@dataclass(frozen=True)
class Answer:
    text: str
    uses: list[tuple[str, str, Any]]  # (id, tool, input)


class Refused(Exception):
    """The gateway answered with an error: its HTTP status and body's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


@dataclass
class Client:
    told: dict[str, Any]
    api: str
    stream: bool
    conversation: list[dict[str, Any]] = field(default_factory=list)

    def user(self, text: str) -> None:
        self.conversation.append({"role": "user", "content": text})

    async def ask(self) -> Answer:
        asked = {"chat": self._chat, "responses": self._responses, "messages": self._messages}
        return await asked[self.api]()

    def results(self, outputs: dict[str, str]) -> None:
        """Each tool use's output sent with the next request, as the format wants it."""
        if self.api == "chat":
            self.conversation += [{"role": "tool", "tool_call_id": k, "content": v}
                                  for k, v in outputs.items()]  # fmt: skip
        elif self.api == "responses":
            self.conversation += [{"type": "function_call_output", "call_id": k, "output": v}
                                  for k, v in outputs.items()]  # fmt: skip
        else:
            blocks = [{"type": "tool_result", "tool_use_id": k, "content": v}
                      for k, v in outputs.items()]  # fmt: skip
            self.conversation.append({"role": "user", "content": blocks})

    def _openai(self) -> Any:
        from openai import AsyncOpenAI

        return AsyncOpenAI(
            base_url=self.told["OPENAI_BASE_URL"], api_key=self.told["OPENAI_API_KEY"],
            max_retries=0, timeout=60,
        )  # fmt: skip

    async def _chat(self) -> Answer:
        from openai import APIStatusError

        tools = [{"type": "function", "function": {"name": n, "parameters": s}}
                 for n, s in TOOLS.items()]  # fmt: skip
        client, kwargs = (
            self._openai(),
            {"model": MODEL, "messages": self.conversation, "tools": tools},
        )
        try:
            if self.stream:
                async with client.chat.completions.stream(**kwargs) as stream:
                    async for _ in stream:
                        pass
                    message = (await stream.get_final_completion()).choices[0].message
            else:
                message = (await client.chat.completions.create(**kwargs)).choices[0].message
        except APIStatusError as exc:
            raise Refused(exc.status_code, exc.message) from exc
        self.conversation.append(message.model_dump(exclude_none=True))
        uses = [(c.id, c.function.name, json.loads(c.function.arguments or "{}"))
                for c in message.tool_calls or []]  # fmt: skip
        return Answer(message.content or "", uses)

    async def _responses(self) -> Answer:
        from openai import APIStatusError

        tools = [{"type": "function", "name": n, "parameters": s} for n, s in TOOLS.items()]
        client, kwargs = (
            self._openai(),
            {"model": MODEL, "input": self.conversation, "tools": tools},
        )
        try:
            if self.stream:
                async with client.responses.stream(**kwargs) as stream:
                    async for _ in stream:
                        pass
                    response = await stream.get_final_response()
            else:
                response = await client.responses.create(**kwargs)
        except APIStatusError as exc:
            raise Refused(exc.status_code, exc.message) from exc
        self.conversation += [item.model_dump(exclude_none=True) for item in response.output]
        uses = [(i.call_id, i.name, json.loads(i.arguments or "{}"))
                for i in response.output if i.type == "function_call"]  # fmt: skip
        return Answer(response.output_text, uses)

    async def _messages(self) -> Answer:
        url = str(self.told["ANTHROPIC_BASE_URL"]) + "/v1/messages"
        headers = {"x-api-key": str(self.told["ANTHROPIC_API_KEY"]),
                   "anthropic-version": "2023-06-01"}  # fmt: skip
        body = {"model": MODEL, "max_tokens": 1024, "messages": self.conversation,
                "tools": [{"name": n, "input_schema": s} for n, s in TOOLS.items()],
                "stream": self.stream}  # fmt: skip
        async with httpx.AsyncClient(timeout=None) as client:
            if self.stream:
                async with client.stream("POST", url, json=body, headers=headers) as reply:
                    if reply.status_code != 200:
                        raise Refused(reply.status_code, _said(json.loads(await reply.aread())))
                    lines = [line async for line in reply.aiter_lines()]
                message = streamed_message(iter(lines))
            else:
                reply = await client.post(url, json=body, headers=headers)
                if reply.status_code != 200:
                    raise Refused(reply.status_code, _said(reply.json()))
                message = reply.json()
        content = message["content"]
        self.conversation.append({"role": "assistant", "content": content})
        text = "".join(b.get("text", "") for b in content if b["type"] == "text")
        return Answer(text, [(b["id"], b["name"], b["input"]) for b in content
                             if b["type"] == "tool_use"])  # fmt: skip


def _said(body: dict[str, Any]) -> str:
    return str(body.get("error", {}).get("message", body))
