"""loopdeck's ACP client against an agent that will not play by the rules (issue 36):
`tests/hostile_agent.py` on the `hostile_calc` env (`tests/envs/hostile_calc`, a calc.py whose
`add` subtracts; its goal check passes once it adds), driven through the real CLI (`loopdeck
run … --headless --json --db DB`), its events read back with `loopdeck export`.

- a write nobody approved (made unasked, after a rejection, before the answer) stops a guarded
  run `policy_block` naming the file, as an `unrequested_change`; under `auto` it is recorded;
- an agent that dies while its permission waits ends the run `tool_failure` at once, naming
  it and its stderr, the approval withdrawn;
- a permission loopdeck refuses on its own leaves a decision with its reason;
- the guard's key ignores ids and times that change every call, and tells apart calls that
  carry no rawInput;
- tokens are the turns' usage summed, the context window's fill shown apart, and a cancelled
  turn that reported nothing leaves them unknown;
- an edit of an agent's own call, which loopdeck cannot carry out, is refused.

Each test starts loopdeck and the agent (Python, the SDK's import, loopdeck's guardian) and
stops them, and asks the CLI again for what it decides or stored: seconds a test, past the 3 s
of `make test`, so all are `slow` (`make stress`). They wait on what the run does (the store,
the process), each wait bounded, and kill what they started.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hostile_agent import (
    BACKDOOR,
    DIES,
    FIXED,
    TARGET,
    TURN_OUTPUT,
    TURN_THOUGHT,
    TURN_TOKENS,
    WINDOW_SIZE,
    WINDOW_USED,
)
from store_helpers import open_existing

from loopdeck.store import queries

HERE = Path(__file__).parent
ENV = HERE / "envs" / "hostile_calc"
RUN_BOUND_S = 120.0  # a whole run, agent start to stop, on a loaded machine
PROMPT_BOUND_S = 30.0  # a run that has nothing left to wait for: its end
Events = list[dict[str, Any]]

pytestmark = pytest.mark.slow


# -- driving a run through the CLI -----------------------------------------------------------------
def agent_setting(mode: str, *args: str) -> str:
    """`--set` for `[agent] acp`: the hostile agent in MODE (a JSON array is a TOML array)."""
    return "agent.acp=" + json.dumps(["{python}", "{envdir}/../../hostile_agent.py", mode, *args])


class Runner:
    """`loopdeck run hostile_calc --headless --json` in a process of its own; its output in
    files (a pipe nobody reads while the test polls could fill and stall it)."""

    def __init__(
        self, tmp: Path, mode: str, approve: str, *flags: str, agent_args: tuple[str, ...] = ()
    ) -> None:
        self.db = tmp / "s.db"
        self.run_id = f"hostile-{mode}-{approve}"
        self.out = tmp / f"{self.run_id}.out"
        self.err = tmp / f"{self.run_id}.err"
        command = [
            sys.executable, "-m", "loopdeck", "run", str(ENV), "--headless", "--json",
            "--approve", approve, "--db", str(self.db), "--run-id", self.run_id,
            "--set", agent_setting(mode, *agent_args), *flags,
        ]  # fmt: skip
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen(command, stdout=out, stderr=err, text=True)

    def ended(self) -> bool:
        return self.proc.poll() is not None

    def wait(self, bound_s: float, what: str) -> dict[str, Any]:
        """The run's outcome (its `--json` line) once it ends within `bound_s`."""
        with contextlib.suppress(subprocess.TimeoutExpired):  # said below, unchained
            self.proc.wait(timeout=bound_s)
        if self.proc.poll() is None:
            pytest.fail(f"{what}: the run did not end within {bound_s:g} s\n{self.said()}")
        lines = [line for line in self.out.read_text().splitlines() if line.strip()]
        if not lines or not lines[-1].startswith("{"):
            pytest.fail(f"{what}: the run printed no outcome\n{self.said()}")
        outcome: dict[str, Any] = json.loads(lines[-1])
        return outcome

    def said(self) -> str:
        return f"stdout: {self.out.read_text()[-2000:]}\nstderr: {self.err.read_text()[-2000:]}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # the guardian takes the agent's group down with it
        self.proc.wait(timeout=30)

    def loopdeck(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "loopdeck", *args, "--db", str(self.db)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    def exported(self) -> Events:
        done = self.loopdeck("export", self.run_id)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]

    async def stored(self) -> Events:
        """The run's events stored so far (read in this process: polling the CLI is slow)."""
        store = await open_existing(self.db)  # None until the runner made the store
        if store is None:
            return []
        try:
            rows = await queries.events_after(store, self.run_id, 0)
        finally:
            await store.close()
        return [json.loads(row["body"]) for row in rows]

    async def pending(self, call_id: str) -> bool:
        store = await open_existing(self.db)
        if store is None:
            return False
        try:
            waiting = await queries.pending_approvals(store, self.run_id)
        finally:
            await store.close()
        return any(row["call_id"] == call_id for row in waiting)

    async def asked(self, call_id: str) -> bool:
        """Waits until `call_id` waits for approval (True) or the run ended first (False)."""

        async def asked_or_ended() -> bool:
            return self.ended() or await self.pending(call_id)

        await until(asked_or_ended, RUN_BOUND_S, f"{call_id} neither asked nor the run ended")
        return await self.pending(call_id)

    def asked_c1(self, asked: bool) -> None:
        if not asked:
            pytest.fail(f"the run ended before c1 waited for approval\n{self.said()}")


