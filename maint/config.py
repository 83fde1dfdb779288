"""Hermes's config.yaml: read with defaults for missing keys; one key written back by ``autoprune on|off``.

A round-trip loader is used so that write-back keeps the user's comments and layout.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from maint.errors import UsageError
from maint.store.targets import hermes_home

SESSION_DEFAULTS: dict[str, Any] = {
    "auto_prune": False,
    "auto_archive": False,
    "auto_archive_days": 3,
    "retention_days": 90,
    "vacuum_after_prune": True,
    "min_vacuum_interval_days": 30,
    "min_interval_hours": 24,
    "max_export_messages": 20000,
}


@dataclass
class Config:
    path: Path
    exists: bool
    raw: Any = None
    sessions: dict[str, Any] = field(default_factory=dict)
    journal_mode: str | None = None

    def session(self, key: str) -> Any:
        return self.sessions.get(key, SESSION_DEFAULTS.get(key))

    def has_session_key(self, key: str) -> bool:
        return key in self.sessions


def yaml_loader() -> YAML:
    return YAML(typ="rt")


def load_config(path: Path | None = None) -> Config:
    path = path or hermes_home() / "config.yaml"
    if not path.exists():
        return Config(path=path, exists=False)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read config ({exc.__class__.__name__}: {exc})") from None
    try:
        data = yaml_loader().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else "?"
        problem = (exc.problem or exc.context or "malformed YAML").strip()
        raise UsageError(f"{path}:{line}: malformed config: {problem}") from None
    except YAMLError as exc:
        raise UsageError(f"{path}: malformed config: {str(exc).splitlines()[0]}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}:1: malformed config: top level must be a mapping")
    sessions = data.get("sessions") or {}
    if not isinstance(sessions, dict):
        raise UsageError(f"{path}: 'sessions' must be a mapping")
    database = data.get("database") or {}
    journal = database.get("journal_mode") if isinstance(database, dict) else None
    return Config(path=path, exists=True, raw=data, sessions=dict(sessions),
                  journal_mode=str(journal).lower() if journal is not None else None)


def set_session_key(path: Path, key: str, value: Any) -> None:
    """Write ``sessions.<key>`` into config.yaml, keeping the user's comments and other keys.

    The new text goes to a temporary file beside it and replaces the old one
    atomically, so a crash never leaves a half-written config.
    """
    yaml = yaml_loader()
    data = None
    if path.exists():
        try:
            data = yaml.load(path.read_text(encoding="utf-8"))
        except YAMLError as exc:
            raise UsageError(f"{path}: malformed config, not rewriting it ({str(exc).splitlines()[0]})") from None
    if data is None:
        from ruamel.yaml.comments import CommentedMap

        data = CommentedMap()
    if not isinstance(data, dict):
        raise UsageError(f"{path}:1: malformed config: top level must be a mapping")
    if not isinstance(data.get("sessions"), dict):
        from ruamel.yaml.comments import CommentedMap

        data["sessions"] = CommentedMap()
    data["sessions"][key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        yaml.dump(data, fh)
    os.replace(tmp, path)
