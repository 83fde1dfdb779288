"""list: the conversations a user would see, newest first by start (as Hermes lists them) or by activity.

Compression continuations fold into their lineage (shown at its live tip) and
subagent runs are hidden, as in Hermes's own picker; archived and hidden
sessions are not listed, except pinned ones: a pin means "always listed" (the
hidden canonical Bot Chat excepted, which Bot Mode reaches through its bot).
Pinned conversations are listed even past ``limit``, up to ``limit`` of them;
the rest are counted on a line of their own (``--limit 0`` lists them all).

SQLite folds, filters, counts and orders the lineages (:mod:`maint.store.lineage`); Python sees only
the rows it shows.
"""

from __future__ import annotations

import functools
import json
import math
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from maint.store import lineage
from maint.store.timestamps import local, raw
from maint.store.catalog import CANONICAL_BOT_CHAT_TITLE, SessionInfo, catalog_sql
from maint.store.text_check import readable_id_sql, shown_text_sql, unreadable_ids
from maint.store.connection import Store, open_store

if TYPE_CHECKING:
    from maint.store.targets import StoreTarget

PREVIEW_CHARS = 60


def workspace_key(s: SessionInfo) -> str | None:
    """Hermes's workspace key: the git repo root, else the working directory (upstream ``workspace_key``)."""
    return workspace_of(s.git_repo_root, s.cwd)


def workspace_of(repo_root: Any, cwd: Any) -> str | None:
    return (repo_root or "").strip() or (cwd or "").strip() or None


def in_workspace(key: str | None, needle: str) -> bool:
    """Path substring or exact directory name, case-insensitive (as ``hermes sessions list --workspace``)."""
    if not key:
        return False
    key, needle = key.lower(), needle.lower()
    return needle in key or needle == os.path.basename(key.rstrip("/\\"))


SORTS = ("started", "last-active")


# Pinned conversations past the limit are listed up to this many pages of LIMIT rows; the rest are counted
# ("… N more pinned not shown"), so thousands of pins (a Desktop user's sidebar) still make one page.
PINNED_PAST_LIMIT_PAGES = 1


