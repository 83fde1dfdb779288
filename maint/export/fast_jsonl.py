"""The jsonl backup assembled by SQLite: each session's line is built in C, byte for byte what
:func:`maint.export.render.write_jsonl_session` writes (without redaction, which needs Python per text).

SQLite's ``json_quote`` escapes text and prints integers exactly as ``json.dumps(ensure_ascii=False)``
does, but not floats (Python prints the shortest round-trip digits, SQLite 15 or 17) nor blobs
(``default=str``): those go through the SQL functions below, which run Python's own code. A timing
rounded to 0.1 ms is written by SQL when that is provably Python's ``repr(round(x, 1))`` (see
:func:`_tenths`), by Python otherwise. Whatever the SQL cannot vouch for puts a NUL in the line
(which otherwise never holds one: every text is escaped) and the caller renders that session the
reference way: text or infinite timestamps, roles that are not text, an assistant's ``tool_calls``
that is a blob, not strict JSON or holds more brackets than :data:`~maint.json_text.MAX_DEPTH`,
prompt hashes that are not text, rows that reached the aggregate out of order, and sessions too big
to build whole (:data:`LINE_BYTES`). Lines come back as bytes
and are written as they are; one that is not UTF-8 goes the reference way, which fails as it
always did.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache
from typing import Any

import apsw

from maint.json_text import MAX_DEPTH
from maint.store.connection import USAGE_TABLE, Store, quote_ident
from maint.store.sqlutil import sql_literal

# The redactor's patterns compile when it is imported (a tenth of a second, most of a small export's start):
# a redacted export loads it (:func:`_load_redactor`), an unredacted one never does.
KEEP_COLUMNS: frozenset[str]
gate: Callable[[bytes], Any]
redact_gated: Callable[[str, Any], str]
redact_text: Callable[[str], str]
redact_value: Callable[[Any], Any]


def _load_redactor() -> None:
    global KEEP_COLUMNS, gate, redact_gated, redact_text, redact_value
    from maint.export.redact import KEEP_COLUMNS, gate, redact_gated, redact_text, redact_value


_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)  # render._dumps: the reference's encoder
_quote = json.encoder.encode_basestring  # what that encoder does to a str (ensure_ascii=False)
BATCH = 256  # sessions per statement: few statements, lines released as they stream
# Sessions a paced redacted export gates beyond what the transaction before built (:func:`_next_gated`)
GATE_MARGIN = 8
CHUNK = 1 << 20  # bytes per write
# A line is built whole in memory: while the SQL runs, SQLite refuses any string longer than this
# (SQLITE_LIMIT_LENGTH), and the session goes to the reference renderer, which streams it row by row.
LINE_BYTES = 8 << 20
# Lines one paced read transaction gathers before it ends and they are written (see ReadPacing).
READ_BYTES = 8 << 20


def _json(value: Any) -> str:
    return _ENCODER.encode(value)


def _ms(value: float | None) -> str:
    """``round(value, 1)`` as the encoder prints it (the timings' figures, finite floats).

    NULL is SQLite's NaN, from infinite timestamps: those lines are given back, whatever this says.
    """
    return "null" if value is None else float.__repr__(round(value, 1))


def _roles(roles: str) -> str:
    """The role counts as the reference's Counter keeps them, first seen first, printed as its encoder
    prints a dict of str to int (counted in a plain dict: a Counter costs more to build than to fill)."""
    counts: dict[str, int] = {}
    for role in json.loads(roles):
        counts[role] = counts.get(role, 0) + 1
    return "{" + ", ".join([f"{_quote(k)}: {v}" for k, v in counts.items()]) + "}"


def _affinity(declared: str) -> str:
    """SQLite's column affinity from a declared type (https://sqlite.org/datatype3.html, 3.1)."""
    t = (declared or "").upper()
    if "INT" in t:
        return "integer"
    if any(k in t for k in ("CHAR", "CLOB", "TEXT")):
        return "text"
    if not t or "BLOB" in t:
        return "blob"
    return "real" if any(k in t for k in ("REAL", "FLOA", "DOUB")) else "numeric"


def _value(expr: str, affinity: str = "blob", redact: bool = False) -> str:
    """A column as ``json.dumps`` prints it: finite floats by ``float.__repr__``, blobs and infinities
    by the encoder itself, the rest by SQLite.

    Types are told apart by comparisons, which cost no function call: SQLite orders NULL < numbers <
    text < blobs, so ``x < ''`` is a number and ``x >= x''`` a blob. A text-affinity column holds no
    number (SQLite turns one into text on the way in), a real-affinity one no integer.
    """
    real = f"iif(abs({expr}) <= 1.7976931348623157e308, maint_repr({expr}), maint_json({expr}))"
    number = {"text": "", "real": f"WHEN {expr} < '' THEN {_shortest(expr, real)} "}.get(
        affinity, f"WHEN {expr} < '' THEN iif(typeof({expr}) = 'real', {real}, {expr}) ")
    if redact:  # texts of 8 characters or more and blobs go through the redactor (render.redact_row)
        return (f"CASE WHEN {expr} IS NULL THEN 'null' {number}WHEN {expr} < x'' THEN "
                f"iif(length({expr}) < 8, json_quote({expr}), coalesce(maint_gated(CAST({expr} AS BLOB)), "
                f"json_quote({expr}))) ELSE maint_redacted({expr}) END")
    return (f"CASE WHEN {expr} IS NULL THEN 'null' {number}WHEN {expr} < x'' THEN json_quote({expr}) "
            f"ELSE maint_json({expr}) END")


def _shortest(expr: str, otherwise: str) -> str:
    """``repr(x)`` for a float x in [2**30, 2**31) (the binade of the timestamps of 2004 to 2038), in SQL where
    that is provable, else *otherwise*: most of an export's floats, each a Python call otherwise.

    There x = N / 2**22 exactly (N = x * 2**22: the product and the cast are exact below 2**53), with ten digits
    before the point, so Python's shortest round-trip repr has at most seven after it. In units of 1e-7 the
    fraction is u = T / 2**22 (T = (N mod 2**22) * 10**7, below 2**46), and a decimal c reads back as x when
    |c * 2**22 - T| < 5,000,000: integers, exact. (Equality, where reading rounds half to even, cannot happen:
    for c a multiple of 10 the left side is a multiple of 2**7, 5,000,000 = 2**6 * 5**8 is not; for the nearest
    unit it is at most 2**21.)
    That interval is 2.4 units wide, so it holds at most one multiple of 10: when the nearest one is inside,
    it is the shortest repr (its zeros stripped, ".0" when none is left, a carry into the integer part
    included); else the repr has seven decimals, the unit nearest u, ``(T + 2**21) >> 22``, which is no
    multiple of 10 (that one would be inside) and carries nothing. A u exactly between two units asks Python.
    """
    q, half = 1 << 22, 1 << 21
    n = f"CAST({expr} * {q} AS INTEGER)"
    t = f"(({n} & {q - 1}) * 10000000)"
    near10 = f"(({t} + {5 * q}) % {10 * q})"  # 5 * 2**22 - (the multiple of 10 nearest u) * 2**22 + T
    total = f"(({n} >> 22) * 10000000 + ({t} + {5 * q}) / {10 * q} * 10)"
    # (|| binds tighter than / in SQL: the parentheses matter)
    trimmed = (f"(({total} / 10000000) || '.' || "
               f"coalesce(nullif(rtrim(substr({total} % 10000000 + 10000000, 2), '0'), ''), '0'))")
    seven = f"(({n} >> 22) || '.' || substr((({t} + {half}) >> 22) + 10000000, 2))"
    return (f"coalesce(CASE WHEN {expr} >= 1073741824.0 AND {expr} < 2147483648.0 THEN CASE "
            f"WHEN {near10} BETWEEN {5 * q - 4999999} AND {5 * q + 4999999} THEN {trimmed} "
            f"WHEN {t} & {q - 1} <> {half} THEN {seven} END END, {otherwise})")


def _tenths(expr: str) -> str:
    """``repr(round(x, 1))`` for a float x >= 0 (a gap in ms), in SQL where that is provable.

    With 0 <= x < 1e8, ``x*10 + 0.5`` is computed within 2e-8 of its exact value, so away from a
    tie (the fraction of x*10 more than 1e-6 from .5) its floor is the exact round-half-even of 10x,
    k; Python's round returns the double nearest k/10, whose shortest repr is k/10 in fixed notation
    (at most 9 digits). Anything else (a near tie, a huge gap) asks Python.

    The floors are casts (x >= 0: a cast truncates to the floor) and ``abs(y) > c`` is ``y > c OR -y > c``:
    opcodes, not function calls, as this runs once a message.
    """
    tens = f"({expr}) * 10"
    frac = f"({tens} - CAST({tens} AS INTEGER))"
    k = f"CAST({tens} + 0.5 AS INTEGER)"
    return (f"iif({expr} < 1e8 AND ({frac} - 0.5 > 1e-6 OR 0.5 - {frac} > 1e-6), "
            f"concat({k} / 10, '.', {k} % 10), maint_ms({expr}))")


def parsed_guard(expr: str) -> str:
    """SQL: true when the text *expr* (a stored ``tool_calls``) is written as the JSON it holds, as Hermes's
    export writes it, rather than as a string: strict JSON (``json_valid``), an array or object, no NUL
    (SQLite would read only up to it), at most :data:`~maint.json_text.MAX_DEPTH` brackets (deeper JSON is
    text to our importer) and no exponent of three digits (``1e400``: a number our importer cannot take
    back, Python reads it as infinity). Anything else stays the stored string, data unchanged."""
    return (f"iif(json_valid({expr}), json_type({expr}) IN ('array', 'object') AND instr({expr}, char(0)) = 0 "
            f"AND length({expr}) - length(replace(replace({expr}, '[', ''), '{{', '')) <= {MAX_DEPTH} "
            f"AND NOT ({expr} GLOB '*[0-9][eE][0-9][0-9][0-9]*' OR {expr} GLOB '*[0-9][eE][+-][0-9][0-9][0-9]*'), 0)")


# Message columns Hermes's export (get_messages) writes as the JSON they hold, with the prefix that marks
# it: tool_calls (the whole text), content (multimodal parts behind SessionDB._CONTENT_JSON_PREFIX),
# upstream's display_metadata (the whole text).
PARSED_COLUMNS = {"tool_calls": "", "content": "\x00json:", "display_metadata": ""}


def _payload(expr: str, prefix: str) -> str:
    """The text after *prefix* (cut as bytes: SQLite's text functions stop at the prefix's NUL)."""
    return f"CAST(substr(CAST({expr} AS BLOB), {len(prefix.encode()) + 1}) AS TEXT)" if prefix else expr


def _has_prefix(expr: str, prefix: str) -> str:
    """SQL: the text *expr* starts with *prefix* (two comparisons: no function call, no scan)."""
    if not prefix:
        return "1"
    head, last = prefix[:-1], prefix[-1]
    low, high = _text_literal(prefix), _text_literal(head + chr(ord(last) + 1))
    return f"{expr} >= {low} AND {expr} < {high}"


def _text_literal(text: str) -> str:
    """A SQL text literal that may hold a NUL (char(0) concatenated in)."""
    parts = [sql_literal(part) for part in text.split("\x00")]
    return "(" + " || char(0) || ".join(parts) + ")"


def parsed_sql(prefix: str) -> str:
    """The JSON a stored text behind *prefix* is written as (its minified form, SQLite's json()), or NULL to
    write the text as a string: what the reference renderer asks the store (so both renderers agree)."""
    body = _payload("?1", prefix)
    return (f"SELECT iif(typeof(?1) = 'text' AND {_has_prefix('?1', prefix)} AND {parsed_guard(body)}, "
            f"json({body}), NULL)")


PARSED_SQL = {col: parsed_sql(prefix) for col, prefix in PARSED_COLUMNS.items()}


def _parsed_value(expr: str, col: str, otherwise: str, redacted: bool) -> str:
    """A ``tool_calls``/``content`` cell: the JSON it holds where :func:`parsed_guard` allows, else
    *otherwise* (the string). Redacted, the text is first redacted (in Python, as the reference does) and
    then judged."""
    prefix = PARSED_COLUMNS[col]
    body = _payload(expr, prefix)
    # A text, told by comparisons first (SQLite orders numbers < text < blobs; the prefix is text): typeof, a
    # function call, is reached only by the few cells that pass them, not once a row.
    text = f"{_has_prefix(expr, prefix)} AND typeof({expr}) = 'text'" if prefix else f"{expr} >= '' AND {expr} < x''"
    if redacted:  # NULL from the redactor: nothing masked, the text is judged here as unredacted
        return (f"iif({text}, coalesce(maint_parsed_redacted_{col}"
                f"({expr}), iif({parsed_guard(body)}, json({body}), {otherwise})), {otherwise})")
    return f"iif({text} AND {parsed_guard(body)}, json({body}), {otherwise})"


def _object(alias: str, columns: list[tuple[str, str]], close: str, redact: bool = False,
            exprs: dict[str, str] | None = None) -> str:
    """``json.dumps`` of a row as a dict (keys in column order, ``", "`` and ``": "``), then *close*;
    with *redact*, of the row as :func:`maint.export.redact.redact_row` leaves it. ``tool_calls`` is
    written as the JSON it holds (:func:`_parsed_value`); *exprs* gives a column's value another way."""
    exprs = exprs or {}
    if not redact or not _gated_texts(alias, columns, exprs):
        return _fields(alias, columns, close, False, exprs)
    # Rows the gate let through (their rowids bound as a JSON array by _Hits.gate_batch: ?2 sessions, ?3
    # messages) go column by column through the redactor; SQLite alone builds the rest, and tells them apart
    # itself (a Python call per row cost as much as the test).
    return (f"iif({alias}.rowid IN (SELECT value FROM json_each(?{HIT_PARAMS[alias]})), "
            f"{_fields(alias, columns, close, True, exprs)}, {_fields(alias, columns, close, False, exprs)})")


HIT_PARAMS = {"s": 2, "m": 3}  # the line SQL's parameters holding the rows the gate let through


def _fields(alias: str, columns: list[tuple[str, str]], close: str, redacted: bool,
            exprs: dict[str, str] | None = None) -> str:
    """:func:`_object`'s row, every redactable text through the redactor when *redacted* (each text gated on
    its own: :func:`_gated`)."""
    exprs = exprs or {}
    parts = []
    for n, (col, affinity) in enumerate(columns):
        parts.append(sql_literal(("{" if n == 0 else ", ") + _json(col) + ": "))
        expr = exprs.get(col, f"{alias}.{quote_ident(col)}")
        value = _value(expr, affinity, redacted and col not in KEEP_COLUMNS)
        if alias == "m" and col in PARSED_COLUMNS:
            value = _parsed_value(expr, col, value, redacted and col not in KEEP_COLUMNS)
        parts.append(value)
    return f"concat({', '.join(parts or [sql_literal('{')])}, {sql_literal(close)})"




def _usage(store: Store, redact: bool) -> str:
    """SQL: the session's ``"model_usage"`` key as :func:`maint.export.render.model_usage` gives it (its rows, in
    column order, sorted by every column), or '' when the store has no such table. Usage rows are few (a model, a
    provider and a task each): redacted, each text goes through the redactor's own gate."""
    if not store.has_table(USAGE_TABLE):
        return "''"
    columns = _columns(store, USAGE_TABLE)
    order = ", ".join(f"u.{quote_ident(c)}" for c, _ in columns)
    return (f"(SELECT concat(', \"model_usage\": [', group_concat({_fields('u', columns, '}', redact)}, ', ' "
            f"ORDER BY {order}), ']') FROM {USAGE_TABLE} u WHERE u.session_id = s.id)")


def _gated_texts(alias: str, columns: list[tuple[str, str]], exprs: dict[str, str] | None = None) -> str:
    """A row's redactable columns (as written: *exprs*) as one UTF-8 blob, a line each (every rule that
    wants the end of a text takes the end of a line), blobs as their bytes; '' when the table has none."""
    exprs = exprs or {}
    texts = []
    for col, affinity in columns:
        if col in KEEP_COLUMNS:
            continue
        expr = exprs.get(col, f"{alias}.{quote_ident(col)}")
        # a number is written by SQLite and never redacted: only texts and blobs (>= '') are gated (a column of
        # text affinity holds no number)
        texts.append(expr if affinity == "text" else f"iif({expr} >= '', {expr}, NULL)")
    return f"CAST(concat_ws(char(10), {', '.join(texts)}) AS BLOB)" if texts else ""


def gate_sql(store: Store) -> tuple[str, str]:
    """Per batch (the JSON array of session ids bound to ``?``): (rowid, texts) of its sessions, then
    of their messages, for :func:`maint.export.redact.gate`."""
    sessions = _gated_texts("s", _columns(store, "sessions"), resolved_columns(store))
    messages = _gated_texts("m", _columns(store, "messages"))
    return (f"SELECT s.rowid, {sessions or 'NULL'} FROM json_each(?) j JOIN sessions s ON s.id = j.value",
            f"SELECT m.rowid, {messages or 'NULL'} FROM json_each(?) j JOIN messages m ON m.session_id = j.value")


def resolved_columns(store: Store) -> dict[str, str]:
    """Session columns written as upstream's export writes them (``get_session``): on stores with
    content-addressed prompts, ``system_prompt`` is the prompt its hash names (else the column), so
    Hermes's own import, which takes the prompt from there, gets it (we also carry ``system_prompts``)."""
    if not store.has_table("system_prompts") or not {"system_prompt", "system_prompt_hash"} <= set(
            store.columns("sessions")):
        return {}
    return {"system_prompt": "coalesce((SELECT sp.prompt FROM system_prompts sp "
                             "WHERE sp.hash = s.system_prompt_hash), s.system_prompt)"}


def _columns(store: Store, table: str) -> list[tuple[str, str]]:
    return [(r[1], _affinity(r[2])) for r in store.conn.execute(f"PRAGMA table_info({quote_ident(table)})")]


_UNAVAILABLE = ('"available": false, "unavailable_reason": "no message has a timestamp", '
                '"wall_clock_ms": null, "largest_gap_ms": null, "intervals": []}}')  # the block's } and the line's


def _messages(columns: list[tuple[str, str]], head: str, prompts: str, redact: bool = False) -> str:
    """The line, in one ordered pass over the session's rows: *head* (the session row, which may use the
    rows' aggregates: ``MAX(ts)``), the messages, the prompts, the role counts (Python's Counter over the
    roles, in order), the tool calls and the timings (:func:`_intervals`); NUL for what the SQL cannot
    vouch for.

    The ids are sorted alone, with each timestamp and the id and timestamp before it (from the session
    index), and the rows fetched in that order; the aggregate takes them as they come, and their order is
    checked, so a plan that reorders them is caught, not trusted: the rows came in id order exactly when the
    first came with no id before it and each next one with the id of the row before it ("x,a1,...,an" =
    "p1,...,pn,max"; ids are numbers, whose text has no comma: anything else gives the line back). Per row,
    the checks that need a function call run only for an assistant's row with ``tool_calls`` (an ``iif``
    jumps; ``AND``/``OR`` in a value evaluate both sides).
    """
    has = {c for c, _ in columns}
    role = "m.role" if "role" in has else "NULL"
    calls = "m.tool_calls" if "tool_calls" in has else "NULL"
    ts = "timestamp" if "timestamp" in has else "NULL"
    return f"""(SELECT concat({head}, group_concat(js, ','), ']', {prompts}, ', "timings": {{"role_counts": ',
            maint_roles(json_group_array(iif(role >= x'' OR role = '', 'unknown', coalesce(role, 'unknown')))),
            ', "tool_calls_emitted": ', coalesce(SUM(iif(role = 'assistant' AND calls <> '',
                iif(json_valid(calls) AND json_type(calls) = 'array', json_array_length(calls), 1), 0)), 0),
            ', "complete": false, ',
            iif(coalesce(SUM(iif(role < '' OR role >= x'', 1,
                                 iif(role = 'assistant' AND calls IS NOT NULL,
                                     typeof(calls) <> 'text'
                                     OR calls <> '' AND NOT json_valid(calls)
                                     OR instr(calls, char(0)) > 0
                                     OR length(calls) - length(replace(replace(calls, '[', ''), '{{', ''))
                                        > {MAX_DEPTH}, 0))), 0)
                OR 'x,' || group_concat(id) IS NOT group_concat(coalesce(prev_id, 'x')) || ',' || MAX(id)
                OR SUM(iif(id < '', 0, 1)), char(0), ''),
            {_intervals()}, char(10))
        FROM (SELECT m.id AS id, {_object('m', columns, '}', redact)} AS js, {role} AS role, {calls} AS calls,
                     o.ts AS ts, o.prev AS prev, o.prev_id AS prev_id
              FROM (SELECT id, {ts} AS ts, LAG({ts}) OVER (ORDER BY id) AS prev, LAG(id) OVER (ORDER BY id) AS prev_id
                    FROM messages
                    WHERE session_id = s.id ORDER BY id) o JOIN messages m ON m.id = o.id))"""


def _intervals() -> str:
    """The rest of the timings block, from each row's timestamp (``ts``) and the one before it (``prev``), in
    the aggregate of :func:`_messages` (which takes the rows in id order, or marks the line).

    NUL when a timestamp is not a finite float or only some messages have one.
    """
    gap = "iif(ts >= prev, (ts - prev) * 1000, 0.0)"
    return f"""CASE
            WHEN SUM(typeof(ts) NOT IN ('real', 'null') OR ts > 1.7976931348623157e308 OR ts < -1.7976931348623157e308)
                 OR COUNT(ts) NOT IN (0, COUNT(*)) THEN char(0)
            WHEN COUNT(ts) = 0 THEN {sql_literal(_UNAVAILABLE)}
            ELSE concat('"available": true, "wall_clock_ms": ', maint_ms((MAX(ts) - MIN(ts)) * 1000),
                ', "largest_gap_ms": ', maint_ms(max(coalesce(MAX((ts - prev) * 1000), 0.0), 0.0)),
                ', "intervals": [', group_concat(concat('{{"id": ', json_quote(id), ', "since_previous_ms": ',
                    iif(prev IS NULL, 'null', {_tenths(gap)}), '}}'), ', '), ']}}}}') END"""


def line_sql(store: Store, redact: bool = False) -> str:
    """One row per session id of the JSON array bound to ``?``: (position, found, messages, line).

    No ORDER BY: a sort would build every line of the batch before returning the first. json_each
    walks the array in order and the caller checks each row's position.
    A session missing from the store is not found (the reference raises as it always did).
    """
    session_cols, message_cols = _columns(store, "sessions"), _columns(store, "messages")
    names = {c for c, _ in session_cols}
    if session_cols:  # Hermes's export_all: last_active after the row, before the messages
        row = _object("s", session_cols, ', "last_active": ', redact, resolved_columns(store))
        messages = sql_literal(', "messages": [')
        # the newest timestamp is the aggregate's (of every row of the session, as last_active_sql reads them)
        last_active = last_active_sql(store, "s.id", newest="MAX(ts)")
        head = f"concat({row}, {_value(last_active, redact=redact)}, {messages})"
    else:
        head = _object("s", session_cols, "\"messages\": [", redact)
    prompts = "''"
    if store.has_table("system_prompts"):
        refs = [f"iif(typeof(s.{c}) = 'text' AND s.{c} <> '', s.{c}, NULL)"
                for c in ("system_prompt_hash", "tool_names") if c in names]
        where = f"p.hash IN ({', '.join(refs)})" if refs else "0"
        # A hash that is not text would be a key json.dumps prints otherwise (only a store whose hash
        # column turns the text refs into numbers matches one).
        prompts = f"""(SELECT concat(', "system_prompts": {{',
                group_concat(json_quote(p.hash) || ': ' || {_value('p.prompt', redact=redact)}, ', '
                             ORDER BY p.hash), '}}',
                iif(SUM(typeof(p.hash) <> 'text'), char(0), ''))
                FROM system_prompts p WHERE {where})"""
    tail = f"{prompts}, {_usage(store, redact)}"
    return f"""SELECT j.key, s.rowid IS NOT NULL, (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id),
        CAST({_messages(message_cols, head, tail, redact)} AS BLOB)
        FROM json_each(?1) j LEFT JOIN sessions s ON s.id = j.value"""


def last_active_sql(store: Store, session: str, newest: str | None = None) -> str:
    """SQL for a session's ``last_active`` as Hermes's ``export_all`` writes it: its newest message
    timestamp, else its ``started_at`` (*session*: the SQL naming its id; *newest*: SQL for that
    timestamp where the caller has it at hand)."""
    if "timestamp" not in store.columns("messages"):
        newest = "NULL"
    elif newest is None:
        newest = f"(SELECT MAX(lm.timestamp) FROM messages lm WHERE lm.session_id = {session})"
    started = (f"(SELECT ls.started_at FROM sessions ls WHERE ls.id = {session})"
               if "started_at" in store.columns("sessions") else "NULL")
    return f"coalesce({newest}, {started})"


def parsed_redacted(store: Store, col: str) -> Callable[[str], str | None]:
    """A text ``tool_calls``/``content`` as the redacted reference writes it: redacted, then the JSON it holds
    or the string (SQLite judges and minifies it, as for every other line); None when nothing is masked."""
    conn, sql = store.conn, PARSED_SQL[col]

    def parsed(text: str) -> str | None:
        redacted = redact_text(text)
        if redacted is text:
            return None  # nothing masked: SQLite judges the text in the statement itself
        out = conn.execute(sql, (redacted,)).fetchall()[0][0]
        return _quote(redacted) if out is None else out
    return parsed


def register(store: Store) -> None:
    conn = store.conn
    for col in PARSED_COLUMNS:
        conn.create_scalar_function(f"maint_parsed_redacted_{col}", parsed_redacted(store, col), 1, deterministic=True)
    conn.create_scalar_function("maint_json", _json, 1, deterministic=True)
    conn.create_scalar_function("maint_repr", float.__repr__, 1, deterministic=True)
    conn.create_scalar_function("maint_ms", _ms, 1, deterministic=True)
    conn.create_scalar_function("maint_roles", _roles, 1, deterministic=True)
    conn.create_scalar_function("maint_redacted", _redacted, 1, deterministic=True)
    conn.create_scalar_function("maint_gated", _gated, 1, deterministic=True)


class _Hits:
    """The rows of the batch under way in which the redactor's gate found a candidate, as the line SQL's
    parameters (:data:`HIT_PARAMS`). Gating a batch in one tight loop before SQLite builds its lines keeps
    the gate's automaton in the CPU's caches (interleaved with the line building it ran at half the speed)."""

    def __init__(self, store: Store, line: str):
        self.store = store
        self.sql = gate_sql(store)
        # as many as the line SQL numbers (a table with no text to gate has no parameter of its own)
        self.count = max((n for n in HIT_PARAMS.values() if f"?{n}" in line), default=1) - 1
        self.params: tuple[str, ...] = ("[]",) * self.count

    def gate_batch(self, batch_json: str) -> None:
        self.params = tuple(json.dumps([rowid for rowid, texts in self.store.conn.execute(sql, (batch_json,))
                                        if texts is not None and gate(texts)]) for sql in self.sql)[:self.count]


def _gated(text: bytes) -> str | None:
    """A text column's UTF-8, redacted and JSON-quoted; None (SQLite quotes it) when the redactor's gate
    says no rule can match: most texts never become Python strings."""
    if len(text) <= 64:
        return _gated_short(text)
    hits = gate(text)
    if not hits:
        return None
    return _quote(redact_gated(text.decode("utf-8"), hits))


@lru_cache(maxsize=8192)
def _gated_short(text: bytes) -> str | None:
    """Short texts (tool names, models, finish reasons) repeat on every message: remembered."""
    hits = gate(text)
    if not hits:
        return None
    return _quote(redact_gated(text.decode("utf-8"), hits))


def _redacted(value: Any) -> str:
    """A text or blob column as the reference renderer writes it with --redact."""
    if value.__class__ is str:
        return _quote(redact_text(value))
    return _json(redact_value(value))


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
                   reference: Callable[[Any], int], redact: bool = False,
                   reads: ReadPacing | None = None) -> int:
    """Every session's line in order, as UTF-8 written in chunks of about :data:`CHUNK` bytes (by a
    second thread); *reference* renders (and counts) a session the SQL gives back. With *redact*,
    every text the reference would redact is redacted by it, called from the SQL.

    Without *reads* the caller holds one read transaction around the whole call. With it, the
    sessions are read in short transactions of their own (:class:`ReadPacing`): each reads whole
    sessions into its spool (where *reference* must write too) and ends before a byte of them is
    written, so no read lock waits on the output."""
    if redact:
        _load_redactor()
    register(store)
    sql = line_sql(store, redact)
    hits = _Hits(store, sql) if redact else None
    out = _Chunks(write)
    n = 0
    try:
        if reads is not None:
            n = _paced(store, sql, ids, out, reference, hits, reads)
        else:
            for batch in _batches(ids):
                if all(isinstance(sid, str) for sid in batch):
                    if hits is not None:
                        hits.gate_batch(json.dumps(batch))
                    n += _write_batch(store, sql, batch, out, _Unlimited(store, reference),
                                      params=hits.params if hits is not None else ())[0]
                else:
                    out.flush()
                    n += sum(reference(sid) for sid in batch)
        out.flush()
    finally:
        out.close()
    return n


