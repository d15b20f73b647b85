"""Text from outside is never markup and never steers the terminal (issue 24, items 4 and 5).

Every place that shows a string the model, a tool, an env or a user supplied is fed generated
hostile strings (an unclosed `[0`, Rich/Textual tags, a trailing backslash, ANSI CSI, OSC 52
and OSC 0 with BEL and ST, bidi overrides, lone surrogates, NUL): none raises, and what
reaches the screen or stdout carries no raw control character. One shared app per test: the
examples run on a worker thread and hand each paint to the app's loop.
"""

from __future__ import annotations

import asyncio
import io
import re
import shutil
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES
from console_helpers import screen_text, wait_until
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from rich.console import Console
from textual.app import App, ComposeResult

from loopdeck.core.approvals import ApprovalRequest
from loopdeck.core.events import CallStatus, Finding, ModelCalled
from loopdeck.core.outcome import CallRecord
from loopdeck.core.text import visible
from loopdeck.operator.fleet import FleetRow
from loopdeck.operator.inbox import PendingQuestion, PendingWrite
from loopdeck.operator.run_findings import RoundVerdict
from loopdeck.operator.runview import RunView
from loopdeck.operator.transcript import Entry, Transcript
from loopdeck.tui.calls_table import CallsTable
from loopdeck.tui.dialogs import ApprovalDialog
from loopdeck.tui.findings_panel import FindingsPanel
from loopdeck.tui.inbox import InboxScreen
from loopdeck.tui.panels import (
    BudgetPanel,
    CallDetail,
    GoalLine,
    OutcomePanel,
    PlanPanel,
    RunHeader,
)
from loopdeck.tui.question_dialog import QuestionDialog
from loopdeck.tui.shown import markup, toast
from loopdeck.tui.transcript_view import TranscriptLog, TranscriptScreen

SIZE = (160, 48)

# What a terminal obeys rather than shows: C0 but for newline and tab (tab only moves to the
# next stop, and `visible` keeps it on purpose), DEL and C1, and the bidi controls.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")

HOSTILE = [
    "[0", "items[0", "[5n", "[2J", "a[0]b", "[1;31m", "[bold]", "[b]x", "[/]", "[/b]", "[ ]",
    "[@click=app.quit]q[/]", "[link=https://x]y", "x\\", "\\[b]", "[", "]", "$goal", "${x}",
    "\x1b[31mred", "\x1b[2J", "\x1b]52;c;aGVsbG8=\x07", "\x1b]0;owned\x1b\\", "\x9b2J",
    "\x9d0;t\x9c", "\u202eevil", "\u2066x\u2069", "a\u2028b\u2029c", "\ud800", "\udfff", "\x00",
    "\x07", "\r", "\x7f", "\ufeff", "\t", "\n",
]  # fmt: skip
pieces = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=6))
hostile = st.one_of(st.sampled_from(HOSTILE), st.lists(pieces, min_size=1, max_size=6).map("".join))
ALL_AT_ONCE = " ".join(HOSTILE)  # every form, tried first in each place
# Generated examples per place: a few in `make test` (each paints a whole screen), many in
# `make stress`.
COUNTS = [pytest.param(5, id="few"), pytest.param(100, id="many", marks=pytest.mark.slow)]


def raw_controls(text: str) -> list[str]:
    return sorted(set(RAW.findall(text)))


def for_each_example(
    app: App[Any], check: Callable[..., Coroutine[Any, Any, None]], *strategies: Any, n: int
) -> Callable[[], None]:
    """A Hypothesis test, run on a thread, whose examples each run `check` on the app's loop."""
    loop = asyncio.get_running_loop()

    @settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.tuples(*strategies))
    @example((ALL_AT_ONCE,) * len(strategies))
    def examples(values: tuple[Any, ...]) -> None:
        asyncio.run_coroutine_threadsafe(check(*values), loop).result()

    return examples


