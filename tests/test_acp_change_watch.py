"""`ChangeWatch` (core/workspace_changes.py) while a permitted command (a call naming no file)
is open: what changes is listed, never silent, and the other permits' approved content is
still checked (a command open is no licence for an edit to land other content)."""

from __future__ import annotations

from loopdeck.core.workspace_changes import ChangeWatch, commanded_words


def snap(**files: str) -> dict[str, dict[str, str]]:
    return {"files": {name.replace("_", "."): digest for name, digest in files.items()}}


def test_a_change_under_an_open_command_is_listed() -> None:
    watch = ChangeWatch()
    watch.look(snap(calc_py="old"))
    watch.permit("c1 ls -la", None)
    changes = watch.look(snap(calc_py="backdoor", new_txt="x"))
    assert not changes  # the command explains it ...
    assert changes.commanded == ["calc.py", "new.txt"]  # ... and it is listed
    assert changes.commands == ["c1 ls -la"]
    said = commanded_words("turn 1", changes)
    assert "c1 ls -la" in said and "calc.py" in said


def test_an_edit_landing_other_content_is_caught_while_a_command_is_open() -> None:
    watch = ChangeWatch()
    watch.look(snap(calc_py="old"))
    watch.permit("c1 edit calc.py", {"calc.py"}, {"calc.py": "approved"})
    watch.permit("c2 ls -la", None)
    watch.ended("c1 edit calc.py")
    changes = watch.look(snap(calc_py="backdoor"))
    assert changes.differs == ["calc.py"], changes
    assert changes.changed == ["calc.py"], changes


def test_a_permit_never_ended_is_dropped() -> None:
    watch = ChangeWatch()
    watch.look(snap(calc_py="old"))
    watch.permit("c1 ls", None)
    assert watch.drop_open() == ["c1 ls"]
    changes = watch.look(snap(calc_py="backdoor"))
    assert changes.changed == ["calc.py"] and not changes.commanded


def test_an_approved_edit_that_also_sets_the_setuid_bit_differs() -> None:
    watch = ChangeWatch()
    watch.look(snap(calc_py="old"))
    watch.permit("c1 edit calc.py", {"calc.py"}, {"calc.py": "approved"})
    watch.ended("c1 edit calc.py")
    changes = watch.look(snap(calc_py="approved mode 4111"))
    assert changes.differs == ["calc.py"], changes


def test_a_folder_emptied_by_a_permitted_removal_is_explained() -> None:
    watch = ChangeWatch()
    watch.look({"files": {"sub/x.py": "a"}})
    watch.permit("c1 rm sub/x.py", {"sub/x.py"})
    watch.ended("c1 rm sub/x.py")
    assert not watch.look({"files": {"sub/": "folder"}})


def test_a_file_permit_never_ended_explains_its_file_at_the_agents_exit() -> None:
    watch = ChangeWatch()
    watch.look(snap(calc_py="old"))
    watch.permit("c1 write calc.py", {"calc.py"})
    watch.permit("c2 ls", None)
    assert watch.drop_open() == ["c2 ls"]
    assert not watch.look(snap(calc_py="fixed"))
    assert watch.look(snap(calc_py="later")).changed == ["calc.py"]  # spent at that look
