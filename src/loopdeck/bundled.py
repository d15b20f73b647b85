"""What ships inside the package: the sample envs and the themes, found with importlib.resources.

Their sources live in the top-level `sample_envs/` and `themes/` folders; `pyproject.toml` maps
them into the package as `loopdeck.sample_envs` and `loopdeck.themes`, so an installed wheel,
an editable install and a checkout all find them the same way, from any directory.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from platformdirs import user_config_path


def bundled_folder(name: str) -> Path:
    """The folder of a bundled resource package (`sample_envs` or `themes`)."""
    try:
        root = importlib.resources.files(f"loopdeck.{name}")
    except ModuleNotFoundError:  # a source tree run without installing: the checkout's folder
        return Path(__file__).resolve().parents[2] / name
    return Path(str(root))


def user_themes_folder() -> Path:
    """Where a user keeps their own theme files (`<user config>/loopdeck/themes`)."""
    return user_config_path("loopdeck") / "themes"
