"""What the runtime needs from a model: one request in, one reply out. LiteLLM lives in llm/."""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from loopdeck.core.text import escape_surrogates

Role = Literal["planner", "executor"]


class ModelRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: Role
    round: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = Field(default_factory=list)
    timeout_s: float = 60.0
    examples: list[str] = Field(default_factory=list)


class RawToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str

    @field_validator("id", "name", "arguments")
    @classmethod
    def _storable(cls, text: str) -> str:
        return escape_surrogates(text)


class ModelReply(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    content: str | None = None
    tool_calls: list[RawToolCall] = Field(default_factory=list)
    # None: the provider did not say (unknown, never 0).
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0
    cost_usd: float | None = None
    latency_ms: float = 0.0

    @field_validator("model", "content")
    @classmethod
    def _storable(cls, text: str | None) -> str | None:
        return None if text is None else escape_surrogates(text)

    @property
    def total_tokens(self) -> int | None:
        """The reply's tokens; None when its provider did not say them."""
        if self.prompt_tokens is None or self.completion_tokens is None:
            return None
        return self.prompt_tokens + self.completion_tokens

    def as_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in self.tool_calls
            ]
        return message


class ProviderError(Exception):
    """A model call that failed; `retryable` says whether backing off may help."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        context_overflow: bool = False,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.context_overflow = context_overflow


class ModelClient(Protocol):
    name: str
    context_window: int | None

    async def complete(self, request: ModelRequest) -> ModelReply: ...

    def count_tokens(self, messages: list[dict[str, Any]]) -> int: ...
