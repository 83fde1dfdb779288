"""Stored text that is not UTF-8: which sessions hold it, and how to name them.

SQLite keeps whatever bytes a writer stored as TEXT; apsw decodes every text value it hands to
Python as strict UTF-8, so one bad byte in one message used to stop a whole-store command (the
error named no session). Commands that read every session's text (exports, doctor) ask
:func:`unreadable_sessions` first and leave those sessions out, named (the bulk jsonl export asks about the
session rows and prompts only, and checks a session's messages when its line is not UTF-8: a line holds
each message's text as stored, so no text is read twice); ids are read back as raw
bytes (``CAST(id AS BLOB)``) and shown with :func:`shown_id`, never decoded strictly.

Each row's texts are checked together by Python's own decoder, one call a row (0.2 s over 180,000
messages of 100 MB; a call per column took four times that, and SQLite's GLOB as a filter for
non-ASCII rows ten times).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from maint.store.connection import PROMPT_REFS, Store, not_utf8, quote_ident
from maint.store.sqlutil import sql_literal


USAGE = "session_model_usage"


def register(store: Store) -> None:
    """``maint_not_utf8`` (every store's connection has it; a bare apsw connection needs this)."""
    store.conn.create_scalar_function("maint_not_utf8", not_utf8, 1, deterministic=True)


def unreadable_id_sql(alias: str) -> str:
    """True when the session row *alias*'s id is not UTF-8 text: bytes that are not UTF-8, or a value stored
    as a BLOB (a TEXT column keeps one as it came; Python would read it as bytes and stop on it)."""
    return f"(typeof({alias}.id) <> 'text' OR maint_not_utf8(CAST({alias}.id AS BLOB)))"


def readable_id_sql(alias: str) -> str:
    """True when the session row *alias*'s id is UTF-8 text, as every id Python reads must be: listings and
    plans leave the others out (and name them, :func:`unreadable_ids`)."""
    return f"NOT {unreadable_id_sql(alias)}"


def unreadable_ids(store: Store) -> list[str]:
    """The ids that are not UTF-8 text, shown escaped (``x\\xff``, a BLOB as ``b'…'``); one pass over the ids alone."""
    return [shown_id(raw, blob) for raw, blob in store.conn.execute(
        f"SELECT CAST(s.id AS BLOB), {is_blob_sql('s.id')} FROM sessions s WHERE {unreadable_id_sql('s')} "
        "ORDER BY 1, 2")]


def is_blob_sql(expr: str) -> str:
    """1 when *expr* is stored as a BLOB: its bytes may equal a text id's, yet SQLite keeps them apart (another
    row, other messages), so a row is matched by its bytes and this flag together (hostile try 17, U6)."""
    return f"(typeof({expr}) = 'blob')"


def shown_text_sql(expr: str) -> str:
    """*expr* as text Python can read, for display: a text that is not UTF-8 with its bad bytes as ``\\xff``."""
    return f"iif(typeof({expr}) = 'text', maint_shown(CAST({expr} AS BLOB)), {expr})"


def bad_text_sql(expr: str) -> str:
    """True when the value of *expr* is TEXT whose bytes are not UTF-8."""
    return f"(typeof({expr}) = 'text' AND maint_not_utf8(CAST({expr} AS BLOB)))"


NULL_ID = "(NULL)"  # how a session row without an id is named (SQLite lets a TEXT primary key hold NULL)


def shown_id(raw: bytes | str | None, blob: bool = False) -> str:
    """Raw id bytes as one safe line: bad bytes as ``\\xff``, control characters escaped; an id stored as a BLOB
    (*blob*) as ``b'…'``, so that it is not taken for the text id of the same bytes (hostile try 17, U6); a NULL
    id as :data:`NULL_ID` (hostile try 16, T7: it was a TypeError in list, repair-routing and every whole-store
    read)."""
    if raw is None:
        return NULL_ID
    text = raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else raw
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return f"b'{shown}'" if blob else shown


@dataclass(frozen=True)
class Unreadable:
    """A session some of whose stored text is not UTF-8: its raw id and the fields (``table.column``)."""

    raw_id: bytes | None  # None: a row whose id is NULL
    fields: tuple[str, ...]
    blob: bool = False  # the id is stored as a BLOB: another row than a text id of the same bytes

    @property
    def id(self) -> str:
        return shown_id(self.raw_id, self.blob)

    @property
    def order(self) -> tuple[bool, bytes, bool]:
        """Id byte order, a NULL id last (sorting by the raw id alone compared None with bytes: a traceback)."""
        return self.raw_id is None, self.raw_id or b"", self.blob

    def describe(self) -> str:
        return f"session {self.id}: stored text is not valid UTF-8 in {', '.join(self.fields)}"

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "fields": list(self.fields)}


