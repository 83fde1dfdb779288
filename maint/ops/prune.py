"""prune: delete ended sessions, whole lineages at a time.

What it may touch: rows of ``sessions``, ``messages`` (the FTS indexes follow
through Hermes's own triggers), ``session_model_usage`` and expired
``compression_locks`` of the sessions it deletes, ``system_prompts`` rows no
session references any more, and ``parent_session_id`` of surviving children
(delegate, branch and reset children outside the selection are kept and orphaned, as Hermes does, never
deleted).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import apsw

from maint.fmt import fmt_bytes, fmt_time
from maint.store import batching, lineage
from maint.store.batching import Applied, Batcher, paced_writes, target_from_env
from maint.store import guard
from maint.store.fts_index import (META_KEY as FTS_AUTOMERGE_KEY, NOTE_KEY as FTS_DETACHED_KEY, detaching,
                                   merges_in_our_hands, put_back_left_over, restore_left_over)
from maint.selection.filters import DEFAULT_PRUNE_DAYS, Filters, implicit_prune_filters
from maint.store.sqlutil import IdList, Paged, chunks, ph
from maint.store.connection import Store, busy_timeout_from_env, open_store
from maint.store.delete import (SLOWEST_S_PER_MESSAGE, SessionFileRemover, delete_sessions, max_unit_seconds,
                                 session_files)
from maint.store.text_check import unreadable_id_sql, unreadable_ids

if TYPE_CHECKING:
    from maint.flow import Operator
    from maint.store.targets import StoreTarget

PLAN_TABLES = ("maint_pc", "maint_sb", "maint_vis", "maint_um", "maint_unit")


@dataclass
class Unit:
    """One atomic deletion: a compression chain (its delegate children are units of their own)."""

    session_ids: list[str]
    messages: int = 0
    # where its rows sit: deleting in rowid order keeps each batch's pages (and FTS doclists) together
    first_message_id: int | None = None
    # fingerprint re-checked inside the write transaction
    last_message_at: dict[str, float | None] = field(default_factory=dict)
    pinned_ok: bool = False  # prune --include-pinned: a pin does not stop it


def _unit_loader(store: Store, generation: int, pinned_ok: bool = False) -> Callable[[int, int], list[Unit]]:
    """Units ``start <= ord < stop`` from ``temp.maint_unit``, for :class:`Paged`.

    The plan lives in temp tables on the store's connection; a later plan on the same connection
    replaces them, and an older plan then refuses to be read.
    """

    def load(start: int, stop: int) -> list[Unit]:
        if store.plan_generation != generation:
            raise RuntimeError("this plan was replaced by a later one on the same store")
        units: dict[int, Unit] = {}
        for ord_, messages, first, sid, last in store.conn.execute(
                "SELECT u.ord, u.messages, u.first_mid, m.id, m.last_message_at "
                "FROM maint_unit u JOIN maint_um m ON m.unit = u.key "
                "WHERE u.ord >= ? AND u.ord < ? ORDER BY u.ord, m.depth, m.first_rid, m.started_at, m.id",
                (start, stop)):
            unit = units.get(ord_)
            if unit is None:
                unit = units[ord_] = Unit(session_ids=[], messages=messages, first_message_id=first,
                                          pinned_ok=pinned_ok)
            unit.session_ids.append(sid)
            unit.last_message_at[sid] = last
        return [units[i] for i in sorted(units)]

    return load


@dataclass
class PrunePlan:
    units: Paged[Unit]  # in deletion order, read from the temp tables a page at a time
    filters: Filters
    implicit_days: float | None
    held_back: dict[str, int]
    sessions: int  # how many sessions the units hold
    messages: int
    store: Store
    planned_at: float = 0.0  # wall clock when planning began: a session started later is new
    include_pinned: bool = False

    @property
    def session_ids(self) -> IdList:
        return IdList(self.iter_session_ids())

    def iter_session_ids(self) -> Iterator[str]:
        """Every planned session, unit by unit in deletion order (streamed from the temp tables)."""
        for unit in self.units:
            yield from unit.session_ids

    def extreme(self, newest: bool) -> dict[str, Any] | None:
        """The planned session active least (or most) recently: ``{id, last_active}``."""
        order = "DESC" if newest else "ASC"
        row = self.store.conn.execute(f"SELECT id, last_active FROM maint_um "
                                      f"ORDER BY last_active {order}, id {order} LIMIT 1").fetchone()
        return {"id": row[0], "last_active": row[1]} if row else None


def plan_prune(store: Store, filters: Filters | None, *, include_archived: bool = False,
               include_pinned: bool = False, now: float | None = None,
               keep: frozenset[str] = frozenset()) -> PrunePlan:
    """Choose what goes. ``filters`` empty/None = the bare rule: inactive >= 90 days.

    Upstream's family rule (``prune_sessions``: "children outside the window are orphaned, not
    cascade-deleted"): every compression chain is judged on its own, delegate (subagent), branch and
    reset children included. A chain goes when every segment matches the filters and none is open,
    pinned (unless *include_pinned*), locked (a turn or compression in progress), archived (unless
    *include_archived*) or in *keep* (just reaped). A child outside the selection stays and loses its
    parent link when its parent goes (:func:`maint.store.delete.delete_sessions`); a parent outside
    the selection stays with its selected children gone. A chain that matched only partly counts as
    ``lineage_live`` (the doc: earlier segments stay while a later one stays, and the conversation
    goes as a whole); one that matched whole but was held back counts under its first segment's
    reason. All of it runs in SQLite over temp tables (see :mod:`maint.store.lineage`); the plan is
    read back a page at a time. The rules are written out in ``docs/prune-rules.md``.
    """
    planned_at = time.time()
    now = time.time() if now is None else now
    store.refuse_unknown_references()  # before planning, so --dry-run says it too
    implicit = None
    if filters is None or filters.is_empty:
        filters, implicit = implicit_prune_filters(now), DEFAULT_PRUNE_DAYS
    conn = store.conn
    with store.planning():
        lineage.build(store, now, filters, keep)
        for table in PLAN_TABLES:
            conn.execute(f"DROP TABLE IF EXISTS temp.{table}")
        conn.execute("CREATE TEMP TABLE maint_pc (key TEXT PRIMARY KEY, status TEXT) WITHOUT ROWID")
        conn.execute(f"""INSERT INTO maint_pc
            SELECT chain, CASE WHEN SUM(matched) = 0 THEN NULL WHEN SUM(matched) < COUNT(*) THEN 'lineage_live'
                               ELSE COALESCE(MAX(first_reason), 'ok') END
            FROM (SELECT chain, matched,
                         FIRST_VALUE(reason) OVER (PARTITION BY chain ORDER BY reason IS NULL, started_at, id)
                             AS first_reason
                  FROM (SELECT chain, matched, started_at, id,
                               CASE WHEN {unreadable_id_sql('maint_s')} THEN 'id_not_utf8'
                                    WHEN keep THEN 'just_reaped' WHEN ended_at IS NULL THEN 'open'
                                    WHEN pinned AND NOT :pinned_ok THEN 'pinned' WHEN locked THEN 'in_progress'
                                    WHEN archived AND NOT :archived_ok THEN 'archived' END AS reason
                        FROM maint_s))
            GROUP BY chain""", {"archived_ok": int(include_archived), "pinned_ok": int(include_pinned)})
        held = {reason: n for reason, n in conn.execute(
            "SELECT status, COUNT(*) FROM maint_pc WHERE status IS NOT NULL AND status <> 'ok' GROUP BY status")}
        # Each taken chain is a unit of its own: its delegate children are judged as chains of their own.
        conn.execute("""CREATE TEMP TABLE maint_um AS
            SELECT p.key AS unit, 0 AS depth, c.first_rid, s.id, s.started_at, s.last_active, s.last_message_at,
                   0 AS messages, NULL AS first_mid
            FROM maint_pc p JOIN maint_c c ON c.key = p.key JOIN maint_s s ON s.chain = p.key
            WHERE p.status = 'ok'""")
        conn.execute("CREATE INDEX temp.maint_um_unit ON maint_um(unit)")
        conn.execute("""UPDATE maint_um SET messages = c.n, first_mid = c.first FROM (
                SELECT session_id, COUNT(*) AS n, MIN(id) AS first FROM messages
                WHERE session_id IN (SELECT id FROM maint_um) GROUP BY session_id) c
            WHERE c.session_id = maint_um.id""")
        # Physical order, not age order: a batch of neighbours rewrites a few shared pages and writes small
        # FTS tombstone segments; scattered sessions rewrite a page (and a doclist) each (measured: about
        # 30 % fewer WAL frames and 25 % less time on a 200k-message store).
        conn.execute("""CREATE TEMP TABLE maint_unit AS
            SELECT ROW_NUMBER() OVER (ORDER BY COALESCE(first_mid, -1), unit) - 1 AS ord, unit AS key,
                   n, messages, first_mid
            FROM (SELECT unit, COUNT(*) AS n, SUM(messages) AS messages, MIN(first_mid) AS first_mid
                  FROM maint_um GROUP BY unit)""")
        conn.execute("CREATE UNIQUE INDEX temp.maint_unit_ord ON maint_unit(ord)")
        units, sessions, messages = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(n), 0), COALESCE(SUM(messages), 0) FROM maint_unit").fetchone()
    store.plan_generation += 1
    return PrunePlan(units=Paged(units, _unit_loader(store, store.plan_generation, include_pinned)),
                     filters=filters, implicit_days=implicit, held_back=held, sessions=sessions, messages=messages,
                     store=store, planned_at=planned_at, include_pinned=include_pinned)


def plan_stored_bytes(store: Store) -> int:
    """Bytes of message text the planned deletion removes (see :func:`stored_bytes`)."""
    return store.scalar(f"SELECT COALESCE(SUM({_text_bytes(store)}), 0) FROM messages "
                        "WHERE session_id IN (SELECT id FROM maint_um)") or 0


def _text_bytes(store: Store) -> str:
    cols = [c for c in ("content", "tool_calls", "reasoning", "reasoning_content", "api_content")
            if store.has_column("messages", c)]
    return " + ".join(f"COALESCE(LENGTH(CAST({c} AS BLOB)), 0)" for c in cols) or "0"


def stored_bytes(store: Store, ids: list[str]) -> int:
    """Bytes of message text the deletion removes (content, tool calls, reasoning)."""
    expr = _text_bytes(store)
    total = 0
    for chunk in chunks(ids):
        total += store.scalar(f"SELECT COALESCE(SUM({expr}), 0) FROM messages WHERE session_id IN ({ph(chunk)})",
                              chunk) or 0
    return total


def interrupted(store: Store) -> list[str]:
    """What a prune killed midway left for the next run to put back (read only; [] when nothing)."""
    if not store.has_table("state_meta"):
        return []
    left = []
    if store.get_meta(FTS_AUTOMERGE_KEY) is not None:
        left.append("FTS5 automerge held at 0 (Hermes's value is kept in state_meta)")
    if store.get_meta(FTS_DETACHED_KEY) is not None:
        left.append("a conversation's messages out of the search index ahead of a delete that did not happen")
    return left


def recover_interrupted(store: Store) -> None:
    """Put back what a prune killed midway left for the next run (our run lock is held, so it is not running):
    Hermes's FTS5 ``automerge``, and a conversation's messages taken out of the index ahead of its delete."""
    restore_left_over(store)
    put_back_left_over(store)


@dataclass
class PruneResult:
    deleted_ids: IdList
    messages: int
    skipped_changed: list[str]
    transactions: int
    longest_lock_s: float
    skipped_too_big: list[str] = field(default_factory=list)
    # Stopped early by the job loop's signal: (units reached, units planned); None when it ran to the end.
    stopped: tuple[int, int] | None = None
    removed_files: list[str] = field(default_factory=list)  # Hermes's files of the deleted sessions
    # Units a search index out of step with their messages refused (SQLITE_CORRUPT_VTAB from FTS5 through
    # Hermes's delete trigger): kept whole, named, and the run goes on; the first error's text.
    skipped_out_of_step: list[str] = field(default_factory=list)
    out_of_step: str | None = None


# A unit is deleted in one transaction, so the lock is held for all of its messages. Hermes's
def check_settings() -> None:
    """Read every setting a bulk delete uses, so a bad one is refused before anything is written."""
    max_unit_seconds(), target_from_env(), busy_timeout_from_env()


def execute_prune(store: Store, plan: PrunePlan, *, batcher: Batcher | None = None,
                  on_progress: Callable[[int], None] | None = None) -> PruneResult:
    if not len(plan.units):  # FTS5's setting stays as it is (after a crashed run's is put back)
        restore_left_over(store)
        return PruneResult(deleted_ids=IdList(), messages=0, skipped_changed=[], transactions=0,
                           longest_lock_s=store.write_stats.longest_hold_s)
    deleted = IdList()  # sessions whose delete has committed
    changed: list[str] = []
    too_big: list[str] = []
    max_unit_s = max_unit_seconds()
    msgs = [0]
    transactions = [0]  # ours that delete or merge, not the two that hold and give back FTS5's automerge
    batcher = batcher or Batcher()

    def transaction():
        transactions[0] += 1
        return store.write()

    def too_long(unit: Unit) -> bool:
        # A unit that leaves the index first (detacher) holds the lock for much less than the run's rate says.
        per_message = SLOWEST_S_PER_MESSAGE if detacher is not None else max(SLOWEST_S_PER_MESSAGE, 1 / batcher.rate)
        if unit.messages * per_message <= max_unit_s:
            return False
        return writes.others() != 0  # None: nobody can say no one else has it open

    def lighten(unit: Unit) -> Callable[[], bool] | None:
        """A unit too big for one transaction leaves the FTS indexes first (see maint.store.fts_index),
        unless it is to be held back or has changed since planning."""
        planned = {sid: unit.last_message_at.get(sid) for sid in unit.session_ids}
        if detacher is None or too_long(unit) or guard.changed_since_plan(
                store, planned, plan.planned_at, time.time(), pinned_ok=plan.include_pinned):
            return None
        return detacher.start(unit.session_ids)

    out_of_step: list[str] = []
    out_of_step_reason: list[str] = []

    def deletable(units: list[Unit]) -> list[Unit]:
        """Delete *units* in the transaction in flight; the ones deleted. A unit whose delete a search index out
        of step with its messages refuses is left whole (its own savepoint rolled back) and named, and the
        others go on (hostile try 5, H6): one bad unit never blocks the rest of a store."""
        try:
            with savepoint(store.conn):
                delete_sessions(store, store.conn, [sid for u in units for sid in u.session_ids])
            return units
        except apsw.CorruptError as exc:
            if exc.extendedresult != apsw.SQLITE_CORRUPT_VTAB:
                raise
        done = []
        for u in units:  # one at a time, only after a refusal: the healthy ones still go
            try:
                with savepoint(store.conn):
                    delete_sessions(store, store.conn, list(u.session_ids))
                done.append(u)
            except apsw.CorruptError as exc:
                if exc.extendedresult != apsw.SQLITE_CORRUPT_VTAB:
                    raise
                out_of_step.extend(u.session_ids)
                out_of_step_reason[:] = out_of_step_reason or [str(exc).split(": ", 1)[-1]]
        return done

    in_flight: list[str] = []  # deleted by the transaction in flight: counted, and their files go, once it commits
    removed_files: list[str] = []
    reached = [0]  # units handed to apply: fewer than planned only when the run was cancelled

    def weight(unit: Unit) -> int:
        return unit.messages + len(unit.session_ids)

    def apply(chunk: list[Unit]) -> Applied:
        reached[0] += len(chunk)
        held = [u for u in chunk if too_long(u)]
        too_big.extend(sid for u in held for sid in u.session_ids)
        chunk = [u for u in chunk if not any(u is h for h in held)]
        # read-checked inside the write transaction: a unit goes whole or not at all
        planned = {sid: u.last_message_at.get(sid) for u in chunk for sid in u.session_ids}
        moved = guard.changed_since_plan(store, planned, plan.planned_at, time.time(),
                                         pinned_ok=plan.include_pinned)
        ok = [u for u in chunk if moved.isdisjoint(u.session_ids)]
        changed.extend(sid for u in chunk if not moved.isdisjoint(u.session_ids) for sid in u.session_ids)
        ok = deletable(ok)
        ids = [sid for u in ok for sid in u.session_ids]
        in_flight.extend(ids)
        if detacher is not None and detacher.out([sid for u in chunk for sid in u.session_ids]):
            detacher.settle(store.conn, deleted=detacher.out(ids))
        msgs[0] += sum(u.messages for u in ok)
        # held-back and changed units cost a lookup, not a delete: counted as work they made the rate 10^8 a
        # second and the next chunk a 3.8 s delete (the 420k scale bench)
        return Applied(len(ids), sum(weight(u) for u in ok))

    with paced_writes(store) as writes, \
            merges_in_our_hands(store, target_s=batcher.target_s, pause=writes.pause) \
            as merge_step, \
            detaching(store, piece=int(batcher.chunk_load), target_s=batcher.target_s, pause=writes.pause) \
            as detacher, SessionFileRemover(store) as remover:  # the folder's request dumps listed once per run
        def after_commit() -> None:
            removed_files.extend(remover.remove(in_flight))
            deleted.extend(in_flight)
            in_flight.clear()

        def upkeep() -> bool:
            """What earlier transactions left: a given-up conversation going back into the index, then merges."""
            if detacher is not None and detacher.give_back_step():
                return True
            return merge_step() if merge_step is not None else False

        writes.run_batches(plan.units, weight, apply, transaction,
                           batcher=batcher, on_progress=on_progress, after_commit=after_commit,
                           upkeep=upkeep if merge_step is not None or detacher is not None else None, lighten=lighten)
    stopped = (reached[0], len(plan.units)) if reached[0] < len(plan.units) else None
    return PruneResult(deleted_ids=deleted, messages=msgs[0], skipped_changed=changed,
                       transactions=transactions[0],
                       longest_lock_s=store.write_stats.longest_hold_s, skipped_too_big=too_big,
                       removed_files=removed_files, stopped=stopped, skipped_out_of_step=out_of_step,
                       out_of_step=out_of_step_reason[0] if out_of_step_reason else None)


@contextlib.contextmanager
def savepoint(conn, name: str = "hermes_maint_unit") -> Iterator[None]:
    """A savepoint inside the transaction in flight: released on success, rolled back (and released) when the
    body raises, so the transaction goes on without what the body did."""
    conn.execute(f"SAVEPOINT {name}")
    try:
        yield
    except BaseException:
        with contextlib.suppress(apsw.Error):  # an error that ended the whole transaction took the savepoint too
            conn.execute(f"ROLLBACK TO {name}")
            conn.execute(f"RELEASE {name}")
        raise
    conn.execute(f"RELEASE {name}")


@dataclass(frozen=True)
class PruneRequest:
    """``hermes-maint prune``'s options; every setting a bulk delete reads is checked when it is made."""

    filters: Filters = field(default_factory=Filters)
    include_archived: bool = False
    include_pinned: bool = False
    dry_run: bool = False

    def __post_init__(self) -> None:
        check_settings()


