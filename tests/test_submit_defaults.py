"""`loopdeck submit` without `--script` or `--model`: the env's defaults are resolved at
submit, as a worker would resolve them, and kept with the run: `runs` shows them while it is
queued, and the worker that takes it up uses them, whatever the env says by then."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

from conftest import SAMPLES
from worker_helpers import lease_state, stored, with_a_worker

from loopdeck.core.events import RunStarted
from loopdeck.store.opening import open_store


def test_a_run_submitted_without_script_or_model_keeps_the_envs_defaults(
    tmp_path: Path, cli: Any
) -> None:
    env = tmp_path / "orders"
    shutil.copytree(SAMPLES / "order_support", env)
    db = tmp_path / "s.db"
    code, done, err = cli("submit", str(env), "--approve", "auto", "--json", "--db", str(db))
    assert code == 0 and done is not None, err
    run_id = str(done["run_id"])
    code, runs, err = cli("runs", "--json", "--db", str(db))
    assert code == 0 and runs is not None, err
    [run] = runs
    assert (run["state"], run["script"], run["model"]) == ("queued", "solve", "scripted"), run
    scenario = env / "scenario.toml"  # changed before a worker claims it: not what it uses
    scenario.write_text(scenario.read_text().replace('model = "scripted"', 'model = "nope/x"'))

    async def started() -> RunStarted:
        store = await open_store(db)
        try:

            async def ended() -> bool:
                return await lease_state(store, run_id) == "ended"

            await with_a_worker(db, ended)
            first = (await stored(store, run_id))[0]
            assert isinstance(first, RunStarted)
            return first
        finally:
            await store.close()

    first = asyncio.run(started())
    assert (first.model, first.script) == ("scripted", "solve")
