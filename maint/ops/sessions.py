"""One session at a time: delete, rename, pin / unpin and the pinned list, as ``hermes sessions`` does them.

Follows upstream Hermes where the Sessions docs are silent: ``delete_session`` and
``_collect_delegate_child_ids`` (hermes_state_sessions.py: delegate children go with the session,
branch and compression children are unlinked and kept), ``sanitize_title`` and ``_set_session_title``
(hermes_state_titles.py: at most 100 characters after removing control, zero-width and bidi-override
characters; unique, except that a compression ancestor's title moves to its continuation; the hidden
canonical Bot Chat keeps its name), ``set_session_pinned`` (a pin covers the whole compression lineage
and un-hides it) and ``_cmd_pinned`` (hermes_cli/sessions_cmd.py).

Every write is one short ``BEGIN IMMEDIATE`` transaction that re-reads what it relies on.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from maint.errors import MaintError, UsageError
from maint.fmt import fmt_time
from maint.store.delete import (delete_sessions, message_counts, refuse_if_too_big_while_shared, remove_session_files,
                                 session_files)
from maint.store import guard, lineage
from maint.store.catalog import (CANONICAL_BOT_CHAT_TITLE, NEWEST_MESSAGE_SQL, SessionInfo, resolve_session,
                                 session_info)
from maint.store.connection import Store, open_store
from maint.store.sqlutil import ph
from maint.store.text_check import shown_text_sql

if TYPE_CHECKING:
    from maint.flow import Operator
    from maint.store.targets import StoreTarget

MAX_TITLE_LENGTH = 100
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_INVISIBLE = re.compile(r"[\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufffc\ufff9-\ufffb]")


# -- delete -------------------------------------------------------------------

def _marker_sql(store: Store, key: str, alias: str = "") -> str:
    col = f"{alias}model_config"
    if not store.has_column("sessions", "model_config"):
        return "NULL"
    return f"json_extract(CASE WHEN json_valid({col}) THEN {col} ELSE '{{}}' END, '$.{key}')"


def delegate_children(store: Store, session_id: str) -> list[str]:
    """Every delegate (subagent) descendant of *session_id*, found by the ``_delegate_from`` marker (or a
    parent link on a marked row), walked recursively; never the session itself, whatever loops the
    markers form."""
    marker = _marker_sql(store, "_delegate_from")
    found = {session_id}
    frontier = [session_id]
    while frontier:
        rows = store.conn.execute(
            f"SELECT id FROM sessions WHERE {marker} IN ({ph(frontier)}) "
            f"OR (parent_session_id IN ({ph(frontier)}) AND {marker} IS NOT NULL)", frontier + frontier)
        frontier = [r[0] for r in rows if r[0] not in found]
        found.update(frontier)
    found.discard(session_id)
    return sorted(found)


@dataclass
class DeletePlan:
    session_id: str
    ids: list[str]  # the session, then its delegate children
    sessions: dict[str, SessionInfo]
    messages: int
    warnings: list[str]
    last_message_at: dict[str, float | None] = field(default_factory=dict)
    removed_files: list[str] = field(default_factory=list)  # Hermes's files of the deleted sessions, once gone
    include_pinned: bool = False  # --include-pinned: a pinned member is deleted (warned), not refused

    @property
    def children(self) -> list[str]:
        return self.ids[1:]


def _busy_refusal(session_id: str, busy: list[str]) -> MaintError:
    which = "it" if busy == [session_id] else ", ".join(busy)
    return MaintError(f"refusing to delete {session_id}: a turn or compression is in progress on {which} "
                      "(deleting would lose the transcript under a running agent); wait until it finishes; "
                      "nothing was deleted")


def plan_delete(store: Store, ref: str, now: float | None = None, *, exact: bool = False,
                include_pinned: bool = False) -> DeletePlan:
    """What ``delete`` removes, or a refusal (exit 1) while a turn lease or compression lock is live, or while
    any of the family is pinned (unless *include_pinned*: then a warning).
    *exact*: *ref* must be a whole id (see :func:`maint.store.catalog.resolve_session`)."""
    now = time.time() if now is None else now
    store.refuse_unknown_references()  # a table we do not know pointing at sessions: before the confirmation
    with store.snapshot():
        sid = resolve_session(store, ref, exact=exact)
        ids = [sid, *delegate_children(store, sid)]
        sessions = {i: session_info(store, i, now) for i in ids}
        counts = message_counts(store, ids)
        busy = sorted(guard.busy(store, ids, now, active=False))  # an open chat is warned about, not refused
        pins = guard.pinned_covering(store, sid, ids)
    if busy:
        raise _busy_refusal(sid, busy)
    if pins and not include_pinned:
        raise MaintError(guard.pinned_refusal(sid, pins, "nothing was deleted"))
    warnings = []
    for i in ids:
        s = sessions[i]
        if s.is_open:
            warnings.append(f"{i} is open: a chat still running it will recreate it (same id, its whole transcript) "
                            "at its next save; close that chat first")
        if s.pinned:
            warnings.append(f"{i} is pinned (a pin means keep)")
    return DeletePlan(session_id=sid, ids=ids, sessions=sessions, messages=sum(n for n, _ in counts.values()),
                      warnings=warnings, last_message_at={i: sessions[i].last_message_at for i in ids},
                      include_pinned=include_pinned)


def execute_delete(store: Store, plan: DeletePlan) -> list[str]:
    """Delete the planned rows in one transaction, after checking nothing changed since the plan."""
    refuse_if_too_big_while_shared(store, plan.ids, "nothing was deleted")
    with store.write() as conn:
        if not conn.execute("SELECT 1 FROM sessions WHERE id = ?", (plan.session_id,)).fetchone():
            raise MaintError(f"{plan.session_id} was deleted by another process meanwhile; nothing more to do")
        ids = [plan.session_id, *delegate_children(store, plan.session_id)]
        busy = sorted(guard.busy(store, ids, time.time(), active=False))
        if busy:
            raise _busy_refusal(plan.session_id, busy)
        pins = guard.pinned_covering(store, plan.session_id, ids)  # pinned since it was shown (Hermes, Desktop, ...)
        if pins and not plan.include_pinned:
            raise MaintError(guard.pinned_refusal(plan.session_id, pins, "nothing was deleted"))
        last = dict(conn.execute(
            f"SELECT id, {NEWEST_MESSAGE_SQL} FROM sessions s "
            f"WHERE id IN ({ph(ids)})", ids))
        if sorted(ids) != sorted(plan.ids) or last != plan.last_message_at:
            raise MaintError(f"{plan.session_id} or its delegate children changed since they were shown (new "
                             "messages or children); nothing was deleted, run delete again to see what goes now")
        delete_sessions(store, conn, ids)
    plan.removed_files = remove_session_files(store, ids)  # after the commit, as Hermes does
    return ids


# -- rename -------------------------------------------------------------------

def sanitize_title(raw: str) -> str:
    """Hermes's title rules; bad input is a usage error naming the rule."""
    if "\n" in raw or "\r" in raw:
        raise UsageError("title: contains a line break (expected one line of text)")
    cleaned = re.sub(r"\s+", " ", _INVISIBLE.sub("", _CONTROL.sub("", raw))).strip()
    if not cleaned:
        raise UsageError(f"title: {raw!r} is empty once control and invisible characters are removed "
                         "(expected some text, e.g. debugging auth flow)")
    if len(cleaned) > MAX_TITLE_LENGTH:
        raise UsageError(f"title: {len(cleaned)} characters (expected at most {MAX_TITLE_LENGTH})")
    return cleaned


