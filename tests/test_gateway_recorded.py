"""What the operator is shown of a gateway run is what its record says: an upstream's failure
(recorded as loopdeck's own runs record a failed model call, `ModelRetry`, the finding said
from it), the upstream the run is answered by (its model), and who decided a rejected write in
the words the model is told. A model LiteLLM can route to no provider is refused before the
agent starts."""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from gateway_clients import Client, Refused
from gateway_helpers import AGENT, Decider, GatewayRun, door_command, door_run
from loopback_server import Call, Text
from openai_loopback import OpenAILoopback

from loopdeck.core.approvals import DenyApprover
from loopdeck.core.events import ApprovalDecided, ModelRetry, RunStarted
from loopdeck.llm.client import unroutable
from loopdeck.operator.transcript import Transcript

MODEL = "openai/loop-model"
WRITE = Call("Write", {"file_path": "a.txt", "content": "from the model\n"}, text="On it.")
REFUSAL = "the upstream refuses every call here"
NO_WRITES = """\
[[rule]]
id = "no-writes"
effect = "deny"
when = 'call.tool == "Write"'
message = "this folder is read-only"
"""


@pytest.fixture(autouse=True)
def upstream_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-upstream-openai")


class _Refusing(BaseHTTPRequestHandler):
    def log_message(self, *_: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        said = {"error": {"message": REFUSAL, "type": "invalid_request_error", "code": None}}
        data = json.dumps(said).encode()
        self.send_response(400)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def refusing() -> Iterator[str]:
    """An OpenAI-compatible upstream that answers every call with a 400: its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


async def test_an_upstream_failure_is_recorded_and_the_finding_said_from_it(
    refusing: str, tmp_path: Path, work: Path
) -> None:
    door_file = tmp_path / "door.json"
    run = GatewayRun(work, door_command(door_file), MODEL, refusing)
    async with door_run(run, door_file) as door:
        client = Client(door.told, "chat", stream=False)
        client.user("go")
        with pytest.raises(Refused) as refused:
            await client.ask()
    outcome = await run.outcome()
    assert refused.value.status == 400 and REFUSAL in refused.value.message
    [failed] = run.events(ModelRetry)
    assert failed.attempt == 1 and failed.delay_s == 0
    assert failed.error.startswith(f"the upstream ({MODEL}) failed a call: ")
    assert REFUSAL in failed.error
    assert outcome.findings == [f"round 1: {failed.error}"]
    entry = Transcript().apply(failed)  # no retry of loopdeck's to say, none "in 0 s"
    assert entry is not None and entry.title == "model call failed · 1 in a row"
    [started] = run.events(RunStarted)
    assert started.model == outcome.model == f"gateway gateway_agent ({MODEL})"


def test_the_gateway_command_stores_the_upstream_and_its_failure(
    cli: Any, refusing: str, tmp_path: Path, work: Path
) -> None:
    db = tmp_path / "s.db"
    code, summary, err = cli(
        "gateway", "--goal", "g", "--workdir", str(work), "--model", MODEL, "--api-base",
        refusing, "--headless", "--json", "--approve", "auto", "--db", str(db),
        "--run-id", "gw-failed", "--", sys.executable, AGENT, "chat", "whole", "go",
    )  # fmt: skip
    assert summary is not None, err
    assert code != 0 and summary["stop_reason"] == "ask_user"  # no --check, nobody to ask
    assert summary["model"] == f"gateway gateway_agent ({MODEL})"
    with sqlite3.connect(db) as store:
        [(model,)] = store.execute("select model from runs where run_id = 'gw-failed'")
        kinds = [kind for (kind,) in store.execute(
            "select kind from events where run_id = 'gw-failed' and body like '%upstream%'"
        )]  # fmt: skip
    assert model == summary["model"]
    assert "model_retry" in kinds
    [finding] = summary["findings"]
    assert REFUSAL in finding and MODEL in finding


def test_a_model_litellm_routes_nowhere_is_refused_before_the_agent_starts(
    cli: Any, tmp_path: Path, work: Path
) -> None:
    code, _, err = cli(
        "gateway", "--goal", "g", "--workdir", str(work), "--model", "nosuchprovider/xyz",
        "--headless", "--approve", "auto", "--db", str(tmp_path / "s.db"),
        "--", sys.executable, AGENT, "door", str(tmp_path / "door.json"),
    )  # fmt: skip
    assert code == 2 and "--model nosuchprovider/xyz: LiteLLM knows no provider for it" in err
    assert not (tmp_path / "door.json").exists()  # the agent never started


@pytest.mark.parametrize(
    "model",
    ["anthropic/claude-3-5-sonnet-20241022", "openai/gpt-4o", "gpt-4o", "claude-sonnet-4-5",
     "ollama/llama3", "hosted_vllm/my-model", "openrouter/anthropic/claude-3.5-sonnet"],
)  # fmt: skip
def test_names_a_provider_takes_are_routable(model: str) -> None:
    assert unroutable(model, None) is None


@pytest.mark.parametrize("model", ["nosuchprovider/xyz", "my-finetune"])
def test_names_no_provider_takes_are_not(model: str) -> None:
    assert unroutable(model, "http://127.0.0.1:9/v1") is not None


async def _rejected_alone(tmp_path: Path, work: Path, **how: Any) -> tuple[GatewayRun, str]:
    """The run and what the agent got for an answer whose one write was rejected."""
    door_file = tmp_path / "door.json"
    with OpenAILoopback([WRITE, Text("Leaving it.")]) as upstream:
        run = GatewayRun(work, door_command(door_file), MODEL, upstream.url, **how)
        async with door_run(run, door_file) as door:
            client = Client(door.told, "chat", stream=False)
            client.user("write a.txt")
            answer = await client.ask()
        await run.outcome()
    return run, answer.text


async def test_a_policy_denial_is_told_as_the_rules_not_the_operators(
    tmp_path: Path, work: Path
) -> None:
    policy = tmp_path / "denyall.toml"
    policy.write_text(NO_WRITES)
    run, told = await _rejected_alone(tmp_path, work, approver=Decider(), policy=policy)
    [decided] = run.events(ApprovalDecided)
    assert decided.decided_by is not None and decided.decided_by.rule_id == "no-writes"
    assert "loopdeck: Write: a.txt was not run: denied by policy rule no-writes" in told
    assert "this folder is read-only" in told
    assert "operator" not in told


async def test_a_default_denial_is_told_as_the_defaults(tmp_path: Path, work: Path) -> None:
    _, told = await _rejected_alone(tmp_path, work, approver=DenyApprover())
    assert "loopdeck: Write: a.txt was not run: writes are denied in this run" in told
    assert "operator" not in told
