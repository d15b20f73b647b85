"""Where a run's policy comes from, broadest first: the user's (`<user config>/loopdeck/
policy.toml`; `LOOPDECK_USER_POLICY` names another file, or `none`), the env folder's
(`policy.toml` beside `scenario.toml`), and the run's own (`--policy FILE`). Light: it only
looks for files, so a run without a policy never loads the expression engine.
"""

from __future__ import annotations

from pathlib import Path

from platformdirs import user_config_path

from loopdeck import settings
from loopdeck.policy.document import PolicyError

FILE_NAME = "policy.toml"
USER_POLICY = "LOOPDECK_USER_POLICY"


def user_policy_path() -> Path | None:
    """The user's policy file, when there is one to read."""
    configured = settings.current().user_policy
    if configured is not None:
        return None if configured == settings.NO_FILE else configured
    path = user_config_path("loopdeck") / FILE_NAME
    return path if path.is_file() else None


def policy_files(env_folder: Path | None, explicit: Path | None) -> list[tuple[str, Path]]:
    """The levels' files that exist, broadest first; a named one that does not is refused."""
    found: list[tuple[str, Path]] = []
    if (user := user_policy_path()) is not None:
        if not user.is_file():
            raise PolicyError(f"{user} ({USER_POLICY}): no such file")
        found.append(("user", user))
    if env_folder is not None and (env_folder / FILE_NAME).is_file():
        found.append(("env", env_folder / FILE_NAME))
    if explicit is not None:
        if not explicit.is_file():
            raise PolicyError(f"--policy {explicit}: no such file")
        found.append(("run", explicit))
    return found
