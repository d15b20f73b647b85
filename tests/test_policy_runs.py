"""A policy deciding a run's calls at the one place approvals are asked: allowed with a receipt
and recorded by the rule, denied with the rule told to the model, asked with the rule that
asked; `state.unchanged` stops allowing once the state moves, `rule.uses` counts, `run.tainted`
follows an injected tool output, shadow mode decides nothing and records everything, and
standing grants decide only where no rule does. Every decision says who made it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.events import (
    ApprovalDecided,
    ApprovalInvalidated,
    ApprovalRequested,
    CallProposed,
    Event,
    EventBus,
    PolicyDecided,
    PolicyInForce,
)
from loopdeck.core.grant_rules import GrantRule
from loopdeck.core.outcome import RunOutcome
from loopdeck.operator.grant_book import GrantBook
from loopdeck.operator.launch import PreparedRun, RunOptions, prepare_run
from loopdeck.operator.otel_attributes import mark
from loopdeck.operator.transcript import Transcript
from loopdeck.policy.record import read_run

POLICY_ENV = Path(__file__).parent / "envs" / "policy"
SRC_WRITES = """
untrusted = ["read_issue"]
[[rule]]
id = "src-writes"
effect = "allow"
when = 'call.tool == "write_file" && call.args.path.startsWith("src/") && state.unchanged'
[[rule]]
id = "no-etc"
effect = "deny"
when = 'has(call.args.path) && call.args.path.startsWith("/etc/")'
message = "nothing outside the repository"
[[rule]]
id = "after-untrusted"
effect = "ask"
when = "run.tainted"
message = "the run has read an issue anyone can write"
"""


@pytest.fixture(autouse=True)
def _no_user_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPDECK_USER_POLICY", "none")


class Operator:
    """Approves what it is asked (the first one with `grant`), keeping each request."""

    def __init__(self, grant: GrantRule | None = None) -> None:
        self.requests: list[ApprovalRequest] = []
        self.grant = grant

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        self.requests.append(request)
        grant = self.grant if len(self.requests) == 1 else None
        return ApprovalDecision(call_id=request.call_id, approved=True, by="cli:ana", grant=grant)

    @property
    def asked(self) -> list[str]:
        return [request.call_id for request in self.requests]


async def run_under(
    tmp_path: Path,
    script: str,
    policy: str,
    operator: Operator,
    on_event: Callable[[PreparedRun, Event], None] | None = None,
) -> tuple[RunOutcome, list[Event]]:
    path = tmp_path / "policy.toml"
    path.write_text(policy, encoding="utf-8")
    bus = EventBus()
    events: list[Event] = []
    bus.subscribe(events.append)
    options = RunOptions(env=str(POLICY_ENV), script=script, policy=path)
    prepared = prepare_run(options, approver=operator, bus=bus)
    if on_event is not None:
        bus.subscribe(lambda event: on_event(prepared, event))
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    return outcome, events


def _of(events: list[Event], cls: type[Any]) -> list[Any]:
    return [event for event in events if isinstance(event, cls)]


def _decided(events: list[Event]) -> dict[str, str]:
    """Each call's last decision: who decided it, as it was recorded."""
    return {e.call_id: e.decided_by.words() for e in _of(events, ApprovalDecided)}


async def test_a_rule_allows_with_a_receipt_and_the_rest_is_asked(tmp_path: Path) -> None:
    operator = Operator()
    outcome, events = await run_under(tmp_path, "writes", SRC_WRITES, operator)
    assert operator.asked == ["c3"]  # docs/c.md: no rule decides it
    (in_force,) = _of(events, PolicyInForce)
    assert in_force.run_kind == "python" and in_force.levels[0]["level"] == "run"
    sha = in_force.levels[0]["sha256"]
    decided = _decided(events)
    assert (
        decided["c1"]
        == decided["c2"]
        == decided["c4"]
        == f"rule src-writes (run policy {sha[:12]})"
    )
    assert decided["c3"] == "operator ana via cli"
    assert [c.status.value for c in outcome.calls] == ["executed"] * 4  # receipts held
    by_rule = next(e for e in _of(events, ApprovalDecided) if e.call_id == "c1")
    assert by_rule.decided_by.policy_sha256 == sha and by_rule.by.startswith("rule src-writes")
    # Requested and decided in events, as an operator's approval is, the policy's verdict first.
    kinds = [type(e).__name__ for e in events if getattr(e, "call_id", None) == "c1"]
    assert (
        kinds.index("PolicyDecided")
        < kinds.index("ApprovalRequested")
        < kinds.index("ApprovalDecided")
    )
    assert outcome.summary_json()["calls"][0]["decided_by"]["rule_id"] == "src-writes"


