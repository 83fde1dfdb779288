"""discard: acknowledge gateway turns lost in a crash, so the session can be continued.

Where upstream records them: the gateway runtime's admission ledger in state.db
(``hermes_state_runtime.py``). Every input the gateway admits for a session is a
``session_admissions`` row (``queued`` → ``started`` → ``terminal``); when a new
gateway epoch starts, ``recover_session_inputs`` marks each ``started`` row of a
dead owner ``unknown`` (its outcome cannot be known, and it is never replayed), and
its worker rows in ``worker_executions`` ``unknown`` too. An ``unknown`` row blocks
the session's queue (``claim_session_input`` raises ``unknown_execution``) until an
operator acknowledges it.

The acknowledgement is upstream's ``resolve_unknown_session_input``, done here in
one ``BEGIN IMMEDIATE`` transaction that re-reads each row: the admission must still
be ``unknown`` with the generation shown; its workers of that generation and owner
epoch (on the logical session and on the last session of its lineage) become
``terminal``; the admission becomes ``terminal`` with outcome ``interrupted``; the
session's ``runtime_revision`` is bumped. The lost input stays on record and is
never requeued; inputs queued behind it run afterwards. Upstream's gateway also
runs an in-process hook at that moment (its classic-output cleanup); that hook is
the running gateway's, and a gateway started later finds the row settled.

Layouts without the ledger (hermes-agent 0.19.0's schema 22, the v30/v31 layouts
without the gateway runtime) have no lost turns to acknowledge: refused with a
one-line reason. A session with a turn or compression in progress (a live lease)
is refused: the turn holding it is not lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from maint import json_text
from maint.errors import MaintError, UsageError
from maint.store import guard
from maint.store.catalog import resolve_session
from maint.store.connection import Store, open_store
from maint.store.sqlutil import ph

if TYPE_CHECKING:
    from maint.flow import Operator
    from maint.store.targets import StoreTarget

LEDGER = "session_admissions"
LOST = "unknown"
ADMISSION_COLUMNS = ("admission_id", "target_session_id", "lineage_json", "status", "generation", "owner_epoch")
PREVIEW = 60

# The admissions of one session: named as its FIFO owner, or carried in its lineage (a continuation).
_OF_SESSION = ("(a.target_session_id = :sid OR EXISTS (SELECT 1 FROM json_each(CASE WHEN json_valid(a.lineage_json) "
               "THEN a.lineage_json ELSE '[]' END) WHERE value = :sid))")


def require_ledger(store: Store) -> None:
    """Refuse a layout without upstream's gateway admission ledger, naming what is missing."""
    missing = [c for c in ADMISSION_COLUMNS if not store.has_column(LEDGER, c)] if store.has_table(LEDGER) else None
    if missing is None:
        raise MaintError(f"{store.path}: this store's schema (version {store.schema_version}) has no gateway "
                         f"admission ledger ({LEDGER}, written by Hermes's gateway runtime), so it holds no lost "
                         "turns to discard; nothing was changed")
    if missing:
        raise MaintError(f"{store.path}: {LEDGER} lacks {', '.join(missing)}: a ledger layout this hermes-maint "
                         "does not know; nothing was changed")


def _preview(payload_json: Any) -> str:
    try:
        payload = json_text.loads(payload_json) if isinstance(payload_json, str) else None
    except ValueError:
        payload = None
    text = payload.get("text") if isinstance(payload, dict) else None
    if not isinstance(text, str):
        return ""
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW else text[:PREVIEW - 1] + "…"


def resolve_target(store: Store, ref: str, *, exact: bool) -> str:
    """ID|TITLE: the shared resolution (:func:`maint.store.catalog.resolve_session`, with titles), the same in
    every mode: a whole id, else an exact title, else a unique id prefix (only where a confirmation shows the
    whole id)."""
    return resolve_session(store, ref, exact=exact, titles=True)


def _rows(store: Store, sid: str) -> list[dict[str, Any]]:
    cols = ", ".join(f"a.{c}" for c in ("admission_id", "status", "generation", "owner_epoch", "target_session_id",
                                         "lineage_json"))
    extra = ", ".join(f"a.{c}" for c in ("intent", "payload_json") if store.has_column(LEDGER, c))
    order = "a.seq" if store.has_column(LEDGER, "seq") else "a.rowid"
    return store.rows(f"SELECT {cols}{', ' + extra if extra else ''} FROM {LEDGER} a WHERE {_OF_SESSION} "
                      f"ORDER BY {order}", {"sid": sid})