def _bad_sql(table: str, alias: str, column: str) -> str:
    """True when the column's value is text that is not UTF-8, or (a session's id) not text at all."""
    expr = f"{alias}.{quote_ident(column)}"
    if table == "sessions" and column == "id":
        return unreadable_id_sql(alias)
    return bad_text_sql(expr)


def _fields(store: Store, table: str, alias: str) -> str:
    cols = store.columns(table)
    parts = [f"iif({_bad_sql(table, alias, c)}, {sql_literal(f'{table}.{c}')}, NULL)" for c in cols]
    return f"concat_ws(',', {', '.join(parts)})" if parts else "''"


def _any_bad(store: Store, table: str, alias: str) -> str:
    """True when some text column of the row is not UTF-8, in one call: the texts joined by a newline
    are UTF-8 exactly when each one is (an ASCII byte can neither finish nor continue a sequence)."""
    texts = [f"iif(typeof({alias}.{quote_ident(c)}) = 'text', {alias}.{quote_ident(c)}, NULL)"
             for c in store.columns(table)]
    if not texts:
        return "0"
    joined = f"maint_not_utf8(CAST(concat_ws(char(10), {', '.join(texts)}) AS BLOB))"
    return f"({joined} OR typeof({alias}.id) <> 'text')" if table == "sessions" else joined


def _rows(store: Store, scope: str, params: Any, messages: bool = True) -> Iterator[tuple[bytes, int, str]]:
    yield from store.conn.execute(
        f"SELECT CAST(s.id AS BLOB), {is_blob_sql('s.id')}, {_fields(store, 'sessions', 's')} FROM sessions s "
        f"WHERE s.id IN ({scope}) AND {_any_bad(store, 'sessions', 's')}", params)
    if messages:
        yield from store.conn.execute(
            f"SELECT CAST(m.session_id AS BLOB), {is_blob_sql('m.session_id')}, {_fields(store, 'messages', 'm')} "
            "FROM messages m "
            f"WHERE m.session_id IN ({scope}) AND {_any_bad(store, 'messages', 'm')}", params)
        if store.has_table(USAGE):  # its per-model usage rows: the jsonl record carries them too
            yield from store.conn.execute(
                f"SELECT CAST(u.session_id AS BLOB), {is_blob_sql('u.session_id')}, {_fields(store, USAGE, 'u')} "
                f"FROM {USAGE} u "
                f"WHERE u.session_id IN ({scope}) AND {_any_bad(store, USAGE, 'u')}", params)
    yield from _prompt_rows(store, scope, params)


def _prompt_rows(store: Store, scope: str, params: Any) -> Iterator[tuple[bytes, int, str]]:
    """The sessions among *scope* that point at a stored prompt that is not UTF-8 (every prompt is read)."""
    refs = [c for c in PROMPT_REFS if store.has_column("sessions", c)]
    if refs and store.has_table("system_prompts") and store.has_column("system_prompts", "prompt"):
        match = " OR ".join(f"s.{c} = p.hash" for c in refs)
        # materialized: flattened into the join, each prompt was decoded once per session pointing at it
        yield from store.conn.execute(
            f"WITH p(hash) AS MATERIALIZED (SELECT hash FROM system_prompts WHERE {bad_text_sql('prompt')}) "
            f"SELECT CAST(s.id AS BLOB), {is_blob_sql('s.id')}, 'system_prompts.prompt' FROM p CROSS JOIN sessions s "
            f"ON {match} "
            f"WHERE s.id IN ({scope})", params)


