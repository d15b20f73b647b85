"""The offline model: a LiteLLM custom provider that plays a scenario's scripts."""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Coroutine, Generator
from typing import Any

from loopdeck.core.scenario import Script
from loopdeck.llm.loader import litellm_module
from loopdeck.llm.script_player import ScriptedReply, play
from loopdeck.tuning.lock_switching import give_way

PROVIDER = "loopdeck-scripted"

_scripts: dict[str, Script] = {}
_keys = itertools.count(1)


def register_script(script: Script, owner: object | None = None) -> str:
    """Hand a script to the provider; the key travels in the call's LiteLLM metadata. The
    entry is released with `owner` (the run's model): the registry holds only the scripts of
    runs still there, however many ran."""
    key = f"script-{next(_keys)}"
    _scripts[key] = script
    if owner is not None:
        weakref.finalize(owner, release_script, key)
    return key


def release_script(key: str) -> None:
    _scripts.pop(key, None)


def registered() -> frozenset[str]:
    """The keys of the scripts the provider holds now (each key is given once)."""
    return frozenset(_scripts)


def handler_class() -> type:
    """The provider that plays scripts, made at first use (it subclasses LiteLLM's)."""
    litellm = litellm_module()
    from litellm.llms.custom_llm import CustomLLMError
    from litellm.types.utils import ChatCompletionMessageToolCall, Function, Usage

    class ScriptedLLM(litellm.CustomLLM):  # type: ignore[misc,name-defined]
        def acompletion(self, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, Any]:
            """The reply is made here, in LiteLLM's thread pool, off the caller's loop as a real
            provider's work is (counting 4,000 messages' tokens is ~2 ms); what is awaited
            only hands the reply (or the error) over."""
            try:
                reply, error = self.completion(*args, **kwargs), None
            except Exception as exc:  # raised where an async provider raises: when awaited
                reply, error = None, exc
            return _HandedOver(reply, error)

        def completion(
            self, model: str, messages: list[dict[str, Any]], *args: Any, **kwargs: Any
        ) -> Any:
            litellm_params = kwargs.get("litellm_params") or {}
            optional = kwargs.get("optional_params") or {}
            meta = litellm_params.get("metadata") or {}
            script = _scripts.get(meta.get("loopdeck_script", ""))
            if script is None:
                raise CustomLLMError(
                    status_code=400, message="scripted model called without a registered script"
                )
            give_way(messages)  # the count below is a provider's work, done in this process
            reply = play(
                script,
                role=meta.get("loopdeck_role", "executor"),
                round_no=int(meta.get("loopdeck_round", 1)),
                messages=messages,
                tools=optional.get("tools") or [],
                react=bool(meta.get("loopdeck_react", False)),
            )
            response = kwargs["model_response"]
            response.model = f"{PROVIDER}/{model}"
            message = response.choices[0].message
            message.content = reply.content
            if reply.tool_calls:
                message.tool_calls = [
                    ChatCompletionMessageToolCall(
                        id=c.id,
                        type="function",
                        function=Function(name=c.name, arguments=c.arguments),
                    )
                    for c in reply.tool_calls
                ]
                response.choices[0].finish_reason = "tool_calls"
            response.usage = Usage(
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                total_tokens=reply.prompt_tokens + reply.completion_tokens,
            )
            _priced(response, meta.get("loopdeck_price"), reply)
            return response

    return ScriptedLLM


def _priced(response: Any, price: tuple[float, float] | None, reply: ScriptedReply) -> None:
    """The reply priced by the provider, at the script's per-token price, as a provider that
    knows its price says it: LiteLLM takes a reply's stamped cost as it is, where it would
    otherwise look the model up in its price map (a third of its own work on a call)."""
    if price is not None:
        input_cost, output_cost = price
        response._hidden_params["response_cost"] = (
            reply.prompt_tokens * input_cost + reply.completion_tokens * output_cost
        )


class _HandedOver(Coroutine[Any, Any, Any]):
    """What `acompletion` returns: the reply made in LiteLLM's pool (or its error, raised
    where an async provider raises it), handed over when awaited. A coroutine to LiteLLM
    (`asyncio.iscoroutine`), but not a native one: when a deadline or a kill cuts the call
    before LiteLLM awaits it, it is dropped without "coroutine was never awaited"."""

    def __init__(self, reply: Any, error: Exception | None) -> None:
        self._reply = reply
        self._error = error

    def send(self, value: Any) -> Any:
        if self._error is not None:
            raise self._error
        raise StopIteration(self._reply)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        raise val if val is not None else typ

    def close(self) -> None:
        self._reply = self._error = None

    def __await__(self) -> Generator[Any, None, Any]:
        if self._error is not None:
            raise self._error
        return self._reply
        yield  # a generator that never suspends: the reply is already here


_registered = False


def ensure_registered() -> None:
    global _registered
    if _registered:
        return
    litellm = litellm_module()
    handler = handler_class()()
    litellm.custom_provider_map = [
        *[p for p in litellm.custom_provider_map if p.get("provider") != PROVIDER],
        {"provider": PROVIDER, "custom_handler": handler},
    ]
    from litellm.utils import custom_llm_setup

    custom_llm_setup()
    _registered = True