def assert_clean(app: App[Any], where: str, *expected: str) -> None:
    """The console still runs, shows what it should, and no raw control reaches the screen."""
    assert app.is_running, f"{where}: the console exited"
    shown = screen_text(app)
    for words in expected:
        assert words in shown, f"{where}: {words!r} not on screen"
    assert not raw_controls(shown), f"{where}: raw {raw_controls(shown)!r} on screen"


# -- the run screen's panels, fed a RunView ---------------------------------------------------
class PanelsApp(App[None]):
    CSS = "Static, CallDetail, FindingsPanel, OutcomePanel { height: auto; max-height: 12; }"

    def compose(self) -> ComposeResult:
        yield RunHeader(id="run-header")
        yield GoalLine()
        yield PlanPanel()
        yield BudgetPanel()
        yield FindingsPanel()
        yield OutcomePanel()
        yield CallDetail()
        yield CallsTable(id="calls")
        yield TranscriptLog(id="transcript-panel")


def hostile_view(text: str) -> tuple[RunView, CallRecord]:
    row = CallRecord(
        call_id="c1", round=1, tool=text, args={text: text, "key": "items[0"}, risk="write",
        fingerprint="f" * 8, state_hash="s" * 8, status=CallStatus.FAILED,
        result={"error": {"message": text}},
    )  # fmt: skip
    view = RunView(run_id="run1", env=text, script=text, model=text, goal=text)
    view.started_at = datetime(2026, 1, 1, tzinfo=UTC)
    view.plans = {1: [text, f"2. {text}"]}
    view.plan_step = 1
    view.model_retries, view.last_model_error = 1, text
    view.findings.found = [
        RoundVerdict(1, "fail", [text, "[/]"]),
        Finding(run_id="r", round=1, text=text),
    ]
    view.stop_reason, view.stop_detail = "tool_failure", text
    view.calls["c1"] = row
    view.calls_seen = 1
    view.changed_calls.add("c1")
    view.decided["c1"] = f"rejected by {text}"
    view.budget = {"turns": (1.0, 10.0)}
    return view, row


@pytest.mark.parametrize(
    "n", [pytest.param(20, id="few"), pytest.param(300, id="many", marks=pytest.mark.slow)]
)
async def test_the_panels_show_hostile_text_as_written(n: int) -> None:
    app = PanelsApp()
    async with app.run_test(size=SIZE) as pilot:

        async def check(text: str) -> None:
            view, row = hostile_view(text)
            app.query_one(RunHeader).show(view, 1.0, 0.0, pending=1)
            app.query_one(GoalLine).show(view)
            app.query_one(PlanPanel).show(view)
            app.query_one(BudgetPanel).show(view, 1.0)
            app.query_one(FindingsPanel).show(view)
            app.query_one(OutcomePanel).show(view)
            app.query_one(CallDetail).show(row, decided=view.decided["c1"])
            app.query_one(CallsTable).fit(view)
            app.query_one(CallsTable).sync(view)
            log = app.query_one(TranscriptLog)
            log.clear()
            log.add([_entry(text)])
            await pilot.pause()
            assert_clean(app, "panels", "goal ", "round 1  FAIL")
            if text:  # as written: no tag taken, none dropped
                assert app.query_one(GoalLine)._painted == f"goal {visible(text)}"  # type: ignore[attr-defined]

        await asyncio.to_thread(for_each_example(app, check, hostile, n=n))


def _entry(text: str) -> Entry:
    event = ModelCalled(
        run_id="run1", role=text, round=1, model=text, prompt_tokens=1, completion_tokens=1,
        cost_usd=None, latency_ms=1.0, content=text,
    )  # fmt: skip
    entry = Transcript().apply(event)
    assert entry is not None
    return entry


# -- dialogs, toasts, the launcher --------------------------------------------------------------
class BareApp(App[None]):
    CSS = "TranscriptLog, #approval-box { border: round white; }"  # their titles are drawn


