"""Pushes of the decisions a run waits on (`--notify`): one push per decision over a simulated
day of 200 asks in bursts, sent through Apprise to a loopback webhook receiver and a loopback
ntfy-compatible server; none for a decision taken in time; no content without
--notify-content and never a secret; settings from the flags, the environment and the config
file; what the console shows of a push."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from notify_receivers import ntfy, webhook

from loopdeck.core.events import (
    ApprovalDecided,
    ApprovalRequested,
    CallStatus,
    DecisionsPushed,
    OutcomeResolved,
    PushFailed,
    QuestionAnswered,
    QuestionAsked,
    RunStarted,
    ToolFinished,
)
from loopdeck.operator.notifications import Notifier
from loopdeck.operator.notify_config import NotifyConfigError, NotifySettings, resolved
from loopdeck.operator.push_channels import BadChannel, Channels
from loopdeck.operator.push_words import Asked, RunAbout, push_text
from loopdeck.operator.runview import RunView
from loopdeck.operator.transcript import Transcript

AFTER_S = 30.0
RUN = "day-run"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def quick_ntfy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Apprise waits 5.5 s between two requests to one ntfy server, in real time; the day
    here is simulated, its pushes come seconds apart: that pace is not what is tested."""
    from apprise.plugins.ntfy import NotifyNtfy

    monkeypatch.setattr(NotifyNtfy, "request_rate_per_sec", 0)


def _request(call_id: str, n: int) -> ApprovalRequested:
    now = datetime.now(UTC)
    return ApprovalRequested(
        run_id=RUN, call_id=call_id, tool="write_file", args={"path": f"f{n}.txt"},
        args_sha256=f"{n:064x}", state_hash="s" * 16, fingerprint="fp", plan_step=None,
        requested_at=now, expires_at=now + timedelta(seconds=300),
    )  # fmt: skip


def _ask(kind: str, n: int) -> tuple[Any, Any]:
    """An ask of `kind` and the event that takes it."""
    if kind == "approval":
        call = f"c{n}"
        decided = ApprovalDecided(run_id=RUN, call_id=call, approved=True, reason="", by="link")
        return _request(call, n), decided
    if kind == "question":
        question = f"q{n}"
        asked = QuestionAsked(run_id=RUN, question_id=question, question="which order?")
        return asked, QuestionAnswered(run_id=RUN, question_id=question, answer="1", by="link")
    call = f"c{n}"
    finished = ToolFinished(
        run_id=RUN, call_id=call, tool="restart", status=CallStatus.OUTCOME_UNKNOWN, result={},
        duration_ms=1.0,
    )  # fmt: skip
    return finished, OutcomeResolved(run_id=RUN, call_id=call, tool="restart", applied=True, by="x")


Day = tuple[list[tuple[float, int, Any]], set[str], set[str]]


def _day(rng: random.Random, asks: int) -> Day:
    """A day's timeline of asks in bursts (1 to 8 within 5 s, minutes apart), each taken in
    time (within `AFTER_S`) or late (two minutes to forty); the ids of all, and of those taken
    in time."""
    timeline: list[tuple[float, int, Any]] = []
    asked: set[str] = set()
    in_time: set[str] = set()
    t, n = 0.0, 0
    while n < asks:
        t += rng.uniform(120, 720)
        for _ in range(min(rng.randint(1, 8), asks - n)):
            n += 1
            asked_at = t + rng.uniform(0, 5)
            quick = rng.random() < 0.4
            wait = rng.uniform(1, AFTER_S - 5) if quick else rng.uniform(120, 2400)
            kind = rng.choice(["approval"] * 6 + ["question"] * 3 + ["outcome"])
            ask, taken = _ask(kind, n)
            timeline += [(asked_at, n, ask), (asked_at + wait, n, taken)]
            asked.add(f"{'q' if kind == 'question' else 'c'}{n}")
            if quick:
                in_time.add(f"{'q' if kind == 'question' else 'c'}{n}")
    return sorted(timeline, key=lambda item: (item[0], item[1])), asked, in_time