@dataclass
class DiscardPlan:
    session_id: str
    lost: list[dict[str, Any]]  # the unknown admissions chosen, as shown
    waiting: list[str]  # queued admissions that run once nothing lost is left

    def as_dicts(self) -> list[dict[str, Any]]:
        return [{"admission_id": r["admission_id"], "generation": r["generation"], "intent": r.get("intent"),
                 "text": _preview(r.get("payload_json"))} for r in self.lost]


def plan_discard(store: Store, ref: str, admissions: list[str], *, exact: bool) -> DiscardPlan:
    require_ledger(store)
    with store.snapshot():
        sid = resolve_target(store, ref, exact=exact)
        rows = _rows(store, sid)
    by_id = {r["admission_id"]: r for r in rows}
    lost = [r for r in rows if r["status"] == LOST]
    if admissions:
        chosen = []
        for aid in dict.fromkeys(admissions):
            row = by_id.get(aid)
            if row is None:
                raise UsageError(f"--admission {aid!r}: no admission of session {sid} has that id (expected one "
                                 f"of its lost turns: {', '.join(r['admission_id'] for r in lost) or 'it has none'})")
            if row["status"] != LOST:
                raise UsageError(f"--admission {aid!r}: that turn is {row['status']}, not lost (only an unknown "
                                 "turn lost in a gateway crash can be discarded); nothing was changed")
            chosen.append(row)
        lost = chosen
    waiting = [r["admission_id"] for r in rows if r["status"] == "queued"]
    return DiscardPlan(session_id=sid, lost=lost, waiting=waiting)


def execute_discard(store: Store, plan: DiscardPlan) -> list[str]:
    """Upstream's ``resolve_unknown_session_input`` for each planned admission, all in one transaction."""
    revision = store.has_column("sessions", "runtime_revision")
    workers = store.has_table("worker_executions")
    done: list[str] = []
    with store.write() as conn:
        locked = guard.busy(store, [plan.session_id], active=False)
        if locked:
            raise MaintError(f"refusing to discard on {plan.session_id}: {locked[plan.session_id]} (that turn is "
                             "not lost); wait until it finishes; nothing was changed")
        for shown in plan.lost:
            aid = shown["admission_id"]
            row = conn.execute(f"SELECT status, generation, owner_epoch, target_session_id, lineage_json FROM {LEDGER} "
                               "WHERE admission_id = ?", (aid,)).fetchone()
            if row is None or row[0] != LOST or row[1] != shown["generation"]:
                raise MaintError(f"admission {aid} changed since it was shown (a gateway settled or adopted it); "
                                 "nothing was changed, run discard again to see what is lost now")
            _, generation, owner_epoch, target, lineage_json = row
            if workers:
                try:
                    lineage = json_text.loads(lineage_json) if lineage_json else []
                except ValueError:
                    lineage = []
                last = lineage[-1] if isinstance(lineage, list) and lineage and isinstance(lineage[-1], str) else target
                targets = list(dict.fromkeys([target, last]))
                conn.execute(f"UPDATE worker_executions SET status = 'terminal' WHERE session_id IN ({ph(targets)}) "
                             "AND generation = ? AND owner_epoch = ?", [*targets, generation, owner_epoch])
            conn.execute(f"UPDATE {LEDGER} SET status = 'terminal', outcome = 'interrupted' WHERE admission_id = ?",
                         (aid,))
            if revision:
                conn.execute("UPDATE sessions SET runtime_revision = runtime_revision + 1 WHERE id = ?", (target,))
            done.append(aid)
    return done


def discard_store(target: StoreTarget, ref: str, admissions: list[str], op: Operator, *,
                  dry_run: bool = False) -> dict[str, Any]:
    """``hermes-maint discard`` on one store: the lost turns of one session; unless *dry_run*, once the
    operator agrees, each acknowledged (terminal, outcome interrupted)."""
    with open_store(target.path, readonly=dry_run) as store:
        plan = plan_discard(store, ref, admissions, exact=not op.asks)  # --yes: a whole id or a title
        report: dict[str, Any] = {"store": str(target.path), "dry_run": dry_run, "session_id": plan.session_id,
                                  "lost": plan.as_dicts(), "waiting": plan.waiting, "discarded": []}
        if dry_run or not plan.lost:
            return report
        op.confirm(f"Discard {len(plan.lost)} lost turn(s) of session {plan.session_id}?", [
            *[f"  {a['admission_id']}  {a['intent'] or 'queue'}  {a['text'] or '(no text)'}" for a in report["lost"]],
            "The lost input stays on record; part of what it asked for may already have run: check its effects "
            "before sending it again.",
            *([f"{len(plan.waiting)} input(s) queued behind it run once nothing lost is left."]
              if plan.waiting else [])])
        report["discarded"] = execute_discard(store, plan)
        return report
