"""An upstream's failure reaches the agent as the upstream said it, in the agent's format: its
status, its `retry-after`, its error's type (an Anthropic client gets the upstream's
`overloaded_error`, not LiteLLM's wrapping of it), code and message; and the record says what
happened: the upstream's status and type, and that the agent was told."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_helpers import GatewayRun, door_command, door_run
from gateway_raw_upstream import RawUpstream, failing

from loopdeck.core.events import ModelRetry
from loopdeck.operator.transcript import Transcript

OPENAI_MODEL = "openai/loop-model"
ANTHROPIC_BODY = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
OPENAI_BODY = {"error": {"message": "Slow down", "type": "rate_limit_error",
                         "code": "rate_limit_exceeded", "param": None}}  # fmt: skip


@pytest.fixture(autouse=True)
def upstream_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-upstream-openai")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-upstream-anthropic")


@pytest.mark.parametrize(
    ("api", "status", "said", "kind", "code"),
    [
        ("messages", 529, ANTHROPIC_BODY, "overloaded_error", None),
        ("chat", 429, OPENAI_BODY, "rate_limit_error", "rate_limit_exceeded"),
        ("responses", 429, OPENAI_BODY, "rate_limit_error", "rate_limit_exceeded"),
        ("messages-from-openai", 429, OPENAI_BODY, "rate_limit_error", None),
    ],
)  # fmt: skip
async def test_an_upstream_failure_reaches_the_agent_as_the_upstream_said_it(
    api: str, status: int, said: dict[str, Any], kind: str, code: str | None, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    door_file = tmp_path / "door.json"
    with RawUpstream([failing(status, said, {"retry-after": "7"})]) as upstream:
        model, base = (
            ("anthropic/claude-loop", upstream.root) if api == "messages"
            else (OPENAI_MODEL, upstream.root + "/v1")
        )  # fmt: skip
        run = GatewayRun(work, door_command(door_file), model, base)
        async with door_run(run, door_file) as door:
            url, headers, body = _raw(api.split("-")[0], door.told)
            async with httpx.AsyncClient(timeout=60) as http:
                reply = await http.post(url, json=body, headers=headers)
        await run.outcome()
    assert reply.status_code == status, reply.text
    assert reply.headers.get("retry-after") == "7"
    error = reply.json()["error"]
    message = said["error"]["message"]
    assert (error["type"], error["message"]) == (kind, message)
    if api.startswith("messages"):
        assert reply.json()["type"] == "error"
    else:
        assert error["code"] == code
    [failed] = run.events(ModelRetry)
    assert f"failed a call: HTTP {status} {kind}: {message}" in failed.error
    assert f"the agent was told so (HTTP {status}, retry-after 7)" in failed.error
    entry = Transcript().apply(failed)
    assert entry is not None and "in 0 s" not in entry.title
    assert f"HTTP {status} {kind}" in entry.body and "the agent was told" in entry.body


def _raw(api: str, told: dict[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
    if api == "messages":
        headers = {"x-api-key": told["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"}
        body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
        return told["ANTHROPIC_BASE_URL"] + "/v1/messages", headers, body
    headers = {"authorization": f"Bearer {told['OPENAI_API_KEY']}"}
    if api == "chat":
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        return told["OPENAI_BASE_URL"] + "/chat/completions", headers, body
    return told["OPENAI_BASE_URL"] + "/responses", headers, {"model": "m", "input": "hi"}
