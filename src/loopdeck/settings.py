"""loopdeck's settings from the environment: every `LOOPDECK_*` variable is read here and
nowhere else (`tests/test_layers.py` holds it), into one frozen `Settings`.

A module at the package's root, below every layer, so that each can read it (the store, `llm`,
the policy, the tuning, the operator, the console): it imports nothing of loopdeck's. What a
setting combines with stays with its owner: the command's flags and the config file's
`notify` keys with `operator/notify_config.py`, the user policy file with `policy/sources.py`.

`current()` is this process's settings, read at first use and again only when a `LOOPDECK_*`
variable changed since (a test's `monkeypatch.setenv`, or `os.environ` set before a child
process starts): reading them costs a dict look-up per variable, parsing happens once per
distinct environment. `Settings.read(environ)` reads another environment (a child's).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal, TypeAlias

NO_FILE: Literal["none"] = "none"
NamedFile: TypeAlias = Path | Literal["none"] | None
"""A file a variable names instead of the default one: a path, `"none"` (no file at all), or
None (the variable is not set: the default place is looked at)."""


def _var(name: str) -> dict[str, str]:
    return {"variable": name}


@dataclass(frozen=True)
class Settings:
    """Every `LOOPDECK_*` setting; each field's `metadata["variable"]` is the variable it is
    read from. A number that cannot be read keeps its default, as each owner did before it
    moved here (`store/`'s timings)."""

    # The store.
    db: str | None = field(default=None, metadata=_var("LOOPDECK_DB"))
    """The store: a SQLite file or a PostgreSQL URL (`--db` says it instead); None: the file in
    the user data dir."""
    host: str | None = field(default=None, metadata=_var("LOOPDECK_HOST"))
    """The host a runner records (containers whose hostnames repeat); None: the hostname."""
    crash_silence_s: float = field(default=30.0, metadata=_var("LOOPDECK_CRASH_SILENCE_S"))
    """How long a runner's heartbeat is silent before its run is called crashed."""
    busy_timeout_s: float = field(default=5.0, metadata=_var("LOOPDECK_BUSY_TIMEOUT_S"))
    """How long a SQLite statement waits for another process's write lock."""
    park_after_s: float = field(default=10.0, metadata=_var("LOOPDECK_PARK_AFTER_S"))
    """How long a run waits on its operator in a worker before it is parked (more than 0)."""
    lease_s: float = field(default=10.0, metadata=_var("LOOPDECK_LEASE_S"))
    """How long a worker's claim holds without a renewal (more than 0)."""
    # Models and the interpreter.
    stock_litellm: bool = field(default=False, metadata=_var("LOOPDECK_STOCK_LITELLM"))
    """`1`: LiteLLM keeps all of its own per-call passes (`llm/litellm_passes.py`)."""
    tuning_off: bool = field(default=False, metadata=_var("LOOPDECK_TUNING"))
    """`off`: no interpreter tuning is applied (`tuning/`)."""
    # Where files are found.
    sample_envs: Path | None = field(default=None, metadata=_var("LOOPDECK_SAMPLE_ENVS"))
    """The folder of sample envs named by name; None: the ones inside the package."""
    themes: Path | None = field(default=None, metadata=_var("LOOPDECK_THEMES"))
    """The one folder themes are read from; None: the bundled ones, then the user's own."""
    user_policy: NamedFile = field(default=None, metadata=_var("LOOPDECK_USER_POLICY"))
    """The user's policy file; None: `<user config>/loopdeck/policy.toml` when it exists."""
    config: NamedFile = field(default=None, metadata=_var("LOOPDECK_CONFIG"))
    """loopdeck's config file; None: `<user config>/loopdeck/config.toml` when it exists."""
    # Pushes (`operator/notify_config.py` reads these texts, after the flags and before the
    # config file, and refuses what it cannot read naming the variable).
    notify: tuple[str, ...] = field(default=(), metadata=_var("LOOPDECK_NOTIFY"))
    """The channels' Apprise URLs, separated by spaces; (): not said."""
    notify_after: str | None = field(default=None, metadata=_var("LOOPDECK_NOTIFY_AFTER"))
    """Seconds a decision waits before it is pushed, as written; None: not said."""
    notify_content: str | None = field(default=None, metadata=_var("LOOPDECK_NOTIFY_CONTENT"))
    """`1` or `0`: whether a push carries the run's content, as written; None: not said."""

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> Settings:
        """The settings an environment says (each variable not set keeps its default)."""
        said = {f.name: environ.get(f.metadata["variable"]) for f in fields(cls)}
        defaults = cls()
        return cls(
            db=said["db"] or None,
            host=said["host"] or None,
            crash_silence_s=_seconds(said["crash_silence_s"], defaults.crash_silence_s),
            busy_timeout_s=_seconds(said["busy_timeout_s"], defaults.busy_timeout_s),
            park_after_s=_positive(_seconds(said["park_after_s"], 0.0), defaults.park_after_s),
            lease_s=_positive(_seconds(said["lease_s"], 0.0), defaults.lease_s),
            stock_litellm=said["stock_litellm"] == "1",
            tuning_off=(said["tuning_off"] or "").strip().lower() == "off",
            sample_envs=Path(said["sample_envs"]) if said["sample_envs"] else None,
            themes=Path(said["themes"]) if said["themes"] else None,
            user_policy=_named_file(said["user_policy"]),
            config=_named_file(said["config"]),
            notify=tuple((said["notify"] or "").split()),
            notify_after=said["notify_after"],
            notify_content=said["notify_content"],
        )


@functools.lru_cache(maxsize=8)
def _read_values(values: tuple[str | None, ...]) -> Settings:
    return Settings.read({n: v for n, v in zip(VARIABLES, values, strict=True) if v is not None})


def current() -> Settings:
    """This process's settings: read at first use, again only once a variable has changed."""
    return _read_values(tuple(os.environ.get(name) for name in VARIABLES))


def _seconds(text: str | None, default: float) -> float:
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        return default


def _positive(value: float, default: float) -> float:
    return value if value > 0 else default


def _named_file(text: str | None) -> NamedFile:
    if text is None:
        return None
    return NO_FILE if text.strip().lower() in ("", NO_FILE) else Path(text)


VARIABLES: tuple[str, ...] = tuple(f.metadata["variable"] for f in fields(Settings))
"""Every variable loopdeck reads, in the order `Settings` lists them (the README's table)."""
