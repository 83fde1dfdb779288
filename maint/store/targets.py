"""Where stores and config live: the same resolution rules Hermes uses."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from maint.errors import UsageError


def hermes_home() -> Path:
    raw = os.environ.get("HERMES_HOME")
    return Path(raw).expanduser() if raw else Path.home() / ".hermes"


@dataclass(frozen=True)
class StoreTarget:
    """One store a command will run against, with the profile it belongs to."""

    path: Path
    profile: str | None  # None = the default store (or an explicit --db)
    missing: bool = False  # a profile folder without a state.db yet (--all-profiles reports it, skipped)


def profile_store(name: str) -> Path:
    if not name or "/" in name or name in (".", ".."):
        raise UsageError(f"--profile: bad profile name {name!r} (expected a profile folder name)")
    return hermes_home() / "profiles" / name / "state.db"


def resolve_targets(db: str | Path | None, profile: str | None, all_profiles: bool) -> list[StoreTarget]:
    """One of --db, --profile or --all-profiles (or none: $HERMES_HOME/state.db).

    --all-profiles is the default store (when it exists) and every folder under profiles/; a folder
    without a state.db is kept as a ``missing`` target so the run reports it instead of passing over it.
    """
    chosen = (db is not None) + (profile is not None) + bool(all_profiles)
    if chosen > 1:
        raise UsageError("--db, --profile and --all-profiles are mutually exclusive (use one)")
    if db is not None:
        if not str(db).strip():
            raise UsageError("--db: empty path (expected the path of a state.db file)")
        return [StoreTarget(Path(db).expanduser(), None)]
    if profile is not None:
        return [StoreTarget(profile_store(profile), profile)]
    home = hermes_home()
    targets = [StoreTarget(home / "state.db", None)]
    if all_profiles:
        targets = [t for t in targets if t.path.exists()]
        pdir = home / "profiles"
        if pdir.is_dir():
            for child in sorted(pdir.iterdir()):
                if child.is_dir():
                    db_path = child / "state.db"
                    targets.append(StoreTarget(db_path, child.name, missing=not os.path.lexists(db_path)))
        if not targets:
            raise UsageError(f"--all-profiles: no state.db found under {home}")
    return targets
