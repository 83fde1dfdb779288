"""How sessions relate, classified the way Hermes does it, worked out by SQLite in temp tables.

* compression continuation: child of a parent that ended with ``compression``
  (and not a fork named by a marker, nor a ``tool`` session). A chain of them
  is one conversation and is pruned or archived only as a whole.
* delegate (subagent) child: ``model_config._delegate_from``; cascades with
  its parent.
* branch child (``_branched_from``, or legacy: parent ended ``branched`` and
  the child started after) and reset child (``_reset_from``, or legacy: parent
  ended at a reset boundary and the child rides the same routing key) are
  separate conversations: kept, never cascaded.

Markers name the parent they forked from; a continuation inherits
``model_config`` verbatim, so a marker naming another row is inherited and
does not make the row a fork.

:func:`build` leaves two temp tables on the store's connection, filled from one read snapshot:

* ``temp.maint_s``, one row per session: the catalogue columns the planners read, ``kind``,
  ``matched`` (the caller's filters), ``chain`` (the key of its compression chain: the member that
  started first) and ``top`` (the chain's first segment);
* ``temp.maint_c``, one row per chain: ``key``, ``tip`` (its live end: from the first segment,
  follow continuations, preferring ones still compressing, then open ones, then the most recently
  active), ``n`` segments, ``first_rid`` (where its first row sits in the table), ``dparent``
  (the chain it was delegated from), ``last_active`` (its freshest segment's), and whether any
  segment is ``archived``, ``hidden``, ``pinned`` or the hidden canonical Bot Chat (``botchat``).

Nothing per session is held in Python, so memory stays flat however many sessions the store
holds. Stores whose parent links form loops (Hermes never writes them; a hand-edited or damaged
store can) are the one exception: the few sessions on such a loop are resolved in Python exactly
as the previous, all-Python planner did (``tests/reference_planner.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from maint.selection.filters import Filters
from maint.store.catalog import CANONICAL_BOT_CHAT_TITLE, catalog_sql, relation_sql
from maint.store.connection import Store

COMPRESSION = "compression"
DELEGATE = "delegate"
BRANCH = "branch"
RESET = "reset"
OTHER = "other"
ROOT = "root"

RESET_END_REASONS = ("session_reset", "session_switch", "idle", "daily", "suspended", "resume_pending_expired")

TEMP_TABLES = ("maint_s", "maint_c", "maint_walk", "maint_multi", "maint_best", "maint_tip", "maint_keep")


def _truthy(expr: str) -> str:
    return f"COALESCE({expr}, '') <> ''"


def kind_sql(store: Store, c: str = "c", p: str = "p") -> str:
    """The kind of session *c* given its parent row *p* (``p.id`` NULL when it has none)."""
    er = f"{p}.end_reason" if store.has_column("sessions", "end_reason") else "NULL"
    key = f"{p}.session_key" if store.has_column("sessions", "session_key") else "NULL"
    resets = ", ".join(f"'{r}'" for r in RESET_END_REASONS)
    return f"""CASE
        WHEN {p}.id IS NULL THEN
            CASE WHEN {_truthy(f'{c}.delegate_from')} AND {c}.delegate_from IS NOT {c}.id
                      AND EXISTS (SELECT 1 FROM sessions x WHERE x.id = {c}.delegate_from)
                 THEN '{DELEGATE}' ELSE '{ROOT}' END
        WHEN {er} IS 'compression'
             AND NOT ({p}.id IS {c}.branched_from OR {p}.id IS {c}.delegate_from OR {p}.id IS {c}.reset_from)
             AND {c}.source IS NOT 'tool' THEN '{COMPRESSION}'
        WHEN {_truthy(f'{c}.delegate_from')} THEN '{DELEGATE}'
        WHEN {_truthy(f'{c}.branched_from')}
             OR ({er} IS 'branched' AND {p}.ended_at IS NOT NULL AND {c}.started_at >= {p}.ended_at) THEN '{BRANCH}'
        WHEN {_truthy(f'{c}.reset_from')}
             OR (COALESCE({er} IN ({resets}), 0) AND {_truthy(f'{c}.session_key')}
                 AND {c}.session_key = {key}) THEN '{RESET}'
        ELSE '{OTHER}' END"""


def compression_edges_sql(store: Store) -> str:
    """(child, parent) for every compression continuation: only children of a session that ended with
    ``compression`` are read."""
    if not store.has_column("sessions", "end_reason"):
        return "SELECT NULL AS child, NULL AS parent WHERE 0"
    children = relation_sql(store, "s.parent_session_id IN (SELECT id FROM sessions WHERE end_reason = 'compression')")
    return f"""SELECT c.id AS child, c.parent_id AS parent
        FROM ({children}) c
        JOIN sessions p ON p.id = c.parent_id AND c.parent_id <> ''
        WHERE {kind_sql(store)} = '{COMPRESSION}'"""


def chained_ids(store: Store) -> str:
    """Builds ``temp.maint_chained`` (every session of a compression chain of two or more) and returns a
    query of its ids, for :func:`build`'s *only*: few sessions, found without reading the others."""
    conn = store.conn
    conn.execute("DROP TABLE IF EXISTS temp.maint_chained")
    conn.execute("CREATE TEMP TABLE maint_chained (id TEXT PRIMARY KEY, parent TEXT) WITHOUT ROWID")
    conn.execute(f"INSERT INTO maint_chained SELECT child, parent FROM ({compression_edges_sql(store)})")
    conn.execute("INSERT OR IGNORE INTO maint_chained SELECT parent, NULL FROM maint_chained")
    return "SELECT id FROM maint_chained"


