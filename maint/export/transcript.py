"""Reading a session's messages as a stream, and the timings rebuilt from their timestamps.

Nothing here loads a whole session: rows are yielded one by one, so export
memory stays flat however large the store grows.
"""

from __future__ import annotations

from collections import Counter
from typing import Any
from collections.abc import Iterator

from maint import json_text
from maint.store.connection import Store

def iter_messages(store: Store, session_id: str, *, display: bool = False) -> Iterator[dict[str, Any]]:
    """Every stored row (backups), or only what the user sees: active or archived by compaction."""
    cols = store.columns("messages")
    where = "session_id = ?"
    if display and "active" in cols:
        where += " AND (active = 1 OR " + ("compacted = 1" if "compacted" in cols else "0") + ")"
    yield from store.iter_rows(f"SELECT * FROM messages WHERE {where} ORDER BY id", (session_id,))


def stored_count(store: Store, session_id: str) -> int:
    return store.scalar("SELECT COUNT(*) FROM messages WHERE session_id = ?", (session_id,)) or 0


def _tool_call_count(raw: Any) -> int:
    if not raw:
        return 0
    try:
        calls = json_text.loads(raw) if isinstance(raw, str) else raw
    except ValueError:  # not JSON, or nested past json_text.MAX_DEPTH
        return 1
    return len(calls) if isinstance(calls, list) else 1


def shown_role(role: Any) -> str:
    return role.decode("utf-8", "backslashreplace") if role.__class__ is bytes else str(role)


class Timings:
    """Accumulates the timings block while messages stream past; holds no text."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.largest_gap = 0.0
        self.roles: Counter = Counter()
        self.tool_calls = 0
        self.intervals: list[tuple[Any, float | None]] = []
        self.previous: float | None = None

    def add(self, msg: dict[str, Any]) -> None:
        role = msg.get("role") or "unknown"
        if role.__class__ is not str:  # a BLOB or a number stored as the role: a key of role_counts must be text
            role = shown_role(role)
        self.roles[role] += 1
        if role == "assistant" and msg.get("tool_calls"):
            self.tool_calls += _tool_call_count(msg["tool_calls"])
        ts = msg.get("timestamp")
        if ts.__class__ is not float and not isinstance(ts, (int, float)):
            self.intervals.append((msg.get("id"), None))
            return
        if self.previous is None:
            self.intervals.append((msg.get("id"), None))
            self.first = self.last = ts
        else:
            gap = (ts - self.previous) * 1000
            gap = gap if gap > 0 else 0.0
            if gap > self.largest_gap:
                self.largest_gap = gap
            self.intervals.append((msg.get("id"), round(gap, 1)))
            if ts < self.first:
                self.first = ts
            if ts > self.last:
                self.last = ts
        self.previous = ts

    def block(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role_counts": dict(self.roles), "tool_calls_emitted": self.tool_calls,
                               "complete": False}
        if self.first is None:
            out.update(available=False, unavailable_reason="no message has a timestamp", wall_clock_ms=None,
                       largest_gap_ms=None, intervals=[])
        else:
            out.update(available=True, wall_clock_ms=round((self.last - self.first) * 1000, 1),
                       largest_gap_ms=round(self.largest_gap, 1),
                       intervals=[{"id": i, "since_previous_ms": g} for i, g in self.intervals])
        return out
