"""The one selection engine shared by prune, archive and export.

Flags arrive as strings; :func:`parse_filters` validates every one (bad value
or empty window -> :class:`UsageError`, exit 2) and returns a :class:`Filters`
whose :meth:`Filters.matches` is a plain predicate over a session record. The CLI
reads each flag as it parses (:func:`read_value`, one kind per flag in :data:`FLAGS`)
and hands the values to :func:`build_filters`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from maint.errors import UsageError
from maint.selection.timeparse import read_amount, read_count, read_moment
from maint.store.sqlutil import cwd_under

if TYPE_CHECKING:  # only for annotations: filters stay importable without opening SQLite
    from maint.store.catalog import SessionInfo

DEFAULT_PRUNE_DAYS = 90


@dataclass(frozen=True)
class Filters:
    # last activity bounds (older_than = upper, exclusive as upstream's; newer_than = lower, inclusive)
    active_before: float | None = None
    active_after: float | None = None
    # started_at bounds (before = upper, exclusive; after = lower, inclusive)
    started_before: float | None = None
    started_after: float | None = None
    source: str | None = None
    provider: str | None = None
    end_reason: str | None = None
    user: str | None = None
    chat_id: str | None = None
    chat_type: str | None = None
    title: str | None = None
    model: str | None = None
    branch: str | None = None
    cwd: str | None = None
    min_messages: int | None = None
    max_messages: int | None = None
    min_tokens: int | None = None
    max_tokens: int | None = None
    min_cost: float | None = None
    max_cost: float | None = None
    min_tool_calls: int | None = None
    max_tool_calls: int | None = None

    @property
    def is_empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))

    def matches(self, s: SessionInfo) -> bool:
        if (self.active_before is not None or self.active_after is not None) and s.undated:
            return False  # no time to compare (upstream's NULL last activity matches no bound)
        if self.active_before is not None and not s.last_active < self.active_before:
            return False
        if self.active_after is not None and not s.last_active >= self.active_after:
            return False
        if self.started_before is not None and not s.started_at < self.started_before:
            return False
        if self.started_after is not None and not s.started_at >= self.started_after:
            return False
        for attr, value in (("source", self.source), ("end_reason", self.end_reason), ("user_id", self.user),
                            ("chat_id", self.chat_id), ("chat_type", self.chat_type)):
            if value is not None and getattr(s, attr) != value:
                return False
        if self.provider is not None and (s.billing_provider or "").lower() != self.provider.lower():
            return False
        for attr, needle in (("title", self.title), ("model", self.model), ("git_branch", self.branch)):
            if needle is not None and needle.lower() not in (getattr(s, attr) or "").lower():
                return False
        if self.cwd is not None and not cwd_under(s.cwd, self.cwd):
            return False
        for value, lo, hi in ((s.message_count, self.min_messages, self.max_messages),
                              (s.tokens, self.min_tokens, self.max_tokens),
                              (s.cost, self.min_cost, self.max_cost),
                              (s.tool_call_count, self.min_tool_calls, self.max_tool_calls)):
            if lo is not None and not value >= lo:
                return False
            if hi is not None and not value <= hi:
                return False
        return True

    def sql(self, col: str = "") -> tuple[str, dict[str, Any]]:
        """The same predicate as :meth:`matches`, as SQL over the catalogue's columns
        (:func:`maint.store.catalog.catalog_sql`), with named parameters ``f_*``; ``col`` prefixes
        the column names (``"c."``). Text folding and the cwd rule call the Python functions
        :func:`maint.store.connection.register_functions` installs, so no rule is restated in SQL.
        """
        terms: list[str] = []
        params: dict[str, Any] = {}

        def term(sql: str, name: str, value: Any) -> None:
            terms.append(sql)
            params[name] = value

        for name, value, op, column in (("f_active_before", self.active_before, "<", "last_active"),
                                        ("f_active_after", self.active_after, ">=", "last_active"),
                                        ("f_started_before", self.started_before, "<", "started_at"),
                                        ("f_started_after", self.started_after, ">=", "started_at")):
            if value is not None:
                term(f"{col}{column} {op} :{name}", name, value)
        if self.active_before is not None or self.active_after is not None:
            terms.append(f"NOT {col}undated")
        for column, value in (("source", self.source), ("end_reason", self.end_reason), ("user_id", self.user),
                              ("chat_id", self.chat_id), ("chat_type", self.chat_type)):
            if value is not None:
                term(f"{col}{column} = :f_{column}", f"f_{column}", value)
        if self.provider is not None:
            term(f"maint_lower(COALESCE({col}billing_provider, '')) = :f_provider", "f_provider",
                 self.provider.lower())
        for column, needle in (("title", self.title), ("model", self.model), ("git_branch", self.branch)):
            if needle is not None:
                term(f"instr(maint_lower(COALESCE({col}{column}, '')), :f_{column}) > 0", f"f_{column}",
                     needle.lower())
        if self.cwd is not None:
            term(f"maint_cwd_under({col}cwd, :f_cwd)", "f_cwd", self.cwd)
        for column, lo, hi in (("message_count", self.min_messages, self.max_messages),
                               ("tokens", self.min_tokens, self.max_tokens),
                               ("cost", self.min_cost, self.max_cost),
                               ("tool_call_count", self.min_tool_calls, self.max_tool_calls)):
            if lo is not None:
                term(f"{col}{column} >= :f_min_{column}", f"f_min_{column}", lo)
            if hi is not None:
                term(f"{col}{column} <= :f_max_{column}", f"f_max_{column}", hi)
        return (" AND ".join(f"({t})" for t in terms) or "1"), params

    @property
    def columns(self) -> set[str]:
        """The catalogue columns :meth:`sql` reads (see :func:`maint.store.catalog.catalog_sql`)."""
        used = {"source": self.source, "end_reason": self.end_reason, "user_id": self.user, "chat_id": self.chat_id,
                "chat_type": self.chat_type, "billing_provider": self.provider, "title": self.title,
                "model": self.model, "git_branch": self.branch, "cwd": self.cwd,
                "message_count": self.min_messages if self.min_messages is not None else self.max_messages,
                "tokens": self.min_tokens if self.min_tokens is not None else self.max_tokens,
                "cost": self.min_cost if self.min_cost is not None else self.max_cost,
                "tool_call_count": self.min_tool_calls if self.min_tool_calls is not None else self.max_tool_calls}
        return {column for column, value in used.items() if value is not None}


def normalize_cwd(path: str) -> str:
    expanded = os.path.expanduser(path)
    return expanded.rstrip("/\\") or expanded


# flag name (``older_than`` for --older-than) -> (Filters field it sets, kind of value it takes)
FLAGS: dict[str, tuple[str, str]] = {
    "older_than": ("active_before", "time"), "newer_than": ("active_after", "time"),
    "before": ("started_before", "time"), "after": ("started_after", "time"),
    **{name: (name, "text") for name in ("source", "provider", "end_reason", "user", "chat_id", "chat_type",
                                         "title", "model", "branch")},
    "cwd": ("cwd", "dir"),
    **{f"{side}_{what}": (f"{side}_{what}", "count") for what in ("messages", "tokens", "tool_calls")
       for side in ("min", "max")},
    "min_cost": ("min_cost", "usd"), "max_cost": ("max_cost", "usd"),
}


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def read_value(kind: str, value: Any, now: float | None = None) -> Any:
    """One flag's value of *kind* (see :data:`FLAGS`), or ``ValueError`` naming the value and the accepted form."""
    if kind == "time":
        return read_moment(value, now)
    if kind == "count":
        return read_count(value)
    if kind == "usd":
        return read_amount(value)
    text = str(value)
    if not text.strip():
        raise ValueError("empty value (expected a directory path, e.g. ~/scratch)" if kind == "dir"
                         else "empty value (expected a non-empty string)")
    return normalize_cwd(text) if kind == "dir" else text


