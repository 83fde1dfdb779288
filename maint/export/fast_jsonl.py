"""The jsonl backup assembled by SQLite: each session's line is built in C, byte for byte what
:func:`maint.export.render.write_jsonl_session` writes (without redaction, which needs Python per text).

SQLite's ``json_quote`` escapes text and prints integers exactly as ``json.dumps(ensure_ascii=False)``
does, but not floats (Python prints the shortest round-trip digits, SQLite 15 or 17) nor blobs
(``default=str``): those go through the SQL functions below, which run Python's own code. A timing
rounded to 0.1 ms is written by SQL when that is provably Python's ``repr(round(x, 1))`` (see
:func:`_tenths`), by Python otherwise. Whatever the SQL cannot vouch for puts a NUL at the line's end
and the caller renders that session the reference way: text timestamps, roles that are
not text, an assistant's ``tool_calls`` that is a blob or not strict JSON, prompt hashes that are not
text. Lines come back as bytes and are written as they are; one that is not UTF-8 goes the reference way,
which fails as it always did.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from maint.store.connection import Store

_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)  # render._dumps: the reference's encoder
BATCH = 256  # sessions per statement: few statements, lines released as they stream
CHUNK = 1 << 20  # bytes per write


def _json(value: Any) -> str:
    return _ENCODER.encode(value)


def _ms(value: float) -> str:
    return _ENCODER.encode(round(value, 1))


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _value(expr: str) -> str:
    """A column as ``json.dumps`` prints it: finite floats by ``float.__repr__``, blobs and infinities
    by the encoder itself, the rest by SQLite."""
    return (f"CASE typeof({expr}) WHEN 'real' THEN iif(abs({expr}) <= 1.7976931348623157e308, "
            f"maint_repr({expr}), maint_json({expr})) WHEN 'blob' THEN maint_json({expr}) "
            f"ELSE json_quote({expr}) END")


def _tenths(expr: str) -> str:
    """``repr(round(x, 1))`` for a float x >= 0 (a gap in ms), in SQL where that is provable.

    With 0 <= x < 1e8, ``x*10 + 0.5`` is computed within 2e-8 of its exact value, so away from a
    tie (the fraction of x*10 more than 1e-6 from .5) its floor is the exact round-half-even of 10x,
    k; Python's round returns the double nearest k/10, whose shortest repr is k/10 in fixed notation
    (at most 9 digits). Anything else (a near tie, a huge gap) asks Python.
    """
    return (f"iif({expr} < 1e8 AND abs({expr} * 10 - floor({expr} * 10) - 0.5) > 1e-6, "
            f"concat(CAST(floor({expr} * 10 + 0.5) AS INTEGER) / 10, '.', "
            f"CAST(floor({expr} * 10 + 0.5) AS INTEGER) % 10), maint_ms({expr}))")


def _object(alias: str, columns: list[str], close: str) -> str:
    """``json.dumps`` of a row as a dict (keys in column order, ``", "`` and ``": "``), without its ``}``."""
    parts = []
    for n, col in enumerate(columns):
        parts.append(_literal(("{" if n == 0 else ", ") + _json(col) + ": "))
        parts.append(_value(f"{alias}.{_ident(col)}"))
    return f"concat({', '.join(parts or [_literal('{')])}, {_literal(close)})"


_UNAVAILABLE = ('"available": false, "unavailable_reason": "no message has a timestamp", '
                '"wall_clock_ms": null, "largest_gap_ms": null, "intervals": []}}')  # the block's } and the line's


def _timings(message_cols: list[str]) -> str:
    """The timings block closing the line, or NUL when a row has what the SQL cannot vouch for."""
    has = set(message_cols)
    ts = "m.timestamp" if "timestamp" in has else "NULL"
    role = "m.role" if "role" in has else "NULL"
    calls = "m.tool_calls" if "tool_calls" in has else "NULL"
    gap = "max((ts - prev) * 1000, 0.0)"
    return f"""(WITH w AS (SELECT m.id AS id, {ts} AS ts, {role} AS role, {calls} AS calls,
                  LAG({ts}) OVER (ORDER BY m.id) AS prev
              FROM messages m WHERE m.session_id = s.id)
        SELECT CASE
            WHEN SUM(typeof(ts) NOT IN ('real', 'null') OR typeof(role) NOT IN ('text', 'null')
                     OR role = 'assistant' AND typeof(calls) NOT IN ('text', 'null')
                     OR role = 'assistant' AND calls <> '' AND NOT json_valid(calls))
                 OR COUNT(ts) NOT IN (0, COUNT(*)) THEN char(0)
            ELSE concat('{{"role_counts": {{', (SELECT group_concat(json_quote(r) || ': ' || n, ', ' ORDER BY f)
                    FROM (SELECT coalesce(nullif(role, ''), 'unknown') AS r, COUNT(*) AS n, MIN(id) AS f
                          FROM w GROUP BY 1)),
                 '}}, "tool_calls_emitted": ', coalesce(SUM(iif(role = 'assistant' AND calls <> '',
                        iif(json_valid(calls) AND json_type(calls) = 'array', json_array_length(calls), 1), 0)), 0),
                 ', "complete": false, ',
                 iif(COUNT(ts) = 0, {_literal(_UNAVAILABLE)},
                     concat('"available": true, "wall_clock_ms": ', maint_ms((MAX(ts) - MIN(ts)) * 1000),
                            ', "largest_gap_ms": ', maint_ms(max(coalesce(MAX((ts - prev) * 1000), 0.0), 0.0)),
                            ', "intervals": [', group_concat(concat('{{"id": ', json_quote(id),
                                ', "since_previous_ms": ', iif(prev IS NULL, 'null', {_tenths(gap)}), '}}'),
                                ', ' ORDER BY id), ']}}}}')))
            END FROM w)"""


def line_sql(store: Store) -> str:
    """One row per session id of the JSON array bound to ``?``: (found, messages, line).

    A session missing from the store is not found (the reference raises as it always did).
    """
    session_cols, message_cols = store.columns("sessions"), store.columns("messages")
    head = _object("s", session_cols, ", \"messages\": [" if session_cols else "\"messages\": [")
    prompts, end = "''", "char(10)"
    if store.has_table("system_prompts"):
        refs = [f"iif(typeof(s.{c}) = 'text' AND s.{c} <> '', s.{c}, NULL)"
                for c in ("system_prompt_hash", "tool_names") if c in session_cols]
        where = f"p.hash IN ({', '.join(refs)})" if refs else "0"
        prompts = f"""(SELECT concat(', "system_prompts": {{',
                group_concat(json_quote(p.hash) || ': ' || {_value('p.prompt')}, ', ' ORDER BY p.hash), '}}')
                FROM system_prompts p WHERE {where})"""
        # A hash that is not text would be a key json.dumps prints otherwise (only a store whose hash
        # column converts the text refs matches one).
        end = f"(SELECT iif(SUM(typeof(p.hash) <> 'text'), char(0), char(10)) FROM system_prompts p WHERE {where})"
    messages = f"""(SELECT group_concat({_object('m', message_cols, '}')}, ',' ORDER BY m.id)
        FROM messages m WHERE m.session_id = s.id)"""
    return f"""SELECT s.rowid IS NOT NULL, (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id),
        CAST(concat({head}, {messages}, ']', {prompts}, ', "timings": ', {_timings(message_cols)}, {end}) AS BLOB)
        FROM json_each(?) j LEFT JOIN sessions s ON s.id = j.value ORDER BY j.key"""


def register(store: Store) -> None:
    conn = store.conn
    conn.create_scalar_function("maint_json", _json, 1, deterministic=True)
    conn.create_scalar_function("maint_repr", float.__repr__, 1, deterministic=True)
    conn.create_scalar_function("maint_ms", _ms, 1, deterministic=True)


def _batches(ids: Iterable[Any]) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for sid in ids:
        batch.append(sid)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def write_sessions(store: Store, ids: Iterable[Any], write: Callable[[bytes], None],
                   reference: Callable[[Any], int]) -> int:
    """Every session's line in order, as UTF-8 written in chunks of about :data:`CHUNK` bytes;
    *reference* renders (and counts) a session the SQL gives back."""
    register(store)
    sql = line_sql(store)
    out = _Chunks(write)
    n = 0
    for batch in _batches(ids):
        if all(isinstance(sid, str) for sid in batch):
            n += _write_batch(store, sql, batch, out, reference)
        else:
            out.flush()
            n += sum(reference(sid) for sid in batch)
    out.flush()
    return n


class _Chunks:
    """Lines gathered into large writes; flushed before the reference writes, to keep the order."""

    def __init__(self, write: Callable[[bytes], None]):
        self.write, self.parts, self.size = write, [], 0

    def add(self, data: bytes) -> None:
        self.parts.append(data)
        self.size += len(data)
        if self.size >= CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.parts:
            self.write(b"".join(self.parts))
            self.parts, self.size = [], 0


def _write_batch(store: Store, sql: str, batch: list[str], out: _Chunks, reference: Callable[[Any], int]) -> int:
    n, done = 0, 0
    while done < len(batch):
        try:
            for found, count, line in store.conn.execute(sql, (json.dumps(batch[done:]),)):
                if found and line.endswith(b"}\n"):
                    if not line.isascii():
                        line.decode("utf-8")  # text that is not UTF-8 fails as the reference always did
                    out.add(line)
                    n += count
                else:
                    out.flush()
                    n += reference(batch[done])
                done += 1
        except UnicodeDecodeError:
            out.flush()
            n += reference(batch[done])
            done += 1
    return n