def _compression_ancestor(store: Store, ancestor: str, session_id: str) -> bool:
    """Is *ancestor* an earlier segment of *session_id*'s compression lineage?"""
    seen, current = {session_id}, session_id
    cols = ", ".join(f"{_marker_sql(store, k)}" for k in ("_branched_from", "_delegate_from", "_reset_from"))
    while True:
        row = store.conn.execute(f"SELECT parent_session_id, source, {cols} FROM sessions WHERE id = ?",
                                 (current,)).fetchone()
        if row is None or row[0] is None or row[0] in seen:
            return False
        parent, source, *markers = row
        end = store.scalar("SELECT end_reason FROM sessions WHERE id = ?", (parent,))
        if end != "compression" or parent in markers or source == "tool":
            return False
        if parent == ancestor:
            return True
        seen.add(parent)
        current = parent


def rename(store: Store, ref: str, raw_title: str) -> dict[str, Any]:
    title = sanitize_title(raw_title)
    hidden = "COALESCE(hidden, 0)" if store.has_column("sessions", "hidden") else "0"
    has_source = store.has_column("sessions", "title_source")
    transferred_from = None
    with store.write() as conn:
        sid = resolve_session(store, ref)
        previous, is_hidden = conn.execute(f"SELECT {shown_text_sql('title')}, {hidden} FROM sessions WHERE id = ?",
                                           (sid,)).fetchone()
        if previous == CANONICAL_BOT_CHAT_TITLE and is_hidden and title != previous:
            raise MaintError(f"{sid} is a bot's canonical Bot Chat: Bot Mode finds it by this name, so renaming it "
                             "would orphan the conversation; nothing was changed")
        # IS NOT: a row whose id is NULL holds its title too (`id != ?` never matched it: hostile try 18, U8's rest)
        conflict = conn.execute(f"SELECT id, COALESCE(archived, 0), {hidden} FROM sessions WHERE title = ? "
                                "AND id IS NOT ?", (title, sid)).fetchone()
        if conflict:
            other, archived, other_hidden = conflict
            if other is None:
                raise MaintError(f"title {title!r} is already used by a session row without an id (NULL); titles "
                                 "are unique (choose another); nothing was changed")
            if _compression_ancestor(store, other, sid) or (
                    title == CANONICAL_BOT_CHAT_TITLE and archived and other_hidden):
                # An earlier segment (or a retired Bot Chat) cannot be renamed by hand: its title moves here.
                conn.execute("UPDATE sessions SET title = NULL WHERE id = ?", (other,))
                transferred_from = other
            else:
                raise MaintError(f"title {title!r} is already used by session {other}; titles are unique "
                                 "(choose another, or rename that session first); nothing was changed")
        conn.execute(f"UPDATE sessions SET title = ?{', title_source = ?' if has_source else ''} WHERE id = ?",
                     (title, "user", sid) if has_source else (title, sid))
    return {"session_id": sid, "title": title, "previous_title": previous, "transferred_from": transferred_from}