def hostile_request(text: str) -> ApprovalRequest:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return ApprovalRequest(
        run_id=text, call_id=text, tool=text, args={text: [text]}, args_sha256="a" * 64,
        state_hash=text, fingerprint=text, plan_step=text, requested_at=at,
        expires_at=at + timedelta(seconds=60), rationale=text, asked_again=text,
    )  # fmt: skip


@pytest.mark.parametrize(
    "n", [pytest.param(3, id="few"), pytest.param(100, id="many", marks=pytest.mark.slow)]
)
async def test_dialogs_and_toasts_show_hostile_text_as_written(n: int) -> None:
    app = BareApp()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    async with app.run_test(size=SIZE, notifications=True) as pilot:

        async def check(text: str, risk: str) -> None:
            app.clear_notifications()
            toast(app, text, title=text, severity="error")
            dialog = ApprovalDialog(hostile_request(text), 2, risk, lambda: now)
            await app.push_screen(dialog)
            dialog.action_reject()  # the keys line names the tool
            await wait_until(pilot, lambda: bool(dialog.query("Toast")))
            await pilot.pause()
            assert_clean(app, "approval dialog and toast", "Approve this write?", "Reject ")
            dialog.dismiss(None)
            answer = QuestionDialog(text, text)
            await app.push_screen(answer)
            await pilot.pause()
            assert_clean(app, "answer dialog", "The agent asks")
            answer.dismiss(None)
            app.clear_notifications()  # the toast would cover the subtitle
            found = TranscriptScreen(Transcript(), markup("[b]Transcript[/] · run $run", run=text))
            await app.push_screen(found)
            found._say(1, text)  # the search's subtitle quotes what was typed
            await pilot.pause()
            assert_clean(app, "transcript screen", "Transcript · run ", "“" if text.strip() else "")
            found.dismiss(None)
            await pilot.pause()

        await asyncio.to_thread(for_each_example(app, check, hostile, hostile, n=n))


