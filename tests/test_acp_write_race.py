"""loopdeck's own `fs/write_text_file` never writes outside the working copy, even when the
agent swaps a folder of the path for a link to elsewhere after loopdeck resolved it (the red
team's race, issue 38): the swap made deterministic, in the wait between resolving the path
and writing (the state's hash, awaited), the write refused, nothing outside touched."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from acp import RequestError

from loopdeck.acp_env.bridge import FileWriteAsked
from loopdeck.acp_env.file_writes import write_file
from loopdeck.core.events import CallStatus
from loopdeck.core.workspace_changes import ChangeWatch


class Host:
    def __init__(self, workdir: Path, before_write: Any) -> None:
        self.workdir = workdir
        self.before_write = before_write

    async def state_hash(self) -> str:
        self.before_write()  # the agent's move, in the wait
        return "state"


class Calls:
    """What of `AcpCalls` a write permitted with this very content uses."""

    def __init__(self, workdir: Path, target: Path, content: str, before_write: Any) -> None:
        self.host = Host(workdir, before_write)
        self.written: set[str] = set()
        self.permitted_writes = {target.resolve(): content}
        self.watch = ChangeWatch()


def asked(path: Path, content: str) -> FileWriteAsked:
    return FileWriteAsked(path=str(path), content=content)


async def test_a_folder_swapped_for_a_link_while_the_write_waits_refuses_it(
    tmp_path: Path,
) -> None:
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "sub").mkdir(parents=True)
    outside.mkdir()
    target = work / "sub" / "x.txt"

    def swap() -> None:
        (work / "sub").rename(work / "sub_real")
        (work / "sub").symlink_to(outside)

    calls = Calls(work, target, "hello\n", swap)
    with pytest.raises(RequestError, match="path changed while the write waited"):
        await write_file(calls, asked(target, "hello\n"))  # type: ignore[arg-type]
    assert list(outside.iterdir()) == []
    assert not (work / "sub_real" / "x.txt").exists()


async def test_a_file_swapped_for_a_link_while_the_write_waits_refuses_it(
    tmp_path: Path,
) -> None:
    work, outside = tmp_path / "work", tmp_path / "outside.txt"
    work.mkdir()
    outside.write_text("the operator's\n")
    target = work / "x.txt"
    target.write_text("old\n")

    def swap() -> None:
        target.unlink()
        target.symlink_to(outside)

    calls = Calls(work, target, "hello\n", swap)
    with pytest.raises(RequestError, match="path changed while the write waited"):
        await write_file(calls, asked(target, "hello\n"))  # type: ignore[arg-type]
    assert outside.read_text() == "the operator's\n"


async def test_a_hard_link_to_elsewhere_is_not_written_through(tmp_path: Path) -> None:
    work, outside = tmp_path / "work", tmp_path / "outside.txt"
    work.mkdir()
    outside.write_text("the operator's\n")
    target = work / "x.txt"
    os.link(outside, target)
    calls = Calls(work, target, "hello\n", lambda: None)
    with pytest.raises(RequestError, match="hard link"):
        await write_file(calls, asked(target, "hello\n"))  # type: ignore[arg-type]
    assert outside.read_text() == "the operator's\n"


async def test_a_write_with_nothing_swapped_is_written(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    target = work / "new" / "deep" / "x.txt"
    calls = Calls(work, target, "hello\n", lambda: None)
    await write_file(calls, asked(target, "hello\n"))  # type: ignore[arg-type]
    assert target.read_text() == "hello\n"


class Approving(Calls):
    """A write no permission showed: proposed, approved as asked, its end recorded."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir, workdir / "none", "", lambda: None)
        self.permitted_writes = {}
        self.ended: list[tuple[CallStatus, dict[str, Any]]] = []

    async def proposed_own(self, kind: str, title: str, raw: dict[str, Any]) -> Any:
        self.raw = raw
        return SimpleNamespace(result=None, decided_by=None)

    async def approved(self, record: Any, why: str) -> Any:
        return SimpleNamespace(args=self.raw)

    def finish(
        self, record: Any, status: CallStatus, result: dict[str, Any], ms: float = 0
    ) -> None:
        self.ended.append((status, result))


@pytest.mark.parametrize("permitted", [True, False], ids=["permitted", "approved"])
async def test_content_utf8_cannot_say_is_refused_the_file_left_as_it_was(
    permitted: bool, tmp_path: Path
) -> None:
    """A lone surrogate (valid JSON): the write refused by name before the file is opened,
    the file's old content kept; an approved write's call recorded as failed, saying why."""
    work = tmp_path / "work"
    work.mkdir()
    target = work / "x.txt"
    target.write_text("old\n")
    bad = "new \ud800\n"
    calls = Calls(work, target, bad, lambda: None) if permitted else Approving(work)
    with pytest.raises(RequestError, match="not UTF-8 text"):
        await write_file(calls, asked(target, bad))  # type: ignore[arg-type]
    assert target.read_text() == "old\n"
    if isinstance(calls, Approving):
        [(status, result)] = calls.ended
        assert status is CallStatus.FAILED and "U+D800" in result["error"]["message"]
