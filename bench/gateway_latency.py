"""The latency `loopdeck gateway` adds to a model call it does not hold (issue 39), against
LiteLLM alone on the same loopback upstream.

Three doors answer the same Chat Completions requests, timed by one client (this file run as
`--client`, httpx, connections kept alive, the clock stopped once the whole answer, or the
stream's last event, is read) that takes the doors in turn, call by call:

- upstream: a loopback OpenAI API (this file as `--upstream`, aiohttp): a text answer, or a
  `read_file` tool call when the user asks to read (each a file of its own, so no read repeats
  one from the same state), with its usage; streamed when asked;
- LiteLLM alone: the request handed to `litellm.acompletion` against the upstream, its answer
  sent back (whole, or its chunks as server-sent events): LiteLLM, imported and set as loopdeck
  imports it, behind the smallest door (this file as `--litellm`, aiohttp);
- the gateway: `loopdeck gateway --approve auto ... -- python gateway_latency.py --client ...`:
  the client is the gateway's agent, given its door and token in OPENAI_BASE_URL and
  OPENAI_API_KEY, and each call through it a recorded model call of a run (a SQLite store in a
  temporary folder); the other two doors' URLs are its arguments.

For each kind of call (a text answer, a read; whole, streamed), CALLS calls after WARM ones;
the figure is the gateway's p50 less LiteLLM alone's. Target (issue 39): <= 5 ms, for whole
answers: a streamed one is printed but not held to it, as the gateway asks the upstream for the
whole answer (it must see every tool use before the agent does) and streams it to the agent
itself, where LiteLLM alone streams the upstream's chunks through. The upstream alone (the
client straight to it) is printed too.

    .venv/bin/python bench/gateway_latency.py [CALLS] [WARM]
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from targets_table import Row, print_table

HERE = Path(__file__).resolve()
TARGET_MS = 5.0
MODEL = "openai/bench-upstream"  # LiteLLM's name for the upstream, in the gateway and alone
KINDS = (("text", False), ("read", False), ("text", True), ("read", True))
TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "The text of a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]},
    }},
]  # fmt: skip
USAGE = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
READY = "ready "


# -- the upstream ---------------------------------------------------------------------------------
def upstream_reply(body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The text and tool calls answering `body`: a read of the file the user names, or text."""
    said = str(body["messages"][-1].get("content") or "")
    if said.startswith("read "):
        call = {
            "id": f"call_{abs(hash(said))}",
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": said[5:]})},
        }
        return "", [call]  # fmt: skip
    return "Hello.", []


def chunks(model: str, text: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": model}
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": text}]
    deltas += [{"tool_calls": [{"index": i, **call}]} for i, call in enumerate(calls)]
    out = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    finish = "tool_calls" if calls else "stop"
    out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    out.append({**base, "choices": [], "usage": USAGE})
    return out


async def serve_upstream() -> None:
    from aiohttp import web

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        text, calls = upstream_reply(body)
        model = str(body["model"])
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = calls
            finish = "tool_calls" if calls else "stop"
            return web.json_response({
                "id": "chatcmpl-bench", "object": "chat.completion", "created": 1, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": USAGE,
            })  # fmt: skip
        frames = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks(model, text, calls))
        return web.Response(text=frames + "data: [DONE]\n\n", content_type="text/event-stream")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    await announce(app)


async def announce(app: Any) -> None:
    """Serve `app` on a free loopback port, say the port on stdout, run until killed."""
    from aiohttp import web

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    print(f"{READY}{port}", flush=True)
    await asyncio.Event().wait()