# -- pin / unpin / pinned ------------------------------------------------------

def require_pins(store: Store) -> None:
    if not store.has_column("sessions", "pinned"):
        raise MaintError(f"{store.path}: pins need the sessions.pinned column, which this store's schema "
                         f"(version {store.schema_version}) does not have; upgrade Hermes first; nothing was changed")




def set_pinned(store: Store, refs: list[str], pinned: bool, op: Operator | None = None) -> list[dict[str, Any]]:
    """Pin or unpin each session's whole lineage in one transaction; every reference resolves first.

    Unpinning takes away the keep flag (the next sweep may prune the session), so it follows the
    destructive commands' id rule: a prefix is acted on only after a confirmation at a terminal shows the
    whole id; without one (no terminal, --yes, the unattended operator) whole ids only. A pin takes prefixes.
    """
    require_pins(store)
    guarded = not pinned
    exact = guarded and not (op is not None and op.can_ask)
    with store.snapshot():
        resolved = [(ref, resolve_session(store, ref, exact=exact, action="unpin")) for ref in refs]
        prefixed = [sid for ref, sid in resolved if ref != sid]
        shown = {sid: session_info(store, sid).title for sid in prefixed}
    if guarded and prefixed and op is not None:
        op.confirm(f"Unpin {len(prefixed)} session(s) named by a prefix?",
                   [f"{sid}  {shown[sid] or '(untitled)'}" for sid in dict.fromkeys(prefixed)])
    ids = list(dict.fromkeys(sid for _, sid in resolved))
    hidden = store.has_column("sessions", "hidden")
    out = []
    with store.write() as conn:
        for sid in ids:
            lineage = [r[0] for r in conn.execute(guard.LINEAGE_CTE + "SELECT id FROM lineage ORDER BY id", (sid, sid))]
            conn.execute(f"UPDATE sessions SET pinned = ? WHERE id IN ({ph(lineage)})", [int(pinned), *lineage])
            title, is_hidden = conn.execute(
                f"SELECT title, {'COALESCE(hidden, 0)' if hidden else '0'} FROM sessions WHERE id = ?",
                (sid,)).fetchone()
            unhidden = []
            if pinned and hidden and not (is_hidden and title == CANONICAL_BOT_CHAT_TITLE):
                # A pin means "keep this visible": a pinned row that stayed hidden would be listed nowhere.
                unhidden = [r[0] for r in conn.execute(
                    f"SELECT id FROM sessions WHERE hidden <> 0 AND id IN ({ph(lineage)})", lineage)]
                conn.execute(f"UPDATE sessions SET hidden = 0 WHERE id IN ({ph(lineage)})", lineage)
            out.append({"id": sid, "title": title, "lineage": lineage, "unhidden": unhidden})
    return out


