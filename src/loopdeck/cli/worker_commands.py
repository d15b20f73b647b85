"""`loopdeck submit`, `loopdeck worker` and `loopdeck fork`: runs placed on workers (their
run's flags are `run`'s, handed in by the parser, so this module imports nothing of it).

    loopdeck submit ENV_DIR [--script NAME] [run's options] [--db URL]
    loopdeck worker [--db URL] [--slots N] [--notify URL …]
    loopdeck fork RUN_ID --at CALL_ID [--model M] [--script NAME] [--message TEXT] [--db URL]

Light at import: what each runs is imported when it runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
from collections.abc import Callable
from typing import Any

from loopdeck.caps import budget_overrides
from loopdeck.cli.notify_flags import add_notify_flags, notify_settings
from loopdeck.store.base import (
    DB_HELP,
    Location,
    StoreError,
    default_db_path,
    is_postgres,
    store_location,
)

RunFlags = Callable[[argparse.ArgumentParser], None]
PUSHED_BY_WORKER = "its worker pushes a submitted run's decisions (`loopdeck worker --notify`)"
WORKER_COMMANDS = ("submit", "worker", "fork")
# `run`'s flags that mean nothing for a run no terminal watches: refused by name.
NOT_FOR_SUBMIT = {
    "headless": "a submitted run is always headless",
    "theme": "a submitted run has no console",
    "otlp": "a worker sends no trace of its own",
    "otlp_content": "a worker sends no trace of its own",
    "notify": PUSHED_BY_WORKER,
    "notify_after": PUSHED_BY_WORKER,
    "notify_content": PUSHED_BY_WORKER,
}


def _slots(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"must be between 1 and 1000, got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds, got {text!r}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text!r}")
    return value


def add_worker_commands(commands: Any, run_flags: RunFlags) -> None:
    submit = commands.add_parser(
        "submit", help="record a run as queued for `loopdeck worker`; prints its id"
    )
    submit.add_argument("env", metavar="ENV_DIR", help="env folder (one every worker sees)")
    submit.add_argument("--script", help="script the offline model plays (default: solve)")
    submit.add_argument("--model", help="LiteLLM model name; 'scripted' is the offline model")
    submit.add_argument("--api-base", help="base URL of an OpenAI-compatible server")
    submit.add_argument("--mode", choices=["rounds", "react"],
                        help="planner/executor/reviewer rounds, or one ReAct loop"
                        " (default: the scenario's mode, rounds unless it says)")  # fmt: skip
    submit.add_argument("--model-timeout", type=_seconds, metavar="SECONDS",
                        help="how long one model call may take before it is retried"
                        " (default: the scenario's model_timeout_s, 60)")  # fmt: skip
    submit.add_argument("--set", dest="settings", action="append", default=[],
                        metavar="KEY=VALUE", help="override a scenario.toml value")  # fmt: skip
    run_flags(submit)
    worker = commands.add_parser(
        "worker", help="claim queued runs and run them, each under a lease, until stopped"
    )
    worker.add_argument("--db", type=store_location, help=DB_HELP)
    worker.add_argument("--slots", type=_slots, default=4, help="runs at once (default 4)")
    add_notify_flags(worker)  # its runs' decisions pushed, a run kept until its push went
    fork = commands.add_parser(
        "fork", help="a new run from a run's events up to one of its calls, queued for a worker"
    )
    fork.add_argument("run_id", metavar="RUN_ID")
    fork.add_argument("--at", required=True, metavar="CALL_ID",
                      help="the call whose model turn is asked again")  # fmt: skip
    fork.add_argument("--model", help="the model from the fork on (default: the run's)")
    fork.add_argument("--script", help="the script the offline model plays from the fork on")
    fork.add_argument("--message", metavar="TEXT", help="said to the agent at the fork")
    fork.add_argument("--env", dest="env_dir", metavar="ENV_DIR",
                      help="the run's env folder, when it was not submitted")  # fmt: skip
    fork.add_argument("--set", dest="settings", action="append", default=[],
                      metavar="KEY=VALUE", help="override a scenario.toml value")  # fmt: skip
    fork.add_argument("--db", type=store_location, help=DB_HELP)
    fork.add_argument("--json", action="store_true", help="one JSON value on the last line")


def run_worker_command(args: argparse.Namespace) -> int:
    if args.command == "worker":
        return _worker(args)
    if args.command == "fork":
        return _fork(args)
    return _submit(args)


def _submit(args: argparse.Namespace) -> int:
    import asyncio

    from loopdeck.core.scenario import ScenarioError
    from loopdeck.operator.launch import RunOptions
    from loopdeck.operator.placement import submit

    for flag, why in NOT_FOR_SUBMIT.items():
        if getattr(args, flag, None):
            raise ScenarioError(f"--{flag.replace('_', '-')}: {why}")
    options = RunOptions(
        env=args.env, script=args.script, model=args.model, api_base=args.api_base,
        mode=args.mode, approve=args.approve, run_id=args.run_id,
        budget_overrides=budget_overrides(args),
        model_timeout_s=args.model_timeout, pause_at=args.pause_at,
        settings=list(args.settings), policy=args.policy,
    )  # fmt: skip

    def warned(words: str) -> None:
        print(f"loopdeck: {words}", file=sys.stderr)

    run_id = asyncio.run(submit(args.db or default_db_path(), options, warned))
    if args.json:
        print(json.dumps({"run_id": run_id}))
    else:
        print(run_id)
    return 0


def _worker(args: argparse.Namespace) -> int:
    """Until SIGTERM or SIGINT: then no more claims, and each run it holds is handed back to
    the queue where it is, one that cannot move stopped after its current tools (a second
    signal leaves at once: their leases run out)."""
    import asyncio
    import signal

    from loopdeck import tuning
    from loopdeck.operator.worker import Worker

    location = args.db or default_db_path()
    _refuse_missing(location)
    notify = notify_settings(args)
    if notify.on:
        from loopdeck.operator.push_channels import Channels

        Channels(notify.urls)  # a URL Apprise cannot read: refused now, naming it (exit 2)
    tuning.for_headless()
    worker = Worker(location, slots=args.slots, say=_said, notify=notify if notify.on else None)

    async def until_stopped() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def stopping(number: int) -> None:
            if stop.is_set():
                os._exit(128 + number)
            _said(f"worker {worker.name.holder}: stopping, its runs handed back (a run that"
                  " cannot move is stopped after its current tools)")  # fmt: skip
            stop.set()

        for number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(number, stopping, number)
        await worker.run(stop)

    asyncio.run(until_stopped())
    return 0


def _refuse_missing(location: Location) -> None:
    """A worker claims the runs submitted to its store: a SQLite file that is not there
    holds none, and made empty (a mistyped `--db`) it would wait forever, so it is refused by
    name. A PostgreSQL database that is not there fails to connect."""
    if is_postgres(location) or os.path.lexists(location):
        return
    submit = f"loopdeck submit ENV_DIR --db {shlex.quote(str(location))}"
    raise StoreError(
        f"{location}: no such store (`{submit}` creates it; a worker claims the runs"
        " submitted there)"
    )


def _said(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _fork(args: argparse.Namespace) -> int:
    import asyncio

    from loopdeck.core.text import visible
    from loopdeck.operator.fork import fork

    location = args.db or default_db_path()
    forked = fork(location, args.run_id, args.at, model=args.model, script=args.script,
                  message=args.message, env=args.env_dir, settings=args.settings,
                  tell=lambda said: _said(f"loopdeck: {visible(said)}"))  # fmt: skip
    run_id = asyncio.run(forked)
    if args.json:
        print(json.dumps({"run_id": run_id, "forked_from": args.run_id, "at": args.at}))
    else:
        print(run_id)
        print(f"forked from {args.run_id} at {args.at}: queued for a worker", file=sys.stderr)
    return 0
