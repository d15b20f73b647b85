"""A claimed run that has a log goes on from it (`core/replay_log.py`), or, when it cannot,
ends `crashed` saying why: its env kept its state in its worker's memory, lost with it (it
has no `reopen`), its loop is an agent's own (an agent's session lives in its process), or the
run rebuilt from its log did something else than the log says. `unresumable` says why in words
true before any worker is lost: a worker that stops on purpose says them too
(`worker._stop_unmovable`), as do `runs` and a refused decision once its lease lapsed.

A run that can go on: its env reopened where its state lives (`env.reopen(run_id)`), its
runtime rebuilt from the log, and its move recorded (`RunMoved`); a write it was asked to
decide before the move is asked in the store's row as it was, its expiry counted again from
the move (`Refreshed`).
"""

from __future__ import annotations

from typing import Any

from loopdeck.core.agent_loop import AgentLoop
from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.events import (
    EVENTS_ADAPTER,
    ApprovalRequested,
    ApprovalWithdrawn,
    Event,
    RunStarted,
    RunStopped,
    StateChanged,
)
from loopdeck.core.runtime import Runtime
from loopdeck.core.states import RunState, StopReason
from loopdeck.store import asking_clock, leases
from loopdeck.store.approver import Recording, StoreApprover
from loopdeck.store.base import Store
from loopdeck.store.writer import EventWriter


async def load_log(store: Store, run_id: str) -> list[Event]:
    """The run's own events (its runners', not a reader's), in order."""
    rows = await store.fetchall(
        "SELECT body FROM events WHERE run_id = ? AND origin IS NULL ORDER BY seq", (run_id,)
    )
    if not rows:
        return []
    return list(EVENTS_ADAPTER.validate_json("[" + ",".join(row[0] for row in rows) + "]"))


def stopped(log: list[Event]) -> bool:
    return any(isinstance(event, RunStopped) for event in log)


def unresumable(runtime: Runtime, *, reopened: bool = True) -> str | None:
    """Why this run cannot be rebuilt from a log in this worker (and, `reopened`, go on
    where its env's state is); None when it can."""
    env = runtime.env
    if not isinstance(runtime.agent, AgentLoop):
        return (
            "its agent drives its own loop in its own process (an agent's session cannot be"
            " rebuilt from the log)"
        )
    return env.not_reopenable() if reopened else None


async def record_stop(
    store: Store, run_id: str, epoch: int, log: list[Event], detail: str, started: dict[str, Any]
) -> None:
    """A stop the run's runtime could not record itself (`crashed`, `detail` saying why),
    written under the lease after its log, its pending requests withdrawn with it. A run
    with no log gets its start first (`started`: its env, model, goal…)."""
    writer = EventWriter(store, approve_mode=str(started.get("approve_mode") or ""),
                         fence=(run_id, epoch))  # fmt: skip
    last = next((e for e in reversed(log) if isinstance(e, StateChanged)), None)
    asked = {e.call_id for e in log if isinstance(e, ApprovalRequested)}
    writer.resume_from(None if last is None else last.target.value, asked)
    seq = log[-1].seq if log else 0
    made: list[Event] = []
    if not log:
        seq += 1
        made.append(RunStarted(
            run_id=run_id, seq=seq, env=str(started.get("env") or "?"),
            script=started.get("script"), model=str(started.get("model") or "?"),
            mode=str(started.get("mode") or "rounds"), goal="", budget={},
        ))  # fmt: skip
    pending = await store.fetchall(
        "SELECT call_id FROM approvals WHERE run_id = ? AND state = 'pending'", (run_id,)
    )
    for row in pending:
        seq += 1
        made.append(ApprovalWithdrawn(run_id=run_id, seq=seq, call_id=str(row[0])))
    made.append(RunStopped(run_id=run_id, seq=seq + 1, state=RunState.STOPPED,
                           stop_reason=StopReason.CRASHED, detail=detail))  # fmt: skip
    await writer.write_back(made)


class Refreshed(StoreApprover):
    """`--approve wait` for a run going on from its log: a write it had asked for before it
    moved is waited for in its row as it stands (decided meanwhile, or still pending, its
    expiry counted again from now); one whose request expired unanswered meanwhile (a parked
    run, woken by the expiry) ends its wait as an expiry does: recorded, and asked again."""

    def __init__(self, recording: Recording, asked: set[str]) -> None:
        super().__init__(recording)
        self.asked = set(asked)

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        if request.call_id in self.asked:
            self.asked.discard(request.call_id)
            if await _expired_unanswered(self.recording.store, request):
                raise TimeoutError  # as the wait had ended here: recorded, and asked again
            await leases.refresh_request(
                self.recording.store, request.run_id, request.call_id,
                request.requested_at.isoformat(), request.expires_at.isoformat(),
            )  # fmt: skip
        return await super().ask(request)


async def _expired_unanswered(store: Store, request: ApprovalRequest) -> bool:
    """Judged on the store's clock, as a decision is (`store/asking_clock.py`)."""
    return await asking_clock.expired_unanswered(store, request.run_id, request.call_id)


def request_expiry(log: list[Event]) -> float | None:
    """When the run's last asked write expires (unix seconds), if it waits on one."""
    asked = next((e for e in reversed(log) if isinstance(e, ApprovalRequested)), None)
    return None if asked is None else asked.expires_at.timestamp()