def parse_filters(raw: dict[str, Any], now: float | None = None) -> Filters:
    """Validate raw flag values (None = not given) into :class:`Filters`."""
    now = time.time() if now is None else now
    values = {}
    for name, value in raw.items():
        if value is not None:
            try:
                values[name] = read_value(FLAGS[name][1], value, now)
            except ValueError as exc:
                raise UsageError(f"{flag_of(name)}: {exc}") from None
    return build_filters(values)


def build_filters(values: dict[str, Any]) -> Filters:
    """:class:`Filters` from flag values already read (None = not given), refusing an empty window or range."""
    out = {FLAGS[name][0]: value for name, value in values.items() if value is not None}
    if "active_before" in out and "active_after" in out and out["active_after"] > out["active_before"]:
        raise UsageError("--newer-than/--older-than: empty window (the lower bound is after the upper bound)")
    if "started_before" in out and "started_after" in out and out["started_after"] >= out["started_before"]:
        raise UsageError("--after/--before: empty window (--after must be earlier than --before)")
    for name in ("messages", "tokens", "cost", "tool_calls"):
        lo, hi = out.get(f"min_{name}"), out.get(f"max_{name}")
        if lo is not None and hi is not None and lo > hi:
            flag = name.replace("_", "-")
            raise UsageError(f"--min-{flag}/--max-{flag}: empty range ({lo} > {hi})")
    return Filters(**out)


def implicit_prune_filters(now: float | None = None, days: float = DEFAULT_PRUNE_DAYS) -> Filters:
    now = time.time() if now is None else now
    return Filters(active_before=now - days * 86400)
