"""Reading a session's messages as a stream, and the timings rebuilt from their timestamps.

Nothing here loads a whole session: rows are yielded one by one, so export
memory stays flat however large the store grows.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any
from collections.abc import Iterator

from maint.store import Store

BLOB_COLUMNS = ()


def message_columns(store: Store) -> list[str]:
    return [r[1] for r in store.conn.execute("PRAGMA table_info(messages)")]


def iter_messages(store: Store, session_id: str, *, display: bool = False) -> Iterator[dict[str, Any]]:
    """Every stored row (backups), or only what the user sees: active or archived by compaction."""
    cols = message_columns(store)
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
        calls = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return 1
    return len(calls) if isinstance(calls, list) else 1


class Timings:
    """Accumulates the timings block while messages stream past; holds no text."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.largest_gap = 0.0
        self.roles: Counter = Counter()
        self.tool_calls = 0
        self.intervals: list[dict[str, Any]] = []

    def add(self, msg: dict[str, Any]) -> None:
        self.roles[msg.get("role") or "unknown"] += 1
        if msg.get("role") == "assistant":
            self.tool_calls += _tool_call_count(msg.get("tool_calls"))
        ts = msg.get("timestamp")
        if not isinstance(ts, (int, float)):
            self.intervals.append({"id": msg.get("id"), "since_previous_ms": None})
            return
        gap = None if self.last is None else max(0.0, (ts - self.last) * 1000)
        if gap is not None:
            self.largest_gap = max(self.largest_gap, gap)
        self.intervals.append({"id": msg.get("id"), "since_previous_ms": None if gap is None else round(gap, 1)})
        self.first = ts if self.first is None else min(self.first, ts)
        self.last = ts if self.last is None else max(self.last, ts)

    def block(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role_counts": dict(self.roles), "tool_calls_emitted": self.tool_calls,
                               "complete": False}
        if self.first is None:
            out.update(available=False, unavailable_reason="no message has a timestamp", wall_clock_ms=None,
                       largest_gap_ms=None, intervals=[])
        else:
            out.update(available=True, wall_clock_ms=round((self.last - self.first) * 1000, 1),
                       largest_gap_ms=round(self.largest_gap, 1), intervals=self.intervals)
        return out
