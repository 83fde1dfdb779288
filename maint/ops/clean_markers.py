"""clean-markers: clear the bare tool-call marker text (``[memory]``) older Hermes persisted as assistant content.

Upstream's ``hermes sessions clean-markers`` (``purge_stale_tool_call_markers``, #78148): an assistant
row that carries tool calls and whose whole content, stripped, is one bracketed name (``[memory]``,
``[skill_manage]``) has that content set to the empty string. Only ``content`` changes; the role, the
tool calls and every other column stay, so tool-call pairing is unaffected. Hermes already hides these
rows on every load; clearing them is optional and permanent, so as upstream a snapshot of the store is
taken first (``--no-backup`` skips it; here it is a verified snapshot in the snapshot folder, kind
``pre-clean-markers``, which ``restore`` lists, rather than upstream's ``VACUUM INTO`` beside the store).

Search stays right: the rows are changed in one ``BEGIN IMMEDIATE`` transaction through Hermes's own
full-text triggers. A store whose index has no update trigger (a layout reduced to insert and delete
triggers) gets, for that transaction only, temporary triggers made of its own delete and insert
triggers, so the index drops the old text and takes the new exactly as Hermes would write it.
"""

from __future__ import annotations

import json

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from maint.errors import MaintError
from maint.ops.fts import EXPECTED, mentions
from maint.store.connection import Store, open_store
from maint.store.sqlutil import ph

if TYPE_CHECKING:
    from maint.flow import Operator
    from maint.store.targets import StoreTarget

# Upstream's _STALE_TOOL_CALL_MARKER_RE (run_agent.py / hermes_state): a bare protocol or tool-name marker.
MARKER = re.compile(r"^\[[A-Za-z_][A-Za-z0-9_.-]*\]$")
CANDIDATES_SQL = ("SELECT id, session_id, content FROM messages "
                  "WHERE role = 'assistant' AND tool_calls IS NOT NULL AND tool_calls != '' "
                  "AND typeof(content) = 'text' AND instr(content, '[') > 0")
SHOWN = 20

_TRIGGER = re.compile(r"AFTER\s+(INSERT|DELETE|UPDATE)\b.*?\bON\s+(?:main\.)?\"?messages\"?\s*(?:FOR\s+EACH\s+ROW\s*)?"
                      r"(?:WHEN\s+(.*?))?\s*BEGIN\s+(.*?)\s*END\s*$", re.I | re.S)


def is_marker(content: Any) -> bool:
    return isinstance(content, str) and MARKER.fullmatch(content.strip()) is not None


def find_markers(store: Store) -> list[dict[str, Any]]:
    """Every assistant tool-call row whose content is a bare marker: ``{id, session_id, content}``, by id."""
    return [{"id": r[0], "session_id": r[1], "content": r[2]}
            for r in store.conn.execute(CANDIDATES_SQL + " ORDER BY id") if is_marker(r[2])]


@dataclass
class _Trigger:
    kind: str
    when: str | None
    body: str
    name: str = ""


def _message_triggers(store: Store) -> list[_Trigger]:
    out = []
    for name, sql in store.conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages'"):
        m = _TRIGGER.search(sql or "")
        if m:
            out.append(_Trigger(m.group(1).upper(), m.group(2), m.group(3), str(name)))
    return out


def index_plan(store: Store) -> list[str]:
    """The temporary trigger statements that keep each full-text index right while ``content`` changes:
    none for an index Hermes's own update trigger keeps. Refuses an index it cannot keep."""
    triggers = _message_triggers(store)
    statements = []
    for n, table in enumerate(t for t in EXPECTED if store.has_table(t)):
        if any(t.kind == "UPDATE" and mentions(t.body, table) for t in triggers):
            continue
        delete = [t for t in triggers if t.kind == "DELETE" and mentions(t.body, table)]
        insert = [t for t in triggers if t.kind == "INSERT" and mentions(t.body, table)]
        if len(delete) != 1 or len(insert) != 1:
            raise MaintError(f"{store.path}: the search index {table} has no update trigger and not exactly one "
                             "insert and one delete trigger to keep it with; nothing was changed (run "
                             "hermes-maint repair-fts, or let Hermes open the store to recreate its triggers)")
        d, i = delete[0], insert[0]
        when = " AND ".join(f"({c})" for c in (d.when, i.when) if c)
        body = ";\n".join(s.strip().rstrip(";") for s in (d.body, i.body)) + ";"
        sql = (f"CREATE TEMP TRIGGER maint_clean_markers_{n} AFTER UPDATE OF content ON main.messages"
               f"{' WHEN ' + when if when else ''} BEGIN\n{body}\nEND")
        _check_derived(store, sql, [d.name, i.name])
        statements.append(sql)
    return statements


