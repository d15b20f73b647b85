"""`loopdeck attach` and `loopdeck replay`: the console on a run recorded in the store."""

from __future__ import annotations

import argparse
import asyncio

from loopdeck import tuning


def open_remote_console(args: argparse.Namespace) -> int:
    """The run is looked up first (a dead runner marked crashed), so a wrong id or store is
    named here, before any console opens (and no console opens without a terminal)."""
    from loopdeck.cli.parser import EXIT_BAD_INPUT
    from loopdeck.cli.runs import refused_without_terminal

    if refused_without_terminal(args.command):
        return EXIT_BAD_INPUT
    from loopdeck.core.text import visible
    from loopdeck.operator.links import ReplayLink
    from loopdeck.operator.records import check_run
    from loopdeck.operator.store_link import StoreLink
    from loopdeck.tui.app import ConsoleStart, LoopdeckApp

    asyncio.run(check_run(args.db, args.run_id))
    tuning.for_console()
    link = (StoreLink if args.command == "attach" else ReplayLink)(args.db, args.run_id)
    # The store it was given: the farewell's replay hint names it (`--db`), `i` reads it.
    app = LoopdeckApp(ConsoleStart.for_link(link, args.db), theme_name=args.theme)
    code = app.run()
    if app.farewell:
        print(visible(app.farewell))
    return 0 if code is None else code
