"""`loopdeck acp --goal TEXT [--workdir DIR] [--check CMD] -- AGENT_CMD ARGS…`: an ACP agent
run on the user's folder in place, with no env folder, headless or in the console as any run
(`cli/runs.py` drives it; this module checks its words and makes its options).

Light at import, like the rest of the CLI: what is said wrong is said before the console
paints, and the run's modules are imported only when its options are made.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from loopdeck.cli.agent_words import folder_and_command_problem, said_refused
from loopdeck.cli.parser import budget_overrides

if TYPE_CHECKING:
    from loopdeck.operator.launch import RunOptions

USAGE = "loopdeck acp --goal TEXT [--workdir DIR] [--check CMD] -- AGENT_CMD ARGS…"


def problem(args: argparse.Namespace) -> str | None:
    """What keeps this `acp` command from running, in one line; None when nothing does."""
    if not (args.goal or "").strip():
        return f"acp needs --goal TEXT, the agent's first prompt: {USAGE}"
    if not args.agent_command:
        return f"acp needs the agent's command after --: {USAGE}"
    return folder_and_command_problem(args)


def refused(args: argparse.Namespace) -> bool:
    """Says why and returns True when this `acp` command cannot run."""
    return said_refused(problem(args))


def about(args: argparse.Namespace) -> str:
    """The run in words, for the console's first frame."""
    return f"acp {' '.join(args.agent_command)} in {args.workdir.resolve()}"


def acp_options(args: argparse.Namespace) -> RunOptions:
    """`loopdeck acp`'s words as the run's options."""
    from loopdeck.operator.launch import AcpTarget, RunOptions

    workdir = args.workdir.resolve()
    target = AcpTarget(
        goal=args.goal,
        workdir=workdir,
        command=list(args.agent_command),
        check=args.check,
        mode=args.session_mode,
        env=dict(args.agent_env),
    )
    return RunOptions(
        env=f"acp:{workdir.name or workdir}",
        approve=args.approve,
        budget_overrides=budget_overrides(args),
        run_id=args.run_id,
        pause_at=args.pause_at,
        acp=target,
    )
