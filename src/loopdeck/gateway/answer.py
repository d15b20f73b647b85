"""What the gateway knows of a model call whatever its format: the tool uses an answer holds,
what is decided for each before the agent sees it, and the `ApiFormat` each of the three
formats implements (`chat_format.py`, `responses_format.py`, `messages_format.py`).

An answer is kept as the JSON the agent will read (a dict in its format); the formats read
it and change it, LiteLLM's adapters make and stream it (each imported after
`litellm_module()`, which configures LiteLLM first: its local price map, never the network's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

Body = dict[str, Any]


@dataclass(frozen=True)
class ToolUse:
    """A tool use in the model's answer: its id (what the agent answers with), its tool's
    name, and its input (a JSON object, or a freeform tool's text); `fixed`: why an edit of
    it cannot be carried out ("": it can)."""

    use_id: str
    name: str
    input: dict[str, Any] | str
    fixed: str = ""


@dataclass(frozen=True)
class ToolResult:
    """A tool use's result as the agent sends it back in its next request."""

    use_id: str
    text: str
    is_error: bool = False


@dataclass(frozen=True)
class Release:
    """The tool use goes to the agent; `edited`: with the operator's input instead."""

    edited: dict[str, Any] | str | None = None


@dataclass(frozen=True)
class Replace:
    """The tool use is taken out of the answer; `text` stands in its place."""

    text: str


Verdict = Release | Replace


@dataclass(frozen=True)
class Usage:
    """The tokens one answer spent, as its usage says: the prompt's (what was read from a
    cache and written to one included) and the completion's."""

    prompt: int
    completion: int

    @property
    def total(self) -> int:
        return self.prompt + self.completion


def split_usage(prompt: Any, completion: Any, total: Any) -> Usage | None:
    """The split from a usage's parts; a total with a part missing gives the rest to the
    other, a total alone is the prompt's; None: no figure at all."""
    if isinstance(prompt, int) and isinstance(completion, int):
        return Usage(prompt, completion)
    if not isinstance(total, int):
        return None
    if isinstance(completion, int):
        return Usage(total - completion, completion)
    return Usage(prompt, total - prompt) if isinstance(prompt, int) else Usage(total, 0)


class ApiFormat(Protocol):
    """One of the three formats agents send: its paths, how LiteLLM calls it upstream, and
    how an answer in it is read, changed and sent."""

    name: str

    async def call(self, litellm: Any, body: Body, upstream: dict[str, Any]) -> Body:
        """The answer to `body` from the upstream (`upstream`: model, api_base, timeout…),
        asked whole (never streamed), as the agent's format's JSON."""

    def refused(self, body: Body) -> str | None:
        """Why the request is refused before it goes upstream (it asks for what the gateway
        cannot decide), or None."""

    def refused_answer(self, answer: Body) -> str | None:
        """Why the upstream's answer is not delivered (it adds what a request would be refused
        for), or None."""

    def tool_uses(self, answer: Body) -> list[ToolUse]: ...

    def schemas(self, body: Body) -> dict[str, Any]:
        """The input schema of each tool the request declares, by name."""

    def unseen(self, body: Body, uses: list[ToolUse]) -> frozenset[str]:
        """The tools of `uses` the request brought without declaring them (a stored prompt's,
        kept by the upstream): loopdeck cannot say what they are, so each is a write."""

    def decided(self, answer: Body, verdicts: dict[str, Verdict]) -> Body:
        """The answer with each tool use released, edited or replaced by text."""

    def retold(self, body: Body, answer: Body, results: dict[str, str]) -> Body:
        """The request `body` asked again, the model told what became of its tool uses: its
        answer as its turn, each tool use answered by the result in `results` (by id)."""

    def prefixed(self, answer: Body, text: str) -> Body:
        """The answer with `text` said first (what the gateway told the model before it)."""

    def usage(self, answer: Body) -> Usage | None:
        """The tokens the call spent, prompt and completion, from the answer's usage; None: it
        says none."""

    def said(self, answer: Body) -> str:
        """The answer's text."""

    def results(self, body: Body) -> list[ToolResult]:
        """The tool results a request carries."""

    def ran(self, answer: Body) -> list[ToolResult]:
        """The results an answer carries of calls its upstream ran once the agent approved
        them (a remote MCP server's)."""

    def ran_unasked(self, answer: Body) -> list[tuple[ToolUse, ToolResult]]:
        """The calls its upstream ran before anyone saw the answer (a remote MCP server that
        runs its calls unasked), each with its result."""

    def final(self, text: str, model: str) -> Body:
        """A text answer with no tool use: what a stopped run answers."""

    def frames(self, answer: Body) -> list[bytes]:
        """The answer as the format streams it (server-sent events)."""

    def keepalive(self) -> bytes:
        """What keeps a held stream's connection alive (an SSE comment, a `ping`)."""

    def error(self, status: int, kind: str, message: str, code: str | None = None) -> Body:
        """The format's error body (`code`: the OpenAI formats', else its type)."""

    def stream_error(self, kind: str, message: str, code: str | None = None) -> bytes:
        """An error said inside a stream already started."""


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: `data` as JSON (a string as it is), `event` its name."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


SSE_COMMENT = b": keep-alive\n\n"


def parsed_input(raw: Any) -> dict[str, Any] | str:
    """A tool use's arguments as JSON text: the object, or the text itself when it is not
    one (a freeform tool's input)."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return raw
        return value if isinstance(value, dict) else raw
    return {} if raw is None else str(raw)


def present(block: dict[str, Any]) -> dict[str, Any]:
    """A part of an answer as a request carries it back: its fields that say something."""
    return {key: value for key, value in block.items() if value is not None}


def input_text(value: dict[str, Any] | str) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def result_text(content: Any) -> str:
    """A tool result's content as text: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                text = part.get("text") or part.get("output") or ""
                parts.append(text if isinstance(text, str) else json.dumps(text))
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return "" if content is None else json.dumps(content)
