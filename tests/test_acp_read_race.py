"""`fs/read_text_file` never reads outside the working copy, even when the agent swaps a folder
of the path (or the file) for a link to elsewhere after loopdeck resolved it: the swap made
deterministic right after `inside()` resolved the path, the read refused, the file outside
never read; as `fs/write_text_file` is (`test_acp_write_race.py`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from acp import RequestError

from loopdeck.acp_env import bridge
from loopdeck.acp_env.bridge import Bridge

SECRET = "outside the working copy\n"


def _swapped_after_resolving(monkeypatch: pytest.MonkeyPatch, swap: Callable[[], None]) -> None:
    """The agent's move, between loopdeck resolving the path and opening the file."""
    resolve = bridge.inside

    def inside_then_swap(workdir: Path, path: str) -> Path:
        resolved = resolve(workdir, path)
        swap()
        return resolved

    monkeypatch.setattr(bridge, "inside", inside_then_swap)


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "sub").mkdir(parents=True)
    outside.mkdir()
    (work / "sub" / "notes.txt").write_text("inside\n")
    (outside / "notes.txt").write_text(SECRET)
    return work, outside


async def test_a_folder_swapped_for_a_link_mid_read_refuses_the_read(
    monkeypatch: pytest.MonkeyPatch, folders: tuple[Path, Path]
) -> None:
    work, outside = folders

    def swap() -> None:
        (work / "sub").rename(work / "sub_real")
        (work / "sub").symlink_to(outside)

    _swapped_after_resolving(monkeypatch, swap)
    with pytest.raises(RequestError) as refused:
        await Bridge(work).read_text_file("s", "sub/notes.txt")
    said = str(refused.value.data)
    assert "sub/notes.txt: not read: the path changed as it was read" in said, said
    assert SECRET.strip() not in said


async def test_the_file_swapped_for_a_link_mid_read_refuses_the_read(
    monkeypatch: pytest.MonkeyPatch, folders: tuple[Path, Path]
) -> None:
    work, outside = folders

    def swap() -> None:
        (work / "sub" / "notes.txt").unlink()
        (work / "sub" / "notes.txt").symlink_to(outside / "notes.txt")

    _swapped_after_resolving(monkeypatch, swap)
    with pytest.raises(RequestError, match="Invalid params"):
        await Bridge(work).read_text_file("s", str(work / "sub" / "notes.txt"))


async def test_a_link_inside_the_working_copy_is_read_where_it_points(
    folders: tuple[Path, Path],
) -> None:
    work, _ = folders
    (work / "alias.txt").symlink_to(work / "sub" / "notes.txt")
    read = await Bridge(work).read_text_file("s", "alias.txt")
    assert read.content == "inside\n"
    lines = await Bridge(work).read_text_file("s", "sub/notes.txt", line=1, limit=1)
    assert lines.content == "inside\n"


async def test_a_fifo_is_refused_never_waited_on(folders: tuple[Path, Path]) -> None:
    work, _ = folders
    os.mkfifo(work / "pipe")
    with pytest.raises(RequestError) as refused:
        await Bridge(work).read_text_file("s", "pipe")
    assert "not read" in str(refused.value.data)


async def test_a_link_out_of_the_working_copy_is_refused_as_outside(
    folders: tuple[Path, Path],
) -> None:
    work, outside = folders
    (work / "escape").symlink_to(outside)
    with pytest.raises(RequestError) as refused:
        await Bridge(work).read_text_file("s", "escape/notes.txt")
    assert "outside the run's working copy" in str(refused.value.data)