def unreadable_sessions(store: Store, scope: str = "SELECT id FROM sessions", params: Any = (), *,
                        messages: bool = True) -> list[Unreadable]:
    """The sessions among *scope* (SQL selecting session ids) with stored text that is not UTF-8,
    in id byte order, each with every field where it was found. A session whose id itself is not
    UTF-8 has ``sessions.id`` among its fields.

    Without *messages*, the messages are not read, except those of the sessions found (each is named
    with every field a full check names): for a caller that reads every message anyway and checks
    each session it finds unreadable there (:func:`unreadable_session`; the jsonl export)."""
    register(store)
    return _unreadable(store, scope, params, messages)


def readable_row_sql(store: Store, alias: str = "s") -> str:
    """True when every text of the sessions row *alias* (its id included) is UTF-8: for a caller that reads whole
    session rows into Python (:func:`maint.store.catalog.load_sessions`). Registers the check on the store."""
    register(store)
    return f"NOT {_any_bad(store, 'sessions', alias)}"


def unreadable_rows(store: Store) -> list[str]:
    """The sessions :func:`readable_row_sql` leaves out, shown (an id that is not UTF-8 escaped), in id byte order."""
    return [shown_id(raw, blob) for raw, blob in store.conn.execute(
        f"SELECT CAST(s.id AS BLOB), {is_blob_sql('s.id')} FROM sessions s WHERE NOT ({readable_row_sql(store, 's')}) "
        "ORDER BY 1, 2")]


def unreadable_session(store: Store, session_id: str) -> list[Unreadable]:
    """:func:`unreadable_sessions` of one session, on a :class:`Store`'s own connection (it has the function
    already: SQLite refuses to register one again while a statement of the connection is running)."""
    return _unreadable(store, "SELECT ?", (session_id,), True)


def _unreadable(store: Store, scope: str, params: Any, messages: bool) -> list[Unreadable]:
    found: dict[tuple[bytes, bool], list[str]] = {}
    for raw, blob, fields in _rows(store, scope, params, messages):
        have = found.setdefault((raw, bool(blob)), [])
        have.extend(f for f in fields.split(",") if f not in have)
    if not messages and found:  # the sessions found, checked in full (ids as hex: they may not be UTF-8)
        hexed = json.dumps([[raw.hex().upper(), blob] for raw, blob in found])
        bad = _unreadable(store, f"SELECT id FROM sessions WHERE (hex(CAST(id AS BLOB)), {is_blob_sql('id')}) IN "
                                 "(SELECT value ->> 0, value ->> 1 FROM json_each(?))", (hexed,), True)
    else:
        bad = [Unreadable(raw, tuple(found[raw, blob]), blob) for raw, blob in sorted(found)]
    return bad + _null_id(store, scope, params)


def _null_id(store: Store, scope: str, params: Any) -> list[Unreadable]:
    """A row without an id among *scope* (SQLite lets a TEXT primary key hold NULL; hostile try 16, T7): no record
    can name it, so it is unreadable too, named :data:`NULL_ID`. ``id IN (scope)`` never matches NULL, so it is
    looked for apart, and only in a store that has such a row (the id's index answers that at once)."""
    if store.scalar("SELECT 1 FROM sessions WHERE id IS NULL LIMIT 1") is None:
        return []
    held = store.scalar(f"WITH scope(id) AS ({scope}) SELECT 1 FROM scope WHERE id IS NULL LIMIT 1", params)
    return [] if held is None else [Unreadable(None, ("sessions.id",))]


# -- the daily check: only what can have changed since the last clean complete pass ---------------------------

@dataclass(frozen=True)
class TextMark:
    """Where the last complete pass that found every stored text valid stood: the messages' AUTOINCREMENT
    counter (``sqlite_sequence``; ids are never reused, so every message added since has a higher id)
    read before that pass began, and when it began (for the report)."""

    message_id: int
    at: float

    def as_json(self) -> dict[str, Any]:
        return {"message_id": self.message_id, "at": self.at}

    @classmethod
    def from_json(cls, data: Any) -> TextMark | None:
        try:
            mark = cls(int(data["message_id"]), float(data["at"]))
        except (TypeError, KeyError, ValueError, OverflowError):
            return None
        return mark if mark.message_id >= 0 and mark.at == mark.at else None