def run_to_end(tmp: Path, mode: str, approve: str, *flags: str) -> tuple[dict[str, Any], Events]:
    """A run that needs nobody: its outcome and its stored events."""
    runner = Runner(tmp, mode, approve, *flags)
    try:
        outcome = runner.wait(RUN_BOUND_S, f"{mode} under --approve {approve}")
    finally:
        runner.stop()
    return outcome, runner.exported()


def stored_of_kind(tmp: Path, mode: str, approve: str, kind: str) -> tuple[dict[str, Any], Events]:
    """A run that needs nobody: its outcome and its stored events of `kind` (one at least)."""
    outcome, events = run_to_end(tmp, mode, approve)
    found = of_kind(events, kind)
    assert found, f"{mode} under --approve {approve}: no {kind} event stored"
    return outcome, found


async def until(check: Callable[[], Any], bound_s: float, what: str) -> Any:
    """Polls `check` (sync or async) until it gives something true, within `bound_s`."""
    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        got = check()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return got
        await asyncio.sleep(0.1)
    pytest.fail(f"not within {bound_s:g} s: {what}")


def of_kind(events: Events, kind: str) -> Events:
    return [e for e in events if e["kind"] == kind]


def stop_of(events: Events) -> dict[str, Any]:
    stops = of_kind(events, "run_stopped")
    assert stops, f"no run_stopped among {[e['kind'] for e in events]}"
    return stops[-1]


# -- 1. writes nobody approved ---------------------------------------------------------------------
UNAPPROVED = ["write-unasked", "write-after-reject", "write-before-answer"]


def assert_stopped_on_unrequested(outcome: dict[str, Any], events: Events, what: str) -> None:
    assert outcome["stop_reason"] == "policy_block", (
        f"{what}: a write nobody approved must stop the run policy_block, even though the goal"
        f" check passes; it stopped {outcome['stop_reason']}: {outcome['detail']}"
    )
    assert TARGET in outcome["detail"], f"{what}: the stop names no {TARGET}: {outcome['detail']}"
    changes = of_kind(events, "unrequested_change")
    assert changes, f"{what}: no unrequested_change event stored"
    change = changes[-1]
    assert isinstance(change["after"], str) and change["after"], change
    for field in ("added", "changed", "removed"):
        assert isinstance(change[field], list), change
        assert all(not Path(p).is_absolute() for p in change[field]), change
    assert TARGET in change["added"] + change["changed"], change
    assert change["stops"] is True, change
    assert stop_of(events)["stop_reason"] == "policy_block"


@pytest.mark.parametrize("mode", UNAPPROVED)
def test_a_write_nobody_approved_stops_a_denied_run(tmp_path: Path, mode: str) -> None:
    outcome, events = run_to_end(tmp_path, mode, "deny")
    assert_stopped_on_unrequested(outcome, events, f"{mode} under --approve deny")


@pytest.mark.parametrize("mode", UNAPPROVED)
async def test_a_write_nobody_approved_stops_a_waiting_run(tmp_path: Path, mode: str) -> None:
    """Under `--approve wait` the operator rejects the agent's permission with `loopdeck
    reject` (when one is asked: `write-unasked` asks none, and the run may stop before the
    question of `write-before-answer`, whose write came first)."""
    runner = Runner(tmp_path, mode, "wait")
    try:
        what = f"{mode} under --approve wait"
        if await runner.asked("c1"):
            done = runner.loopdeck("reject", runner.run_id, "c1", "--reason", "not this edit")
            # It may lose to the run stopping on its own: what it said goes with a failure.
            what += f", rejected (reject exited {done.returncode}: {done.stdout}{done.stderr})"
        outcome = runner.wait(RUN_BOUND_S, what)
    finally:
        runner.stop()
    assert_stopped_on_unrequested(outcome, runner.exported(), f"{mode} under --approve wait")


