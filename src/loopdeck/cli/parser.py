"""The command line's shape: every command, flag and check of its values, and its exit codes.

Light on purpose: it imports no pydantic model, no env and no console, so `loopdeck run`
paints its first frame before the heavy imports (they happen behind it).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from loopdeck import __version__
from loopdeck.caps import FLAGGED_CAPS
from loopdeck.caps import budget_overrides as budget_overrides
from loopdeck.cli.chosen_command import ChosenCommand, add_own_module_commands
from loopdeck.cli.gateway_parser import add_gateway_command
from loopdeck.cli.notify_flags import add_notify_flags
from loopdeck.cli.parse_errors import CommandParser, Parser
from loopdeck.store.base import DB_HELP, store_location

EXIT_GOAL_MET, EXIT_STOPPED, EXIT_BAD_INPUT = 0, 1, 2

ENV_COMMANDS = ("envs", "init-env", "check")
THEME_HELP = "console theme: a name, or the path of a theme file"
STORE_COMMANDS = (
    "runs", "pending", "approve", "reject", "answer", "message", "cancel", "pause", "resume",
    "export", "attach", "replay", "grants", "revoke", "resolve", "verify", "workers",
)  # fmt: skip


def _positive(kind: Callable[[str], float], name: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a {name}, got {text!r}") from None
        if not math.isfinite(value):  # only a float is ever not: inf, nan
            raise argparse.ArgumentTypeError(f"must be a finite {name}, got {text!r}")
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be a {name} greater than 0, got {text!r}")
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


def said(text: str) -> str:
    """A message's TEXT: words, or `-` (read from stdin)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: nothing to say to the agent")
    return text


def otlp_url(text: str) -> str:
    """An OTLP/HTTP endpoint: an http(s) URL with a host."""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(
            f"must be an http:// or https:// URL (http://localhost:4318/v1/traces), got {text!r}"
        )
    return text


def run_id(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", text):
        raise argparse.ArgumentTypeError(
            f"must be 1 to 64 letters, digits, '_', '.' or '-', got {text!r}"
        )
    return text


def command_line(text: str) -> list[str]:
    """A command line split as a shell would split it, never run through one."""
    import shlex  # here: no other command's start pays its import

    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"cannot be split into words ({exc}): {text!r}") from None
    if not words:
        raise argparse.ArgumentTypeError("is empty: give the command that checks the goal")
    return words


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        raise argparse.ArgumentTypeError(
            f"must be KEY=VALUE (e.g. API_KEY=${{API_KEY}}), got {text!r}"
        )
    return key, value


positive_int = _positive(int, "whole number")
positive_float = _positive(float, "number")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command; only `command`'s arguments when given (`cli/chosen_command.py`)."""
    parser = Parser(prog="loopdeck", description="Supervise LLM agents.")
    parser.add_argument("--version", action="version", version=f"loopdeck {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    commands = ChosenCommand(subparsers, command)

    run = commands.add_parser("run", help="run an agent against an env")
    run.add_argument("env", metavar="ENV_DIR", help="env folder, or a sample env's name")
    run.add_argument("--script", help="script the offline model plays (default: solve)")
    run.add_argument("--model", help="LiteLLM model name; 'scripted' is the offline model")
    run.add_argument("--api-base", help="base URL of an OpenAI-compatible server")
    run.add_argument(
        "--mode", choices=["rounds", "react"],
        help="planner/executor/reviewer rounds, or one ReAct loop (default: the scenario's)",
    )  # fmt: skip
    run.add_argument(
        "--model-timeout", type=positive_float, metavar="SECONDS",
        help="how long one model call may take before it is retried",
    )  # fmt: skip
    run.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario.toml value for this run (e.g. data.orders=3); repeatable",
    )
    add_run_flags(run)
    add_acp_command(commands)
    add_gateway_command(commands, add_agent_flags, add_run_flags)

    console = commands.add_parser(
        "console", help="the console's fleet: every run in the store, live (n starts one)"
    )
    console.add_argument("--theme", help=THEME_HELP)
    console.add_argument("--db", type=store_location, help=DB_HELP)
    console.add_argument("--no-bell", action="store_true", help="alerts as toasts only, no bell")
    add_notify_flags(console)

    add_store_commands(commands)
    if command is None or not (commands.built or command in ENV_COMMANDS):
        add_own_module_commands(commands, add_run_flags)  # `run` imports none of them
    add_env_commands(commands)
    commands.listed()
    return parser


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of a run, whoever its agent: `run`'s and `acp`'s alike."""
    parser.add_argument("--headless", action="store_true", help="no console: print a summary")
    parser.add_argument("--json", action="store_true", help="last stdout line is one JSON object")
    parser.add_argument(
        "--approve",
        choices=["auto", "deny", "wait"],
        help="how writes are decided (default: in the console; headless, auto for the scripted"
        " model, required for a real one; wait: `loopdeck approve` or a console decides)",
    )
    parser.add_argument("--db", type=store_location, help=DB_HELP)
    parser.add_argument(
        "--run-id", type=run_id, metavar="RUN_ID", help="the run's id (default: a new one)"
    )
    add_budget_flags(parser)
    parser.add_argument(
        "--pause-at",
        type=fraction,
        metavar="FRACTION",
        help="with an operator attached, pause and ask when a budget passes this fraction",
    )
    parser.add_argument("--theme", help=THEME_HELP)
    add_policy_flag(parser)
    add_notify_flags(parser)
    add_otlp_flags(
        parser,
        "send the run as one OpenTelemetry trace to this OTLP/HTTP endpoint, what has ended"
        " as it runs, the rest when it stops (default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or"
        " OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces, when set)",
    )


def add_policy_flag(parser: argparse.ArgumentParser) -> None:
    """`--policy FILE`: the run's own level of its policy, over the user's and the env's."""
    parser.add_argument(
        "--policy",
        type=Path,
        metavar="FILE",
        help="a policy.toml deciding this run's calls before you are asked (with the user's"
        " and the env folder's: deny over ask over allow)",
    )