class ReadPacing:
    """How a paced export reads: in transactions (*transaction*, e.g. ``Store.snapshot``) that end after
    :data:`BATCH` sessions, :data:`READ_BYTES` of lines, or, on a rollback-journal store (where our read
    lock keeps every writer out), the lock budget of :mod:`maint.store.batching` (``batch_ms``),
    whichever comes first; a session is always read whole, in one transaction. *spool* gathers what a
    transaction reads (:class:`maint.export.files.Spool`); it is written after the transaction ends."""

    def __init__(self, transaction: Callable[[], Any], spool: Any, budget_s: float | None,
                 clock: Callable[[], float] = time.monotonic):
        self.transaction, self.spool, self.budget_s, self.clock = transaction, spool, budget_s, clock
        self.transactions = 0
        self.started = 0.0

    def begin(self) -> None:
        self.transactions += 1
        self.started = self.clock()

    def spent(self) -> bool:
        if self.spool.size >= READ_BYTES:
            return True
        return self.budget_s is not None and self.clock() - self.started >= self.budget_s


def read_pacing(store: Store, spool: Any) -> ReadPacing:
    """The pacing for *store*: the clock bounds a read only where readers hold writers off (not WAL).

    The lock budget's module (and psutil, which it imports) is loaded only for such a store."""
    if str(store.scalar("PRAGMA journal_mode")).lower() == "wal":
        return ReadPacing(store.snapshot, spool, None)
    from maint.store.batching import target_from_env

    return ReadPacing(store.snapshot, spool, target_from_env())


