"""Where stores and config live: the same resolution rules Hermes uses."""

from __future__ import annotations

import contextlib
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
    problem: str | None = None  # why this entry cannot even be looked at (reported as a failed store)
    alias_of: StoreTarget | None = None  # the same file as this earlier target's: run once, as that one
    explicit: bool = False  # named with --db: it must exist (the default store may not yet)

    @property
    def name(self) -> str:
        return self.profile or "default"


def is_default_name(name: str) -> bool:
    """``default`` (any case) names the home itself, as Hermes's ``-p default`` does; a folder of that name under
    profiles/ is none of Hermes's profiles (its own list skips it)."""
    return name.strip().casefold() == "default"


def key_profile(session_key: str | None) -> str | None:
    """``agent:<ns>:...`` -> the profile a gateway session key names; ``agent:main`` is the default profile."""
    if not isinstance(session_key, str) or not session_key.startswith("agent:"):
        return None  # a BLOB or number stored as a key names no profile (hostile try 15, S12)
    ns = session_key.split(":", 2)[1] if session_key.count(":") >= 2 else None
    if not ns:
        return None
    return "default" if ns == "main" else ns


def profile_folders(home: Path) -> list[str]:
    """The names under ``home/profiles`` that may be profiles: every entry but one named like the home's alias, or
    one whose name is not UTF-8 (Hermes's names are ``[a-z0-9][a-z0-9_-]*``; such a folder stopped repair-profiles
    for the whole home: hostile try 15, S13)."""
    with contextlib.suppress(OSError):
        return [n for n in sorted(os.listdir(home / "profiles")) if not is_default_name(n) and _utf8(n)]
    return []


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def profile_folder_by_path(store: Path | str) -> Path | None:
    """The folder of a store whose path, as given or as its links lead, is ``…/profiles/NAME/state.db``: a profile's
    folder by its place, whichever home it is in (config resolution and repair-routing read it alike)."""
    given = Path(store).expanduser()
    for p in (given, Path(os.path.realpath(given))):
        if p.parent.parent.name == "profiles":
            return p.parent
    return None


def home_of(store: Path | str) -> Path | None:
    """The Hermes home a store is the state.db of: $HERMES_HOME, or $HERMES_HOME/profiles/NAME; None for a store
    outside the home. Decided by the file itself (device and inode), so any path to it answers alike: a linked
    profile folder, a relative path, ``..`` (hostile tries 13 and 14, Q1, R1, R9: config resolution and
    repair-routing each decided by folder names and took a linked profile for none)."""
    try:
        st = os.stat(Path(store).expanduser())
    except OSError:
        return None
    home = hermes_home()
    folders = [home]
    with contextlib.suppress(OSError):  # every folder under profiles/ is its own home, as its path says
        folders += [home / "profiles" / name for name in sorted(os.listdir(home / "profiles"))]
    for folder in folders:
        try:
            other = os.stat(folder / "state.db")
        except OSError:
            continue
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            return folder
    return None


def profile_of(store: Path | str) -> str | None:
    """Which profile of $HERMES_HOME a store is: "default" for its state.db, NAME for profiles/NAME/state.db; None
    for a store outside the home (:func:`home_of`), or in a profiles/ folder named like the home's alias."""
    folder = home_of(store)
    if folder is None:
        return None
    if folder == hermes_home():
        return "default"
    return None if is_default_name(folder.name) else folder.name


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
        return [StoreTarget(Path(db).expanduser(), None, explicit=True)]
    if profile is not None:
        if is_default_name(profile):  # Hermes's `-p default`: the home itself (hostile try 15, S1)
            return [StoreTarget(hermes_home() / "state.db", None)]
        return [StoreTarget(profile_store(profile), profile)]
    home = hermes_home()
    targets = [StoreTarget(home / "state.db", None)]
    if all_profiles:
        # A dangling or looping link at the default store is kept: opening it reports the problem.
        targets = [t for t in targets if os.path.lexists(t.path)]
        targets += _profile_targets(home / "profiles")
        if not targets:
            raise UsageError(f"--all-profiles: no state.db found under {home}")
        targets = _mark_aliases(targets)
    return targets


def _mark_aliases(targets: list[StoreTarget]) -> list[StoreTarget]:
    """A target whose file (st_dev, st_ino, links followed) an earlier one already names becomes an alias of it."""
    seen: dict[tuple[int, int], StoreTarget] = {}
    out = []
    for t in targets:
        if t.missing or t.problem:
            out.append(t)
            continue
        try:
            st = os.stat(t.path)
        except OSError:  # opening it reports the problem
            out.append(t)
            continue
        first = seen.setdefault((st.st_dev, st.st_ino), t)
        out.append(t if first is t else StoreTarget(t.path, t.profile, alias_of=first))
    return out


def _profile_targets(pdir: Path) -> list[StoreTarget]:
    """Every entry of profiles/ that is (or links to) a folder, or that cannot be told apart from one; not one named
    like the home's alias (``default``), which Hermes never uses (its own profile list skips it)."""
    if not os.path.lexists(pdir):
        return []
    try:
        children = sorted(os.scandir(pdir), key=lambda e: e.name)
    except OSError as exc:
        return [StoreTarget(pdir, "*", problem=f"{pdir}: cannot list the profiles ({exc.strerror})")]
    out = []
    for child in children:
        if is_default_name(child.name):
            continue
        try:
            is_folder = child.is_dir()  # follows a link
        except OSError:
            is_folder = False
        if not is_folder and not child.is_symlink():
            continue  # a stray file in profiles/ is not a profile
        db_path = Path(child.path) / "state.db"
        if not is_folder:
            out.append(StoreTarget(db_path, child.name, problem=f"{child.path}: is a broken or looping link"))
            continue
        try:
            os.lstat(db_path)
            out.append(StoreTarget(db_path, child.name))
        except FileNotFoundError:
            out.append(StoreTarget(db_path, child.name, missing=True))
        except OSError as exc:
            out.append(StoreTarget(db_path, child.name, problem=f"{db_path}: cannot be looked at ({exc.strerror})"))
    return out