def prune_store(target: StoreTarget, req: PruneRequest, op: Operator) -> dict[str, Any]:
    """Plan, ask, delete in paced transactions: the report of one store's prune."""
    with open_store(target.path, readonly=req.dry_run) as store:  # a preview works on a read-only store
        plan = plan_prune(store, req.filters, include_archived=req.include_archived,
                          include_pinned=req.include_pinned)
        count = plan.sessions
        report = {
            "store": str(target.path), "dry_run": req.dry_run, "matched": count, "session_ids": [],
            "messages": plan.messages, "implicit_days": plan.implicit_days, "held_back": plan.held_back,
            "oldest": plan.extreme(newest=False), "newest": plan.extreme(newest=True),
            "session_files": [], "removed_files": [], "ids_not_utf8": unreadable_ids(store),
        }
        # Text size is read only when someone will look at it (preview or prompt).
        report["bytes"] = plan_stored_bytes(store) if (req.dry_run or op.asks) else None
        if req.dry_run or not count:
            if not req.dry_run and not op.asks:
                # Nothing to delete, but what a killed run left goes back (the delete itself does this first).
                recover_interrupted(store)
            report.update(deleted=0, transactions=0, longest_lock_ms=0.0, skipped_changed=[], skipped_too_big=[],
                          removed_files=[], skipped_out_of_step=[], out_of_step=None)
            if req.dry_run:
                report["session_ids"] = plan.session_ids
                report["session_files"] = session_files(target.path, plan.session_ids)
            return report
        o, n = report["oldest"], report["newest"]
        op.confirm(f"Delete {count} sessions ({plan.messages} messages)?", [
            f"{count} sessions, {plan.messages} messages, {fmt_bytes(report['bytes'] or 0)} of stored text",
            f"  oldest: {o['id']} (last active {fmt_time(o['last_active'])})",
            f"  newest: {n['id']} (last active {fmt_time(n['last_active'])})",
        ])
        with op.progress(len(plan.units), "Pruning") as tick:
            result = execute_prune(store, plan, on_progress=tick)
        report.update(
            session_ids=result.deleted_ids, matched=len(result.deleted_ids), messages=result.messages,
            deleted=len(result.deleted_ids), transactions=result.transactions,
            longest_lock_ms=round(result.longest_lock_s * 1000, 1), skipped_changed=result.skipped_changed,
            skipped_too_big=result.skipped_too_big, removed_files=result.removed_files,
            skipped_out_of_step=result.skipped_out_of_step, out_of_step=result.out_of_step,
        )
        if result.stopped is not None:  # the job loop's SIGTERM/SIGINT: the history row says so too
            report.update(status="stopped", planned=count, stopped_by=batching.cancel_signal(),
                          units_done=result.stopped[0], units_planned=result.stopped[1])
        return report