class _SpoolOut:
    """:class:`_Chunks`'s face for :func:`_write_batch` when lines go to a spool (in order with what the
    reference renderer writes there)."""

    def __init__(self, spool: Any):
        self.add = spool.write_bytes

    def flush(self) -> None:
        pass


def _paced(store: Store, sql: str, ids: Iterable[Any], out: _Chunks, reference: Callable[[Any], int],
           hits: _Hits | None, reads: ReadPacing) -> int:
    ids = ids if isinstance(ids, Sequence) else list(ids)
    spool_out = _SpoolOut(reads.spool)
    n, pos = 0, 0
    size = BATCH
    while pos < len(ids):
        batch = list(ids[pos:pos + size])
        with reads.transaction():
            reads.begin()
            if isinstance(batch[0], str):
                batch = list(itertools.takewhile(lambda sid: isinstance(sid, str), batch))
                if hits is not None:  # gated in the transaction that builds the lines: no row escapes it
                    hits.gate_batch(json.dumps(batch))
                got, done = _write_batch(store, sql, batch, spool_out, _Unlimited(store, reference), reads.spent,
                                         hits.params if hits is not None else ())
                if hits is not None:
                    size = _next_gated(size, len(batch), done)
            else:
                got, done = reference(batch[0]), 1
        n += got
        pos += done
        # The transaction has ended: now the output may wait as long as it likes. What it read goes to the
        # writing thread in one piece, so the next transaction's reading overlaps its writing.
        parts = reads.spool.take()
        if parts is None:  # a session too big for memory went through the spool's temporary file
            reads.spool.drain(out.add)
        else:
            out.add_all(parts)
    return n