def test_a_day_of_200_asks_in_bursts_pushes_each_decision_once(quick_ntfy: None) -> None:
    clock, recorded = FakeClock(), []
    with webhook() as (hook, hooked), ntfy() as (topic, published):
        settings = NotifySettings((hook, topic), after_s=AFTER_S)
        notifier = Notifier(
            settings, Channels(settings.urls), clock=clock, inline=True,
            emit=lambda cls, **fields: recorded.append(cls(**fields)),
        )  # fmt: skip
        notifier.take(RunStarted(run_id=RUN, env="order_support", script="solve", model="m",
                                 mode="react", goal="g", budget={}))  # fmt: skip
        timeline, asked, in_time = _day(random.Random(40), 200)
        for at, _, event in timeline:
            while (wake := notifier.plan.wake()) is not None and wake <= at:
                clock.now = wake
                notifier.tick()
            clock.now = at
            notifier.take(event)
        assert notifier.plan.waiting == {}  # every decision was taken by the day's end

        pushes = [event for event in recorded if isinstance(event, DecisionsPushed)]
        pushed = Counter(d.call_id for push in pushes for d in push.decisions)
        assert pushes and all(push.channels == ["json", "ntfy"] for push in pushes)
        assert max(pushed.values()) == 1  # one push per decision, at most
        assert not in_time & set(pushed)  # none for a decision taken in time
        assert len(asked) == 200
        assert set(pushed) == asked - in_time  # every decision that waited was pushed
        assert any(len(push.decisions) > 1 for push in pushes)  # a burst goes in one push
        # Each push reached both channels, as Apprise sent it.
        assert len(hooked.wait_for(len(pushes))) == len(pushes)
        assert len(published.wait_for(len(pushes))) == len(pushes)
        first = published.items[0]["body"]
        assert first["topic"] == "decisions" and first["title"].startswith("loopdeck:")
        said = " ".join(item["body"]["message"] for item in hooked.items)
        assert all(f"[{call}]" in said for call in pushed)
        print(
            f"\nclosing note: {len(pushes)} pushes for {len(asked)} decisions over a day"
            f" ({len(in_time)} taken in time, never pushed): {len(pushes) / len(asked):.2f}"
            f" pushes per decision, {len(pushes) / len(pushed):.2f} per decision pushed"
        )


def test_a_push_carries_no_content_without_the_flag_and_never_a_secret() -> None:
    secret = "sk-live-4f9c2b7e1d"
    asked = Asked(
        "c3", "approval", "approve write_file (write)", datetime.now(UTC),
        content=(("arguments", f'{{"token": "{secret}", "path": "notes.txt"}}'),
                 ("why", "the model's own words")),
    )  # fmt: skip
    run = RunAbout("r1", "env/solve", "/tmp/runs.db", {"turns": (4, 30), "cost_usd": (0.01, 0.5)})
    secrets = {secret: "OPENAI_API_KEY"}
    _, body = push_text(run, [asked], content=False, secrets=secrets)
    assert "notes.txt" not in body and "the model's own words" not in body
    assert "approve write_file (write) [c3]" in body and "turns 4/30" in body
    assert "loopdeck approve r1 c3 --db /tmp/runs.db" in body
    _, with_content = push_text(run, [asked], content=True, secrets=secrets)
    assert "notes.txt" in with_content and "the model's own words" in with_content
    assert secret not in with_content and "[OPENAI_API_KEY left out]" in with_content


def test_the_environments_secrets_are_found_by_their_names() -> None:
    from loopdeck.operator.push_words import secret_values

    environ = {"ANTHROPIC_API_KEY": "sk-ant-123456", "PATH": "/usr/bin:/bin",
               "GH_TOKEN": "ghp_abcdef", "DEBUG": "1", "PGPASSWORD": "hunter22"}  # fmt: skip
    found = secret_values(environ)
    assert set(found.values()) == {"ANTHROPIC_API_KEY", "GH_TOKEN", "PGPASSWORD"}


