"""What the planners know about each session, read in SQL, whatever columns this layout has.

Hermes adds columns over time (``pinned``, ``hidden``, ``last_activity_at`` ...).
A column that is absent turns its feature off: no ``pinned`` column means
nothing is pinned.

:func:`catalog_sql` is one row per session, computed by SQLite as it scans the
table: the planners (:mod:`maint.store.lineage`) copy the few columns they need
into temp tables and never hold the catalogue in Python objects, so their memory
does not grow with the store. :func:`session_info` reads one session as a record,
for the places that need one (a trace's header, the checks before a verified delete).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from maint.errors import SessionNotFound, UsageError
from maint.selection.timeparse import EARLIEST, LATEST
from maint.store.connection import Store
from maint.store.text_check import readable_row_sql, shown_id


ORPHAN_REAP_REASON = "startup_orphan_reap"
# Bot Mode finds its chat by this exact title on a hidden row: it stays hidden and keeps its name.
CANONICAL_BOT_CHAT_TITLE = "Bot Chat"


@dataclass
class SessionInfo:
    id: str
    source: str
    started_at: float
    ended_at: float | None
    end_reason: str | None
    parent_id: str | None
    last_active: float
    last_message_at: float | None = None
    user_id: str | None = None
    chat_id: str | None = None
    chat_type: str | None = None
    session_key: str | None = None
    model: str | None = None
    title: str | None = None
    cwd: str | None = None
    git_branch: str | None = None
    billing_provider: str | None = None
    message_count: int = 0
    tool_call_count: int = 0
    tokens: int = 0
    cost: float = 0.0
    archived: bool = False
    auto_archived: bool = False  # hidden by the idle sweep (sessions.auto_archive), not by hand
    pinned: bool = False
    hidden: bool = False
    git_repo_root: str | None = None
    branched_from: str | None = None
    delegate_from: str | None = None
    reset_from: str | None = None
    system_prompt_hash: str | None = None
    tool_names: str | None = None
    locked: bool = False  # unexpired compression lock or turn lease
    undated: bool = False  # no time inside the epoch window: last_active is "now", and no age filter matches it

    @property
    def is_open(self) -> bool:
        return self.ended_at is None


NUMERIC = "('integer', 'real')"


def _sane(expr: str) -> str:
    """1 when *expr* is a number inside the epoch window a time may have (1970 to the end of year 9999)."""
    return f"(typeof({expr}) IN {NUMERIC} AND {expr} BETWEEN {EARLIEST!r} AND {LATEST!r})"


def _opt(store: Store, col: str, default: str = "NULL") -> str:
    return f"s.{col}" if store.has_column("sessions", col) else default


def _marker(mc: str, key: str) -> str:
    """A ``model_config`` marker as text (Python's ``str()`` of what ``json_extract`` returns), or NULL.

    Text that contains neither ``_from`` nor a ``\\u`` escape cannot hold a key ending in ``_from``,
    so most rows skip the JSON parse. Text and integers convert in SQL; anything else through
    ``maint_str`` (registered by :func:`maint.store.connection.register_functions`).
    """
    value = f"json_extract({mc}, '$.{key}')"
    return f"""(CASE WHEN (instr({mc}, '_from') > 0 OR instr({mc}, '\\u') > 0) AND json_valid({mc})
                THEN CASE typeof({value}) WHEN 'null' THEN NULL WHEN 'text' THEN {value}
                          WHEN 'integer' THEN CAST({value} AS TEXT) ELSE maint_str({value}) END END)"""


def _flag(expr: str) -> str:
    """Python truthiness of a stored flag as 0/1 (NULL, 0 and '' are false)."""
    return f"(CASE WHEN {expr} IS NULL OR {expr} = 0 OR {expr} = '' THEN 0 ELSE 1 END)"


def locked_sql(store: Store, id_expr: str) -> str:
    """1 when the session has a turn or compression in progress (an unexpired lock or lease); ``:now``."""
    parts = []
    if store.has_table("compression_locks"):
        parts.append(f"EXISTS (SELECT 1 FROM compression_locks l WHERE l.session_id = {id_expr} "
                     "AND l.expires_at > :now)")
    if store.has_table("session_turn_leases"):
        parts.append(f"EXISTS (SELECT 1 FROM session_turn_leases t WHERE t.conversation_id = {id_expr} "
                     "AND t.expires_at > :now)")
    return f"({' OR '.join(parts)})" if parts else "0"


# Columns a filter may read besides the ones every planner reads (see Filters.columns).
OPTIONAL_COLUMNS = ("user_id", "chat_id", "chat_type", "model", "cwd", "git_branch", "billing_provider",
                    "message_count", "tool_call_count", "tokens", "cost", "git_repo_root", "system_prompt_hash",
                    "tool_names")


# The newest message time that is a number. SQLite orders every number before any text, so a stray text
# timestamp would win a plain MAX and hide the real ones; "< ''" keeps the numbers and still lets SQLite
# read the answer from the end of the (session_id, timestamp) index range.
NEWEST_MESSAGE_SQL = "(SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = s.id AND m.timestamp < '')"


def catalog_sql(store: Store, columns: Iterable[str] | None = None, where: str = "1", lean: bool = False,
                locks: bool = True) -> str:
    """One row per session (bind ``:now``), with the columns :class:`SessionInfo` has, plus ``rid``.

    *columns* limits the optional ones (:data:`OPTIONAL_COLUMNS`) to those named; the planners pass
    what their filters read, so SQLite reads no more of each row than it must. *where* (over ``s``,
    the sessions table) limits the rows before anything is computed for them. *lean* skips the two
    per-session lookups (newest message, lock or lease): ``last_message_at`` is NULL, ``locked`` 0 and
    ``last_active`` therefore not the real one; for counts that do not need them. ``locks=False``
    skips the lock and lease lookup alone (``locked`` is 0).

    ``last_active`` is the freshest of ``last_activity_at`` and the newest message, else
    ``started_at``, each only when inside the epoch window (1970 to 9999, as upstream skips garbage
    times), else (no such time: a hand-edited or damaged row) ``:now``, so what cannot be
    dated is never old enough to delete (``undated`` is 1 for it: no last-activity bound matches it, as
    upstream's NULL matches none); a reaped orphan counts again from its closing time (only a
    later sweep may delete it). Flags are 0/1, markers text or NULL. The inner select carries
    ``LIMIT -1 OFFSET 0`` so SQLite runs it as a co-routine instead of flattening it: the
    newest-message lookup then runs once per session, not once per use in ``last_active``.
    """
    mc = "s.model_config" if store.has_column("sessions", "model_config") else "NULL"
    wanted = set(OPTIONAL_COLUMNS if columns is None else columns)
    optional = {
        "user_id": _opt(store, "user_id"), "chat_id": _opt(store, "chat_id"), "chat_type": _opt(store, "chat_type"),
        "model": _opt(store, "model"), "cwd": _opt(store, "cwd"), "git_branch": _opt(store, "git_branch"),
        "billing_provider": _opt(store, "billing_provider"),
        "message_count": f"COALESCE({_opt(store, 'message_count')}, 0)",
        "tool_call_count": f"COALESCE({_opt(store, 'tool_call_count')}, 0)",
        "tokens": f"COALESCE({_opt(store, 'input_tokens')}, 0) + COALESCE({_opt(store, 'output_tokens')}, 0)",
        "cost": f"COALESCE({_opt(store, 'actual_cost_usd')}, {_opt(store, 'estimated_cost_usd')}, 0)",
        "git_repo_root": _opt(store, "git_repo_root"), "system_prompt_hash": _opt(store, "system_prompt_hash"),
        "tool_names": _opt(store, "tool_names"),
    }
    extra = "".join(f"{expr} AS {name}, " for name, expr in optional.items() if name in wanted)
    raw = f"""
        SELECT s.rowid AS rid, s.id AS id, s.source AS source, s.started_at AS started_at, s.ended_at AS ended_at,
               {_opt(store, 'end_reason')} AS end_reason, s.parent_session_id AS parent_id,
               {"NULL" if lean else NEWEST_MESSAGE_SQL}
                   AS last_message_at,
               {_opt(store, 'last_activity_at')} AS last_activity_at,
               {_opt(store, 'session_key')} AS session_key, {_opt(store, 'title')} AS title, {extra}
               {_flag(_opt(store, 'archived', '0'))} AS archived,
               {_flag(_opt(store, 'auto_archived', '0'))} AS auto_archived,
               {_flag(_opt(store, 'pinned', '0'))} AS pinned,
               {_flag(_opt(store, 'hidden', '0'))} AS hidden,
               {_marker(mc, '_branched_from')} AS branched_from,
               {_marker(mc, '_delegate_from')} AS delegate_from,
               {_marker(mc, '_reset_from')} AS reset_from,
               {"0" if lean or not locks else locked_sql(store, 's.id')} AS locked
        FROM sessions s WHERE {where} LIMIT -1 OFFSET 0"""
    # Upstream's sane-epoch window (_sql_freshest_of): a time outside it (a garbage double from a damaged page,
    # 5e+246) is skipped, or one bad cell would keep the session "active" for ever. The newest message in the
    # window is looked up again only when the newest of all is out of it.
    msg = f"""(CASE WHEN {_sane('r.last_message_at')} THEN r.last_message_at WHEN r.last_message_at IS NULL
                    THEN NULL ELSE (SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = r.id
                                    AND m.timestamp BETWEEN {EARLIEST!r} AND {LATEST!r}) END)"""
    fresh = f"""
        CASE WHEN {_sane('r.last_activity_at')} AND {msg} IS NOT NULL THEN max(r.last_activity_at, {msg})
             WHEN {_sane('r.last_activity_at')} THEN r.last_activity_at
             WHEN {msg} IS NOT NULL THEN {msg}
             WHEN {_sane('r.started_at')} THEN r.started_at
             ELSE :now END"""
    return f"""
        SELECT r.*, CASE WHEN r.end_reason = '{ORPHAN_REAP_REASON}' AND typeof(r.ended_at) IN {NUMERIC}
                         THEN max({fresh}, r.ended_at) ELSE {fresh} END AS last_active,
               CASE WHEN {_sane('r.last_activity_at')} OR {msg} IS NOT NULL OR {_sane('r.started_at')}
                    THEN 0 ELSE 1 END AS undated
        FROM ({raw}) r"""


def relation_sql(store: Store, where: str = "1") -> str:
    """The columns a session's kind depends on (see :func:`maint.store.lineage.kind_sql`), nothing else."""
    mc = "s.model_config" if store.has_column("sessions", "model_config") else "NULL"
    return f"""
        SELECT s.id AS id, s.source AS source, s.started_at AS started_at, s.parent_session_id AS parent_id,
               {_opt(store, 'session_key')} AS session_key,
               {_marker(mc, '_branched_from')} AS branched_from, {_marker(mc, '_delegate_from')} AS delegate_from,
               {_marker(mc, '_reset_from')} AS reset_from
        FROM sessions s WHERE {where} LIMIT -1 OFFSET 0"""


def _record(row: dict) -> SessionInfo:
    del row["rid"], row["last_activity_at"]
    # A time stored as text or bytes (a hand-edited or damaged row) would stop the first comparison in
    # Python: the start and end read as the last activity the SQL above gave (a number, "now" for what
    # cannot be dated), so an ended session stays ended; a newest message that is not a number as none.
    for key in ("started_at", "ended_at"):
        if row[key] is not None and row[key].__class__ not in (float, int):
            row[key] = row["last_active"]
    if row["last_message_at"].__class__ not in (float, int):
        row["last_message_at"] = None
    for key, value in row.items():
        if value.__class__ is bytes:  # a BLOB where text is due: shown, never decoded strictly
            row[key] = shown_id(value)
    for flag in ("archived", "auto_archived", "pinned", "hidden", "locked", "undated"):
        row[flag] = bool(row[flag])
    return SessionInfo(**row)


def session_info(store: Store, session_id: str, now: float | None = None) -> SessionInfo:
    """One session as a record."""
    now = time.time() if now is None else now
    rows = store.rows(f"SELECT * FROM ({catalog_sql(store)}) WHERE id = :id", {"now": now, "id": session_id})
    if not rows:
        raise SessionNotFound(f"no session {session_id!r} in {store.path}")
    return _record(rows[0])


def load_sessions(store: Store, now: float | None = None) -> dict[str, SessionInfo]:
    """Every session as a record, in table order, but those whose row holds text that is not UTF-8 (the caller
    names them: :func:`maint.store.text_check.unreadable_sessions`). Its memory grows with the store: only
    repair-routing, which compares sessions pairwise, uses it; the planners work in SQL
    (:mod:`maint.store.lineage`)."""
    now = time.time() if now is None else now
    rows = store.iter_rows(catalog_sql(store, where=readable_row_sql(store, "s")), {"now": now})
    return {info.id: info for info in map(_record, rows)}


def resolve_session(store: Store, ref: str, *, exact: bool = False, titles: bool = False,
                    action: str = "a destructive command") -> str:
    """An id or a unique prefix of one (case-sensitive, as ids are); with *titles* (ID|TITLE), also a
    session's exact title.

    Every mode (dry run, confirmation, --yes) resolves a ref alike: a whole id first, then (with *titles*)
    an exact title, then an id prefix. A title is exact and a prefix is partial, so a ref that is one
    session's title and the beginning of another's id names the titled one (a dry run previewed the prefix's
    session and --yes then refused the same ref). A title that several sessions have is ambiguous.

    *exact*: the destructive-operation contract. A destructive command run without an interactive
    confirmation (``--yes``) takes whole ids (or exact titles) only: a prefix could match another session
    once the one meant is gone (a second run of the same command deleted a different session). A prefix is
    shown whole at an interactive confirmation instead. *action* names the command in that refusal.
    """
    if not ref:
        raise SessionNotFound("empty session id (expected a session id or a unique prefix)")
    if store.scalar("SELECT 1 FROM sessions WHERE id = ?", (ref,)):
        return ref
    expected = ("a session id, a unique prefix of one, or a session's exact title" if titles
                else "a session id or a unique prefix")
    if titles and store.has_column("sessions", "title"):
        named = [r[0] for r in store.conn.execute("SELECT id FROM sessions WHERE title = ? ORDER BY id LIMIT 3",
                                                  (ref,))]
        if len(named) == 1:
            return named[0]
        if named:
            raise SessionNotFound(f"title {ref!r} names several sessions ({', '.join(named[:2])}, ...); "
                                  "give the session id")
    matches = [r[0] for r in store.conn.execute(
        "SELECT id FROM sessions WHERE id > ?1 AND substr(id, 1, length(?1)) = ?1 ORDER BY id LIMIT 3", (ref,))]
    if not matches:
        raise SessionNotFound(f"no session matches {ref!r} (expected {expected})")
    if len(matches) > 1:
        raise SessionNotFound(f"session prefix {ref!r} is ambiguous ({', '.join(matches[:2])}, ...); "
                              "give more of the id")
    if exact:
        whole = "whole ids or exact titles" if titles else "whole ids"
        raise UsageError(f"{ref!r} is not a whole session id (it begins {matches[0]!r}); without a confirmation "
                         f"at a terminal (--yes) {action} takes {whole} only (a prefix is accepted "
                         "where the confirmation shows the whole id)")
    return matches[0]
