"""The jsonl backup renderer, frozen: the reference the SQL-built export must match byte for byte.

A copy of ``render.write_jsonl_session`` with the ``Timings`` and ``iter_messages`` it used, as they
were before the export learned to build lines in SQLite; do not change it with the product. Changed
twice since, by the format: (issue 25) Hermes's keys (``last_active``) and ``tool_calls`` written as the
JSON it holds, as multimodal ``content`` behind Hermes's ``\\x00json:`` prefix, judged and minified here
in Python, independently of the SQLite ``json()`` the product uses; (hostile try 15, S17) the session's
``session_model_usage`` rows as ``model_usage``, every column, sorted by all of them.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)


def _dumps(obj: Any) -> str:
    return _ENCODER.encode(obj)


def _nesting(text: str) -> int:
    """Array/object depth, brackets in strings not counted (a plain character walk)."""
    level = deepest = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            level += 1
            deepest = max(deepest, level)
        elif c in "]}":
            level -= 1
    return deepest


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(name)
    return json.loads(text, parse_constant=refuse)


def _parsed(raw: Any, prefix: str = "") -> str | None:
    """The JSON a stored tool_calls text (or a content text behind Hermes's prefix) is written as, minified;
    None to keep it a string. Strict JSON, an array or object, no NUL, at most 100 brackets, no three-digit
    exponent (see fast_jsonl.parsed_guard)."""
    if not isinstance(raw, str) or not raw.startswith(prefix):
        return None
    raw = raw[len(prefix):]
    if "\x00" in raw or raw.count("[") + raw.count("{") > 100:
        return None
    if re.search(r"[0-9][eE][+-]?[0-9]{3}", raw):
        return None
    try:
        value = _strict(raw)
    except ValueError:
        return None
    if not isinstance(value, (list, dict)):
        return None
    out, in_string, escaped = [], False, False
    for c in raw:  # whitespace outside strings dropped; every other character as stored
        if in_string:
            out.append(c)
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif c not in " \t\n\r":
            out.append(c)
    return "".join(out)


def _message(msg: dict[str, Any]) -> str:
    parsed = {k: p for k, prefix in (("tool_calls", ""), ("content", "\x00json:"), ("display_metadata", ""))
              if (p := _parsed(msg.get(k), prefix)) is not None}
    if not parsed:
        return _dumps(msg)
    return "{" + ", ".join(f"{_dumps(k)}: {parsed[k] if k in parsed else _dumps(v)}" for k, v in msg.items()) + "}"


def _tool_call_count(raw: Any) -> int:
    if not raw:
        return 0
    if isinstance(raw, str) and _nesting(raw) > 100:  # deeper than the documented bound: not taken as JSON
        return 1
    try:
        calls = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:  # not JSON
        return 1
    return len(calls) if isinstance(calls, list) else 1


class Timings:
    def __init__(self) -> None:
        self.first = self.last = self.previous = None
        self.largest_gap = 0.0
        self.roles: Counter = Counter()
        self.tool_calls = 0
        self.intervals: list = []

    def add(self, msg: dict[str, Any]) -> None:
        role = msg.get("role") or "unknown"
        self.roles[role] += 1
        if role == "assistant" and msg.get("tool_calls"):
            self.tool_calls += _tool_call_count(msg["tool_calls"])
        ts = msg.get("timestamp")
        if not isinstance(ts, (int, float)):
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


def _rows(conn, sql: str, params=()):
    cur = conn.cursor()
    desc = None
    for row in cur.execute(sql, params):
        desc = desc or [d[0] for d in cur.get_description()]
        yield dict(zip(desc, row))


def jsonl_line(conn, session_id: str) -> tuple[str, int]:
    """One session's line as today's export writes it (no redaction), and its message count."""
    row = next(_rows(conn, "SELECT * FROM sessions WHERE id = ?", (session_id,)))
    prompts = None
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'system_prompts'").fetchall():
        if "system_prompt" in row and "system_prompt_hash" in row:  # upstream's get_session: the prompt resolved
            found = conn.execute("SELECT prompt FROM system_prompts WHERE hash = ?",
                                 (row["system_prompt_hash"],)).fetchall()
            if found and found[0][0] is not None:
                row["system_prompt"] = found[0][0]
        refs = sorted({v for c in ("system_prompt_hash", "tool_names") if isinstance(v := row.get(c), str) and v})
        prompts = {h: p for h, p in conn.execute(
            f"SELECT hash, prompt FROM system_prompts WHERE hash IN ({','.join('?' * len(refs))}) ORDER BY hash",
            refs)} if refs else {}
    head = _dumps(row)
    newest = conn.execute("SELECT MAX(timestamp) FROM messages WHERE session_id = ?", (session_id,)).fetchall()[0][0]
    last_active = row.get("started_at") if newest is None else newest
    parts = [head[:-1] + ', "last_active": ' + _dumps(last_active) + ', "messages": ['
             if len(row) else '{"messages": [']
    timings = Timings()
    n = 0
    for msg in _rows(conn, "SELECT * FROM messages WHERE session_id = ? ORDER BY id", (session_id,)):
        timings.add(msg)
        parts.append(("," if n else "") + _message(msg))
        n += 1
    tail = "" if prompts is None else ', "system_prompts": ' + _dumps(prompts)
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'session_model_usage'").fetchall():
        cols = [r[1] for r in conn.execute("PRAGMA table_info(session_model_usage)")]
        order = ", ".join('"' + c + '"' for c in cols)
        tail += ', "model_usage": ' + _dumps(list(_rows(
            conn, f"SELECT * FROM session_model_usage WHERE session_id = ? ORDER BY {order}", (session_id,))))
    parts.append("]" + tail + ', "timings": ' + _dumps(timings.block()) + "}\n")
    return "".join(parts), n
