"""LiteLLM's passes over the conversation, at a fraction of their cost per message.

Every call through `litellm.acompletion` walks the whole conversation three times before the
provider sees it, so a call at 500 messages cost 1.8x a call at 20:

- `_remove_thought_signatures_from_messages` (in `acompletion`'s `function_setup`, on the
  caller's loop) copies each message and tool call;
- `validate_and_fix_openai_messages` copies them again and drops fields that are None;
- `messages_have_pdf_file_part` looks for PDF parts in each message's content.

And after the call it builds a logging payload for its success callbacks (the call's
standard logging object, its cost computed again, metadata), on the caller's loop, a third of a
call's own CPU at 20 messages: with no callback registered anywhere it is handed to nobody.

Each pass here does what LiteLLM's own does (returns the same, changes what it is given in
the same way, raises the same) with fewer calls and checks per message; the success log is
left unbuilt only when nothing could hear it (`schedule_success_log`). It handles messages
that are plain dicts, which is what loopdeck sends; given anything else it hands the whole
call to LiteLLM's own function. `tests/test_litellm_passes.py` compares the two on generated
conversations.

A pass replaces LiteLLM's function only where the sources it was written against are still
there unchanged (`REPLACEMENTS`: the sha256 of LiteLLM's function and of the helpers whose work
the pass does itself): a LiteLLM whose functions differ keeps its own, and `install()` says
which. `LOOPDECK_STOCK_LITELLM=1` keeps all of LiteLLM's own.

The validation runs in LiteLLM's thread pool, in the `completion` that `acompletion` hands
there: over a long conversation it first gives the interpreter's lock way to the console
(`loopdeck.tuning.lock_switching.give_way`).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from loopdeck import settings
from loopdeck.tuning.lock_switching import give_way

Pass = Callable[..., Any]


def remove_thought_signatures(messages: list[Any], separator: str) -> Any:
    """`litellm.utils._remove_thought_signatures_from_messages`: copies of the messages and
    of their tool calls, with a Gemini thought signature cut off each tool call id."""
    if not _all_dicts(messages):
        return _stock["thought_signatures"](messages, separator)
    processed = list(map(dict.copy, messages))
    for copy in processed:
        role = copy.get("role")
        if role == "assistant":
            calls = copy.get("tool_calls")
            if not isinstance(calls, list):
                continue
            if role.__class__ is not str:  # it may be equal to "tool" as well
                return _stock["thought_signatures"](messages, separator)
            copied_calls = []
            for call in calls:
                if type(call) is not dict:
                    return _stock["thought_signatures"](messages, separator)
                call = call.copy()
                call_id = call.get("id")
                if isinstance(call_id, str) and separator in call_id:
                    call["id"] = call_id.split(separator, 1)[0]
                copied_calls.append(call)
            copy["tool_calls"] = copied_calls
        elif role == "tool":
            call_id = copy.get("tool_call_id")
            if isinstance(call_id, str) and separator in call_id:
                copy["tool_call_id"] = call_id.split(separator, 1)[0]
    return processed


def validate_and_fix_messages(messages: list[Any]) -> Any:
    """`litellm.utils.validate_and_fix_openai_messages`: a message without a role is the
    assistant's, its tool calls are copied (in place, as LiteLLM does), and each message is
    returned as a copy without the fields that are None."""
    if not _all_dicts(messages):
        return _stock["validate"](messages=messages)
    give_way(messages)
    fixed: list[Any] = []
    user_parts = False
    for message in messages:
        role = message.get("role")
        if not role:
            role = message["role"] = "assistant"
        calls = message.get("tool_calls")
        if calls:
            copied_calls = []
            if type(calls) is list:
                for call in calls:
                    if type(call) is not dict:
                        break
                    copied_calls.append(call.copy())
                else:
                    message["tool_calls"] = copied_calls
            if message["tool_calls"] is calls:  # not a list of plain dicts
                message["tool_calls"] = _stock["jsonify_tools"](tools=calls)
        cleaned = message.copy()
        for key, value in message.items():
            if value is None:
                del cleaned[key]
        if role == "user" and not isinstance(cleaned.get("content"), str | None):
            user_parts = True
        fixed.append(cleaned)
    if user_parts:  # content parts: LiteLLM checks their types (and says which is wrong)
        return _stock["validate_user"](messages=fixed)
    return fixed


def messages_have_pdf(messages: Any) -> bool:
    """`messages_have_pdf_file_part`: only a message whose content is a list of parts can
    hold a PDF, so only those are looked into (by LiteLLM's own check)."""
    has_pdf = _stock["message_has_pdf"]
    for message in messages:
        if type(message) is not dict:
            if has_pdf(message):
                return True
        elif isinstance(message.get("content"), list) and has_pdf(message):
            return True
    return False


def schedule_success_log(
    *, logging_obj: Any, result: object, start_time: Any, end_time: Any,
    is_completion_with_fallbacks: bool,
) -> None:  # fmt: skip
    """`litellm.utils._schedule_async_success_logging`: the call's success log claimed, as
    LiteLLM's own claims it (so an outer wrapper schedules none either), and built only when
    something could hear it: a callback in any of LiteLLM's lists or the call's own, a
    deferred log (its proxy), a streamed reply, a cache, or the payload printed by request
    (`LITELLM_PRINT_STANDARD_LOGGING_PAYLOAD`). Else LiteLLM's handler would build the payload
    and call no one; the reply's cost is set before this, in its hidden params."""
    if _heard(logging_obj):
        _stock["schedule_success_log"](
            logging_obj=logging_obj, result=result, start_time=start_time,
            end_time=end_time, is_completion_with_fallbacks=is_completion_with_fallbacks,
        )  # fmt: skip
        return
    logging_obj.claim_async_success_log()


def _heard(logging_obj: Any) -> bool:
    litellm = importlib.import_module("litellm")
    return bool(
        litellm.logging_callback_manager.get_all_callbacks()
        or getattr(logging_obj, "dynamic_success_callbacks", None)
        or getattr(logging_obj, "dynamic_async_success_callbacks", None)
        or getattr(logging_obj, "defer_async_logging", True)
        or getattr(logging_obj, "stream", True) is True
        or litellm.cache is not None
        or os.environ.get("LITELLM_PRINT_STANDARD_LOGGING_PAYLOAD")
    )


_DICT_ONLY = {dict}


def _all_dicts(items: list[Any]) -> bool:
    """Every item is a plain dict (not a subclass, whose copy or get may be its own)."""
    return not set(map(type, items)) - _DICT_ONLY


UTILS = "litellm.utils"
MAIN = "litellm.main"
PROMPTS = "litellm.litellm_core_utils.prompt_templates.common_utils"
LOGGING = "litellm.litellm_core_utils.litellm_logging"
CALLBACKS = "litellm.litellm_core_utils.logging_callback_manager"


@dataclass(frozen=True)
class Replacement:
    """A pass, the function it replaces (`module.attribute`), and the LiteLLM functions it
    was written against: the replaced one and those whose work it does itself."""

    module: str
    attribute: str
    replacement: Pass
    follows: tuple[tuple[str, str], ...]
    digest: str  # sha256 of their sources, in that order


REPLACEMENTS: dict[str, Replacement] = {
    "thought_signatures": Replacement(
        UTILS,
        "_remove_thought_signatures_from_messages",
        remove_thought_signatures,
        follows=(
            (UTILS, "_remove_thought_signatures_from_messages"),
            (UTILS, "_process_assistant_message_tool_calls"),
            (UTILS, "_process_tool_message_id"),
        ),
        digest="305aa8f0d2f4dd938e17f3a6981ef0431148ea3394cf6c564342f015e861145e",
    ),
    "validate": Replacement(
        MAIN,
        "validate_and_fix_openai_messages",
        validate_and_fix_messages,
        follows=(
            (UTILS, "validate_and_fix_openai_messages"),
            (UTILS, "jsonify_tools"),
            (UTILS, "convert_to_dict"),
            (UTILS, "cleanup_none_field_in_message"),
            (UTILS, "validate_chat_completion_user_messages"),
        ),
        digest="280278cb6c30324bfc638c40a6140b5d339ed5b020ab623ce5bb90314eae8f6f",
    ),
    "pdf": Replacement(
        MAIN,
        "messages_have_pdf_file_part",
        messages_have_pdf,
        follows=(
            (PROMPTS, "messages_have_pdf_file_part"),
            (PROMPTS, "_has_pdf_file_part"),
            (PROMPTS, "content_parts"),
        ),
        digest="ff1182f501d47943b49a1e611025b14cb6964db7bfa38575b004a7648a5c77f2",
    ),
    "success_log": Replacement(
        UTILS,
        "_schedule_async_success_logging",
        schedule_success_log,
        follows=(
            (UTILS, "_schedule_async_success_logging"),
            (UTILS, "dispatch_success_logging"),
            (LOGGING, "Logging._async_success_handler_body"),
            (LOGGING, "Logging._get_completed_success_callbacks"),
            (LOGGING, "Logging.get_combined_callback_list"),
            (CALLBACKS, "LoggingCallbackManager.get_all_callbacks"),
        ),
        digest="900b9e667f028841f54e11e5c32e17243707643daada734439973695f38b81e5",
    ),
}
# LiteLLM's own functions the passes hand unusual input to, by the names the passes use.
_STOCK_PLACES: dict[str, tuple[str, str]] = {
    "thought_signatures": (UTILS, "_remove_thought_signatures_from_messages"),
    "validate": (UTILS, "validate_and_fix_openai_messages"),
    "jsonify_tools": (UTILS, "jsonify_tools"),
    "validate_user": (UTILS, "validate_chat_completion_user_messages"),
    "message_has_pdf": (PROMPTS, "_has_pdf_file_part"),
    "schedule_success_log": (UTILS, "_schedule_async_success_logging"),
}
_stock: dict[str, Pass] = {}
_installed: dict[str, tuple[ModuleType, Pass]] = {}  # name: (module, LiteLLM's function)


def sources_digest(places: tuple[tuple[str, str], ...]) -> str | None:
    """sha256 of the functions' sources, or None if one is gone or has no source."""
    digest = hashlib.sha256()
    for module_name, attribute in places:
        function: Any = importlib.import_module(module_name)
        for name in attribute.split("."):  # a method: "Class.method"
            function = getattr(function, name, None)
        if function is None or getattr(function, "__loopdeck_pass__", False):
            return None
        try:
            digest.update(inspect.getsource(function).encode())
        except (OSError, TypeError):  # a frozen or stripped install
            return None
    return digest.hexdigest()


def install() -> list[str]:
    """Puts each pass in place of LiteLLM's function. Returns the names of those left out:
    LiteLLM's functions are not the ones they were written against (or are gone)."""
    if settings.current().stock_litellm:
        return sorted(REPLACEMENTS)
    left_out: list[str] = []
    for name, replacement in REPLACEMENTS.items():
        if name in _installed:
            continue
        if sources_digest(replacement.follows) != replacement.digest:
            left_out.append(name)
            continue
        for stock, (module_name, attribute) in _STOCK_PLACES.items():
            _stock.setdefault(stock, getattr(importlib.import_module(module_name), attribute))
        module = importlib.import_module(replacement.module)
        _installed[name] = (module, getattr(module, replacement.attribute))
        setattr(module, replacement.attribute, replacement.replacement)
    return left_out


def uninstall() -> None:
    """LiteLLM's own functions back in place (for tests and A/B benches)."""
    for name, (module, function) in list(_installed.items()):
        setattr(module, REPLACEMENTS[name].attribute, function)
        del _installed[name]


def installed() -> list[str]:
    return sorted(_installed)


def replaced(name: str) -> Pass:
    """LiteLLM's own function that the installed pass `name` stands in for."""
    if name not in _installed:
        raise KeyError(f"the pass {name!r} is not installed (installed: {installed()})")
    return _installed[name][1]


def in_place(name: str) -> Pass:
    """The function LiteLLM calls now where the pass `name` goes: the pass, or its own."""
    replacement = REPLACEMENTS[name]
    function: Pass = getattr(importlib.import_module(replacement.module), replacement.attribute)
    return function


for _replacement in REPLACEMENTS.values():
    _replacement.replacement.__loopdeck_pass__ = True  # type: ignore[attr-defined]