def drop(store: Store) -> None:
    for table in (*TEMP_TABLES, "maint_chained"):
        store.conn.execute(f"DROP TABLE IF EXISTS temp.{table}")


def build(store: Store, now: float, filters: Filters | None = None, keep: Iterable[str] = (),
          only: str | None = None) -> None:
    """Fill ``temp.maint_s`` and ``temp.maint_c`` (see the module's doc) inside the caller's snapshot.

    ``matched`` is 1 for the sessions *filters* match (all without filters); *keep* ids get ``keep = 1``.
    *only* (a query of session ids closed under compression edges, e.g. :func:`chained_ids`) limits
    the tables to those sessions; any other session is a chain of its own.
    """
    conn = store.conn
    for table in TEMP_TABLES:
        conn.execute(f"DROP TABLE IF EXISTS temp.{table}")
    where, params = filters.sql("c.") if filters is not None else ("1", {})
    conn.execute("""CREATE TEMP TABLE maint_s (
        id TEXT PRIMARY KEY, rid INTEGER, source, started_at, ended_at, end_reason, parent_id, last_active,
        last_message_at, archived INTEGER, auto_archived INTEGER, pinned INTEGER, hidden INTEGER,
        botchat INTEGER, locked INTEGER, matched INTEGER, kind TEXT, dtarget, top, chain,
        keep INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID""")
    conn.execute(f"""
        INSERT INTO maint_s (id, rid, source, started_at, ended_at, end_reason, parent_id, last_active,
                             last_message_at, archived, auto_archived, pinned, hidden, botchat, locked, matched,
                             kind, dtarget, top, chain)
        SELECT id, rid, source, started_at, ended_at, end_reason, parent_id, last_active, last_message_at,
               archived, auto_archived, pinned, hidden, hidden AND title IS '{CANONICAL_BOT_CHAT_TITLE}', locked,
               matched, kind,
               CASE WHEN kind = '{DELEGATE}' THEN CASE WHEN has_parent THEN parent_id ELSE delegate_from END END,
               CASE WHEN kind <> '{COMPRESSION}' THEN id END, id
        FROM (SELECT c.*, p.id IS NOT NULL AS has_parent, {kind_sql(store)} AS kind,
                     CASE WHEN {where} THEN 1 ELSE 0 END AS matched
              FROM ({catalog_sql(store, filters.columns if filters is not None else (),
                                 "1" if only is None else f"s.id IN ({only})")}) c
              LEFT JOIN sessions p ON p.id = c.parent_id AND c.parent_id <> ''
              WHERE c.id IS NOT NULL LIMIT -1 OFFSET 0)""",
                 {"now": now, **params})
    keep = list(keep)
    if keep:
        conn.execute("CREATE TEMP TABLE maint_keep (id TEXT PRIMARY KEY) WITHOUT ROWID")
        conn.executemany("INSERT OR IGNORE INTO maint_keep VALUES (?)", [(k,) for k in keep])
        conn.execute("UPDATE maint_s SET keep = 1 WHERE id IN (SELECT id FROM maint_keep)")
    _chains(store)


