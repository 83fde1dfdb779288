"""Which conversations ``list`` shows in its default order (newest start first), without building every
compression chain's lineage.

A conversation starts when its first session does (a chain's key: the member that started first),
so the page is found by walking ``sessions`` newest start first (Hermes's ``idx_sessions_started``)
and stopping after ``limit`` visible conversations. The total for the "… more not shown" line and
the pinned conversations past the limit need every session's visibility, read without
newest-message or lock lookups: the plain sessions (no parent, no compression, no marker: most of
them) from their own row in one pass; the others (children, compression chains, sessions with a
marker) by the rules of :mod:`maint.store.lineage`, into a temp table where chains are grouped and
judged whole. :mod:`maint.store.lineage` then builds the tips of the chains shown. A store without
the index is sorted in full, which is slower, not different.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from maint.store import lineage
from maint.store.catalog import CANONICAL_BOT_CHAT_TITLE, _flag, catalog_sql
from maint.store.text_check import readable_id_sql
from maint.store.connection import Store

TEMP_TABLES = ("maint_lp", "maint_lx", "maint_li", "maint_lw", "maint_lc", "maint_lv")


def _lean_sql(store: Store, where: str) -> str:
    """Per session matching *where*: its kind, whether it continues a compression (``cont``) and whether it
    would be listed as a conversation of its own (``visible``)."""
    return f"""
        SELECT id, parent_id, started_at, source, kind, archived, hidden, pinned, botchat,
               kind = '{lineage.COMPRESSION}' AS cont,
               (:source IS NULL OR source = :source)
               AND (NOT (kind = '{lineage.DELEGATE}' OR archived OR hidden) OR (pinned AND NOT botchat)) AS visible
        FROM (SELECT c.id, c.parent_id, c.started_at, c.source, c.archived, c.hidden, c.pinned,
                     c.hidden AND c.title IS '{CANONICAL_BOT_CHAT_TITLE}' AS botchat, {lineage.kind_sql(store)} AS kind
              FROM ({catalog_sql(store, (), where, lean=True)}) c
              LEFT JOIN sessions p ON p.id = c.parent_id AND c.parent_id <> '' LIMIT -1 OFFSET 0)"""


def _plain_sql(store: Store, a: str = "s") -> str:
    """True for a session that can only be a conversation of its own and a root: no parent, not ended by a
    compression, no marker in its ``model_config`` (the test :func:`catalog_sql` makes before parsing
    one). Most sessions are plain, and their own row's flags say whether they are listed."""
    er = f"{a}.end_reason" if store.has_column("sessions", "end_reason") else "NULL"
    mc = f"{a}.model_config" if store.has_column("sessions", "model_config") else "NULL"
    return (f"(COALESCE({a}.parent_session_id, '') = '' AND {er} IS NOT 'compression' "
            f"AND NOT COALESCE(instr({mc}, '_from') > 0 OR instr({mc}, '\\u') > 0, 0))")


def _flag_or_0(store: Store, a: str, col: str) -> str:
    """Flag *col* of row *a* as 0/1, or 0 where the layout lacks the column."""
    return _flag(f"{a}.{col}") if store.has_column("sessions", col) else "0"


def _plain_visible_sql(store: Store, a: str = "s") -> str:
    """Whether a plain session is listed: the rule of :func:`_lean_sql` for a root."""
    flag = functools.partial(_flag_or_0, store, a)
    title = f"{a}.title" if store.has_column("sessions", "title") else "NULL"
    return (f"(:source IS NULL OR {a}.source = :source) AND (NOT ({flag('archived')} OR {flag('hidden')}) "
            f"OR ({flag('pinned')} AND NOT ({flag('hidden')} AND {title} IS '{CANONICAL_BOT_CHAT_TITLE}')))")


def pick(store: Store, *, source: str | None, limit: int, now: float) -> tuple[list[Any], list[Any], int] | None:
    """(single sessions, chain keys, total): the visible conversations to show, newest start first
    within the limit plus every pinned one, and how many are visible in all; None when parent links
    loop (a damaged store), for the caller to build the full lineage instead. Reads every session's
    row once. Call inside a snapshot; :func:`drop` cleans up."""
    conn, params = store.conn, {"source": source, "now": now}
    plain = _plain_sql(store)
    pinned_flag = _flag_or_0(store, "s", "pinned")
    total, pinned = conn.execute(f"""
        SELECT COUNT(*), json_group_array(s.id) FILTER (WHERE {pinned_flag})
        FROM sessions s WHERE {plain} AND {_plain_visible_sql(store)} AND {readable_id_sql('s')}""",
        params).fetchone()
    pinned = _json_list(pinned)
    drop(store)
    # The other sessions: children, sessions ended by a compression, sessions with a marker.
    if not _judge(store, f"NOT {plain}", params):
        return None
    total += store.scalar("SELECT COUNT(*) FROM maint_lv")
    pinned += [r[0] for r in conn.execute("SELECT id FROM maint_li WHERE NOT chained AND visible AND pinned")]
    page = [r[0] for r in conn.execute(f"""
        SELECT o.id FROM sessions o
        WHERE {readable_id_sql('o')}
          AND CASE WHEN o.id IN (SELECT id FROM maint_li) THEN o.id IN (SELECT id FROM maint_lv)
                   ELSE {_plain_visible_sql(store, 'o')} END
        ORDER BY o.started_at DESC, o.id LIMIT :limit""", {**params, "limit": limit or -1})]
    return (*_keys(store, page, pinned), total)