def list_conversations(store: Store, *, source: str | None = None, limit: int = 20, workspace: str | None = None,
                       now: float | None = None, sort: str = "started",
                       count: bool = True) -> tuple[list[dict[str, Any]], int | None, bool, int]:
    """Rows to show, how many conversations matched (None when not *count*), whether any unpinned one is
    not shown (the '… more not shown' line) and how many pinned ones past the limit are not shown either.

    A page is ``limit`` conversations in the chosen order, then the pinned ones the limit cut off (a pin
    means "always listed"), newest first, up to ``limit`` of them; past those, pinned ones are counted,
    not listed (``limit=0`` lists everything).

    ``sort="started"`` (Hermes's own order: the conversation's first session's start, newest first)
    walks ``sessions`` by start and stops at the limit (:mod:`maint.ops.listing_by_start`), unless
    ``workspace`` is given, which needs every chain's tip, or no limit; counting the rest then takes
    one lean pass over every session, which ``count=False`` skips. ``sort="last-active"``,
    ``workspace`` and ``limit=0`` read every session: only sessions of compression chains (a few, found
    through their parents' ``end_reason``) go through the lineage tables; every other session is a
    conversation of its own, read straight from ``sessions``: once without its newest-message lookup
    to count, once with it for SQLite's top-N sort, and once more, limited to pinned rows, for the
    pinned ones past the limit.
    """
    from maint.ops import listing_by_start

    if sort not in SORTS:
        raise ValueError(f"sort: {sort!r} (expected one of {', '.join(SORTS)})")
    now = time.time() if now is None else now
    store.conn.create_scalar_function("maint_workspace", workspace_of, 2, deterministic=True)
    store.conn.create_scalar_function("maint_in_workspace", lambda key, needle: int(in_workspace(key, needle)), 2,
                                      deterministic=True)
    sql = _Sql(store, workspace)
    order = "started_at DESC, root_id" if sort == "started" else "last_active DESC, id"
    params = {"source": source, "workspace": workspace, "limit": limit or -1, "now": now}
    with store.snapshot():
        picked, total, more, counted = None, None, False, count
        if sort == "started" and workspace is None and limit:
            if not count:
                picked = listing_by_start.page(store, source=source, limit=limit, now=now)
            if count or picked is listing_by_start.TOO_FAR:
                counted = True
                picked = listing_by_start.pick(store, source=source, limit=limit, now=now)
        if picked is None:
            lineage.build(store, now, only=lineage.chained_ids(store))
            total = store.scalar(f"SELECT COUNT(*) FROM ({sql.chains})", params) + \
                store.scalar(f"SELECT COUNT(*) FROM ({sql.singles(lean=True)})", params)
            pinned = f"SELECT * FROM ({sql.chains}) WHERE pinned" + (
                f" UNION ALL SELECT * FROM ({sql.singles(where=_flag_sql('s.pinned'))})" if sql.has("pinned") else "")
            chosen = f"""SELECT * FROM (SELECT * FROM ({sql.chains}) UNION ALL SELECT * FROM ({sql.singles()})
                                       ORDER BY {order} LIMIT :limit)
                         UNION SELECT * FROM ({pinned})"""
        else:
            singles, keys, found = picked
            if counted:
                total = found
            else:
                more = found
            lineage.build(store, now, only=listing_by_start.chain_members(store, keys))
            listing_by_start.drop(store)
            params["picked"] = json.dumps(singles)
            chosen = f"""SELECT * FROM ({sql.chains}) UNION ALL
                SELECT * FROM ({sql.singles(where="s.id IN (SELECT value FROM json_each(:picked))")})"""
        # The page's rows come first in this order (they are the newest of all listed), the pinned ones past
        # it after them: a page of LIMIT rows plus at most LIMIT pinned ones, the rest counted.
        shown = store.rows(f"""
            SELECT v.id, v.root_id, {sql.title} AS title, v.source, v.last_active, v.started_at,
                   tip.ended_at IS NULL AS open, v.segments, v.pinned, v.archived, {sql.key} AS workspace,
                   COUNT(*) OVER () AS maint_listed
            FROM ({chosen}) v
            JOIN sessions tip ON tip.id = v.id JOIN sessions root ON root.id = v.root_id
            ORDER BY {", ".join("v." + term for term in order.split(", "))}
            LIMIT :cap""", {**params, "cap": min((PINNED_PAST_LIMIT_PAGES + 1) * limit, 2**63 - 1) if limit else -1})
        listed = shown[0]["maint_listed"] if shown else 0
        for row in shown:
            del row["maint_listed"]
            for flag in ("open", "pinned", "archived"):
                row[flag] = bool(row[flag])
            row["preview"] = _preview(store, row["root_id"])
        lineage.drop(store)
    if total is not None:
        more = total > listed
    return shown, total if count else None, more, listed - len(shown)


class _Sql:
    """The list's queries for this store's columns: its chains (``temp.maint_c``) and its single sessions."""

    def __init__(self, store: Store, workspace: str | None):
        self.store, self.workspace = store, workspace
        self.has = has = functools.partial(store.has_column, "sessions")
        self.title = shown_text_sql("COALESCE(NULLIF(tip.title, ''), root.title)") if has("title") else "NULL"
        def col(a: str, c: str) -> str:  # paths go to Python: bytes that are not UTF-8 shown, never a stop
            return shown_text_sql(f"{a}.{c}") if has(c) else "NULL"

        self.key = " ".join(f"""COALESCE(maint_workspace({col('tip', 'git_repo_root')}, {col('tip', 'cwd')}),
                                     maint_workspace({col('root', 'git_repo_root')}, {col('root', 'cwd')}))""".split())
        in_workspace_sql = f"AND maint_in_workspace({self.key}, :workspace)" if workspace is not None else ""
        ws_join = "JOIN sessions tip ON tip.id = c.tip JOIN sessions root ON root.id = c.key" if workspace else ""
        # A pin means "always listed", except the hidden canonical Bot Chat; delegate runs, archived and hidden
        # conversations are out of sight otherwise.
        self.chains = f"""SELECT c.tip AS id, c.key AS root_id, r.source AS source, c.last_active AS last_active,
                   r.started_at AS started_at, c.n AS segments, c.pinned AS pinned, c.archived AS archived
            FROM maint_c c JOIN maint_s r ON r.id = c.key {ws_join}
            WHERE (NOT (r.kind = '{lineage.DELEGATE}' OR c.archived OR c.hidden) OR (c.pinned AND NOT c.botchat))
              AND (:source IS NULL OR r.source = :source) {in_workspace_sql}"""

    def singles(self, lean: bool = False, where: str = "1") -> str:
        store, workspace = self.store, self.workspace
        one = ("s.id NOT IN (SELECT id FROM maint_chained) AND (:source IS NULL OR s.source = :source) AND "
               f"{readable_id_sql('s')} AND " + where)
        cat = catalog_sql(store, ("git_repo_root", "cwd") if workspace is not None else (), one, lean, locks=False)
        ws = (f"AND maint_in_workspace(maint_workspace({shown_text_sql('c.git_repo_root')}, "
              f"{shown_text_sql('c.cwd')}), :workspace)"
              if workspace is not None else "")
        return f"""SELECT c.id AS id, c.id AS root_id, c.source AS source, c.last_active AS last_active,
                   c.started_at AS started_at, 1 AS segments, c.pinned AS pinned, c.archived AS archived
            FROM ({cat}) c LEFT JOIN sessions p ON p.id = c.parent_id AND c.parent_id <> ''
            WHERE (NOT ({lineage.kind_sql(store)} = '{lineage.DELEGATE}' OR c.archived OR c.hidden)
                   OR (c.pinned AND NOT (c.hidden AND c.title IS '{CANONICAL_BOT_CHAT_TITLE}'))) {ws}"""


