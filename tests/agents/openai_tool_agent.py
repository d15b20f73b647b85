"""An agent in the OpenAI format, as people write one with the `openai` SDK: it asks its model
(Chat Completions, at `OPENAI_BASE_URL` with `OPENAI_API_KEY`, as the SDK reads them) what to do,
runs the tool calls the answer contains itself -- `read_file` and `write_file` on paths under
its working directory, `list_files` of it, `run_command` in a shell there -- sends their
results back, and loops until an answer calls no tool. It asks nobody before it writes:
whatever supervises it must do so at the model boundary (`loopdeck gateway`).

    python openai_tool_agent.py [--stream] [--model NAME] [--max-steps N] GOAL

Its last answer's text goes to stdout; a model call that fails (the API's error, a refused
connection) ends it with exit 2 and the error on stderr, as the SDK raised it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai

SYSTEM = "You are a coding agent. Use the tools to read and write files in the working folder."
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "The text of a file in the working folder.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a file in the working folder, replacing what it held.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_files",
            "description": "The files in the working folder.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_command",
            "description": "Run a shell command in the working folder: its exit code and output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
]
COMMAND_TIMEOUT_S = 120


def inside(path: str) -> Path:
    """`path` under the working folder; one that leaves it is refused."""
    root = Path.cwd().resolve()
    found = (root / path).resolve()
    if not found.is_relative_to(root):
        raise ValueError(f"{path}: outside the working folder")
    return found


def run_tool(name: str, raw: str) -> str:
    """What the tool call did, as the model is told it (an error is told, not raised)."""
    try:
        args = json.loads(raw or "{}")
        if name == "read_file":
            return inside(args["path"]).read_text(encoding="utf-8")
        if name == "write_file":
            target = inside(args["path"])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(args["content"], encoding="utf-8")
            return f"wrote {len(args['content'])} characters to {args['path']}"
        if name == "list_files":
            root = Path.cwd()
            return "\n".join(
                sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
            )
        if name == "run_command":
            done = subprocess.run(
                args["command"], shell=True, capture_output=True, text=True,
                timeout=COMMAND_TIMEOUT_S, check=False,
            )  # fmt: skip
            return f"exit {done.returncode}\n{done.stdout}{done.stderr}"
        return f"error: no tool named {name!r}"
    except (OSError, ValueError, KeyError, TypeError, subprocess.TimeoutExpired) as error:
        return f"error: {error}"


def ask(client: openai.OpenAI, model: str, messages: list[dict[str, Any]], stream: bool) -> Any:
    """The model's answer as one assistant message: {"content", "tool_calls"}."""
    if not stream:
        done = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)  # type: ignore[arg-type]
        message = done.choices[0].message
        calls = [
            {"id": c.id, "type": "function",
             "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls or []
        ]  # fmt: skip
        return {"content": message.content or "", "tool_calls": calls}
    text: list[str] = []
    calls_by_index: dict[int, dict[str, Any]] = {}
    chunks = client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True},
    )  # fmt: skip
    for chunk in chunks:
        for choice in chunk.choices:
            delta = choice.delta
            text.append(delta.content or "")
            for part in delta.tool_calls or []:
                call = calls_by_index.setdefault(
                    part.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                call["id"] = part.id or call["id"]
                if part.function is not None:
                    call["function"]["name"] += part.function.name or ""
                    call["function"]["arguments"] += part.function.arguments or ""
    return {
        "content": "".join(text),
        "tool_calls": [calls_by_index[k] for k in sorted(calls_by_index)],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("goal")
    parser.add_argument("--stream", action="store_true", help="ask for streamed answers")
    parser.add_argument("--model", default="gpt-agent", help="the model name it asks for")
    parser.add_argument("--max-steps", type=int, default=50, help="model calls at most")
    options = parser.parse_args(argv)
    client = openai.OpenAI()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": options.goal},
    ]
    for _ in range(options.max_steps):
        try:
            answer = ask(client, options.model, messages, options.stream)
        except openai.OpenAIError as error:
            print(f"model call failed: {error}", file=sys.stderr)
            return 2
        calls = answer["tool_calls"]
        messages.append({"role": "assistant", "content": answer["content"] or None,
                         **({"tool_calls": calls} if calls else {})})  # fmt: skip
        if not calls:
            print(answer["content"])
            return 0
        for call in calls:
            result = run_tool(call["function"]["name"], call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    print(f"stopped after {options.max_steps} model calls", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