def _next_gated(size: int, gated: int, done: int) -> int:
    """How many sessions the next paced transaction of a redacted export gates: about as many as this one built when
    it ended within its batch (the sessions it gated and left to the next transaction are gated again there: with
    whole batches, about 70 of each 256 on the redaction benchmark's store, where a transaction holds about 180),
    twice as many (up to :data:`BATCH`) when it built them all. The gate's SQL and the line SQL run once a
    transaction either way (the line SQL is too long for apsw's statement cache: each run compiles it)."""
    if done < gated:
        return min(BATCH, done + GATE_MARGIN)
    return min(BATCH, 2 * size)


class _Unlimited:
    """Runs the SQL under :data:`LINE_BYTES` and the reference renderer without it (it reads a big
    row whole, as it always did)."""

    def __init__(self, store: Store, reference: Callable[[Any], int]):
        self.conn, self.reference = store.conn, reference

    def __call__(self, session_id: Any) -> int:
        limit = self.conn.limit(apsw.SQLITE_LIMIT_LENGTH, self.normal)
        try:
            return self.reference(session_id)
        finally:
            self.conn.limit(apsw.SQLITE_LIMIT_LENGTH, limit)

    def __enter__(self) -> _Unlimited:
        self.normal = self.conn.limit(apsw.SQLITE_LIMIT_LENGTH, LINE_BYTES)
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.limit(apsw.SQLITE_LIMIT_LENGTH, self.normal)


