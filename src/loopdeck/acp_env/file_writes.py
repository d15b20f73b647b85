"""A file the agent asks loopdeck to write (`fs/write_text_file`): a write loopdeck gates and
runs once per path, content and state. Written unasked only with the very content a permitted
call showed the operator for the file, once, in its turn (`permitted_writes.py`); anything
else (no permission for the file this turn, its content not told, other content) is asked as
a write of its own and recorded as written, the operator's edit included.

The file is written with no link followed (`confined_files.py`): a folder of the path the agent
swaps for a link after it was resolved (a race while the write waits) refuses the write.
Content UTF-8 cannot say (a lone surrogate) is refused by name before the file is opened.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Protocol

from loopdeck.acp_env.bridge import FileWriteAsked, OutsideWorkdir, inside
from loopdeck.acp_env.call_results import failed
from loopdeck.acp_env.confined_files import write_inside
from loopdeck.acp_env.permitted_writes import text_digest
from loopdeck.acp_env.terminal_calls import CallsHost
from loopdeck.acp_env.workspace import FS_WRITE
from loopdeck.core.decided_by import refused_words
from loopdeck.core.events import CallStatus
from loopdeck.core.tools import ErrorCode


class WritingCalls(CallsHost, Protocol):
    """What of `AcpCalls` a file's write uses."""

    written: set[str]  # each write once per path, content and state
    permitted_writes: dict[Path, set[str]]  # the content a permission showed, by file


async def write_file(calls: WritingCalls, asked: FileWriteAsked) -> Any:
    from acp import RequestError
    from acp.schema import WriteTextFileResponse

    path, content = asked.path, asked.content
    workdir = calls.host.workdir
    try:
        target = inside(workdir, path)
    except OutsideWorkdir as exc:
        await calls.refused_own(FS_WRITE, f"write {path}", {"path": path, "content": content}, exc)
        raise RequestError.invalid_params({"path": str(exc)}) from None
    state_hash = await calls.host.state_hash()
    said_once = f"{target}\0{content}\0{state_hash}".encode("utf-8", "surrogatepass")
    once = hashlib.sha256(said_once).hexdigest()
    if once in calls.written:
        raise RequestError(-32000, f"{path}: this write already ran in this run")
    if content not in calls.permitted_writes.pop(target, set()):
        # not what a permission showed (none for this file, this turn; its content not
        # told; or other content): asked as a write of its own, recorded as written
        shown = target.relative_to(workdir.resolve()).as_posix()
        record = await calls.proposed_own(
            FS_WRITE, f"write {shown}", {"path": shown, "content": content}
        )
        got = await calls.approved(record, f"the agent asks loopdeck to write {shown}")
        if got is None:
            reason = (record.result or {}).get("error", {}).get("message", "")
            said = refused_words(f"the write of {path}", record.decided_by, reason)
            raise RequestError(-32000, said)
        # What is written is what was approved: the operator's edit, when they made one.
        path, content = str(got.args.get("path", path)), str(got.args.get("content", ""))
        try:
            target = inside(workdir, path)
        except OutsideWorkdir as exc:
            calls.finish(record, CallStatus.FAILED, failed(ErrorCode.TOOL_ERROR, str(exc)))
            raise RequestError.invalid_params({"path": str(exc)}) from None
        try:
            write_inside(workdir.resolve(), target, _encoded(path, content))
        except (OSError, Unwritable) as exc:
            said = str(exc) if isinstance(exc, Unwritable) else _moved(path, exc)
            calls.finish(record, CallStatus.FAILED, failed(ErrorCode.TOOL_ERROR, said))
            raise RequestError(-32000, said) from None
        calls.finish(record, CallStatus.EXECUTED, {"ok": True, "data": {"written": path}})
    else:
        try:
            write_inside(workdir.resolve(), target, _encoded(path, content))
        except Unwritable as exc:
            raise RequestError(-32000, str(exc)) from None
        except OSError as exc:
            raise RequestError(-32000, _moved(path, exc)) from None
    calls.written.add(once)
    rel = target.relative_to(workdir.resolve()).as_posix()
    calls.watch.wrote(rel, text_digest(content))  # what the call's file holds now
    calls.watch.permit(f"write {once}", {rel})
    calls.watch.ended(f"write {once}")
    return WriteTextFileResponse()


class Unwritable(Exception):
    """Content that is no UTF-8 text (a lone surrogate, which JSON can carry)."""


def _encoded(path: str, content: str) -> bytes:
    """`content` as the file's bytes, before the file is touched: content UTF-8 cannot say
    is refused by name (the file left as it was)."""
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = f"U+{ord(exc.object[exc.start]):04X}"
        raise Unwritable(
            f"{path}: not written: its content is not UTF-8 text ({bad} at character"
            f" {exc.start}: a lone surrogate)"
        ) from None


def _moved(path: str, exc: OSError) -> str:
    return (
        f"{path}: not written: the path changed while the write waited (a link or another"
        f" folder where the working copy's folder was: {exc.strerror or exc})"
    )
