"""Upstream Hermes's current prune selection, restated in plain Python from ``hermes_state_maintenance.py``
(``_PRUNE_FILTERS``, ``_prune_filter_where``, ``_prune_where(whole_lineages=True)``, ``_NOT_PINNED_SQL``) and
``hermes_state_common.py`` (``_sql_freshest_of``, ``_non_continuation_child_sql``), for the differential tests.

It reads the rows with plain queries and decides row by row, with none of the product's code: it is
what the planner is compared with. The rules, as upstream has them:

* only ended rows; every filter ANDs; ``archived`` is tri-state (None = both);
* last activity: the freshest of ``last_activity_at`` and the newest message time, else ``started_at``,
  each only inside the sane epoch window; a row with no such time has none (and no age bound matches it);
* ``last_active_before`` is strict and a reaped orphan (``startup_orphan_reap``) also needs
  ``ended_at < cutoff``; ``last_active_after``, ``started_after`` are ``>=``; ``started_before`` is ``<``;
* a pin keeps the row and every compression continuation after it, unless ``include_pinned``;
* ``whole_lineages``: a compression ancestor of any continuation the selection leaves is kept;
* children outside the selection are orphaned; nothing cascades.

Upstream's exact window (``hermes_cli.timefmt.EPOCH_MIN``/``EPOCH_MAX``) was not readable in the reference
snapshot; the window here is the product's (1970 to the end of 9999), stated in one place.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

WINDOW = (0.0, 253402300799.0)
REAP = "startup_orphan_reap"
MARKERS = ("_branched_from", "_delegate_from", "_reset_from")


def _sane(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and WINDOW[0] <= value <= WINDOW[1])


def _markers(model_config: Any) -> dict[str, Any]:
    try:
        parsed = json.loads(model_config) if isinstance(model_config, str) else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def load(path: Path) -> tuple[dict[str, dict], dict[str, list[float]]]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    rows = {r["id"]: dict(r) for r in conn.execute("SELECT * FROM sessions")}
    times: dict[str, list[float]] = {}
    for sid, ts in conn.execute("SELECT session_id, timestamp FROM messages"):
        times.setdefault(sid, []).append(ts)
    conn.close()
    return rows, times


def last_active(row: dict, times: list[float]) -> float | None:
    fresh = [v for v in (row.get("last_activity_at"), *times) if _sane(v)]
    if fresh:
        return max(fresh)
    return row["started_at"] if _sane(row["started_at"]) else None


def continues(child: dict, parent: dict) -> bool:
    """*child* is a compression continuation of *parent* (not a fork naming it, not a tool session)."""
    if parent.get("end_reason") != "compression" or (child.get("source") or "") == "tool":
        return False
    marks = _markers(child.get("model_config"))
    return all((marks.get(m) if marks.get(m) is not None else "") != parent["id"] for m in MARKERS)


def _cwd_under(cwd: Any, prefix: str) -> bool:
    """Upstream's ``_cwd_prefix_clause``: equal, or under it (LIKE: ASCII case folded)."""
    if not isinstance(cwd, str):
        return False
    p = prefix.rstrip("/\\") or prefix
    low, lp = cwd.lower(), p.lower()
    return cwd == p or low.startswith(lp + "/") or low.startswith(lp + "\\")


def matches(row: dict, la: float | None, f: dict[str, Any]) -> bool:
    if row["ended_at"] is None:
        return False
    v = f.get("last_active_before")
    if v is not None and not (la is not None and la < v and (row.get("end_reason") != REAP or row["ended_at"] < v)):
        return False
    v = f.get("last_active_after")
    if v is not None and not (la is not None and la >= v):
        return False
    if f.get("started_before") is not None and not row["started_at"] < f["started_before"]:
        return False
    if f.get("started_after") is not None and not row["started_at"] >= f["started_after"]:
        return False
    if f.get("source") and row["source"] != f["source"]:
        return False
    if f.get("cwd_prefix") and not _cwd_under(row.get("cwd"), f["cwd_prefix"]):
        return False
    if f.get("max_messages") is not None and not (row.get("message_count") or 0) <= f["max_messages"]:
        return False
    if f.get("min_messages") is not None and not (row.get("message_count") or 0) >= f["min_messages"]:
        return False
    archived = f.get("archived")
    return not (isinstance(archived, bool) and bool(row.get("archived")) != archived)


def select(path: Path, filters: dict[str, Any], include_pinned: bool = False) -> set[str]:
    """The ids upstream's ``prune_sessions(older_than_days=None, **filters)`` deletes."""
    rows, times = load(path)
    parent_of = {sid: r["parent_session_id"] for sid, r in rows.items()}
    edge = {sid: p for sid, p in parent_of.items() if p in rows and continues(rows[sid], rows[p])}
    pinned_tail: set[str] = set()
    changed = True
    while changed:  # continuations (transitively) of a pinned segment
        changed = False
        for child, parent in edge.items():
            if child not in pinned_tail and (rows[parent].get("pinned") or parent in pinned_tail):
                pinned_tail.add(child)
                changed = True
    chosen = {sid for sid, r in rows.items()
              if matches(r, last_active(r, times.get(sid, [])), filters)
              and (include_pinned or (not r.get("pinned") and sid not in pinned_tail))}
    kept: set[str] = set()
    for child, parent in edge.items():
        if child not in chosen:
            node = parent
            while node is not None and node not in kept:
                kept.add(node)
                node = edge.get(node)
    return chosen - kept


def components(path: Path) -> list[set[str]]:
    """The compression conversations: sessions joined by continuation edges."""
    rows, _ = load(path)
    group = {sid: sid for sid in rows}

    def find(x: str) -> str:
        while group[x] != x:
            group[x] = group[group[x]]
            x = group[x]
        return x

    for sid, r in rows.items():
        p = r["parent_session_id"]
        if p in rows and continues(r, rows[p]):
            group[find(sid)] = find(p)
    out: dict[str, set[str]] = {}
    for sid in rows:
        out.setdefault(find(sid), set()).add(sid)
    return list(out.values())