class _Chunks:
    """Lines gathered into large writes, handed to one thread: hashing and writing a chunk (both
    release the GIL) overlap SQLite building the next (apsw releases it too). One chunk is in
    flight at a time, so memory stays at two chunks; :meth:`flush` waits for it, so the reference
    renderer's own writes, and the end of the file, come after every line before them."""

    def __init__(self, write: Callable[[bytes], None]):
        self.write, self.parts, self.size = write, [], 0
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="export-write")
        self.pending: Future | None = None

    def add(self, data: bytes) -> None:
        self.parts.append(data)
        self.size += len(data)
        if self.size >= CHUNK:
            self._hand_over()

    def add_all(self, parts: list[bytes]) -> None:
        """Several pieces at once: handed over together when they reach :data:`CHUNK`."""
        self.parts.extend(parts)
        self.size += sum(map(len, parts))
        if self.size >= CHUNK:
            self._hand_over()

    def _hand_over(self) -> None:
        if self.pending is not None:
            self.pending.result()  # raises what the write raised
        self.pending = self.pool.submit(self.write, b"".join(self.parts)) if self.parts else None
        self.parts, self.size = [], 0

    def flush(self) -> None:
        self._hand_over()
        if self.pending is not None:
            self.pending.result()
            self.pending = None

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def _write_batch(store: Store, sql: str, batch: list[str], out: Any, reference: _Unlimited,
                 stop: Callable[[], bool] = lambda: False, params: tuple = ()) -> tuple[int, int]:
    """The lines of *batch*, in order, until *stop* says so after a session: (messages, sessions done).
    *params*: the SQL's further parameters (a redacted export's rows to redact, :class:`_Hits`)."""
    n, done = 0, 0
    while done < len(batch):
        try:
            with reference:
                start = done
                cursor = store.conn.execute(sql, (json.dumps(batch[start:]), *params))
                for key, found, count, line in cursor:
                    if key != done - start:
                        raise RuntimeError(f"export: SQLite returned session {key} of a batch in place of "
                                           f"{done - start}; nothing was written")
                    if found and b"\0" not in line:
                        if not line.isascii():
                            line.decode("utf-8")  # text that is not UTF-8 fails as the reference always did
                        out.add(line)
                        n += count
                    else:
                        out.flush()
                        n += reference(batch[done])
                    done += 1
                    if stop():
                        cursor.close()
                        return n, done
        except (UnicodeDecodeError, apsw.TooBigError):  # not UTF-8, or too big to build whole
            out.flush()
            n += reference(batch[done])
            done += 1
            if stop():
                return n, done
    return n, done
