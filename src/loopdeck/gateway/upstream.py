"""The gateway's upstream: `--model` (a LiteLLM model name) at `--api-base`, its credentials in
loopdeck's own environment, reached only through LiteLLM (`loopdeck.llm.loader`, the one
configured import: the local price map, no telemetry). Each call is asked whole (the agent's
stream is made from the whole answer once it is decided), never retried here (the agent
retries what it retries), and priced by `litellm.completion_cost`: a model LiteLLM has no
price for costs an unknown amount, never 0.

A failure goes back with the upstream's own status (LiteLLM's Anthropic interface says 500
for any failure it wraps: the status is read from the failure it wraps, so a 529 overloaded
stays 529), its `retry-after`, so the agent's client waits as the upstream asks, and its own
error type, code and message as its reply's body says them (an Anthropic client gets the
`overloaded_error` it would have had, not LiteLLM's wrapping of it).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

from loopdeck.gateway.answer import ApiFormat, Body
from loopdeck.llm.client import classify
from loopdeck.llm.loader import litellm_module

UPSTREAM_FAILED = "upstream_error"
BAD_GATEWAY = 502
PASSED_HEADERS = ("retry-after", "retry-after-ms")  # of an upstream's failure, to the agent
# What LiteLLM takes as its own (where to call, with which key, what to fake) rather than the
# request's: never the agent's to set. `metadata` is the APIs' own field too, and passes.
OWN_FIELDS = frozenset({
    "base_url", "extra_headers", "extra_body", "extra_query", "timeout", "organization",
    "deployment_id", "project",
})  # fmt: skip
OWN_PREFIXES = ("aws_", "vertex_", "azure_", "watsonx_", "litellm_")


@functools.cache
def _litellms_own() -> frozenset[str]:
    litellm_module()  # configured (offline price map) before any of LiteLLM is imported
    from litellm.types.utils import all_litellm_params

    return frozenset(set(all_litellm_params) - {"metadata"}) | OWN_FIELDS


class UpstreamFailed(Exception):
    """The upstream refused or failed a call: its status (502 when it said none), its words,
    and its error's type and code when its reply said them (None: it said none)."""

    def __init__(
        self,
        status: int,
        message: str,
        headers: dict[str, str] | None = None,
        kind: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        self.kind = kind
        self.code = code

    def said(self) -> str:
        """The failure in one line: its status, its type when the upstream named one, its
        words."""
        kind = f" {self.kind}" if self.kind else ""
        return f"HTTP {self.status}{kind}: {self.message}"


@dataclass
class Upstream:
    model: str
    api_base: str | None
    timeout_s: float
    # The answers' model names LiteLLM has no price for: not looked up again on every call.
    unpriced: set[str] = field(default_factory=set)

    def _kwargs(self, headers: dict[str, str]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model, "timeout": self.timeout_s, "num_retries": 0, "max_retries": 0,
            "drop_params": True,
        }  # fmt: skip
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if headers:
            kwargs["extra_headers"] = dict(headers)
        return kwargs

    async def ask(self, api: ApiFormat, body: Body, headers: dict[str, str]) -> Body:
        """The answer, in the agent's format; `UpstreamFailed` naming what the upstream said."""
        litellm = litellm_module()
        try:
            return await api.call(litellm, body, self._kwargs(headers))
        except Exception as exc:  # every failure goes back to the agent in its format
            failed = classify(exc)
            status = _status(exc) or (failed.status if isinstance(failed.status, int) else None)
            error = _error(exc)
            message = str(error.get("message") or "") or str(failed)
            kind, code = error.get("type"), error.get("code")
            raise UpstreamFailed(
                status or BAD_GATEWAY, message, _headers(exc),
                str(kind) if kind else None, str(code) if code else None,
            ) from exc  # fmt: skip

    def reserved(self, body: Body) -> list[str]:
        """The body's fields that would steer LiteLLM itself (its endpoint, its key, a mock
        answer): refused, never passed on."""
        own = _litellms_own()
        return sorted(k for k in body if k in own or k.startswith(OWN_PREFIXES))

    def cost(self, answer: Body) -> float | None:
        """What the answer cost, by LiteLLM's prices for the upstream; None: unknown."""
        named = str(answer.get("model") or self.model)
        if named in self.unpriced:
            return None
        litellm = litellm_module()
        try:
            return float(litellm.completion_cost(completion_response=answer, model=self.model))
        except Exception:  # LiteLLM raises for a model it has no price for: unknown, not 0
            self.unpriced.add(named)
            return None


def _chain(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(found) < 20 and seen not in found:
        found.append(seen)
        seen = seen.__cause__ or seen.__context__
    return found


def _status(exc: BaseException) -> int | None:
    """The upstream's own HTTP status: the one said nearest the reply (LiteLLM's wrappers
    say their own further out)."""
    for seen in reversed(_chain(exc)):
        status = getattr(seen, "status_code", None)
        if not isinstance(status, int):
            status = getattr(getattr(seen, "response", None), "status_code", None)
        if isinstance(status, int) and 400 <= status < 600:
            return status
    return None


def _headers(exc: BaseException) -> dict[str, str]:
    """The upstream's `retry-after` (and `-ms`), wherever in the chain it was kept."""
    for seen in _chain(exc):
        for said in (getattr(seen, "litellm_response_headers", None),
                     getattr(getattr(seen, "response", None), "headers", None)):  # fmt: skip
            try:
                found = {k: str(said[k]) for k in PASSED_HEADERS if said and said.get(k)}
            except (AttributeError, TypeError):
                continue
            if found:
                return found
    return {}


def _error(exc: BaseException) -> dict[str, Any]:
    """The error object of the upstream's reply (`{"type", "message", "code"}`, in whichever
    format the upstream speaks), from the failure nearest the reply that kept it; {}: none."""
    for seen in reversed(_chain(exc)):
        for said in (_reply_json(seen), getattr(seen, "body", None),
                     _json(getattr(seen, "message", None))):  # fmt: skip
            if found := _error_in(said):
                return found
    return {}


def _error_in(said: Any) -> dict[str, Any]:
    if not isinstance(said, dict):
        return {}
    error = said.get("error", said)  # the SDKs' `body` is the error object itself
    if isinstance(error, str):
        return {"message": error}
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error
    return {}


def _reply_json(seen: BaseException) -> Any:
    try:
        reply = getattr(seen, "response", None)
        return reply.json() if reply is not None else None
    except (ValueError, AttributeError, RuntimeError):  # not JSON, not read, not a reply
        return None


def _json(text: Any) -> Any:
    if not isinstance(text, str) or not text.lstrip().startswith("{"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
