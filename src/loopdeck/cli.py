"""`loopdeck`: run an env headless or in the console, and list the sample envs."""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from loopdeck.cli_envs import ENV_COMMANDS, add_env_commands, run_env_command
from loopdeck.cli_store import (
    STORE_COMMANDS,
    add_store_commands,
    check_store,
    run_recorded_headless,
    run_store_command,
)
from loopdeck.core.scenario import ScenarioError
from loopdeck.core.states import StopReason
from loopdeck.llm.client import MissingCredentials
from loopdeck.store.database import DB_HELP, StoreError, default_db_path, store_location

if TYPE_CHECKING:
    from loopdeck.operator.launch import RunOptions
    from loopdeck.tui.app import LoopdeckApp

EXIT_GOAL_MET, EXIT_STOPPED, EXIT_BAD_INPUT = 0, 1, 2


def _positive(kind: Callable[[str], float], name: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a {name}, got {text!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(
                f"must be a finite {name} greater than 0, got {text!r}"
            )
        return value

    return parse


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a fraction, got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (e.g. 0.8), got {text!r}")
    return value


positive_int = _positive(int, "positive integer")
positive_float = _positive(float, "positive number")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loopdeck", description="Supervise LLM agents.")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run an agent against an env")
    run.add_argument("env", metavar="ENV_DIR", help="env folder, or a sample env's name")
    run.add_argument("--script", help="script the offline model plays (default: solve)")
    run.add_argument("--model", help="LiteLLM model name; 'scripted' is the offline model")
    run.add_argument("--api-base", help="base URL of an OpenAI-compatible server")
    run.add_argument("--mode", choices=["rounds", "react"])
    run.add_argument("--headless", action="store_true", help="no console: print a summary")
    run.add_argument("--json", action="store_true", help="last stdout line is one JSON object")
    run.add_argument(
        "--approve",
        choices=["auto", "deny", "wait"],
        help="how writes are decided headless (wait: `loopdeck approve` or a console decides)",
    )
    run.add_argument("--db", type=store_location, help=DB_HELP)
    run.add_argument("--max-turns", type=positive_int)
    run.add_argument("--max-tool-calls", type=positive_int)
    run.add_argument("--max-tokens", type=positive_int)
    run.add_argument("--max-cost", type=positive_float, metavar="USD")
    run.add_argument("--deadline", type=positive_float, metavar="SECONDS")
    run.add_argument("--max-rounds", type=positive_int)
    run.add_argument("--model-timeout", type=positive_float, metavar="SECONDS")
    run.add_argument(
        "--pause-at",
        type=fraction,
        metavar="FRACTION",
        help="with an operator attached, pause and ask when a budget passes this fraction",
    )
    run.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario.toml value for this run (e.g. data.orders=3)",
    )
    run.add_argument("--theme", help="console theme: a name, or the path of a theme file")

    console = commands.add_parser("console", help="the console's launcher over the sample envs")
    console.add_argument("--theme", help="console theme: a name, or the path of a theme file")
    console.add_argument("--db", type=store_location, help=DB_HELP)
    console.add_argument(
        "--no-bell", action="store_true", help="alerts as toasts only, without the bell"
    )

    add_store_commands(commands)

    add_env_commands(commands)
    return parser


def _options(args: argparse.Namespace) -> RunOptions:
    from loopdeck.operator.launch import RunOptions

    return RunOptions(
        env=args.env,
        script=args.script,
        model=args.model,
        api_base=args.api_base,
        mode=args.mode,
        approve=args.approve,
        budget_overrides={
            "max_turns": args.max_turns,
            "max_tool_calls": args.max_tool_calls,
            "max_tokens": args.max_tokens,
            "max_cost": args.max_cost,
            "deadline": args.deadline,
            "max_rounds": args.max_rounds,
        },
        model_timeout_s=args.model_timeout,
        pause_at=args.pause_at,
        settings=list(args.settings),
    )


def _run_headless(args: argparse.Namespace) -> int:
    from loopdeck.headless import print_json, print_summary

    outcome = asyncio.run(run_recorded_headless(_options(args), args.db))
    if args.json:
        print_json(outcome)
    else:
        print_summary(outcome)
    return EXIT_GOAL_MET if outcome.stop_reason is StopReason.GOAL_MET else EXIT_STOPPED


def _run_console(args: argparse.Namespace) -> int:
    from loopdeck.operator.approval_queue import StoreBackedQueue
    from loopdeck.operator.launch import prepare_run
    from loopdeck.tui.app import LoopdeckApp

    queue = StoreBackedQueue()
    options = _options(args)
    if options.approve == "wait":
        raise ScenarioError("--approve wait is for --headless runs; the console decides itself")
    asyncio.run(check_store(args.db))
    approver = None if options.approve else queue
    prepared = prepare_run(options, approver=approver, answerer=queue)
    app = LoopdeckApp(prepared, queue, theme_name=args.theme, db_path=args.db or default_db_path())
    return _after_console(app, app.run())


def _after_console(app: LoopdeckApp, code: int | None) -> int:
    """The console is gone: say what became of the run, in one line, and exit 0 on a quit."""
    for problem in app.theme_problems:
        print(f"loopdeck: {problem}", file=sys.stderr)
    if app.farewell:
        print(app.farewell)
    return 0 if code is None else code


def _launcher(args: argparse.Namespace) -> int:
    from loopdeck.tui.app import LoopdeckApp

    asyncio.run(check_store(args.db))
    app = LoopdeckApp(theme_name=args.theme, db_path=args.db or default_db_path())
    app.bell_enabled = not args.no_bell
    return _after_console(app, app.run())


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command in ENV_COMMANDS:
            return run_env_command(args)
        if args.command == "console":
            return _launcher(args)
        if args.command in STORE_COMMANDS:
            return run_store_command(args)
        if args.headless or args.json:
            return _run_headless(args)
        return _run_console(args)
    except ScenarioError as exc:
        print(f"loopdeck: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (ValueError, StoreError, MissingCredentials) as exc:
        print(f"loopdeck: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # A reader like `head` went away: nothing more to say, and nothing was lost.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def entry() -> None:
    """The `loopdeck` command. Everything is recorded and closed when `main` returns; the
    interpreter's own teardown of LiteLLM's modules takes over a second, so it is skipped."""
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        pass
    os._exit(code)
