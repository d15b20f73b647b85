"""`loopdeck`: run an env headless or in the console, and list the sample envs."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from loopdeck import stop_signals
from loopdeck.cli_parser import ENV_COMMANDS, STORE_COMMANDS, build_parser
from loopdeck.stop_signals import StopSignals
from loopdeck.store.base import default_db_path

if TYPE_CHECKING:
    from loopdeck.core.outcome import RunOutcome
    from loopdeck.operator.approval_queue import ApprovalQueue
    from loopdeck.operator.launch import PreparedRun, RunOptions
    from loopdeck.tui.app import LoopdeckApp

EXIT_GOAL_MET, EXIT_STOPPED, EXIT_BAD_INPUT = 0, 1, 2


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
    from loopdeck.cli_store import run_recorded_headless
    from loopdeck.core.states import StopReason
    from loopdeck.headless import print_json, print_summary
    from loopdeck.store.runner import RunAbandoned

    signals = StopSignals()

    async def recorded() -> RunOutcome:
        signals.install()
        try:
            return await run_recorded_headless(_options(args), args.db, signals)
        finally:
            signals.remove()

    try:
        outcome = asyncio.run(recorded())
    except RunAbandoned as exc:
        print(f"loopdeck: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    if args.json:
        print_json(outcome)
    else:
        print_summary(outcome)
    return EXIT_GOAL_MET if outcome.stop_reason is StopReason.GOAL_MET else EXIT_STOPPED


def _run_console(args: argparse.Namespace) -> int:
    """The console paints first; the run is prepared behind that frame (`LoopdeckApp`'s
    `prepare`). What stops the preparation is reported here once the console is gone."""
    from loopdeck.tui.app import LoopdeckApp

    if args.approve == "wait":
        print("loopdeck: --approve wait is for --headless runs; the console decides itself",
              file=sys.stderr)  # fmt: skip
        return EXIT_BAD_INPUT

    def prepare() -> tuple[PreparedRun, ApprovalQueue]:
        from loopdeck.cli_store import check_store
        from loopdeck.operator.approval_queue import StoreBackedQueue
        from loopdeck.operator.launch import prepare_run

        asyncio.run(check_store(args.db))
        queue = StoreBackedQueue()
        approver = None if args.approve else queue
        return prepare_run(_options(args), approver=approver, answerer=queue), queue

    about = f"run {args.env}" + (f" --script {args.script}" if args.script else "")
    app = LoopdeckApp(
        theme_name=args.theme,
        db_path=args.db or default_db_path(),
        prepare=prepare,
        preparing=about,
    )
    code = app.run()
    if app.launch_error is not None:
        raise app.launch_error
    return _after_console(app, code)


def _after_console(app: LoopdeckApp, code: int | None) -> int:
    """The console is gone: say what became of the run, in one line, and exit 0 on a quit."""
    for problem in app.theme_problems:
        print(f"loopdeck: {_said(problem)}", file=sys.stderr)
    if app.farewell:
        print(_said(app.farewell))
    return 0 if code is None else code


def _launcher(args: argparse.Namespace) -> int:
    from loopdeck.cli_store import check_store
    from loopdeck.tui.app import LoopdeckApp

    asyncio.run(check_store(args.db))
    app = LoopdeckApp(theme_name=args.theme, db_path=args.db or default_db_path())
    app.bell_enabled = not args.no_bell
    return _after_console(app, app.run())


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command in ENV_COMMANDS:
            from loopdeck.cli_envs import run_env_command

            return run_env_command(args)
        if args.command == "console":
            return _launcher(args)
        if args.command in STORE_COMMANDS:
            from loopdeck.cli_store import run_store_command

            return run_store_command(args)
        if args.headless or args.json:
            return _run_headless(args)
        return _run_console(args)
    except BrokenPipeError:
        # A reader like `head` went away: nothing more to say, and nothing was lost.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:  # Ctrl-C where no run was there to stop (an import, a read)
        print("loopdeck: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except Exception as exc:
        if not isinstance(exc, _bad_input()):
            raise
        print(f"loopdeck: {_said(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _said(problem: object) -> str:
    """A message naming outside text (a path, an env's or a script's name): its controls and
    bidi characters shown as escapes, never obeyed by the terminal."""
    from loopdeck.core.text import visible

    return visible(str(problem))


def _bad_input() -> tuple[type[Exception], ...]:
    """What the CLI reports in one line with exit 2 (imported only when something failed)."""
    from loopdeck.core.scenario import ScenarioError
    from loopdeck.llm.client import MissingCredentials
    from loopdeck.store.base import StoreError

    return (ScenarioError, ValueError, StoreError, MissingCredentials)


def entry() -> None:
    """The `loopdeck` command. Everything is recorded and closed when `main` returns; the
    interpreter's own teardown of LiteLLM's modules takes over a second, so it is skipped."""
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        pass
    if stop_signals.ended_by is not None:
        # Stopped by a signal, its runs recorded killed: the env's subprocesses go too, and
        # the process ends by that signal, as its sender expects.
        stop_signals.end_children()
        stop_signals.exit_by_signal(stop_signals.ended_by)
    os._exit(code)