def _check_derived(store: Store, sql: str, names: list[str]) -> None:
    """The trigger put together from Hermes's delete and insert triggers parses (EXPLAIN compiles it and
    creates nothing). Their text is split by a pattern, which a BEGIN in a string or an END in a comment
    can mislead: such a store is refused, naming the triggers, before anything is written."""
    import apsw

    try:
        store.conn.execute("EXPLAIN " + sql).fetchall()
    except apsw.SQLError:
        raise MaintError(f"{store.path}: cannot derive an update trigger from {' and '.join(names)}; nothing was "
                         "changed (run hermes-maint repair-fts, or let Hermes open the store to recreate its "
                         "triggers)") from None


def clear_markers(store: Store, ids: list[int]) -> list[int]:
    """Clear the rows of *ids* that are still bare markers, in one transaction; the ids cleared."""
    temps = index_plan(store)
    with store.write() as conn:
        try:
            for sql in temps:
                conn.execute(sql)
            # the ids as one JSON parameter: an IN-list of them stopped at SQLite's 32,766 variables (hostile try
            # 11, N5: 84,000 markers, nothing cleaned)
            still = [r[0] for r in conn.execute(
                "SELECT id, content FROM messages WHERE role = 'assistant' AND tool_calls IS NOT NULL "
                "AND tool_calls != '' AND id IN (SELECT value FROM json_each(?))", (json.dumps(ids),))
                if is_marker(r[1])] if ids else []
            for start in range(0, len(still), 500):
                chunk = still[start:start + 500]
                conn.execute(f"UPDATE messages SET content = '' WHERE id IN ({ph(chunk)})", chunk)
        finally:
            for n in range(len(temps)):
                conn.execute(f"DROP TRIGGER IF EXISTS temp.maint_clean_markers_{n}")
    return still


def clean_markers_store(target: StoreTarget, op: Operator, *, dry_run: bool = False,
                        backup: bool = True) -> dict[str, Any]:
    """``hermes-maint clean-markers`` on one store: the rows found; unless *dry_run*, once the operator
    agrees, a snapshot (unless not *backup*) and the rows cleared."""
    with open_store(target.path, readonly=dry_run) as store:
        with store.snapshot():
            found = find_markers(store)
        report: dict[str, Any] = {"store": str(target.path), "dry_run": dry_run, "rows": found,
                                  "rows_found": len(found), "sessions": len({r["session_id"] for r in found}),
                                  "cleared": [], "backup": None}
        if dry_run or not found:
            return report
        index_plan(store)  # a store whose index cannot be kept is refused before the question
        op.confirm(f"Clear {len(found)} stale tool-call marker row(s) in {target.path}?", [
            f"{len(found)} assistant row(s) in {report['sessions']} session(s) whose whole text is a bare "
            "marker; only that text is cleared (tool calls and everything else stay):",
            *[f"  message {r['id']}  session {r['session_id']}  {r['content'].strip()}" for r in found[:SHOWN]],
            *([f"  … {len(found) - SHOWN} more"] if len(found) > SHOWN else []),
            "a snapshot of the store is taken first" if backup else "no snapshot is taken (--no-backup)"])
        if backup:
            from maint.ops.backup import prepare_folder, store_label, take_snapshot

            snap = take_snapshot(target.path, prepare_folder(None, store=target.path),
                                 label=store_label(target.path, target.profile), kind="pre-clean-markers")
            report["backup"] = str(snap.path)
        started = time.monotonic()
        report["cleared"] = clear_markers(store, [r["id"] for r in found])
        report["seconds"] = round(time.monotonic() - started, 3)
        return report