async def test_deny_refuses_and_tells_the_model_the_rule_and_its_message(tmp_path: Path) -> None:
    operator = Operator()
    outcome, events = await run_under(tmp_path, "passwd", SRC_WRITES, operator)
    assert operator.asked == []
    (call,) = outcome.calls
    assert call.status.value == "rejected"
    told = call.result["error"]["message"]  # what the model reads
    assert told == "denied by policy rule no-etc: nothing outside the repository"
    (decided,) = _of(events, ApprovalDecided)
    assert not decided.approved and decided.decided_by.rule_id == "no-etc"


async def test_a_state_unchanged_rule_stops_allowing_once_the_state_moves(tmp_path: Path) -> None:
    """c2 is allowed by the rule, then the world moves before it runs: asked again, the rule
    no longer holds and the operator decides. c4's state moves between its proposal and its
    ask: the rule's approval, bound to the state proposed, is found stale before it runs."""

    def drift(prepared: PreparedRun, event: Event) -> None:
        env: Any = prepared.runtime.env
        moved = isinstance(event, ApprovalDecided) and event.call_id == "c2" and event.approved
        if (moved and event.decided_by.who == "rule") or (
            isinstance(event, CallProposed) and event.call_id == "c4"
        ):
            env.drift += 1

    operator = Operator()
    outcome, events = await run_under(tmp_path, "writes", SRC_WRITES, operator, drift)
    assert operator.asked == ["c2", "c3", "c4"]
    c2 = [e for e in _of(events, PolicyDecided) if e.call_id == "c2"]
    assert [e.effect for e in c2] == ["allow", "none"]
    assert [e.facts["state"]["unchanged"] for e in c2] == [True, False]
    invalidated = _of(events, ApprovalInvalidated)
    assert invalidated[0].problem == "environment state changed since approval"
    c4 = [e for e in _of(events, PolicyDecided) if e.call_id == "c4"]
    assert [e.effect for e in c4] == ["allow", "none"]
    assert [e.facts["state"]["unchanged"] for e in c4] == [True, False]
    assert [e.call_id for e in invalidated] == ["c2", "c4"]
    assert _decided(events)["c2"] == "operator ana via cli"
    assert all(c.status.value == "executed" for c in outcome.calls)


async def test_rule_uses_count_each_decision_of_the_rule(tmp_path: Path) -> None:
    policy = '[[rule]]\nid = "three"\neffect = "allow"\nwhen = "rule.uses < 3"\n'
    operator = Operator()
    _, events = await run_under(tmp_path, "six", policy, operator)
    assert operator.asked == ["c4", "c5", "c6"]
    uses = [e.facts["rules"]["run:three"]["uses"] for e in _of(events, PolicyDecided)]
    assert uses == [0, 1, 2, 3, 3, 3]


async def test_the_run_is_tainted_once_it_has_read_untrusted_output(tmp_path: Path) -> None:
    operator = Operator()
    _, events = await run_under(tmp_path, "tainted", SRC_WRITES, operator)
    assert operator.asked == ["c3"]  # c1 before the issue was read: allowed
    (request,) = operator.requests
    asked_by = request.asked_by  # what the dialog shows: which rule asked, and why
    assert asked_by is not None and asked_by.rule_id == "after-untrusted"
    assert asked_by.why == "the run has read an issue anyone can write"
    verdicts = {e.call_id: e for e in _of(events, PolicyDecided)}
    assert verdicts["c1"].facts["run"]["tainted"] is False
    assert verdicts["c3"].facts["run"] == verdicts["c3"].facts["run"] | {
        "tainted": True,
        "read": ["write_file", "read_issue"],
    }
    assert verdicts["c3"].matched == ["run:src-writes (allow)", "run:after-untrusted (ask)"]
    (requested,) = [e for e in _of(events, ApprovalRequested) if e.call_id == "c3"]
    assert requested.asked_by == asked_by


async def test_shadow_mode_decides_nothing_and_records_everything(tmp_path: Path) -> None:
    shadow = 'mode = "shadow"\n' + SRC_WRITES.replace('effect = "allow"', 'effect = "deny"')
    operator = Operator()
    outcome, events = await run_under(tmp_path, "writes", shadow, operator)
    assert operator.asked == ["c1", "c2", "c3", "c4"]  # as if there were no policy
    verdicts = _of(events, PolicyDecided)
    assert [e.call_id for e in verdicts] == ["c1", "c2", "c3", "c4"]
    assert {e.effect for e in verdicts} == {"none"}
    assert [e.would for e in verdicts] == ["deny", "deny", "none", "deny"]
    assert verdicts[0].would_by is not None and verdicts[0].would_by.rule_id == "src-writes"
    assert set(_decided(events).values()) == {"operator ana via cli"}
    assert all(c.status.value == "executed" for c in outcome.calls)


