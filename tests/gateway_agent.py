"""An agent that never asks, for the gateway's tests: it calls its model in one of the three
formats (`chat`, `responses` with the official `openai` SDK; `messages` over raw HTTP, as the
`anthropic` SDK is not installed here), streamed or not, at the endpoint and with the key its
environment gives it, and runs every tool use the answer holds (`Read`, `Write`, `Bash`, named
and shaped as Claude Code's), until an answer holds none. It prints each answer's text.

    python gateway_agent.py FORMAT stream|whole GOAL
    python gateway_agent.py door PATH

What goes wrong is written to the file `GATEWAY_AGENT_LOG` names (the agent exits 1). In `door`
mode it calls nothing: it writes the door the gateway gave it (its endpoints and key) to PATH
as JSON, and exits once PATH.done appears, with the status written in it: a test then drives
the gateway itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

TOOLS = {
    "Read": {"type": "object", "properties": {"file_path": {"type": "string"}},
             "required": ["file_path"]},
    "Write": {"type": "object", "properties": {"file_path": {"type": "string"},
              "content": {"type": "string"}}, "required": ["file_path", "content"]},
    "Bash": {"type": "object", "properties": {"command": {"type": "string"}},
             "required": ["command"]},
}  # fmt: skip
MODEL = "agent-model"  # what the agent asks for; the gateway's upstream answers


def run_tool(name: str, args: dict[str, Any]) -> str:
    try:
        if name == "Read":
            return Path(args["file_path"]).read_text()
        if name == "Write":
            Path(args["file_path"]).write_text(args["content"])
            return f"wrote {args['file_path']}"
        if name == "Bash":
            done = subprocess.run(args["command"], shell=True, capture_output=True, text=True)
            return done.stdout + done.stderr
    except (OSError, KeyError) as exc:
        return f"error: {exc}"
    return f"error: no tool {name}"


def chat(goal: str, stream: bool) -> None:
    from openai import OpenAI

    client = OpenAI()
    tools = [
        {"type": "function", "function": {"name": n, "parameters": s}} for n, s in TOOLS.items()
    ]
    messages: list[dict[str, Any]] = [{"role": "user", "content": goal}]
    while True:
        if stream:
            with client.chat.completions.stream(model=MODEL, messages=messages, tools=tools) as s:
                for _ in s:
                    pass
                message = s.get_final_completion().choices[0].message
        else:
            reply = client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
            message = reply.choices[0].message
        print(message.content or "", flush=True)
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return
        for call in message.tool_calls:
            out = run_tool(call.function.name, json.loads(call.function.arguments or "{}"))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": out})


def responses(goal: str, stream: bool) -> None:
    from openai import OpenAI

    client = OpenAI()
    tools = [{"type": "function", "name": n, "parameters": s} for n, s in TOOLS.items()]
    items: list[dict[str, Any]] = [{"role": "user", "content": goal}]
    while True:
        if stream:
            with client.responses.stream(model=MODEL, input=items, tools=tools) as s:
                for _ in s:
                    pass
                response = s.get_final_response()
        else:
            response = client.responses.create(model=MODEL, input=items, tools=tools)
        print(response.output_text, flush=True)
        calls = [item for item in response.output if item.type == "function_call"]
        items += [item.model_dump(exclude_none=True) for item in response.output]
        if not calls:
            return
        for call in calls:
            out = run_tool(call.name, json.loads(call.arguments or "{}"))
            items.append({"type": "function_call_output", "call_id": call.call_id, "output": out})


def messages(goal: str, stream: bool) -> None:
    import httpx

    url = os.environ["ANTHROPIC_BASE_URL"].rstrip("/") + "/v1/messages"
    headers = {"x-api-key": os.environ["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"}
    tools = [{"name": n, "input_schema": s} for n, s in TOOLS.items()]
    conversation: list[dict[str, Any]] = [{"role": "user", "content": goal}]
    while True:
        body = {"model": MODEL, "max_tokens": 1024, "messages": conversation, "tools": tools,
                "stream": stream}  # fmt: skip
        with httpx.Client(timeout=None) as client:
            if stream:
                with client.stream("POST", url, json=body, headers=headers) as reply:
                    reply.raise_for_status()
                    message = streamed_message(reply.iter_lines())
            else:
                reply = client.post(url, json=body, headers=headers)
                reply.raise_for_status()
                message = reply.json()
        content = message["content"]
        print("".join(b.get("text", "") for b in content if b["type"] == "text"), flush=True)
        conversation.append({"role": "assistant", "content": content})
        uses = [b for b in content if b["type"] == "tool_use"]
        if not uses:
            return
        results = [
            {
                "type": "tool_result",
                "tool_use_id": u["id"],
                "content": run_tool(u["name"], u["input"]),
            }
            for u in uses
        ]
        conversation.append({"role": "user", "content": results})


def streamed_message(lines: Any) -> dict[str, Any]:
    """An Anthropic stream read as the SDK reads it: blocks built from their deltas; `ping`
    and anything unknown skipped; an `error` event raised."""
    message: dict[str, Any] = {}
    partial: dict[int, str] = {}
    for line in lines:
        if not line.startswith("data: "):
            continue
        event = json.loads(line[6:])
        kind = event.get("type")
        if kind == "error":
            raise RuntimeError(f"stream error: {event['error']}")
        if kind == "message_start":
            message = event["message"]
        elif kind == "content_block_start":
            message["content"].append(event["content_block"])
            partial[event["index"]] = ""
        elif kind == "content_block_delta":
            block, delta = message["content"][event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] = block.get("text", "") + delta["text"]
            elif delta["type"] == "input_json_delta":
                partial[event["index"]] += delta["partial_json"]
        elif kind == "content_block_stop":
            block = message["content"][event["index"]]
            if block["type"] == "tool_use":
                block["input"] = json.loads(partial[event["index"]] or "{}")
        elif kind == "message_delta":
            message.update(event["delta"])
    return message


DOOR = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN")  # fmt: skip


def door(path: str) -> int:
    told = {name: os.environ.get(name) for name in DOOR}
    told["pid"] = os.getpid()  # type: ignore[assignment]
    told["environ"] = sorted(os.environ)  # type: ignore[assignment]
    Path(path + ".tmp").write_text(json.dumps(told))
    Path(path + ".tmp").rename(path)
    done = Path(path + ".done")
    while not done.exists():
        time.sleep(0.02)
    return int(done.read_text().strip() or 0)


def main() -> int:
    if sys.argv[1] == "door":
        return door(sys.argv[2])
    fmt, mode, goal = sys.argv[1], sys.argv[2], sys.argv[3]
    try:
        {"chat": chat, "responses": responses, "messages": messages}[fmt](goal, mode == "stream")
    except Exception:
        if log := os.environ.get("GATEWAY_AGENT_LOG"):
            with open(log, "a") as file:
                file.write(traceback.format_exc())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