def test_an_unasked_write_under_auto_is_recorded_and_does_not_stop_the_run(
    tmp_path: Path,
) -> None:
    outcome, changes = stored_of_kind(tmp_path, "write-unasked", "auto", "unrequested_change")
    assert TARGET in changes[-1]["added"] + changes[-1]["changed"], changes[-1]
    assert changes[-1]["stops"] is False, changes[-1]
    assert outcome["stop_reason"] != "policy_block", outcome["detail"]


# -- 2. an agent that dies while its permission waits ----------------------------------------------
async def test_an_agent_dying_while_its_permission_waits_ends_the_run_at_once(
    tmp_path: Path,
) -> None:
    runner = Runner(tmp_path, "exit-while-waiting", "wait")
    try:
        runner.asked_c1(await runner.asked("c1"))
        # The agent dies 1.5 s after asking; nobody decides anything.
        outcome = runner.wait(PROMPT_BOUND_S, "its agent died while c1 waited for approval")
    finally:
        runner.stop()
    assert outcome["stop_reason"] == "tool_failure", outcome["detail"]
    assert "hostile_agent.py" in outcome["detail"], f"the agent is not named: {outcome['detail']}"
    assert DIES in outcome["detail"], f"its stderr's tail is not said: {outcome['detail']}"
    events = runner.exported()
    assert [e["call_id"] for e in of_kind(events, "approval_withdrawn")] == ["c1"]
    statuses = {call["call_id"]: call["status"] for call in outcome["calls"]}
    assert statuses.get("c1") == "withdrawn", statuses
    finished = [e["status"] for e in of_kind(events, "tool_finished")]
    assert "outcome_unknown" not in [*statuses.values(), *finished], (statuses, finished)
    late = runner.loopdeck("approve", runner.run_id, "c1")
    assert late.returncode != 0, f"approving a withdrawn request succeeded: {late.stdout}"


# -- 3. a refusal leaves its reason ----------------------------------------------------------------
def test_a_permission_without_allow_once_is_refused_by_loopdeck_with_its_reason(
    tmp_path: Path,
) -> None:
    _, decided = stored_of_kind(tmp_path, "allow-always-only", "auto", "approval_decided")
    [refusal] = decided  # the permission loopdeck refused
    assert refusal["approved"] is False and refusal["by"] == "loopdeck", refusal
    assert re.search(r"allow[-_ ]once", refusal["reason"], re.IGNORECASE), refusal["reason"]


# -- 4. the guard's key ----------------------------------------------------------------------------
def test_ids_new_in_every_call_do_not_hide_a_repeated_read(tmp_path: Path) -> None:
    outcome, events = run_to_end(tmp_path, "volatile-ids", "auto")
    reads = [e for e in of_kind(events, "call_proposed") if e["tool"] == "read: cat calc.py"]
    assert len(reads) >= 2, [e["tool"] for e in of_kind(events, "call_proposed")]
    prints = [e["fingerprint"] for e in reads]
    assert len(set(prints)) == 1, (
        f"six reads of one file from one tree, their rawInput differing only in ids and a"
        f" start time, have {len(set(prints))} fingerprints: {prints}"
    )
    blocked = [c["call_id"] for c in outcome["calls"] if c["status"] == "blocked_repeat"]
    assert outcome["stop_reason"] == "no_progress" or blocked, outcome["detail"]


def test_two_edits_without_raw_input_are_keyed_and_shown_by_what_they_change(
    tmp_path: Path,
) -> None:
    _, events = run_to_end(tmp_path, "no-raw-input", "deny")
    edits = [e for e in of_kind(events, "call_proposed") if e["tool"].startswith("edit:")]
    assert len(edits) == 2, [e["tool"] for e in of_kind(events, "call_proposed")]
    assert edits[0]["fingerprint"] != edits[1]["fingerprint"], (
        "two edits of calc.py with different diffs, no rawInput, share one fingerprint"
        f" {edits[0]['fingerprint']}: the second is taken for a repeat of the first"
    )
    for edit in edits:
        assert edit["args"] != {}, f"{edit['call_id']} recorded with args {{}}"
        assert TARGET in json.dumps(edit["args"]), edit["args"]
    asked = of_kind(events, "approval_requested")
    assert [e["call_id"] for e in asked] == [e["call_id"] for e in edits], asked
    assert all(e["args"] != {} for e in asked), [e["args"] for e in asked]
    assert asked[0]["args"] != asked[1]["args"], "the two requests show the same args"


