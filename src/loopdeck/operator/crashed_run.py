"""What a worker says of a run it could not go on with, before it records the run `crashed`
(`leased_run.LeasedRun._crash`): why its rebuild left its log, in words, and the writes it
had asked for whose decision it never took, recorded as not run.

An approval is durable before its write runs (`core/write_approvals.py`): a write whose
decision is not in the run's log never ran, whatever its row says was decided meanwhile
(`loopdeck approve` while no worker held the run). Left as it is, the run's stop would list
it as an outcome nobody knows, and send the operator to `resolve` a write that never started.
"""

from __future__ import annotations

from loopdeck.core.events import (
    ApprovalDecided,
    ApprovalInvalidated,
    ApprovalRequested,
    ApprovalWithdrawn,
    CallStatus,
    Event,
    PolicyInForce,
    StateChanged,
    ToolFinished,
)
from loopdeck.core.replay_log import ReplayLog
from loopdeck.core.runtime import Runtime
from loopdeck.core.tools import ErrorCode, ToolResult
from loopdeck.store.base import Store
from loopdeck.store.writer import EventWriter


def diverged_words(runtime: Runtime, replay: ReplayLog) -> str:
    """Why the rebuilt run left its log, in words: its policy, where it is not the one the
    log recorded."""
    said = replay.diverged or "the run could not be rebuilt from its log"
    logged = replay.last_of(PolicyInForce)
    gate = runtime.calls.approvals.policy.gate
    now = None if gate is None else gate.in_force()
    if logged is None or (now is not None and now["sha256"] == logged.sha256):
        return said
    files = ", ".join(f"{level.get('level')} {level.get('path')}" for level in logged.levels)
    has = "no policy" if now is None else f"policy sha256 {str(now['sha256'])[:12]}"
    return (
        f"{said}: it was decided under policy sha256 {logged.sha256[:12]} ({files}), and the"
        f" rebuilt run has {has}"
    )


def untaken(log: list[Event]) -> list[ApprovalRequested]:
    """The requests the run made whose decision it never took (none in its log after them)."""
    waiting: dict[str, ApprovalRequested] = {}
    for event in log:
        if isinstance(event, ApprovalRequested):
            waiting[event.call_id] = event
        elif isinstance(
            event, ApprovalDecided | ApprovalInvalidated | ApprovalWithdrawn | ToolFinished
        ):
            waiting.pop(event.call_id, None)
    return list(waiting.values())


async def withdraw_untaken(
    store: Store, run_id: str, epoch: int, log: list[Event], approve_mode: str, why: str
) -> bool:
    """Each write the run asked for and never took a decision on, recorded as not run
    (`withdrawn`, as a live run's stop records a pending one), under the lease; whether there
    was any."""
    requests = untaken(log)
    if not requests:
        return False
    writer = EventWriter(store, approve_mode=approve_mode, fence=(run_id, epoch))
    last = next((e for e in reversed(log) if isinstance(e, StateChanged)), None)
    asked = {e.call_id for e in log if isinstance(e, ApprovalRequested)}
    writer.resume_from(None if last is None else last.target.value, asked)
    seq = log[-1].seq
    said = f"not run: the run stopped before it took its decision ({why})"
    made: list[Event] = []
    for request in requests:
        seq += 1
        result = ToolResult.failure(request.tool, request.call_id, ErrorCode.REJECTED, said)
        made.append(ToolFinished(run_id=run_id, seq=seq, call_id=request.call_id,
                                 tool=request.tool, status=CallStatus.WITHDRAWN,
                                 result=result.for_model(), duration_ms=0.0))  # fmt: skip
    await writer.write_back(made)
    return True