def add_acp_command(commands: Any) -> None:
    """`loopdeck acp --goal TEXT [--workdir DIR] [--check CMD] -- AGENT_CMD ARGS…`: an ACP
    agent on a folder, in place, with no env folder (`cli/acp_command.py`)."""
    acp = commands.add_parser(
        "acp",
        help="run an ACP agent on a folder, in place, under loopdeck's supervision",
        usage="loopdeck acp --goal TEXT [--workdir DIR] [--check CMD] [options] -- AGENT_CMD ARGS…",
    )
    add_agent_flags(
        acp,
        "what the agent is to do: its first prompt",
        "the goal check, run in DIR after each turn, without a shell (exit 0: met; its"
        " output: what is left). Without it you judge each turn, or headless the run stops",
    )
    acp.add_argument(
        "--mode", dest="session_mode", metavar="NAME", help="the ACP session mode to set"
    )
    acp.add_argument(
        "agent_command", nargs="*", metavar="AGENT_CMD", help="after --: the agent's command"
    )
    add_run_flags(acp)


def add_agent_flags(parser: argparse.ArgumentParser, goal: str, check: str) -> None:
    """The flags of an agent run on a folder in place: `acp`'s and `gateway`'s alike."""
    parser.add_argument("--goal", metavar="TEXT", help=goal)
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="the folder the agent works in, in place: never copied, never removed (default: here)",
    )
    parser.add_argument("--check", type=command_line, metavar="CMD", help=check)
    parser.add_argument(
        "--env",
        dest="agent_env",
        action="append",
        default=[],
        type=key_value,
        metavar="KEY=VALUE",
        help="added to the agent's environment (${VAR}: from loopdeck's); repeatable",
    )


def add_store_commands(commands: Any) -> None:
    def with_db(parser: argparse.ArgumentParser, json_flag: bool = True) -> argparse.ArgumentParser:
        parser.add_argument("--db", type=store_location, help=DB_HELP)
        if json_flag:
            parser.add_argument(
                "--json", action="store_true", help="one JSON value on the last line"
            )
        return parser

    with_db(commands.add_parser("runs", help="past and live runs in the store, newest first"))
    with_db(commands.add_parser("pending", help="what waits for you: writes, questions, outcomes"))
    with_db(commands.add_parser("workers", help="the store's workers, each with its runs"))
    approve = with_db(commands.add_parser("approve", help="approve a pending write"))
    approve.add_argument("run_id", metavar="RUN_ID")
    approve.add_argument("call_id", metavar="CALL_ID")
    add_decision_commands(commands, approve, with_db)
    reject = with_db(commands.add_parser("reject", help="reject a pending write"))
    reject.add_argument("run_id", metavar="RUN_ID")
    reject.add_argument("call_id", metavar="CALL_ID")
    reject.add_argument("--reason", default="", help="goes back to the model")
    add_answer(with_db(commands.add_parser("answer", help="answer the question a run asks")))
    message = with_db(commands.add_parser("message", help="speak to a live run's agent"))
    message.add_argument("run_id", metavar="RUN_ID")
    message.add_argument(
        "text",
        metavar="TEXT",
        type=said,
        help="heard by the model before its next turn (-: read stdin)",
    )
    cancel = with_db(commands.add_parser("cancel", help="stop a run after its current tools"))
    cancel.add_argument("run_id", metavar="RUN_ID")
    cancel.add_argument("--now", action="store_true", help="kill now instead")
    for verb, about in (
        ("pause", "hold a run before its next model call"),
        ("resume", "resume it"),
    ):
        held = with_db(commands.add_parser(verb, help=about))
        held.add_argument("run_id", metavar="RUN_ID")
    export = with_db(commands.add_parser("export", help="every event of a run"), json_flag=False)
    export.add_argument("run_id", metavar="RUN_ID")
    export.add_argument("--format", choices=["jsonl"], default="jsonl", help="a line an event")
    add_otlp_flags(
        export, "send the run as one OpenTelemetry trace to this OTLP/HTTP endpoint instead"
    )
    attach = with_db(commands.add_parser("attach", help="the console on a live run"), False)
    attach.add_argument("run_id", metavar="RUN_ID")
    attach.add_argument("--theme", help=THEME_HELP)
    replay = with_db(commands.add_parser("replay", help="the console on a finished run"), False)
    replay.add_argument("run_id", metavar="RUN_ID")
    replay.add_argument("--theme", help=THEME_HELP)
    verify = with_db(
        commands.add_parser("verify", help="prove a run's log by its hash chain (no RUN_ID: all)")
    )
    verify.add_argument("run_id", metavar="RUN_ID", nargs="?")
    verify.add_argument(
        "--export", type=Path, metavar="FILE", help="verify an export file (`loopdeck export`)"
    )


