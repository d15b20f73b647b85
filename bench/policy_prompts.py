"""The prompts repo_triage's policy (`sample_envs/repo_triage/policy.toml`) saves: each of the
sample's scripts played offline, its asks counted. A write the policy's rule allows is one
prompt fewer; a write it leaves to the operator is still asked. Played under `--approve auto`
so that nobody has to answer: whoever approves, a scripted run's calls are the same, so each
ask a rule decided is a prompt the operator would have had without the policy.

    python bench/policy_prompts.py

The user's own policy is left out (`LOOPDECK_USER_POLICY=none`): the figures are the
sample's alone.
"""

from __future__ import annotations

import asyncio
import os
import sys

from loopdeck.core.events import ApprovalDecided, Event, EventBus
from loopdeck.operator.launch import RunOptions, prepare_run, resolve_env_dir

ENV = "repo_triage"


async def asks_of(script: str) -> tuple[int, int, str]:
    """(asks a rule decided, asks left to the operator, how the run stopped)."""
    bus = EventBus()
    events: list[Event] = []
    bus.subscribe(events.append)
    prepared = prepare_run(RunOptions(env=ENV, script=script, approve="auto"), bus=bus)
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    decided = [e for e in events if isinstance(e, ApprovalDecided)]
    ruled = sum(e.decided_by is not None and e.decided_by.who == "rule" for e in decided)
    return ruled, len(decided) - ruled, outcome.stop_reason.value


def main() -> int:
    os.environ["LOOPDECK_USER_POLICY"] = "none"
    scripts = sorted(resolve_env_dir(ENV).scenario.scripts)
    print(f"{'script':<10} {'asks':>5} {'by a rule':>10} {'prompts':>8}  stop")
    saved = asked = 0
    for script in scripts:
        ruled, left, stop = asyncio.run(asks_of(script))
        saved, asked = saved + ruled, asked + left
        print(f"{script:<10} {ruled + left:>5} {ruled:>10} {left:>8}  {stop}")
    total = saved + asked
    share = f" ({saved / total:.0%} of the asks)" if total else ""
    print(f"{'all':<10} {total:>5} {saved:>10} {asked:>8}  prompts saved: {saved}{share}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