def message_counter(store: Store) -> int | None:
    """The messages table's AUTOINCREMENT counter, or None when it has none (ids could then be reused, and no
    mark can say which rows are new)."""
    if not store.has_table("sqlite_sequence"):
        return None
    value = store.scalar("SELECT seq FROM sqlite_sequence WHERE name = 'messages'")
    return value if isinstance(value, int) else None


@dataclass(frozen=True)
class SinceMark:
    """What :func:`unreadable_since` checked: sessions and prompts in full, and these messages."""

    bad: list[Unreadable]
    new_messages: int  # added since the mark
    older_messages: int  # older messages of the sessions that gained one since (rewritten in place by Hermes)
    sessions: int  # every session row


def _touched() -> str:
    """The sessions (ids) that gained a message since the mark (parameter 1): the messages of a session
    Hermes rewrites in place (``api_content`` of its latest user message) are those of a turn that runs,
    and a turn appends its reply."""
    return f"SELECT session_id FROM {_NEW}"


# the messages past the mark (parameter), by rowid: with an index, SQLite reads every message's index entry
_NEW = "messages NOT INDEXED WHERE id > ?"


def unreadable_since(store: Store, mark: TextMark) -> SinceMark:
    """:func:`unreadable_sessions` for the daily check: every session row, usage row and stored prompt (Hermes rewrites
    a session's title, model, end reason … in place at any time), the messages added since *mark*, and every
    older message of a session that gained one since. A message rewritten in place in a session that gained
    no message since is left to the next complete pass (``doctor --full``, weekly)."""
    register(store)
    found: dict[tuple[bytes, bool], list[str]] = {}
    sessions = "SELECT id FROM sessions"
    high = mark.message_id
    mid = f"CAST(m.session_id AS BLOB), {is_blob_sql('m.session_id')}, {_fields(store, 'messages', 'm')}"
    queries = [
        (f"SELECT CAST(s.id AS BLOB), {is_blob_sql('s.id')}, {_fields(store, 'sessions', 's')} FROM sessions s "
         f"WHERE {_any_bad(store, 'sessions', 's')}", ()),
        (f"SELECT {mid} FROM messages m NOT INDEXED "
         f"WHERE m.id > ? AND m.session_id IN ({sessions}) AND {_any_bad(store, 'messages', 'm')}", (high,)),
        (f"SELECT {mid} FROM messages m "
         f"WHERE m.session_id IN ({_touched()}) AND m.id <= ? AND m.session_id IN ({sessions}) "
         f"AND {_any_bad(store, 'messages', 'm')}", (high, high)),
    ]
    if store.has_table(USAGE):  # usage rows, in full: Hermes updates them in place after every call
        queries.append((f"SELECT CAST(u.session_id AS BLOB), {is_blob_sql('u.session_id')}, "
                        f"{_fields(store, USAGE, 'u')} FROM {USAGE} u "
                        f"WHERE u.session_id IN ({sessions}) AND {_any_bad(store, USAGE, 'u')}", ()))
    rows = [row for sql, params in queries for row in store.conn.execute(sql, params)]
    for raw, blob, fields in [*rows, *_prompt_rows(store, sessions, ())]:
        have = found.setdefault((raw, bool(blob)), [])
        have.extend(f for f in fields.split(",") if f not in have)
    new = store.scalar(f"SELECT COUNT(*) FROM {_NEW} AND session_id IN ({sessions})", (high,))
    older = store.scalar(f"SELECT COUNT(*) FROM messages WHERE session_id IN ({_touched()}) AND id <= ? "
                         f"AND session_id IN ({sessions})", (high, high))
    return SinceMark([Unreadable(raw, tuple(found[raw, blob]), blob) for raw, blob in sorted(found)], new, older,
                     store.scalar("SELECT COUNT(*) FROM sessions"))