def _chains(store: Store) -> None:
    conn = store.conn
    conn.execute(f"CREATE INDEX temp.maint_s_parent ON maint_s(parent_id) WHERE kind = '{COMPRESSION}'")
    # Each continuation's first segment: walk down from every non-continuation with continuations.
    conn.execute(f"""CREATE TEMP TABLE maint_walk AS
        WITH RECURSIVE w(id, top) AS (
            SELECT c.id, p.id FROM maint_s c JOIN maint_s p ON p.id = c.parent_id
            WHERE c.kind = '{COMPRESSION}' AND p.kind <> '{COMPRESSION}'
            UNION ALL
            SELECT c.id, w.top FROM w JOIN maint_s c ON c.parent_id = w.id AND c.kind = '{COMPRESSION}')
        SELECT id, top FROM w""")
    conn.execute("UPDATE maint_s SET top = w.top FROM maint_walk w WHERE w.id = maint_s.id")
    looped = _loops(store)
    conn.execute(f"CREATE TEMP TABLE maint_multi AS SELECT DISTINCT top FROM maint_s WHERE kind = '{COMPRESSION}'")
    # The chain's key is the member that started first (ties: the lowest id).
    conn.execute("""UPDATE maint_s SET chain = k.key FROM (
            SELECT id, FIRST_VALUE(id) OVER (PARTITION BY top ORDER BY started_at, id) AS key
            FROM maint_s WHERE top IN (SELECT top FROM maint_multi)) k
        WHERE k.id = maint_s.id AND maint_s.chain IS NOT k.key""")
    # The tip: from the first segment, the best continuation at each step.
    conn.execute(f"""CREATE TEMP TABLE maint_best AS
        SELECT parent_id AS pid, id FROM (
            SELECT parent_id, id, ROW_NUMBER() OVER (
                PARTITION BY parent_id
                ORDER BY CASE WHEN end_reason IS 'compression' THEN 0 WHEN ended_at IS NULL THEN 1 ELSE 2 END,
                         last_active DESC, started_at DESC, id) AS rn
            FROM maint_s WHERE kind = '{COMPRESSION}' AND top IS NOT id) WHERE rn = 1""")
    conn.execute("CREATE INDEX temp.maint_best_pid ON maint_best(pid)")
    conn.execute("""CREATE TEMP TABLE maint_tip AS
        WITH RECURSIVE w(id, top, depth) AS (
            SELECT top, top, 0 FROM maint_multi WHERE top NOT IN (SELECT value FROM json_each(:looped))
            UNION ALL
            SELECT b.id, w.top, w.depth + 1 FROM w JOIN maint_best b ON b.pid = w.id)
        SELECT top, id AS tip, MAX(depth) AS depth FROM w GROUP BY top""", {"looped": _json(looped)})
    conn.execute("""CREATE TEMP TABLE maint_c (
        key TEXT PRIMARY KEY, tip TEXT, n INTEGER, first_rid INTEGER, dparent TEXT, last_active,
        archived INTEGER, hidden INTEGER, pinned INTEGER, botchat INTEGER) WITHOUT ROWID""")
    conn.execute("""INSERT INTO maint_c (key, tip, n, first_rid, last_active, archived, hidden, pinned, botchat)
        SELECT id, id, 1, rid, last_active, archived, hidden, pinned, botchat FROM maint_s
        WHERE top NOT IN (SELECT top FROM maint_multi)""")
    conn.execute("""INSERT INTO maint_c (key, tip, n, first_rid, last_active, archived, hidden, pinned, botchat)
        SELECT chain, COALESCE(t.tip, s.chain), COUNT(*), MIN(rid), MAX(last_active), MAX(archived), MAX(hidden),
               MAX(pinned), MAX(botchat)
        FROM maint_s s LEFT JOIN maint_tip t ON t.top = s.top
        WHERE s.top IN (SELECT top FROM maint_multi) GROUP BY chain""")
    for key, tip in looped.items():
        conn.execute("UPDATE maint_c SET tip = ? WHERE key = ?", (tip, key))
    conn.execute("CREATE INDEX temp.maint_s_chain ON maint_s(chain)")
    # Delegate edges between chains: only a chain's first segment can be a delegate child.
    conn.execute(f"""UPDATE maint_c SET dparent = x.parent FROM (
            SELECT d.chain AS key, t.chain AS parent FROM maint_s d JOIN maint_s t ON t.id = d.dtarget
            WHERE d.kind = '{DELEGATE}' AND t.chain <> d.chain) x
        WHERE x.key = maint_c.key""")
    conn.execute("CREATE INDEX temp.maint_c_dparent ON maint_c(dparent) WHERE dparent IS NOT NULL")
    _break_delegate_loops(store)


def _json(obj: Any) -> str:
    import json

    return json.dumps(list(obj))


