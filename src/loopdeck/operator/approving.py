"""Who decides a run's writes and answers its questions: `--approve auto|deny|wait` or the
console, turned into an approver, an answerer and the console's queue in one place.

Light at import (the CLI asks `refusal` before the console paints its first frame): what the
choice is made of is imported when it is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from loopdeck.core.approvals import Answerer, Approver
    from loopdeck.operator.approval_queue import ApprovalQueue
    from loopdeck.store.approver import Recording

ApproveMode = Literal["auto", "deny", "wait"]
SCRIPTED = "scripted"  # the offline model (`loopdeck.llm.client.SCRIPTED`, not imported: heavy)

WAIT_IN_CONSOLE = "--approve wait is for --headless runs; the console decides itself"
WAIT_NEEDS_STORE = "--approve wait needs the event store (a headless recorded run)"


@dataclass(frozen=True)
class Deciders:
    """Who is asked for a write's decision, who answers the model's questions (None: the
    runtime's default), and the console's queue (None headless): what its dialogs offer."""

    approver: Approver
    answerer: Answerer | None
    queue: ApprovalQueue | None


def refusal(approve: ApproveMode | None, *, console: bool) -> str | None:
    """Why this `--approve` cannot be: light, so the CLI says it before the console paints."""
    return WAIT_IN_CONSOLE if console and approve == "wait" else None


def default_approve_mode(model: str) -> ApproveMode:
    """Offline scripted runs touch only a temporary copy, so they may auto-approve."""
    if model == SCRIPTED:
        return "auto"
    raise _bad(
        f"--approve is required with a real model ({model}): choose auto, deny or wait "
        "(wait: each write waits for `loopdeck approve`, the inbox or an attached console), "
        "or run without --headless to approve in the console"
    )


def deciders(
    approve: ApproveMode | None, *, model: str, console: bool, recording: Recording | None
) -> Deciders:
    """The console decides in its dialogs (its queue raced with the store when `recording`)
    unless `--approve auto|deny` decides its writes; headless, `--approve` (auto for a
    scripted model) decides, `wait` leaving it to whoever decides through the store."""
    from loopdeck.operator.approval_queue import ApprovalQueue, StoreBackedQueue
    from loopdeck.store.approver import StoreAnswerer, StoreApprover

    if (refused := refusal(approve, console=console)) is not None:
        raise _bad(refused)
    if console:
        queue = ApprovalQueue() if recording is None else StoreBackedQueue(recording)
        return Deciders(queue if approve is None else _fixed(approve), queue, queue)
    approve = approve or default_approve_mode(model)
    if approve != "wait":
        return Deciders(_fixed(approve), None, None)
    if recording is None:
        raise _bad(WAIT_NEEDS_STORE)
    return Deciders(StoreApprover(recording), StoreAnswerer(recording), None)


def _fixed(approve: ApproveMode) -> Approver:
    from loopdeck.core.approvals import AutoApprover, DenyApprover

    return AutoApprover() if approve == "auto" else DenyApprover()


def _bad(message: str) -> Exception:
    from loopdeck.core.scenario import ScenarioError

    return ScenarioError(message)
