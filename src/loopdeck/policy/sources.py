"""Where a run's policy comes from, broadest first: the user's (`<user config>/loopdeck/
policy.toml`; `LOOPDECK_USER_POLICY` names another file, or `none`), the env folder's
(`policy.toml` beside `scenario.toml`), and the run's own (`--policy FILE`). Light: it only
looks for files, so a run without a policy never loads the expression engine.
"""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_config_path

from loopdeck import settings
from loopdeck.policy.document import PolicyError

FILE_NAME = "policy.toml"
USER_POLICY = "LOOPDECK_USER_POLICY"


def user_policy_path() -> Path | None:
    """The user's policy file, when there is one to read. Something in its place that is no
    file (a folder, a link to nothing) is refused, naming it: never a policy silently gone."""
    configured = settings.current().user_policy
    if configured is not None:
        return None if configured == settings.NO_FILE else configured
    path = user_config_path("loopdeck") / FILE_NAME
    return path if _present(path, "the user's policy") else None


def policy_files(env_folder: Path | None, explicit: Path | None) -> list[tuple[str, Path]]:
    """The levels' files that exist, broadest first; a named one that does not, or anything
    in a level's place that is no file, is refused (`PolicyError`, naming it)."""
    found: list[tuple[str, Path]] = []
    if (user := user_policy_path()) is not None:
        if not user.is_file():
            raise PolicyError(f"{user} ({USER_POLICY}): {_missing(user)}")
        found.append(("user", user))
    if env_folder is not None and _present(env_folder / FILE_NAME, "the env folder's policy"):
        found.append(("env", env_folder / FILE_NAME))
    if explicit is not None:
        if not explicit.is_file():
            raise PolicyError(f"--policy {explicit}: {_missing(explicit)}")
        found.append(("run", explicit))
    return found


def _present(path: Path, what: str) -> bool:
    """Whether the policy file is there: False when nothing is, `PolicyError` when what is
    there is no file to read."""
    if path.is_file():
        return True
    if not os.path.lexists(path):
        return False
    raise PolicyError(f"{path} ({what}): {_missing(path)}; remove it, or make it a policy file")


def _missing(path: Path) -> str:
    if path.is_dir():
        return "a folder, not a file"
    if path.is_symlink() and not path.exists():
        return f"a link to {os.readlink(path)}, which does not exist"
    if os.path.lexists(path):
        return "not a regular file"
    return "no such file"
