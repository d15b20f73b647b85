"""The runtime's ModelClient over `litellm.acompletion`, scripted or real."""

from __future__ import annotations

import time
from typing import Any

from loopdeck.core.model import ModelReply, ModelRequest, ProviderError, RawToolCall
from loopdeck.core.scenario import Script, ScriptedPrice
from loopdeck.llm.loader import litellm_module
from loopdeck.llm.scripted_provider import PROVIDER, ensure_registered, register_script

SCRIPTED = "scripted"

_RETRYABLE = (
    "RateLimitError",
    "Timeout",
    "APIConnectionError",
    "InternalServerError",
    "ServiceUnavailableError",
)


def classify(exc: Exception) -> ProviderError:
    """Map a LiteLLM exception to retryable or not, keeping the provider's message."""
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    retryable = name in _RETRYABLE or (isinstance(status, int) and status >= 500)
    if name in ("BadRequestError", "AuthenticationError", "PermissionDeniedError", "NotFoundError"):
        retryable = False
    return ProviderError(f"{name}: {exc}", retryable=retryable, status=status)


class LiteLLMModel:
    """A model reached through LiteLLM. `scripted` plays the env's script offline."""

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        script: Script | None = None,
        price: ScriptedPrice | None = None,
        react: bool = False,
    ) -> None:
        self.name = model
        self.api_base = api_base
        self.react = react
        self.price = price or ScriptedPrice()
        self._script_key: str | None = None
        if model == SCRIPTED:
            if script is None:
                raise ValueError("the scripted model needs a script (--script NAME)")
            self._script_key = register_script(script)

    def _request_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"messages": request.messages, "timeout": request.timeout_s}
        if request.tools:
            kwargs["tools"] = request.tools
        if self._script_key is not None:
            ensure_registered()
            kwargs["model"] = f"{PROVIDER}/{request.role}"
            kwargs["metadata"] = {
                "loopdeck_script": self._script_key,
                "loopdeck_role": request.role,
                "loopdeck_round": request.round,
                "loopdeck_react": self.react,
            }
        else:
            kwargs["model"] = self.name
            if self.api_base:
                kwargs["api_base"] = self.api_base
        return kwargs

    def _cost(self, litellm: Any, response: Any) -> float | None:
        try:
            if self._script_key is not None:
                return float(
                    litellm.completion_cost(
                        completion_response=response,
                        custom_cost_per_token={
                            "input_cost_per_token": self.price.input_per_million / 1e6,
                            "output_cost_per_token": self.price.output_per_million / 1e6,
                        },
                    )
                )
            return float(litellm.completion_cost(completion_response=response))
        except Exception:  # LiteLLM raises when the model has no known price: cost is unknown
            return None

    async def complete(self, request: ModelRequest) -> ModelReply:
        litellm = litellm_module()
        kwargs = self._request_kwargs(request)
        started = time.perf_counter()
        try:
            response = await litellm.acompletion(**kwargs)
        except Exception as exc:  # every provider failure is classified, none is swallowed
            raise classify(exc) from exc
        latency_ms = (time.perf_counter() - started) * 1000
        message = response.choices[0].message
        calls = [
            RawToolCall(id=c.id, name=c.function.name or "", arguments=c.function.arguments or "")
            for c in (message.tool_calls or [])
        ]
        usage = getattr(response, "usage", None)
        return ModelReply(
            model=str(response.model or self.name),
            content=message.content,
            tool_calls=calls,
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            cost_usd=self._cost(litellm, response),
            latency_ms=latency_ms,
        )