async def test_a_grant_decides_only_where_no_rule_does(tmp_path: Path) -> None:
    """The operator grants `path=src/*` with c1; a rule that asks for src/b.py comes before
    the grant (its use kept); src/d.py is the grant's."""
    policy = '[[rule]]\nid = "b"\neffect = "ask"\nwhen = \'call.args.path == "src/b.py"\'\n'
    operator = Operator(grant=GrantRule.parse("path=src/*", uses=3))
    _, events = await run_under(tmp_path, "writes", policy, operator)
    assert operator.asked == ["c1", "c2", "c3"]
    decided = _decided(events)
    assert decided["c4"] == "grant g1, granted by cli:ana"
    book = GrantBook()
    for event in events:
        book.take(event)
    (row,) = book.of_run(events[0].run_id)
    assert row.used == ["c4"] and row.uses_left == 2
    c2 = next(e for e in _of(events, PolicyDecided) if e.call_id == "c2")
    assert c2.effect == "ask" and c2.grant_id == "g1"


async def test_every_decision_says_who_made_it_in_the_transcript_and_the_trace(
    tmp_path: Path,
) -> None:
    _, events = await run_under(tmp_path, "writes", SRC_WRITES, Operator())
    transcript = Transcript()
    for event in events:
        transcript.apply(event)
    texts = [entry.text for entry in transcript.entries]
    assert any(t.startswith("policy in force · sha256 ") for t in texts)
    assert any(t.startswith("policy · c1 · allow by rule src-writes (run policy ") for t in texts)
    ruled = next(t for t in texts if t.startswith("approved · c1 · by rule src-writes"))
    assert "not asked: rule src-writes of the run policy decides it (sha256 " in ruled
    assert any(t.startswith("policy · c3 · no rule decides: the operator does") for t in texts)
    decided = [m for e in events if (m := mark(e, content=False)) is not None
               and m.name == "loopdeck.approval.decided"]  # fmt: skip
    by_rule, by_operator = decided[0].attributes, decided[2].attributes
    assert by_rule["loopdeck.decided_by.who"] == "rule"
    assert by_rule["loopdeck.decided_by.rule_id"] == "src-writes"
    assert len(str(by_rule["loopdeck.decided_by.policy_sha256"])) == 64
    assert by_operator["loopdeck.decided_by.who"] == "operator"
    assert (
        by_operator["loopdeck.decided_by.channel"],
        by_operator["loopdeck.decided_by.operator"],
    ) == ("cli", "ana")
    verdicts = [m for e in events if (m := mark(e, content=False)) is not None
                and m.name == "loopdeck.policy.decided"]  # fmt: skip
    assert [v.attributes["loopdeck.policy.effect"] for v in verdicts] == [
        "allow",
        "allow",
        "none",
        "allow",
    ]
    (in_force,) = [m for e in events if (m := mark(e, content=False)) is not None
                   and m.name == "loopdeck.policy.in_force"]  # fmt: skip
    assert "loopdeck.policy.texts" not in in_force.attributes  # the policy's words are content
    assert (
        "loopdeck.policy.texts"
        in (mark(_of(events, PolicyInForce)[0], content=True) or in_force).attributes
    )


async def test_the_facts_recorded_are_the_facts_the_events_make(tmp_path: Path) -> None:
    """What `replay` makes of a run recorded without a policy is what a policy saw live."""

    def drift(prepared: PreparedRun, event: Event) -> None:
        if isinstance(event, CallProposed) and event.call_id == "c3":
            env: Any = prepared.runtime.env
            env.drift += 1

    _, events = await run_under(tmp_path, "tainted", SRC_WRITES, Operator(), drift)
    run_id = events[0].run_id
    recorded = read_run(run_id, events)
    folded = read_run(run_id, [e for e in events if not isinstance(e, PolicyDecided)])
    assert len(recorded.asks) == len(folded.asks) == 3  # c3 asked twice: its state moved
    for live, made in zip(recorded.asks, folded.asks, strict=True):
        assert live.policy is not None and made.policy is None
        for facts in (live.facts, made.facts):
            facts["run"]["budget"].pop("deadline_s")  # the agent's clock: read a moment apart
            facts.pop("time")
        assert live.facts == made.facts