def _flag_sql(expr: str) -> str:
    return f"NOT ({expr} IS NULL OR {expr} = 0 OR {expr} = '')"


def _preview(store: Store, session_id: str) -> str:
    text = store.scalar(
        f"SELECT {shown_text_sql('content')} FROM messages WHERE session_id = ? AND role = 'user' "
        "AND content IS NOT NULL ORDER BY timestamp, id LIMIT 1", (session_id,))
    text = " ".join(str(text or "").split())
    return text[:PREVIEW_CHARS] + "..." if len(text) > PREVIEW_CHARS else text


def relative_time(ts: float, now: float | None = None) -> str:
    now = time.time() if now is None else now
    if not isinstance(ts, (int, float)) or not math.isfinite(ts):
        return raw(ts)
    delta = max(0.0, now - ts)
    if delta < 60:
        return "just now"
    if delta < 3600:
        return f"{int(delta // 60)}m ago"
    if delta < 86400:
        return f"{int(delta // 3600)}h ago"
    if delta < 2 * 86400:
        return "yesterday"
    if delta < 30 * 86400:
        return f"{int(delta // 86400)}d ago"
    return local("%Y-%m-%d", ts)


# The list's Src column is six wide; longer platform names get the short forms the Sessions docs show.
SOURCE_ABBREVIATIONS = {
    "telegram": "tele", "discord": "disc", "whatsapp": "wapp", "api_server": "api", "subagent": "sub",
    "desktop": "desk", "recovered": "recov", "mattermost": "mmost", "homeassistant": "hass",
    "bluebubbles": "bbub", "dingtalk": "dtalk",
}


def source_label(source: str) -> str:
    return SOURCE_ABBREVIATIONS.get(source, source[:6])


@dataclass(frozen=True)
class ListRequest:
    """``hermes-maint list``'s options; *count* asks for the total too (the JSON report shows it)."""

    source: str | None = None
    limit: int = 20
    workspace: str | None = None  # a path substring or a directory name; ~ is expanded
    sort: str = "started"
    count: bool = False


def list_store(target: StoreTarget, req: ListRequest) -> dict[str, Any]:
    """``hermes-maint list`` on one store, read-only: the rows shown, the total when counted, whether more exist."""
    needle = None
    if req.workspace is not None:
        needle = os.path.expanduser(req.workspace.strip())
        needle = needle.rstrip("/\\") or needle
    with open_store(target.path, readonly=True) as store:
        rows, total, more, pinned_cut = list_conversations(store, source=req.source, limit=req.limit,
                                                           workspace=needle, sort=req.sort, count=req.count)
        unlisted = unreadable_ids(store)
    return {"sessions": rows, "total": total, "shown": len(rows), "more": more, "pinned_not_shown": pinned_cut,
            "unlisted_ids_not_utf8": unlisted}
