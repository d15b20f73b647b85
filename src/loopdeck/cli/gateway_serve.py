"""`loopdeck gateway serve [--port P]`: the gateway for agents started elsewhere, each client
token one run, recorded as any other; and `loopdeck gateway token --goal TEXT …`: such a token,
the run's settings signed with the user's key (the file `gateway.key` in loopdeck's data
folder, made readable by the user alone the first time).

The gateway itself is the gateway kind's (`gateway/serving.py`), reached through the kinds'
registry: the CLI imports no kind. Light at import: everything is imported when it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from loopdeck.cli.parser import EXIT_BAD_INPUT, budget_overrides

if TYPE_CHECKING:
    from loopdeck.operator.launch import RunOptions

KEY_FILE = "gateway.key"
STOP_WAIT_S = 30.0  # the served runs' stops, recorded, before `serve` exits


class Serving(Protocol):
    """What the gateway kind offers `serve` and `token` (`gateway/kind.py`)."""

    def service(self, key: bytes, start_run: Any) -> Any: ...
    def token(self, claims: dict[str, Any], key: bytes) -> str: ...
    def key(self, path: Path) -> bytes: ...
    def upstream_problem(self, model: str, api_base: str | None) -> str | None: ...
    def missing_credentials(self, model: str, api_base: str | None) -> str | None: ...


def _gateway() -> Serving:
    from loopdeck.operator.kinds import kind_named

    return cast(Serving, kind_named("gateway"))


def key_path() -> Path:
    import platformdirs

    return platformdirs.user_data_path("loopdeck") / KEY_FILE


def token_problem(args: argparse.Namespace) -> str | None:
    """Why no token is made, the model's own problem first (the check a served run's first
    call makes: `scripted`, or a name LiteLLM routes nowhere)."""
    for flag, value in (("--goal TEXT", args.goal), ("--model MODEL", args.model)):
        if not (value or "").strip():
            return f"gateway token needs {flag}"
    if (problem := _gateway().upstream_problem(args.model, args.api_base)) is not None:
        return problem
    if args.approve is None:
        return "gateway token needs --approve auto|deny|wait: how the run's writes are decided"
    if not args.workdir.is_dir():
        return f"--workdir {args.workdir}: no such folder"
    return None


def run_token(args: argparse.Namespace) -> int:
    """Prints a client token for `serve`: one run with these settings."""
    if (problem := token_problem(args)) is not None:
        print(f"loopdeck: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        policy_sha = _policy_sha(args.policy)
    except Exception as exc:  # a policy its run would refuse: refused now, no token
        print(f"loopdeck: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    run_id = args.run_id or uuid.uuid4().hex[:12]
    claims = {
        "goal": args.goal, "workdir": str(args.workdir.resolve()), "check": args.check,
        "model": args.model, "api_base": args.api_base, "tools": dict(args.tools),
        "budget": {k: v for k, v in budget_overrides(args).items() if v is not None},
        "approve": args.approve, "run_id": run_id, "pause_at": args.pause_at,
        "idle_s": args.idle,
        "policy": None if args.policy is None else str(args.policy.resolve()),
        "policy_sha256": policy_sha,
    }  # fmt: skip
    gateway = _gateway()
    if (missing := gateway.missing_credentials(args.model, args.api_base)) is not None:
        print(
            f"loopdeck: note: {missing}; `gateway serve` must have it in its environment, or"
            " this token's run is refused at its first call",
            file=sys.stderr,
        )
    token = gateway.token(claims, gateway.key(key_path()))
    print(
        f"run {run_id}: give the agent this token as its key (OPENAI_API_KEY, ANTHROPIC_API_KEY)"
        " and `loopdeck gateway serve`'s address as its base URL",
        file=sys.stderr,
    )
    print(token)
    return 0


def _policy_sha(explicit: Path | None) -> str | None:
    """The policy a token's run will be decided under (the user's and `--policy`'s levels),
    read and checked now: its SHA-256 (None: no policy). `PolicyError` names a broken one."""
    from loopdeck.policy.loading import run_policy
    from loopdeck.policy.sources import policy_files

    policy = run_policy(policy_files(None, explicit), "gateway")
    return None if policy is None else str(policy.in_force()["sha256"])


def policy_unchanged(claims: dict[str, Any], prepared: Any) -> None:
    """A token's run is decided under the policy its token was made with, or does not start
    (a file edited since, or the user's policy changed: said, naming both hashes)."""
    if "policy_sha256" not in claims:  # a token made before tokens carried their policy
        return
    gate = prepared.runtime.calls.approvals.policy.gate
    now = None if gate is None else str(gate.in_force()["sha256"])
    if now != claims["policy_sha256"]:
        made, has = claims["policy_sha256"] or "none", now or "none"
        raise ValueError(
            f"its policy changed since its token was made (then {made[:12]}, now {has[:12]}):"
            " make a new token with `loopdeck gateway token`"
        )


def served_options(claims: dict[str, Any], token: str, server: Any) -> RunOptions:
    """A token's settings as its run's options."""
    from loopdeck.cli.gateway_target import GatewayTarget
    from loopdeck.operator.launch import RunOptions

    target = GatewayTarget(
        goal=claims["goal"], workdir=Path(claims["workdir"]), command=[], check=claims["check"],
        env={}, model=claims["model"], api_base=claims["api_base"], tools=claims["tools"],
        token=token, served_by=server, idle_s=claims.get("idle_s"),
    )  # fmt: skip
    return RunOptions(
        env=target.env_name, approve=claims["approve"], budget_overrides=claims["budget"],
        run_id=claims["run_id"], pause_at=claims["pause_at"], acp=target,
        policy=Path(claims["policy"]) if claims.get("policy") else None,
    )  # fmt: skip


def run_serve(args: argparse.Namespace) -> int:
    from loopdeck.stop_signals import StopSignals

    signals = StopSignals()

    async def served() -> None:
        signals.install()
        try:
            await serve(args, signals)
        finally:
            signals.remove()

    asyncio.run(served())
    return 0


async def serve(
    args: argparse.Namespace, signals: Any, serving: Callable[[str], None] | None = None
) -> None:
    """Serves until a stop signal (`serving` is told its address); then every live run is
    killed and recorded."""
    from loopdeck.cli.notify_flags import notify_settings
    from loopdeck.operator.session import RunSession
    from loopdeck.store.base import default_db_path

    sessions: dict[str, RunSession] = {}

    async def start_run(claims: dict[str, Any], token: str, server: Any) -> None:
        session = RunSession(args.db or default_db_path(), say=_say)
        try:
            async with session.opened():
                options = served_options(claims, token, server)
                options.notify = notify_settings(args)  # this server's channels, every run
                policy_unchanged(claims, session.prepare(options))
                sessions[token] = session
                # Said once the store has the run: a command sent by its id then finds it.
                started = f"run {claims['run_id']} started for its token"
                session.on_recorded = lambda: _say(started)
                outcome = await session.record()
                _say(f"run {outcome.run_id} stopped: {outcome.stop_reason.value}: {outcome.detail}")
        except Exception as exc:  # a token whose run cannot start: said, the others go on
            _say(f"run {claims.get('run_id')} could not start: {exc}")
        finally:
            sessions.pop(token, None)
            session.cleanup()

    gateway = _gateway()
    service = gateway.service(gateway.key(key_path()), start_run)
    url = await service.start("127.0.0.1", args.port)
    _say(
        f"gateway serving at {url}: an agent's OPENAI_BASE_URL={url}/v1, ANTHROPIC_BASE_URL={url},"
        " its key a token of `loopdeck gateway token` (one run each)"
    )
    if serving is not None:
        serving(url)
    stopped = asyncio.Event()
    signals.aim(lambda by: stopped.set())
    await stopped.wait()
    for session in list(sessions.values()):
        session.kill("serve's stop")
    runs = list(service.runs.values())
    if runs:
        await asyncio.wait(runs, timeout=STOP_WAIT_S)
    await service.stop()


def _say(message: str) -> None:
    print(f"loopdeck: {message}", file=sys.stderr, flush=True)