def test_settings_come_from_the_flags_then_the_environment_then_the_config(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('notify = ["ntfy://a/t"]\nnotify_after = 45\nnotify_content = true\n')
    environ = {"LOOPDECK_CONFIG": str(config)}
    assert resolved(environ=environ) == NotifySettings(("ntfy://a/t",), 45.0, True)
    environ["LOOPDECK_NOTIFY"] = "json://b:1/x  ntfy://c/t"
    assert resolved(environ=environ).urls == ("json://b:1/x", "ntfy://c/t")
    assert resolved(["slack://T/B/C"], 5, environ=environ) == NotifySettings(
        ("slack://T/B/C",), 5.0, True
    )
    assert resolved(environ={"LOOPDECK_CONFIG": "none"}) == NotifySettings()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('notify = "ntfy://a/t"', "notify must be a list of URLs"),
        ('notfy = ["ntfy://a/t"]', "unknown key 'notfy'"),
        ("notify_after = -1", "notify_after must be 0 or more seconds"),
        ("notify = [", "not TOML"),
    ],
)
def test_a_config_that_cannot_be_read_is_refused_naming_it(
    tmp_path: Path, text: str, said: str
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(text)
    with pytest.raises(NotifyConfigError, match=said) as caught:
        resolved(environ={"LOOPDECK_CONFIG": str(config)})
    assert str(config) in str(caught.value)


def test_a_url_apprise_cannot_read_is_refused_without_its_secret() -> None:
    with pytest.raises(BadChannel, match="not a URL Apprise can send to") as caught:
        Channels(["ntfy://a/t", "nosuch://user:hunter22@host/tok-abc"])
    assert "hunter22" not in str(caught.value) and "tok-abc" not in str(caught.value)


def test_a_url_apprise_cannot_read_is_refused_naming_where_it_was_said(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = ("run", "order_support", "--headless", "--db", str(tmp_path / "s.db"))
    monkeypatch.setenv("LOOPDECK_NOTIFY", "ntfy://a/t nosuch://user:hunter22@host/tok")
    code, _, err = cli(*run)
    assert code == 2 and err.startswith("loopdeck: LOOPDECK_NOTIFY nosuch://host/…: not a URL")
    assert "--notify" not in err and "hunter22" not in err
    code, _, err = cli(*run, "--notify", "bogus")  # the flag wins, and is named
    assert code == 2 and err.startswith("loopdeck: --notify (not a URL): not a URL")
    monkeypatch.delenv("LOOPDECK_NOTIFY")
    config = tmp_path / "config.toml"
    config.write_text('notify = ["bogus"]\n')
    monkeypatch.setenv("LOOPDECK_CONFIG", str(config))
    code, _, err = cli(*run)
    assert code == 2 and err.startswith(f"loopdeck: {config}: notify (not a URL): not a URL")


def test_a_channel_that_does_not_take_a_push_is_said_and_tried_again(quick_ntfy: None) -> None:
    clock, recorded = FakeClock(), []
    with webhook() as (hook, hooked):
        dead = "json://127.0.0.1:9/nobody"  # the discard port: nothing listens
        settings = NotifySettings((hook, dead), after_s=AFTER_S)
        notifier = Notifier(settings, Channels(settings.urls), clock=clock, inline=True,
                            emit=lambda cls, **fields: recorded.append(cls(**fields)))  # fmt: skip
        notifier.take(_request("c1", 1))
        clock.now = AFTER_S
        notifier.tick()
        [push] = recorded
        assert push.channels == ["json"] and push.failed[0].startswith("json: ")
        assert len(hooked.wait_for(1)) == 1
        assert notifier.plan.wake() is None  # one channel took it: pushed, not again


def test_a_push_no_channel_took_is_recorded_as_failed_on_each_and_tried_again() -> None:
    clock, recorded = FakeClock(), []
    dead = ("json://127.0.0.1:9/nobody", "json://127.0.0.1:9/nobody-either")
    notifier = Notifier(
        NotifySettings(dead, after_s=AFTER_S), Channels(dead), clock=clock, inline=True,
        emit=lambda cls, **fields: recorded.append(cls(**fields)),
    )  # fmt: skip
    notifier.take(_request("c1", 1))
    clock.now = AFTER_S
    notifier.tick()
    [push] = recorded
    # Recorded as what happened: a push that failed, never `decisions_pushed` with no channel.
    assert isinstance(push, PushFailed) and push.kind == "push_failed"
    assert len(push.failed) == 2 and [d.call_id for d in push.decisions] == ["c1"]
    assert all(why.startswith("json: ") for why in push.failed)
    view, transcript = RunView(), Transcript()
    view.apply(push)
    transcript.apply(push)
    assert view.pushed["c1"].startswith("push failed at ")  # never said as pushed
    assert transcript.entries[-1].title == "push failed · c1 (approval)"
    assert notifier.plan.wake() == 2 * AFTER_S  # tried again


def test_the_console_shows_the_push_beside_the_decision_and_the_channel_once_taken() -> None:
    from loopdeck.core.events import CallProposed
    from loopdeck.core.push_events import PushedDecision

    view, transcript = RunView(), Transcript()
    until = datetime.now(UTC) + timedelta(minutes=5)
    events = [
        CallProposed(
            run_id=RUN, call_id="c1", round=1, tool="write_file", args={}, risk="write",
            fingerprint="f", state_hash="s",
        ),
        _request("c1", 1),
        DecisionsPushed(
            run_id=RUN, decisions=[PushedDecision(call_id="c1", what="approval", link_until=until)],
            channels=["ntfy"], server="https://box",
        ),
    ]  # fmt: skip
    for event in events:
        view.apply(event)
        transcript.apply(event)
    assert view.decided["c1"].startswith("pushed via ntfy at ")
    assert "link until" in view.decided["c1"]
    entry = transcript.entries[-1]
    assert entry.title == "pushed · c1 (approval) · via ntfy"
    assert "one-time links to https://box" in entry.body
    view.apply(ApprovalDecided(run_id=RUN, call_id="c1", approved=True, reason="", by="link"))
    assert view.decided["c1"].startswith("approved by link at ")
    assert "(pushed via ntfy at " in view.decided["c1"]


async def test_a_run_whose_decision_is_taken_in_time_pushes_nothing(tmp_path: Path) -> None:
    """A real run, recorded: its write waits, is approved through the store at once, and the
    run ends with no push (the webhook took nothing, no `decisions_pushed` event)."""
    from store_helpers import wait_for_pending

    from loopdeck.cli.runs import run_recorded_headless
    from loopdeck.operator import records
    from loopdeck.operator.launch import RunOptions

    db = tmp_path / "runs.db"
    with webhook() as (hook, hooked):
        options = RunOptions(env="order_support", script="solve", approve="wait",
                             notify=NotifySettings((hook,), after_s=AFTER_S))  # fmt: skip
        run = asyncio.create_task(run_recorded_headless(options, db))
        pending = await wait_for_pending(db)
        async with records.opened(db) as store:
            run_id, call_id = pending["run_id"], pending["call_id"]
            decided = await records.decide(
                store, run_id, call_id, approved=True, by="cli", reason="", tell=print
            )
            assert decided.won
        outcome = await run
        async with records.opened(db) as store:
            kinds = [line async for line in records.event_bodies(store, outcome.run_id)]
    assert outcome.stop_reason.value == "goal_met"
    assert not any('"decisions_pushed"' in line for line in kinds)
    assert len(hooked) == 0


async def test_a_failed_push_is_read_as_failed_by_the_inbox_and_a_later_one_as_pushed(
    tmp_path: Path,
) -> None:
    """The inbox reads `push_failed` beside `decisions_pushed` (the last of each decision's):
    its entry says the push failed, then where the next push went."""
    from test_decision_refusals import Recorded

    from loopdeck.core.push_events import PushedDecision
    from loopdeck.core.states import RunState
    from loopdeck.operator.inbox import read_entries
    from loopdeck.operator.otel_attributes import mark
    from loopdeck.store.opening import open_store
    from loopdeck.store.writer import EventWriter

    store = await open_store(tmp_path / "s.db")
    decided = [PushedDecision(call_id="c1", what="approval")]
    try:
        run = Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1")
        run.add(PushFailed, decisions=decided, failed=["json: connection refused"])
        writer = EventWriter(store, approve_mode="wait")
        for event in run.events:
            writer(event)
        await writer.flush()
        [entry] = await read_entries(store)
        assert entry.pushed.startswith("push failed at ")
        assert entry.pushed.endswith(": json: connection refused")
        writer(run.add(DecisionsPushed, decisions=decided, channels=["ntfy"]).events[-1])
        await writer.flush()
        [entry] = await read_entries(store)
        assert entry.pushed.startswith("pushed via ntfy at ")
    finally:
        await store.close()
    # A push is no span event in a trace, failed or not (the trace takes the new kind).
    assert [mark(event, content=True) for event in run.events[-2:]] == [None, None]


def test_the_consoles_push_notes_say_their_times_as_the_push_and_the_link_page_do() -> None:
    """The call panel's and the inbox's note of a push: its times with their UTC offset (and
    their date when not today), as the push's text and the link's page say them, so the
    operator reads one time in all three (`core.text.moment_words`)."""
    from loopdeck.core.push_events import PushedDecision, PushFailed
    from loopdeck.core.text import moment_words
    from loopdeck.operator.push_words import pushed_notes

    at = datetime(2026, 12, 5, 9, 30, 1, tzinfo=UTC)
    until = at + timedelta(minutes=5)
    decision = PushedDecision(call_id="c1", what="approval", link_until=until)
    pushed = DecisionsPushed(
        run_id=RUN, decisions=[decision], channels=["ntfy"], server="https://box", at=at
    )
    assert pushed_notes(pushed) == {
        "c1": f"pushed via ntfy at {moment_words(at)}, link until {moment_words(until)}"
    }
    failed = PushFailed(run_id=RUN, decisions=[decision], failed=["ntfy: refused"], at=at)
    assert pushed_notes(failed) == {"c1": f"push failed at {moment_words(at)}: ntfy: refused"}


def _pushed_by_another(call_id: str, ask: str) -> DecisionsPushed:
    from loopdeck.core.push_events import PushedDecision

    return DecisionsPushed(run_id=RUN, decisions=[PushedDecision(call_id=call_id,
                           what="approval", ask=ask)], channels=["json"])  # fmt: skip


def test_a_write_asked_again_is_pushed_though_the_log_says_its_first_ask_was() -> None:
    """A worker's push of a call's first ask is recorded after the call was asked again (the
    run then moved): the worker that takes it up pushes the second ask, once; a push recorded
    before pushes named their ask still counts for the call."""
    from loopdeck.operator.link_tokens import ask_of_request

    clock, recorded = FakeClock(), []
    with webhook() as (hook, hooked):
        settings = NotifySettings((hook,), after_s=AFTER_S)
        notifier = Notifier(settings, Channels(settings.urls), clock=clock, inline=True,
                            emit=lambda cls, **fields: recorded.append(cls(**fields)))  # fmt: skip
        first, again = _request("c1", 1), _request("c1", 2)
        notifier.take(first)
        notifier.take(again)
        first_ask = ask_of_request("c1", first.args_sha256, first.state_hash, first.requested_at)
        notifier.take(_pushed_by_another("c1", first_ask))
        assert notifier.owes()
        clock.now = AFTER_S
        notifier.tick()
        [push] = recorded
        assert [d.call_id for d in push.decisions] == ["c1"] and push.decisions[0].ask
        assert push.decisions[0].ask != first_ask and len(hooked.wait_for(1)) == 1
        other = Notifier(settings, Channels(settings.urls), clock=clock, inline=True)
        other.take(_request("c2", 3))
        other.take(_pushed_by_another("c2", ""))  # an older loopdeck's record: the call's
        assert not other.owes()


def test_pushes_another_worker_tried_and_no_channel_took_count_among_the_tries() -> None:
    from loopdeck.core.push_events import PushedDecision
    from loopdeck.operator.push_plan import TRIES

    clock = FakeClock()
    dead = ("json://127.0.0.1:9/nobody",)
    notifier = Notifier(NotifySettings(dead, after_s=AFTER_S), Channels(dead), clock=clock,
                        inline=True)  # fmt: skip
    from loopdeck.operator.link_tokens import ask_of_request

    request = _request("c1", 1)
    notifier.take(request)
    ask = ask_of_request("c1", request.args_sha256, request.state_hash, request.requested_at)
    failed = PushFailed(run_id=RUN, decisions=[PushedDecision(call_id="c1", what="approval",
                        ask=ask)], failed=["json: refused"])  # fmt: skip
    for _ in range(TRIES - 1):
        notifier.take(failed)
        assert notifier.owes()
    notifier.take(failed)
    assert not notifier.owes() and notifier.plan.wake() is None  # given up, as its tries were


def test_a_push_no_channel_took_counts_once_though_its_own_record_comes_back_to_it() -> None:
    """The notifier hears the run's bus, its own `push_failed` too: that try is counted once,
    so a decision is tried its `TRIES` times, not fewer."""
    from loopdeck.core.events import EventBus

    clock, bus = FakeClock(), EventBus()
    dead = ("json://127.0.0.1:9/nobody",)
    notifier = Notifier(NotifySettings(dead, after_s=AFTER_S), Channels(dead), clock=clock,
                        inline=True, emit=bus.emit)  # fmt: skip
    bus.subscribe(notifier.take)
    failures: list[Any] = []
    bus.subscribe(lambda e: failures.append(e) if isinstance(e, PushFailed) else None)
    notifier.take(_request("c1", 1))
    clock.now = AFTER_S
    notifier.tick()
    assert len(failures) == 1 and [w.tries for w in notifier.plan.waiting.values()] == [1]
    assert notifier.plan.wake() == 2 * AFTER_S  # tried again


def _a_worker_at_1000() -> tuple[FakeClock, Notifier]:
    """A notifier whose clock reads 1,000 s, its channel one that takes nothing."""
    clock = FakeClock()
    clock.now = 1000.0
    settings = NotifySettings(("json://127.0.0.1:9/nobody",), after_s=AFTER_S)
    return clock, Notifier(settings, Channels(settings.urls), clock=clock, inline=True)


def test_a_decision_read_from_a_moved_runs_log_is_due_after_it_was_asked_not_after_the_move() -> (
    None
):
    """A worker takes a run up from its log: an ask made 25 s ago is due 5 s from now (30 s
    after it was asked), and another worker's push 3 s ago keeps the pushes' gap from it."""
    from loopdeck.core.push_events import PushedDecision

    clock, notifier = _a_worker_at_1000()
    asked = _request("c1", 1)
    earlier = asked.requested_at - timedelta(seconds=25)
    old_ask = asked.model_copy(update={"requested_at": earlier, "at": earlier})
    heard = Notifier(notifier.settings, notifier.channels, clock=clock, inline=True)
    heard.take(old_ask)  # heard live (a fork's rebuild stamps its source's times): as of now
    assert heard.plan.wake() == 1000.0 + AFTER_S
    notifier.read_log([old_ask])
    wake = notifier.plan.wake()
    assert wake is not None and 990.0 < wake <= 1005.0, wake  # not 1030: after the move
    three_s_ago = datetime.now(UTC) - timedelta(seconds=3)
    pushed = DecisionsPushed(
        run_id=RUN,
        channels=["json"],
        at=three_s_ago,
        decisions=[PushedDecision(call_id="c0", what="approval")],
    )
    notifier.read_log([pushed])
    wake, gap = notifier.plan.wake(), notifier.plan.gap_s
    assert wake is not None and 1005.0 < wake <= 997.0 + gap, wake  # the gap kept from it


def test_a_push_another_worker_tried_in_vain_is_tried_again_after_notify_after_from_its_try() -> (
    None
):
    from loopdeck.core.push_events import PushedDecision

    _, notifier = _a_worker_at_1000()
    asked = _request("c1", 1)
    long_ago = asked.requested_at - timedelta(seconds=100)
    tried = PushFailed(
        run_id=RUN,
        decisions=[PushedDecision(call_id="c1", what="approval")],
        failed=["json: refused"],
        at=asked.requested_at - timedelta(seconds=5),
    )
    notifier.read_log([asked.model_copy(update={"requested_at": long_ago, "at": long_ago}),
                       tried])  # fmt: skip
    wake = notifier.plan.wake()
    assert wake is not None and 1000.0 < wake <= 1000.0 - 5 + AFTER_S, wake  # not at once
