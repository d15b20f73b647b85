"""What the view keeps of a long run: its newest call rows, never more than its bound."""

from loopdeck.core.events import CallProposed
from loopdeck.operator.runview import RunView


def test_the_view_keeps_only_its_newest_call_rows() -> None:
    view = RunView(max_call_rows=10)
    for n in range(35):
        view.apply(
            CallProposed(
                run_id="r1", seq=n + 1, call_id=f"c{n}", round=1, tool="poll", args={"n": n},
                risk="read", fingerprint=f"f{n}", state_hash="s",
            )
        )  # fmt: skip
    assert len(view.calls) == 10
    assert list(view.calls) == [f"c{n}" for n in range(25, 35)]
    assert view.calls_seen == 35 and view.calls_dropped == 25


def test_an_approved_write_is_running_until_its_end_and_pending_again_if_asked_again() -> None:
    """Approved, a write is carried out: never shown "pending approval" while it runs."""
    from loopdeck.core.approvals import request_for
    from loopdeck.core.event_base import CallStatus
    from loopdeck.core.events import ApprovalDecided, ApprovalRequested, ToolFinished

    view = RunView()
    args = {"order_id": "ORD-1"}
    view.apply(CallProposed(run_id="r1", seq=1, call_id="c1", round=1, tool="update", args=args,
                            risk="write", fingerprint="f1", state_hash="s"))  # fmt: skip
    request = request_for(run_id="r1", call_id="c1", tool="update", args=args, state_hash="s",
                          fingerprint="f1", plan_step=None, ttl_s=60)  # fmt: skip

    def asked(seq: int) -> ApprovalRequested:
        return ApprovalRequested(seq=seq, grant_id=None, **request.model_dump())

    def approved(seq: int) -> ApprovalDecided:
        return ApprovalDecided(run_id="r1", seq=seq, call_id="c1", approved=True, reason="", by="o")

    view.apply(asked(2))
    assert view.calls["c1"].status is CallStatus.PENDING_APPROVAL
    view.apply(approved(3))
    assert view.calls["c1"].status is CallStatus.RUNNING
    view.apply(asked(4))  # its receipt no longer held: asked again
    assert view.calls["c1"].status is CallStatus.PENDING_APPROVAL
    view.apply(approved(5))
    view.apply(ToolFinished(run_id="r1", seq=6, call_id="c1", tool="update",
                            status=CallStatus.EXECUTED, result={}, duration_ms=1.0))  # fmt: skip
    assert view.calls["c1"].status is CallStatus.EXECUTED


def test_a_stop_no_runtime_recorded_leaves_no_call_open() -> None:
    """A runner killed (its stop recorded by whoever found it gone, with no call's end): the
    write it had approved is an unknown outcome, the one waiting withdrawn, a read in flight
    interrupted, as the runtime marks calls its own stop cuts short."""
    from loopdeck.core.event_base import CallStatus
    from loopdeck.core.events import ApprovalDecided, RunStopped
    from loopdeck.core.states import RunState, StopReason

    view = RunView()
    for n, risk in enumerate(("write", "write", "read"), 1):
        proposed = CallProposed(run_id="r1", seq=n, call_id=f"c{n}", round=1, tool=f"t{n}",
                                args={}, risk=risk, fingerprint="f", state_hash="s")  # fmt: skip
        view.apply(proposed)
    view.apply(ApprovalDecided(run_id="r1", seq=4, call_id="c1", approved=True, reason="", by="o"))
    view.apply(RunStopped(run_id="r1", seq=5, state=RunState.STOPPED,
                          stop_reason=StopReason.CRASHED, detail="its runner is gone"))  # fmt: skip
    statuses = {c: view.calls[c].status for c in ("c1", "c2", "c3")}
    assert statuses == {"c1": CallStatus.OUTCOME_UNKNOWN, "c2": CallStatus.SKIPPED,
                        "c3": CallStatus.INTERRUPTED}  # fmt: skip
    assert view.unknown == {"c1": "t1"}  # the console's `o` resolves it
