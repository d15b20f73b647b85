"""`loopdeck attach` and `loopdeck replay`: the console on a run recorded in the store."""

from __future__ import annotations

import argparse
import asyncio

from loopdeck.core.text import capped
from loopdeck.store import queries
from loopdeck.store.base import RUN_ID_SHOWN, StoreError
from loopdeck.store.opening import open_store


async def _check(args: argparse.Namespace) -> dict[str, object]:
    store = await open_store(args.db, create=False)
    try:
        await queries.mark_crashed_runners(store)
        row = await queries.run_row(store, args.run_id)
    finally:
        await store.close()
    if row is None:
        shown = capped(args.run_id, RUN_ID_SHOWN)
        raise StoreError(f"{store.path}: no run {shown!r} (see `loopdeck runs`)")
    return row


def open_remote_console(args: argparse.Namespace) -> int:
    from loopdeck.operator.links import ReplayLink
    from loopdeck.operator.store_link import StoreLink
    from loopdeck.tui.app import LoopdeckApp

    asyncio.run(_check(args))
    if args.command == "attach":
        app = LoopdeckApp(theme_name=args.theme, link=StoreLink(args.db, args.run_id))
    else:
        app = LoopdeckApp(theme_name=args.theme, link=ReplayLink(args.db, args.run_id))
    code = app.run()
    if app.farewell:
        from loopdeck.core.text import visible

        print(visible(app.farewell))
    return 0 if code is None else code