# -- LiteLLM alone ---------------------------------------------------------------------------------
async def serve_litellm(upstream: str) -> None:
    from aiohttp import web

    from loopdeck.llm.loader import litellm_module

    litellm = litellm_module()  # as loopdeck imports it: offline, its logging settings

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        kwargs = {k: v for k, v in body.items() if k != "model"}
        answer = await litellm.acompletion(
            model=MODEL, api_base=upstream, api_key="sk-bench-upstream", **kwargs
        )
        if not body.get("stream"):
            return web.json_response(answer.model_dump())
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        async for chunk in answer:
            await response.write(f"data: {chunk.model_dump_json()}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    await announce(app)


# -- the client ------------------------------------------------------------------------------------
def client(out: Path, calls: int, warm: int, upstream: str, alone: str) -> None:
    """Time CALLS calls of each kind (after WARM) at each door, the doors taken in turn call by
    call (so a load that comes and goes falls on all three alike): the upstream, LiteLLM alone
    and the gateway (OPENAI_BASE_URL, with its token in OPENAI_API_KEY). Their ns into `out`."""
    import httpx

    doors = {"upstream": upstream, "alone": alone, "gateway": os.environ["OPENAI_BASE_URL"]}
    headers = {"authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"}
    found: dict[str, dict[str, list[int]]] = {door: {} for door in doors}
    with httpx.Client(timeout=120) as http:
        for kind, stream in KINDS:
            name = f"{kind}{' streamed' if stream else ''}"
            for i in range(warm + calls):
                order = list(doors.items())
                order = order[i % 3 :] + order[: i % 3]
                for door, base in order:
                    took = timed_call(http, base, headers, kind, stream, f"{door}-{name}-{i}")
                    if i >= warm:
                        found[door].setdefault(name, []).append(took)
    out.write_text(json.dumps(found))


def timed_call(
    http: Any, base: str, headers: dict[str, str], kind: str, stream: bool, tag: str
) -> int:
    """One call's ns, from its send to its whole answer read."""
    said = f"read file-{tag}.txt" if kind == "read" else f"say hi {tag}"
    body: dict[str, Any] = {
        "model": "bench-agent", "messages": [{"role": "user", "content": said}],
        "tools": TOOLS, "stream": stream,
    }  # fmt: skip
    if stream:
        body["stream_options"] = {"include_usage": True}
    url = base.rstrip("/") + "/chat/completions"
    started = time.perf_counter_ns()
    answer = http.post(url, json=body, headers=headers)
    answer.read()
    took = time.perf_counter_ns() - started
    if answer.status_code != 200 or (stream and b"[DONE]" not in answer.content):
        raise SystemExit(f"{url}: {answer.status_code} {answer.text[:500]}")
    return int(took)


# -- the measure -----------------------------------------------------------------------------------
@contextmanager
def server(*args: str) -> Iterator[str]:
    """This file run as a server (`args`), its base URL once it says its port."""
    proc = subprocess.Popen([sys.executable, str(HERE), *args], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith(READY):
            raise SystemExit(f"{args[0]}: the server did not start")
        yield f"http://127.0.0.1:{line[len(READY) :].strip()}/v1"
    finally:
        proc.kill()
        proc.wait()


def timed(upstream: str, alone: str, folder: Path, calls: int, warm: int) -> Any:
    """The client as the gateway's agent (every call through the gateway a recorded model call
    of a run), timing the three doors: its figures, and the gateway's run as it ended."""
    work, out = folder / "work", folder / "times.json"
    work.mkdir()
    (work / "README.md").write_text("a folder the agent reads\n")
    many = str(10**9)
    command = [
        sys.executable, "-m", "loopdeck", "gateway", "--goal", "answer quickly",
        "--workdir", str(work), "--model", MODEL, "--api-base", upstream,
        "--headless", "--json", "--approve", "auto", "--db", str(folder / "bench.db"),
        "--max-turns", many, "--max-tool-calls", many, "--max-tokens", many,
        "--max-cost", many, "--deadline", many,
        "--", sys.executable, str(HERE), "--client", str(out), str(calls), str(warm),
        upstream, alone,
    ]  # fmt: skip
    environ = {**os.environ, "OPENAI_API_KEY": "sk-bench-upstream"}
    done = subprocess.run(command, env=environ, capture_output=True, text=True, check=False)
    if not out.exists():
        raise SystemExit(f"the gateway's run timed nothing:\n{done.stdout}\n{done.stderr}")
    return dict(json.loads(out.read_text())), done


def _ms(ns: float) -> float:
    return ns / 1e6


def rows(
    bare: dict[str, list[int]], alone: dict[str, list[int]], ours: dict[str, list[int]]
) -> list[Row]:
    found = []
    for kind in alone:
        p50_alone, p50_ours = statistics.median(alone[kind]), statistics.median(ours[kind])
        added = _ms(p50_ours - p50_alone)
        print(
            f"{kind:>14}: upstream alone p50 {_ms(statistics.median(bare[kind])):.3f} ms, "
            f"LiteLLM alone p50 {_ms(p50_alone):.3f} ms, gateway p50 {_ms(p50_ours):.3f} ms "
            f"(p99 {_ms(sorted(ours[kind])[int(0.99 * (len(ours[kind]) - 1))]):.3f} ms): "
            f"added {added:+.3f} ms"
        )
        if kind.endswith("streamed"):
            continue  # the gateway asks the upstream for the whole answer: not like for like
        found.append(Row(
            f"gateway call ({kind}), added p50",
            f"{added:.3f} ms",
            f"budget {TARGET_MS:g} ms (LiteLLM alone p50 {_ms(p50_alone):.3f} ms)",
            max(added, 0.0) / TARGET_MS,
            "<= 1x",
        ))  # fmt: skip
    return found


def measure(calls: int = 300, warm: int = 30) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="loopdeck-gateway-bench-") as name:
        folder = Path(name)
        with server("--upstream") as upstream, server("--litellm", upstream) as alone:
            found, done = timed(upstream, alone, folder, calls, warm)
        print(f"{calls} calls of each kind after {warm} to warm; the gateway's run: "
              f"{(done.stdout.strip().splitlines() or ['(no summary)'])[-1][:300]}")  # fmt: skip
        return rows(found["upstream"], found["alone"], found["gateway"])


def main(argv: list[str]) -> None:
    if argv[:1] == ["--upstream"]:
        asyncio.run(serve_upstream())
    elif argv[:1] == ["--litellm"]:
        asyncio.run(serve_litellm(argv[1]))
    elif argv[:1] == ["--client"]:
        client(Path(argv[1]), int(argv[2]), int(argv[3]), argv[4], argv[5])
    else:
        numbers = [int(arg) for arg in argv]
        print_table(measure(*numbers))


if __name__ == "__main__":
    main(sys.argv[1:])