# The first walk reads this many sessions by start per row asked for; each further walk reads four times more.
WALK_FACTOR = 4
# Past this many sessions read by start (a large --limit, or thousands of subagent runs newer than anything
# listed), judging every session once (:func:`pick`) costs less than walking on.
MAX_WALK = 4096
TOO_FAR = "too far"


def page(store: Store, *, source: str | None, limit: int,
         now: float) -> tuple[list[Any], list[Any], bool] | str | None:
    """(single sessions, chain keys, more): what :func:`pick` shows, and whether any visible
    conversation is left out, without counting them: reads the newest sessions by start (a few
    times *limit*, more if too few of them are listed), the pinned ones, and the compression
    chains they belong to. None as for :func:`pick`; :data:`TOO_FAR` when that would read more than
    :data:`MAX_WALK` sessions. Call inside a snapshot; :func:`drop` cleans up."""
    conn, params = store.conn, {"source": source, "now": now}
    plain = _plain_sql(store)
    pinned_flag = _flag_or_0(store, "s", "pinned")
    pinned_ids = store.scalar(f"SELECT json_group_array(s.id) FROM sessions s WHERE {pinned_flag} "
                              f"AND {readable_id_sql('s')}")
    want = WALK_FACTOR * (limit + 1)
    while True:
        drop(store)
        if want > MAX_WALK:
            return TOO_FAR
        conn.execute("CREATE TEMP TABLE maint_lp (pos INTEGER PRIMARY KEY, id)")
        conn.execute(f"INSERT INTO maint_lp (id) SELECT id FROM sessions s WHERE {readable_id_sql('s')} "
                     "ORDER BY started_at DESC, id LIMIT ?", (want,))
        walked_all = store.scalar("SELECT COUNT(*) FROM maint_lp") < want
        # The chains these sessions may belong to, whole: up through parents that ended with a compression,
        # then down through such parents' children (more than the chains; the rules below judge them).
        conn.execute(f"""CREATE TEMP TABLE maint_lx AS WITH RECURSIVE
            up(id) AS (SELECT s.id FROM sessions s
                       WHERE s.id IN (SELECT id FROM maint_lp UNION ALL SELECT value FROM json_each(:pinned))
                         AND NOT {plain}
                       UNION SELECT p.id FROM up JOIN sessions c ON c.id = up.id
                             JOIN sessions p ON p.id = c.parent_session_id AND c.parent_session_id <> ''
                             WHERE {_ended_compressing(store, 'p')}),
            down(id) AS (SELECT id FROM up
                         UNION SELECT c.id FROM down JOIN sessions d ON d.id = down.id
                               JOIN sessions c ON c.parent_session_id = d.id
                               WHERE {_ended_compressing(store, 'd')})
            SELECT id FROM down""", {"pinned": pinned_ids})
        if not _judge(store, "s.id IN (SELECT id FROM maint_lx)", params):
            return None
        listed = conn.execute(f"""
            SELECT p.id, CASE WHEN v.id IS NOT NULL THEN v.pinned ELSE {_flag_or_0(store, 'o', 'pinned')} END
            FROM maint_lp p JOIN sessions o ON o.id = p.id LEFT JOIN maint_lv v ON v.id = p.id
            WHERE CASE WHEN p.id IN (SELECT id FROM maint_li) THEN v.id IS NOT NULL
                       ELSE {_plain_visible_sql(store, 'o')} END
            ORDER BY p.pos""", params).fetchall()
        more = any(not shown_anyway for _, shown_anyway in listed[limit:])
        if more or walked_all:
            break
        want *= WALK_FACTOR
    pinned = [r[0] for r in conn.execute(f"""
        SELECT o.id FROM sessions o WHERE o.id IN (SELECT value FROM json_each(:pinned))
          AND o.id NOT IN (SELECT id FROM maint_li) AND {_plain_visible_sql(store, 'o')}""",
        {"pinned": pinned_ids, "source": source})]
    pinned += [r[0] for r in conn.execute("SELECT id FROM maint_li WHERE NOT chained AND visible AND pinned")]
    return (*_keys(store, [sid for sid, _ in listed[:limit]], pinned), more)