def pinned_sessions(store: Store, now: float | None = None) -> list[dict[str, Any]]:
    """One entry per pinned conversation (compression lineage), sorted by id so the list is stable."""
    require_pins(store)
    now = time.time() if now is None else now
    title = "COALESCE(NULLIF(tip.title, ''), root.title)" if store.has_column("sessions", "title") else "NULL"
    count = "COALESCE(tip.message_count, 0)" if store.has_column("sessions", "message_count") else "0"
    out = []
    with store.snapshot():
        lineage.build(store, now)
        for row in store.rows(f"""
                SELECT c.tip AS id, {title} AS title, root.source AS source, c.last_active AS last_active,
                       {count} AS message_count, c.archived AS archived, c.key AS key
                FROM maint_c c JOIN sessions tip ON tip.id = c.tip JOIN sessions root ON root.id = c.key
                WHERE c.pinned ORDER BY c.tip"""):
            row["archived"] = bool(row["archived"])
            row["session_ids"] = [r[0] for r in store.conn.execute(
                "SELECT id FROM maint_s WHERE chain = ? AND pinned ORDER BY id", (row.pop("key"),))]
            out.append(row)
        lineage.drop(store)
    return out


# -- the commands, one store each -----------------------------------------------

def delete_session(target: StoreTarget, ref: str, dry_run: bool, op: Operator, *,
                   include_pinned: bool = False) -> dict[str, Any]:
    """``hermes-maint delete``: plan, show what goes, ask, delete in one transaction; the report."""
    with open_store(target.path, readonly=dry_run) as store:  # a preview works on a read-only store
        plan = plan_delete(store, ref, exact=not op.asks,  # no confirmation: a whole id, never a prefix
                           include_pinned=include_pinned)
        s = plan.sessions[plan.session_id]
        report = {"store": str(target.path), "dry_run": dry_run, "session_id": plan.session_id,
                  "session_ids": plan.ids, "children": plan.children, "messages": plan.messages,
                  "warnings": plan.warnings, "deleted": [],
                  "session_files": session_files(target.path, plan.ids) if dry_run else [], "removed_files": []}
        if dry_run:
            return report
        op.confirm(f"Delete {len(plan.ids)} session(s), {plan.messages} messages?", [
            f"{plan.session_id}  {s.title or '(untitled)'}  {s.source}, {s.message_count} messages, "
            f"last active {fmt_time(s.last_active)}",
            *[f"  + delegate child {c} ({plan.sessions[c].source}, {plan.sessions[c].message_count} messages)"
              for c in plan.children]], warnings=plan.warnings)
        report["deleted"] = execute_delete(store, plan)
        report["removed_files"] = plan.removed_files
        return report


@dataclass(frozen=True)
class RenameRequest:
    """``hermes-maint rename``'s arguments; the title is checked against Hermes's rules when it is made."""

    session_id: str
    title: str

    def __post_init__(self) -> None:
        sanitize_title(self.title)  # bad input is refused before any store is opened


def rename_session(target: StoreTarget, req: RenameRequest) -> dict[str, Any]:
    """``hermes-maint rename`` on one store: the new title, the previous one (to undo) and where it came from."""
    with open_store(target.path) as store:
        return {"store": str(target.path), **rename(store, req.session_id, req.title)}


def pin_sessions(target: StoreTarget, refs: list[str], pinned: bool, op: Operator | None = None) -> dict[str, Any]:
    """``hermes-maint pin`` / ``unpin`` on one store (*op*: who confirms an unpin named by a prefix)."""
    with open_store(target.path) as store:
        return {"store": str(target.path), "pinned": pinned, "sessions": set_pinned(store, refs, pinned, op)}


def pinned_report(target: StoreTarget) -> dict[str, Any]:
    """``hermes-maint pinned`` on one store, read-only."""
    with open_store(target.path, readonly=True) as store:
        return {"store": str(target.path), "pinned": pinned_sessions(store)}