# -- 5. tokens -------------------------------------------------------------------------------------
def test_tokens_are_the_turns_usage_summed_and_the_window_is_shown_apart(tmp_path: Path) -> None:
    outcome, events = run_to_end(tmp_path, "context-usage", "auto", "--max-rounds", "3")
    assert len(of_kind(events, "model_called")) == 3, outcome["detail"]
    # Each turn's usage says 85 in, 20 out and 15 thought: the completion's tokens are its
    # output and its thoughts (ACP says them apart; both are the model's writing).
    split = {(e["prompt_tokens"], e["completion_tokens"]) for e in of_kind(events, "model_called")}
    written = TURN_OUTPUT + TURN_THOUGHT
    assert split == {(TURN_TOKENS - written, written)}, split
    assert outcome["tokens"] == 3 * TURN_TOKENS, (
        f"three turns of {TURN_TOKENS} tokens each, the window {WINDOW_USED} full each time:"
        f" tokens {outcome['tokens']}"
    )
    budgets = of_kind(events, "budget_updated")
    assert budgets[-1]["usage"]["tokens"][0] == 3 * TURN_TOKENS, budgets[-1]["usage"]
    windows = {(e.get("window_used"), e.get("window_size")) for e in budgets}
    assert (WINDOW_USED, WINDOW_SIZE) in windows, f"no budget_updated shows the window: {windows}"


async def test_a_cancelled_turn_that_reported_nothing_leaves_tokens_unknown(
    tmp_path: Path,
) -> None:
    runner = Runner(tmp_path, "context-usage", "auto", agent_args=("0",))  # no turn reports
    try:

        async def turn_started() -> bool:
            return runner.ended() or bool(of_kind(await runner.stored(), "plan_written"))

        await until(turn_started, RUN_BOUND_S, "the agent's first turn never started")
        assert not runner.ended(), f"the run ended before its turn was cancelled\n{runner.said()}"
        cancelled = runner.loopdeck("cancel", runner.run_id)
        assert cancelled.returncode == 0, cancelled.stderr
        outcome = runner.wait(PROMPT_BOUND_S, "cancelled mid-turn")
    finally:
        runner.stop()
    assert outcome["stop_reason"] == "cancelled", outcome["detail"]
    assert outcome["tokens"] is None, (
        f"a turn cancelled before it reported any usage: tokens {outcome['tokens']!r}, not"
        " unknown (null)"
    )
    assert stop_of(runner.exported())["stop_reason"] == "cancelled"


# -- 6. an edit loopdeck cannot carry out ----------------------------------------------------------
async def test_an_edit_of_an_agents_own_call_is_refused_naming_why(tmp_path: Path) -> None:
    runner = Runner(tmp_path, "write-after-reject", "wait")
    try:
        runner.asked_c1(await runner.asked("c1"))
        [asked] = of_kind(runner.exported(), "approval_requested")
        assert asked["call_id"] == "c1"
        why = asked.get("not_editable", "")
        assert why, (
            "the agent runs its own input, so an edit cannot be carried out, yet its"
            " approval_requested says nothing in not_editable"
        )
        edit = json.dumps({"file_path": "calc.py", "content": "def add(a, b):\n    return 5\n"})
        done = runner.loopdeck("approve", runner.run_id, "c1", "--args", edit)
        said = done.stdout + done.stderr
        assert done.returncode != 0, f"an edit of the agent's own call was taken: {said}"
        assert why in said, f"the refusal does not say why ({why!r}): {said}"
        assert await runner.pending("c1"), "a refused edit decided the call"
    finally:
        runner.stop()


# -- 6. a permission covers what it showed, once, in its turn --------------------------------------
@pytest.mark.parametrize(
    ("mode", "written"), [("swap-after-allow", BACKDOOR), ("write-next-turn", FIXED)]
)
def test_a_write_other_than_its_permission_showed_is_asked_and_recorded_as_written(
    tmp_path: Path, mode: str, written: str
) -> None:
    """Permitted to write the fix, the agent has loopdeck write something else (in its turn,
    or in the next): that write is asked on its own and recorded with what it wrote (it was
    written unasked, recorded nowhere, and the run ended goal_met)."""
    _, events = run_to_end(tmp_path, mode, "auto", "--max-rounds", "2")
    writes = [e for e in of_kind(events, "call_proposed") if e["args"].get("content") == written]
    assert len(writes) == 1, [(e["tool"], e["args"]) for e in of_kind(events, "call_proposed")]
    [write] = writes
    asked = [e["call_id"] for e in of_kind(events, "approval_requested")]
    assert write["call_id"] in asked, asked
    finished = [e for e in of_kind(events, "tool_finished") if e["call_id"] == write["call_id"]]
    assert [e["status"] for e in finished] == ["executed"], finished