def add_answer(answer: argparse.ArgumentParser) -> None:
    answer.add_argument("run_id", metavar="RUN_ID")
    answer.add_argument("text", metavar="TEXT", help="goes to the model as the operator's answer")
    answer.add_argument(
        "--question",
        metavar="QUESTION_ID",
        help="the question answered (its id: `pending` and a push show it); refused if it is"
        " no longer open, never another's answer",
    )


def add_budget_flags(parser: argparse.ArgumentParser) -> None:
    """A flag per cap that has one (`Cap.flag`), whole for a count: `--max-cost USD`."""
    for cap in FLAGGED_CAPS:
        kind = positive_int if cap.whole else positive_float
        parser.add_argument(cap.flag, type=kind, metavar=cap.metavar, help=f"cap on {cap.label}")


def add_otlp_flags(parser: argparse.ArgumentParser, about: str) -> None:
    """`--otlp URL` and `--otlp-content`, for `export` and `run`."""
    parser.add_argument(
        "--otlp",
        metavar="URL",
        type=otlp_url,
        help=f"{about} (e.g. http://localhost:4318/v1/traces; auth headers from"
        " OTEL_EXPORTER_OTLP_HEADERS)",
    )
    parser.add_argument(
        "--otlp-content",
        action="store_true",
        help="with --otlp: the goal, the model's text, arguments, results and messages on the"
        " spans too",
    )


def add_decision_commands(
    commands: Any, approve: argparse.ArgumentParser, with_db: Callable[..., Any]
) -> None:
    """`approve`'s edit and grant, and `grants`, `revoke`, `resolve`."""
    approve.add_argument(
        "--args",
        metavar="JSON",
        help="run it with these arguments instead (a JSON object, - reads stdin): the model"
        " is told what you changed",
    )
    approve.add_argument(
        "--grant",
        metavar="exact|tool|FIELD=GLOB",
        help="and approve later calls of this tool in this run without asking: with exactly"
        " these arguments, any, or where FIELD matches GLOB (e.g. path=src/*)",
    )
    approve.add_argument("--uses", type=positive_int, metavar="N", help="the grant's uses")
    approve.add_argument(
        "--for", dest="for_s", type=positive_float, metavar="SECONDS", help="the grant's life"
    )
    grants = with_db(commands.add_parser("grants", help="standing grants, with uses left"))
    grants.add_argument("run_id", metavar="RUN_ID", nargs="?")
    revoke = with_db(commands.add_parser("revoke", help="withdraw a run's standing grant"))
    revoke.add_argument("run_id", metavar="RUN_ID")
    revoke.add_argument("grant_id", metavar="GRANT_ID")
    resolve = with_db(
        commands.add_parser("resolve", help="say whether a write whose outcome is unknown ran")
    )
    resolve.add_argument("run_id", metavar="RUN_ID")
    resolve.add_argument("call_id", metavar="CALL_ID")
    resolve.add_argument(
        "outcome",
        choices=["applied", "not-applied"],
        help="applied: recorded as executed; not-applied: the model may try it again",
    )


def add_env_commands(commands: Any) -> None:
    envs = commands.add_parser("envs", help="list the sample envs and their scripts")
    envs.add_argument("--json", action="store_true", help="the envs as one JSON value")
    init = commands.add_parser("init-env", help="copy a sample env here, to start your own")
    init.add_argument("name", metavar="NAME", help="the sample env to copy (see `loopdeck envs`)")
    init.add_argument("dest", nargs="?", type=Path, help="folder to create (default: ./NAME)")
    check = commands.add_parser(
        "check", help="run every script of an env headless against its `expect`"
    )
    check.add_argument("env", metavar="ENV", help="env folder, or a sample env's name")
    check.add_argument(
        "--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
        help="override a scenario.toml value for every script (e.g. data.orders=3)",
    )  # fmt: skip
    check.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print each run's calls, refused replies and env tracebacks",
    )