@pytest.mark.parametrize("n", COUNTS)
async def test_the_inbox_the_fleet_and_the_launcher_show_hostile_text_as_written(
    n: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopdeck.tui import launcher
    from loopdeck.tui.fleet_screen import FleetScreen
    from loopdeck.tui.shared_state import SharedState

    monkeypatch.setattr(launcher, "litellm_module", lambda: None)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    db = tmp_path / "s.db"
    app = BareApp()
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        inbox = InboxScreen(db, lambda: now)
        await app.push_screen(inbox)
        await wait_until(pilot, lambda: inbox.inbox.counter != -1)

        async def in_inbox(text: str) -> None:
            write = PendingWrite(
                run_id=text, call_id=text, tool=text, args={text: text}, env=f"{text}/{text}",
                expires=now + timedelta(seconds=30), rationale=text, plan_step=text,
                asked_again=text,
            )  # fmt: skip
            question = PendingQuestion(run_id=text, call_id=text, question=text, env=text)
            for entry in (write, question):
                inbox.inbox.entries = [entry]
                inbox.render_inbox()
                await pilot.pause()
                assert_clean(app, "inbox", "Approvals inbox", "run ")

        await asyncio.to_thread(for_each_example(app, in_inbox, hostile, n=n))
        inbox.dismiss(None)

        fleet = FleetScreen(db, lambda: now, SharedState())
        await app.push_screen(fleet)

        async def in_fleet(text: str) -> None:
            row = FleetRow(
                run_id=text, env=text, script=text, model=text, state="awaiting_approval",
                stop_reason=text, started_at=now, pending=1, last_finding=text, runner=text,
                closest=text, closest_fraction=0.9,
            )  # fmt: skip
            app.clear_notifications()
            fleet.fleet.rows = {text: row}
            fleet.alerts = type(fleet.alerts)()  # each example's run is new to the alerts
            fleet.filter_text = text
            fleet.render_fleet()
            fleet.check_alerts()
            await wait_until(pilot, lambda: bool(fleet.query("Toast")))
            await pilot.pause()
            assert_clean(app, "fleet", "fleet · 1 run")

        await asyncio.to_thread(for_each_example(app, in_fleet, hostile, n=n))
        fleet.dismiss(None)

        async def in_launcher(text: str) -> None:
            envs = [
                {"env": text, "error": text, "path": text, "scripts": {}},
                {"env": text, "path": text, "scripts": {text: text}},
            ]
            monkeypatch.setattr(launcher, "list_envs", lambda: envs)
            screen = launcher.LauncherScreen()
            await app.push_screen(screen)
            await wait_until(pilot, lambda: screen.listed)
            await pilot.pause()
            assert_clean(app, "launcher", "choose an env and a script")
            screen.dismiss(None)

        await asyncio.to_thread(for_each_example(app, in_launcher, hostile, n=n))


# -- the headless summary, `check`, `runs` and the CLI's error messages -----------------------
def _outcome(text: str) -> Any:
    from loopdeck.core.outcome import RunOutcome
    from loopdeck.core.states import RunState, StopReason

    row = CallRecord(
        call_id=text, round=1, tool=text, args={text: text}, risk="read", fingerprint=text,
        state_hash=text, status=CallStatus.EXECUTED, result={text: text}, duration_ms=1.0,
    )  # fmt: skip
    return RunOutcome(
        run_id=text, env=text, script=text, model=text, mode="rounds", state=RunState.STOPPED,
        stop_reason=StopReason.TOOL_FAILURE, detail=text, rounds=1, model_calls=1,
        tool_calls=1, tokens=1, cost_usd=None, cost_unknown_calls=1, elapsed_s=1.0,
        findings=[text], calls=[row], stray=text,
    )  # fmt: skip


@pytest.mark.parametrize(
    "n", [pytest.param(50, id="few"), pytest.param(1000, id="many", marks=pytest.mark.slow)]
)
def test_the_headless_summary_prints_hostile_text_as_written(n: int) -> None:
    from loopdeck.cli.summary import print_summary

    @settings(max_examples=n, deadline=None)
    @given(hostile)
    @example(ALL_AT_ONCE)
    def printed(text: str) -> None:
        out = io.StringIO()
        print_summary(_outcome(text), Console(file=out, width=120, color_system=None))
        assert not raw_controls(out.getvalue()), out.getvalue()
        if text == "items[0":
            assert out.getvalue().count("items[0") >= 6  # shown, not taken for a tag

    printed()


def _toml(text: str) -> str:
    """A TOML basic string of `text` (see `_kept`)."""
    inner = "".join(
        c if " " <= c <= "~" and c not in '"\\' else f"\\U{ord(c):08x}" for c in _kept(text)
    )
    return f'"{inner}"'


def _kept(text: str) -> str:
    """What TOML can hold of `text`: no lone surrogate."""
    return "".join(c for c in text if not 0xD800 <= ord(c) <= 0xDFFF)


def _hostile_env(folder: Path, text: str) -> Path:
    """service_outage's env under a scenario whose name, script, plan and reply are `text`."""
    env = folder / "env"
    shutil.rmtree(env, ignore_errors=True)
    env.mkdir(parents=True)
    shutil.copy(SAMPLES / "service_outage" / "env.py", env / "env.py")
    name = _toml(text)
    (env / "scenario.toml").write_text(
        f'name = {name}\ngoal = {name}\nmodel = "scripted"\n'
        '[budgets]\nmax_rounds = 1\n[data]\ninitial_db_url = "a"\nlive_db_url = "b"\n'
        "initial_replicas = 1\n"
        f'[scripts.{name}]\ndescription = {name}\nexpect = {{ stop_reason = "goal_met" }}\n'
        f"planner = [{name}]\n[[scripts.{name}.executor]]\nfinal = {name}\n",
        encoding="utf-8",
    )
    return env


@pytest.mark.parametrize(
    "n", [pytest.param(0, id="every-form"), pytest.param(60, id="many", marks=pytest.mark.slow)]
)
def test_check_runs_and_the_cli_errors_print_hostile_text_as_written(
    n: int, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopdeck.cli import main

    monkeypatch.setenv("LOOPDECK_SAMPLE_ENVS", str(tmp_path))  # `envs` lists the hostile env

    phases = [Phase.explicit] if n == 0 else list(Phase)  # in `make test`: every form at once

    @settings(max_examples=max(n, 1), deadline=None, suppress_health_check=list(HealthCheck),
              phases=phases)  # fmt: skip
    @given(hostile.filter(lambda t: _kept(t).strip() and not _kept(t).startswith("-")))
    @example(ALL_AT_ONCE)
    def printed(text: str) -> None:
        env = _hostile_env(tmp_path, text)
        script = _kept(text)
        outputs = []
        for argv in (
            ("check", str(env)),
            ("envs",),
            ("run", str(env), "--script", script, "--headless"),
            ("runs",),
            ("run", str(env), "--script", f"{script}-not-there", "--headless"),
            ("run", str(tmp_path / f"no-{script}"), "--headless"),
            ("runs", "--db", str(tmp_path / f"no-{script}" / "s.db")),
        ):
            main(list(argv))
            out, err = capsys.readouterr()
            outputs.append(out + err)
            assert not raw_controls(out + err), f"{argv}: {raw_controls(out + err)!r}"
        if text == ALL_AT_ONCE:  # shown, not taken for tags
            assert "items[0 [5n [2J" in outputs[0] and "env [0 items[0" in outputs[2]
            assert "[bold] [b]x [/]" in outputs[1]  # `envs`: the goal as written

    printed()


# -- the regression: a call argument `items[0` seen in the console ----------------------------
def _items_env(folder: Path) -> Path:
    """service_outage whose solve script sets the key `items[0` (the env says no such key)."""
    env = folder / "items_env"
    shutil.copytree(SAMPLES / "service_outage", env, ignore=shutil.ignore_patterns("__py*"))
    toml = env / "scenario.toml"
    text = toml.read_text(encoding="utf-8")
    live = 'args = { key = "db_url", value = "postgres://orders-db-v2:5432/orders" }'
    toml.write_text(text.replace(live, live.replace('"db_url"', '"items[0"'), 1), "utf-8")
    return env


async def approve_until(
    pilot: Any, app: App[Any], done: Callable[[], bool], seen: Callable[[], None] = lambda: None
) -> None:
    """Approve each write the run asks for (the later steps write too) until `done`; `seen`
    looks at each approval dialog first."""
    for _ in range(400):
        if done():
            return
        if isinstance(app.screen, ApprovalDialog):
            await pilot.pause()
            seen()
            await pilot.press("a")
        await pilot.pause(0.05)
    raise AssertionError("the run did not end")


async def test_a_call_argument_items_0_is_shown_in_the_call_panel(tmp_path: Path) -> None:
    from console_helpers import console_app, finished, run_screen

    app = console_app(_items_env(tmp_path), "solve")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.pause()
        assert app.screen.request.args["key"] == "items[0"
        assert '"key": "items[0"' in screen_text(app)  # the dialog's arguments
        await approve_until(pilot, app, lambda: finished(app))
        screen = run_screen(app)
        assert screen is not None
        call = next(c for c in screen.view.calls.values() if c.args.get("key") == "items[0")
        screen.show_detail(call.call_id)
        await pilot.pause()
        detail = str(screen.query_one("#detail-body").render())
        assert '"key": "items[0"' in detail and "no config key 'items[0'" in detail
        assert app.is_running


@pytest.mark.slow  # a runner in another process: some seconds
async def test_a_call_argument_items_0_in_the_inbox_and_an_attached_run(tmp_path: Path) -> None:
    from store_helpers import start_runner, wait_for_pending

    from loopdeck.operator.store_link import StoreLink
    from loopdeck.tui.app import ConsoleStart, LoopdeckApp
    from loopdeck.tui.run_screen import RunScreen

    db = tmp_path / "s.db"
    runner = start_runner(_items_env(tmp_path), "solve", db, "--approve", "wait")
    try:
        pending = await wait_for_pending(db)
        assert pending["args"]["key"] == "items[0"
        app = LoopdeckApp(ConsoleStart.for_link(StoreLink(db, pending["run_id"]), db))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
            await pilot.press("escape")
            await pilot.press("i")
            await wait_until(pilot, lambda: isinstance(app.screen, InboxScreen))
            inbox = app.screen
            await wait_until(pilot, lambda: bool(inbox.entries))
            await pilot.pause()
            assert '"key": "items[0"' in str(inbox.query_one("#inbox-body").render())
            await pilot.press("escape")
            await wait_until(pilot, lambda: not isinstance(app.screen, InboxScreen))
            screen = next(s for s in app.screen_stack if isinstance(s, RunScreen))
            call = next(c for c in screen.view.calls.values() if c.args.get("key") == "items[0")
            screen.show_detail(call.call_id)
            await pilot.pause()
            assert '"key": "items[0"' in str(screen.query_one("#detail-body").render())
            assert app.is_running
    finally:
        runner.kill()


# -- a real console on a scripted run whose every word is hostile -----------------------------
def _hostile_run_env(folder: Path, text: str) -> Path:
    """The env's name, goal, plan, a write's arguments and the model's last words: `text`."""
    env = _hostile_env(folder, text)
    name = _toml(text)
    (env / "scenario.toml").write_text(
        f'name = {name}\ngoal = {name}\nmodel = "scripted"\n'
        '[budgets]\nmax_rounds = 1\n[data]\ninitial_db_url = "a"\nlive_db_url = "b"\n'
        "initial_replicas = 1\n"
        f"[scripts.hostile]\nplanner = [{name}]\n"
        f'[[scripts.hostile.executor]]\nstep = 1\ntool = "set_config"\n'
        f"args = {{ key = {name}, value = {name} }}\n"
        f"[[scripts.hostile.executor]]\nfinal = {name}\nreason_code = {name}\n",
        encoding="utf-8",
    )
    return env


@pytest.mark.parametrize(
    "n", [pytest.param(0, id="every-form"), pytest.param(15, id="many", marks=pytest.mark.slow)]
)
def test_a_console_on_a_hostile_run_shows_it_as_written(n: int, tmp_path: Path) -> None:
    from console_helpers import console_app, finished, run_screen

    async def watched(text: str) -> None:
        app = console_app(_hostile_run_env(tmp_path, text), "hostile")
        async with app.run_test(size=SIZE) as pilot:
            dialogs: list[str] = []

            def seen() -> None:
                assert_clean(app, "console: the write's approval", "Approve this write?")
                dialogs.append(text)

            await approve_until(pilot, app, lambda: finished(app), seen)
            await pilot.pause()
            screen = run_screen(app)
            assert screen is not None and app.screen is screen
            assert_clean(app, "console: the finished run", "goal ", "Stopped · ")
            assert dialogs or screen.view.stop_reason == "invalid_decision"  # an empty plan
            await pilot.press("t")
            await wait_until(pilot, lambda: isinstance(app.screen, TranscriptScreen))
            await pilot.pause()
            assert_clean(app, "console: the transcript", "Transcript · run ")

    phases = [Phase.explicit] if n == 0 else list(Phase)

    @settings(max_examples=max(n, 1), deadline=None, phases=phases,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(hostile.filter(str.strip))
    @example(ALL_AT_ONCE)
    def runs(text: str) -> None:
        asyncio.run(watched(text))

    runs()