def _loops(store: Store) -> dict[str, str]:
    """Continuations whose parent links loop: grouped, keyed and tipped in Python; {key: tip}.

    A damaged store only: every continuation of a Hermes-written store descends from a session
    that is not one, which the walk above reaches.
    """
    rows = {r[0]: r[1:] for r in store.conn.execute(
        f"SELECT id, parent_id, started_at, ended_at, end_reason, last_active FROM maint_s "
        f"WHERE kind = '{COMPRESSION}' AND top IS NULL")}
    if not rows:
        return {}
    group: dict[str, str] = {sid: sid for sid in rows}

    def find(x: str) -> str:
        while group[x] != x:
            group[x] = group[group[x]]
            x = group[x]
        return x

    children: dict[str, list[str]] = {}
    for sid, (parent, *_rest) in rows.items():
        children.setdefault(parent, []).append(sid)
        a, b = find(sid), find(parent)
        if a != b:
            group[a] = b
    members: dict[str, list[str]] = {}
    for sid in rows:
        members.setdefault(find(sid), []).append(sid)
    out = {}
    for ids in members.values():
        ids.sort(key=lambda i: (rows[i][1], i))
        key = ids[0]

        def rank(c: str):
            _p, started, ended, reason, active = rows[c]
            state = 0 if reason == "compression" else 1 if ended is None else 2
            return (state, -active, -started, c)

        current, seen = key, {key}  # no member is a loop's first segment: start from the earliest
        while True:
            nxt = [c for c in children.get(current, []) if c not in seen]
            if not nxt:
                break
            current = min(nxt, key=rank)
            seen.add(current)
        out[key] = current
        store.conn.execute("UPDATE maint_s SET top = :key, chain = :key "
                           "WHERE id IN (SELECT value FROM json_each(:ids))", {"key": key, "ids": _json(ids)})
    return out


def _break_delegate_loops(store: Store) -> None:
    """A chain may not be its own delegate ancestor: cut loops as the Python planner did.

    It visited chains in table order (their first row's rowid) and, walking up from each, cut the
    link of the chain it started from when the walk came back on itself. Only chains whose walk
    never reaches a chain without a delegate parent are involved, so only those are loaded.
    """
    # The chains a root (or a parent not in the table) reaches going down, once each: every chain's walk up to its
    # root was N^2/2 rows for a delegate chain of N (5,000: a prune plan of 102 s; hostile try 19, W6). The others
    # are the ones whose walk never ends.
    stuck = store.conn.execute("""
        WITH RECURSIVE reach(key) AS (
            SELECT key FROM maint_c WHERE dparent IS NULL OR dparent NOT IN (SELECT key FROM maint_c)
            UNION
            SELECT c.key FROM maint_c c JOIN reach r ON c.dparent = r.key)
        SELECT key, dparent FROM maint_c WHERE dparent IS NOT NULL AND key NOT IN (SELECT key FROM reach)
        ORDER BY first_rid""").fetchall()
    if not stuck:
        return
    parent = dict(stuck)
    rooted: set[str] = set()  # a walk stops at a chain known to end (a cut only ever takes a link away)
    for key, _ in stuck:
        seen, path, cur = {key}, [key], parent[key]
        while cur is not None and cur not in rooted:
            if cur in seen:
                parent[key] = None
                path = [key]
                break
            seen.add(cur)
            path.append(cur)
            cur = parent.get(cur)
        rooted.update(path)
    cut = [k for k, p in parent.items() if p is None]
    store.conn.execute("UPDATE maint_c SET dparent = NULL WHERE key IN (SELECT value FROM json_each(?))",
                       (_json(cut),))


def delegate_family(store: Store, session_id: str) -> list[str]:
    """The session and its delegate (subagent) descendants, level by level, each level sorted.

    A session's delegate children are the delegate-kind sessions whose parent link or
    ``_delegate_from`` marker names it. One pass over the sessions table per level, reading only
    the columns the kind depends on.
    """
    kind = kind_sql(store)
    out, frontier = [session_id], [session_id]
    while frontier:
        rows = store.conn.execute(f"""
            SELECT c.id FROM ({relation_sql(store)}) c LEFT JOIN sessions p ON p.id = c.parent_id AND c.parent_id <> ''
            WHERE (c.parent_id IN (SELECT value FROM json_each(:ids))
                   OR c.delegate_from IN (SELECT value FROM json_each(:ids)))
              AND c.id NOT IN (SELECT value FROM json_each(:seen)) AND {kind} = '{DELEGATE}'
            ORDER BY c.id""", {"ids": _json(frontier), "seen": _json(out)}).fetchall()
        frontier = [r[0] for r in rows]
        out.extend(frontier)
    return out