def _ended_compressing(store: Store, a: str) -> str:
    return f"{a}.end_reason = 'compression'" if store.has_column("sessions", "end_reason") else "0"



def _judge(store: Store, where: str, params: dict[str, Any]) -> bool:
    """Judges the sessions matching *where* (none of them plain, the set closed under compression
    edges) by the lineage rules: ``maint_li`` (each one), ``maint_lw`` (each chain's members under its
    first segment), ``maint_lc`` (each chain, keyed by the member that started first) and ``maint_lv``
    (the listed ones: chain keys and sessions of no chain, with their pin). False when a continuation
    is reached from no first segment: parent links loop."""
    conn = store.conn
    conn.execute(f"CREATE TEMP TABLE maint_li AS SELECT *, cont AS chained FROM ({_lean_sql(store, where)})", params)
    conn.execute("CREATE INDEX temp.maint_li_id ON maint_li(id)")
    conn.execute("CREATE INDEX temp.maint_li_parent ON maint_li(parent_id) WHERE cont")
    conn.execute("UPDATE maint_li SET chained = 1 WHERE NOT cont AND id IN (SELECT parent_id FROM maint_li WHERE cont)")
    # Each chain from its first segment down; a continuation never reached sits on a loop.
    conn.execute("""CREATE TEMP TABLE maint_lw AS WITH RECURSIVE w(top, id) AS (
            SELECT id, id FROM maint_li WHERE chained AND NOT cont
            UNION ALL
            SELECT w.top, c.id FROM w JOIN maint_li c ON c.parent_id = w.id AND c.cont)
        SELECT top, id FROM w""")
    if store.scalar("SELECT (SELECT COUNT(*) FROM maint_lw) < (SELECT COUNT(*) FROM maint_li WHERE chained)"):
        drop(store)
        return False
    conn.execute("CREATE INDEX temp.maint_lw_top ON maint_lw(top)")
    # A chain is as visible as its key (the member that started first) and all its segments make it.
    conn.execute(f"""CREATE TEMP TABLE maint_lc AS
        SELECT g.top, g.key, g.pinned,
               (:source IS NULL OR k.source = :source)
               AND (NOT (k.kind = '{lineage.DELEGATE}' OR g.archived OR g.hidden) OR (g.pinned AND NOT g.botchat))
                   AS visible
        FROM (SELECT w.top, MAX(i.archived) AS archived, MAX(i.hidden) AS hidden, MAX(i.pinned) AS pinned,
                     MAX(i.botchat) AS botchat,
                     (SELECT x.id FROM maint_lw y JOIN maint_li x ON x.id = y.id WHERE y.top = w.top
                      ORDER BY x.started_at, x.id LIMIT 1) AS key
              FROM maint_lw w JOIN maint_li i ON i.id = w.id GROUP BY w.top) g
        JOIN maint_li k ON k.id = g.key""", params)
    conn.execute("""CREATE TEMP TABLE maint_lv AS SELECT key AS id, pinned FROM maint_lc WHERE visible
        UNION ALL SELECT id, pinned FROM maint_li WHERE NOT chained AND visible""")
    conn.execute("CREATE INDEX temp.maint_lv_id ON maint_lv(id)")
    return True


def _keys(store: Store, page: list[Any], pinned: list[Any]) -> tuple[list[Any], list[Any]]:
    """The page's and the pinned conversations, split into single sessions and chain keys."""
    chain_keys = set(r[0] for r in store.conn.execute(
        "SELECT key FROM maint_lc WHERE visible AND (pinned OR key IN (SELECT value FROM json_each(?)))",
        (_dumps(page),)))
    singles = [sid for sid in page if sid not in chain_keys]
    seen = set(singles)
    singles += [sid for sid in pinned if sid not in seen]
    return singles, sorted(chain_keys, key=str)


def chain_members(store: Store, keys: list[Any]) -> str:
    """Fills ``temp.maint_chained`` with every session of the chains keyed *keys* (from :func:`pick`) and
    returns a query of their ids, for :func:`maint.store.lineage.build`'s *only*."""
    conn = store.conn
    conn.execute("DROP TABLE IF EXISTS temp.maint_chained")
    conn.execute("CREATE TEMP TABLE maint_chained (id PRIMARY KEY, parent) WITHOUT ROWID")
    conn.execute("""INSERT INTO maint_chained SELECT w.id, NULL FROM maint_lw w
        WHERE w.top IN (SELECT top FROM maint_lc WHERE key IN (SELECT value FROM json_each(?)))""",
                 (_dumps(keys),))
    return "SELECT id FROM maint_chained"


def drop(store: Store) -> None:
    for table in TEMP_TABLES:
        store.conn.execute(f"DROP TABLE IF EXISTS temp.{table}")


def _json_list(text: str | None) -> list[Any]:
    return json.loads(text) if text else []


def _dumps(ids: list[Any]) -> str:
    return json.dumps(list(ids))
