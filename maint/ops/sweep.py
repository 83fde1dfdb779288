"""The nightly sweep: Hermes's one-time ghost repair, hide idle conversations (when asked), reap orphans, prune
past retention, VACUUM when it pays.

Hermes processes run the same sweep at start-up. Two things keep exactly one
sweeper per interval: the non-blocking flock Hermes takes beside the store,
and Hermes's own ``last_auto_prune`` marker in ``state_meta``, read, compared
and written in one ``BEGIN IMMEDIATE`` transaction before any work starts.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

from maint import json_text
from maint.config import Config
from maint.flow import Operator, target_config
from maint.selection.filters import DEFAULT_PRUNE_DAYS, implicit_prune_filters
from maint.store import batching
from maint.store.holders import HolderReport, find_holders
from maint.store.locks import LockHeld, maintenance_lock
from maint.store.runlock import RunLockHeld
from maint.store.sqlutil import write_json
from maint.ops.diskcheck import low_disk_notice
from maint.ops.ghosts import prune_ghosts_once
from maint.ops.auto_archive import claim_idle_marker, execute_idle_archive, missing_column, plan_idle_archive
from maint.ops.prune import check_settings, execute_prune, plan_prune, recover_interrupted
from maint.ops.reap import reap, reap_candidates
from maint.store.connection import Store, open_store
from maint.ops.vacuum import detect_replication, space_shortfall, vacuum_in_place

if TYPE_CHECKING:
    from maint.store.targets import StoreTarget

log = logging.getLogger("hermes_maint.sweep")

MARKER_KEY = "last_auto_prune"  # Hermes's own key: shared with every Hermes process
VACUUM_KEY = "last_vacuum"  # Hermes's own key: written only after a successful VACUUM
REPORT_KEY = "hermes_maint.last_sweep_report"
# Ours: which claim of the marker was a sweep of ours, and whether that sweep ran to the end.
RUN_KEY = "hermes_maint.sweep_run"
MIN_FREELIST_RATIO = 0.25
# The report kept in state_meta names this many ids per list at most (the printed one names them all): SQLite
# holds a value whole in memory while it writes it, twice over, and a sweep of a 10 GB store prunes 400,000
# sessions (10 MB of ids). The cut lists' full lengths are under ``truncated``, as in the run history.
KEPT_IDS = 10_000


def validate_retention(value: Any) -> int | None:
    """retention_days must be an integer >= 0; anything else means skip this sweep."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _finite_non_negative(value: Any) -> bool:
    """A config number we can compare with: NaN would make every comparison false (and archive everything)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value >= 0


def _number(cfg: Config, key: str, default: float) -> float:
    value = cfg.session(key)
    if not _finite_non_negative(value):
        log.warning("sessions.%s=%r is not a number >= 0; using %s", key, value, default)
        return default
    return float(value)


@dataclass
class Claim:
    claimed: bool
    previous: float | None  # the marker before this claim
    resumed: bool = False  # the marker's last claim was a sweep of ours that did not finish


def _unfinished_run_of_ours(conn, marker: str | None) -> bool:
    row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (RUN_KEY,)).fetchone()
    try:
        run = json_text.loads(row[0]) if row and row[0] else {}
    except ValueError:
        return False
    return isinstance(run, dict) and run.get("marker") == marker and run.get("completed") is False


def claim_marker(store: Store, interval_s: float, now: float, force: bool) -> Claim:
    """Read-compare-write of the shared marker in one write transaction.

    The marker is claimed at the start, as Hermes does, so concurrent starters never both sweep.
    Our own record beside it says whether that claim's sweep finished: a sweep that was killed or
    cancelled part-way is resumed by the next run inside the interval instead of being skipped.
    """
    with store.write() as conn:
        row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (MARKER_KEY,)).fetchone()
        marker = row[0] if row else None
        try:
            previous = float(marker) if marker is not None else None
        except (TypeError, ValueError):
            previous = None  # a corrupt marker counts as no earlier run
        resumed = _unfinished_run_of_ours(conn, marker)
        if previous is not None and not force and not resumed and 0 <= now - previous < interval_s:
            return Claim(False, previous)
        conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)", (MARKER_KEY, str(now)))
        conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)",
                     (RUN_KEY, json.dumps({"marker": str(now), "completed": False})))
        return Claim(True, previous, resumed)


def _write_report(conn, report: dict[str, Any]) -> None:
    """The report as JSON text in ``state_meta``, its id lists cut to :data:`KEPT_IDS` (see there), written in
    pieces into a value of its exact size (SQLite's incremental blob I/O works on text too): building it as one
    string cost four copies of it in memory."""
    from maint.ops.history import compact

    report = compact(report, cap=KEPT_IDS)
    size = 0

    def count(piece: str) -> None:
        nonlocal size
        size += len(piece.encode("utf-8"))

    write_json(report, count)  # id lists are IdLists, written without unpacking them
    conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, CAST(zeroblob(?) AS TEXT))",
                 (REPORT_KEY, size))
    rowid = conn.execute("SELECT rowid FROM state_meta WHERE key = ?", (REPORT_KEY,)).fetchone()[0]
    with conn.blob_open("main", "state_meta", "value", rowid, True) as blob:
        write_json(report, lambda piece: blob.write(piece.encode("utf-8")))


def record_finished(store: Store, report: dict[str, Any]) -> None:
    """The report and our run record in one transaction: a finished sweep is never left looking unfinished."""
    with store.write() as conn:
        _write_report(conn, report)
        conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)",
                     (RUN_KEY, json.dumps({"marker": str(report["started_at"]),
                                           "completed": report["completed"]})))


@dataclass
class VacuumDecision:
    run: bool
    reason: str


def decide_vacuum(store: Store, *, deleted: int, enabled: bool, min_interval_days: float, now: float,
                  holders: Callable[[Path], HolderReport], disk_usage=shutil.disk_usage,
                  replicated: bool = False) -> VacuumDecision:
    if deleted <= 0:
        return VacuumDecision(False, "nothing was deleted")
    if not enabled:
        return VacuumDecision(False, "sessions.vacuum_after_prune is off")
    last = store.get_meta(VACUUM_KEY)
    try:
        last_ts = float(last) if last is not None else None
    except ValueError:
        last_ts = None
    if last_ts is not None and now - last_ts < min_interval_days * 86400:
        days = (now - last_ts) / 86400
        return VacuumDecision(False, f"last VACUUM {days:.1f} days ago (min_vacuum_interval_days "
                                     f"{min_interval_days:g})")
    pages = store.page_stats()
    ratio = pages["freelist_count"] / pages["page_count"] if pages["page_count"] else 0.0
    if ratio < MIN_FREELIST_RATIO:
        return VacuumDecision(False, f"only {ratio:.1%} of pages are free (needs {MIN_FREELIST_RATIO:.0%})")
    report = holders(store.path)
    replica = detect_replication(store.path, configured=replicated, holders=report)
    if replica:
        return VacuumDecision(False, f"store is {replica.describe()}: in-place VACUUM refused "
                                     "(use hermes-maint optimize --into PATH for a compacted copy)")
    if report.holders:
        return VacuumDecision(False, f"store held by {report.describe()}")
    if report.unknown:
        return VacuumDecision(False, f"holder check could not complete ({report.describe()})")
    short = space_shortfall(store, disk_usage)
    if short:
        return VacuumDecision(False, f"not enough free space ({short[0]} bytes free, need {short[1]})")
    return VacuumDecision(True, f"{ratio:.1%} of pages free, no other process holds the store")


def empty_report(db: Path) -> dict[str, Any]:
    return {"store": str(db), "swept": False, "skipped_reason": None, "reaped_ids": [], "pruned_ids": [],
            "pruned_messages": 0, "skipped_too_big": [], "skipped_out_of_step": [], "out_of_step": None,
            "bytes_before": None, "bytes_after": None, "bytes_freed": 0,
            "vacuumed": False, "vacuum_reason": None, "retention_days": None, "seconds": 0.0,
            "started_at": None, "completed": False, "cancelled": False, "resumed": False,
            "auto_archived_ids": [], "auto_archive_skipped_reason": None, "ghost_pruned_ids": [],
            "lock_holders": [], "lock_held_by_another_user": []}


def ghost_step(db: Path, now: float) -> list[str]:
    """Hermes's one-time repair of empty TUI ghost sessions (:mod:`maint.ops.ghosts`), run as Hermes runs it:
    first, whatever ``sessions.auto_prune`` says, once per store (latched by Hermes's own key)."""
    try:
        store = open_store(db)
    except RunLockHeld:
        return []  # another hermes-maint is working on this store: the next sweep does it
    with store:
        ids = prune_ghosts_once(store, now)
    if ids:
        log.info("sweep of %s: pruned %d empty TUI ghost session(s)", db, len(ids))
    return ids or []


def auto_archive_step(db: Path, cfg: Config, interval_s: float, now: float,
                      force: bool) -> tuple[list[str], str | None]:
    """sessions.auto_archive: before pruning and independent of auto_prune, as Hermes runs it, with
    Hermes's own ``last_auto_archive`` marker. Returns (archived ids, why it did not run)."""
    if cfg.session("auto_archive") is not True:
        return [], "sessions.auto_archive is off"
    days = cfg.session("auto_archive_days")
    if not _finite_non_negative(days):
        log.warning("sessions.auto_archive_days=%r is invalid: it must be a number of days >= 0; "
                    "skipping the idle sweep", days)
        return [], f"invalid sessions.auto_archive_days {days!r} (expected a number of days >= 0)"
    try:
        store = open_store(db)
    except RunLockHeld as exc:
        return [], f"another hermes-maint is working on this store ({str(exc).split(': ', 1)[-1]})"
    with store:
        reason = missing_column(store)
        if reason:
            log.warning("idle sweep of %s skipped: %s", db, reason)
            return [], reason
        claimed, previous = claim_idle_marker(store, interval_s, now, force)
        if not claimed:
            return [], (f"idle sweep already ran {(now - previous) / 3600:.1f} h ago (min_interval_hours "
                        f"{interval_s / 3600:g}; --force to run anyway)")
        ids = execute_idle_archive(store, plan_idle_archive(store, float(days), now))
    log.info("idle sweep of %s: archived %d session(s) idle >= %g days", db, len(ids), days)
    return ids, None


def run_sweep(db: Path, cfg: Config, *, force: bool = False, now: float | None = None,
              holders: Callable[[Path], HolderReport] = find_holders,
              disk_usage=shutil.disk_usage) -> dict[str, Any]:
    """One sweep of one store; never raises for an expected skip, only for a store that can't be used."""
    now = time.time() if now is None else now
    started = time.monotonic()
    report = empty_report(db)
    report["started_at"] = now

    def skip(reason: str) -> dict[str, Any]:
        report["skipped_reason"] = reason
        report["seconds"] = round(time.monotonic() - started, 3)
        log.info("sweep of %s skipped: %s", db, reason)
        return report

    interval_s = _number(cfg, "min_interval_hours", 24) * 3600
    report["ghost_pruned_ids"] = ghost_step(db, now)
    report["auto_archived_ids"], report["auto_archive_skipped_reason"] = auto_archive_step(
        db, cfg, interval_s, now, force)
    if cfg.session("auto_prune") is not True:
        return skip("sessions.auto_prune is off (set it to true, or run `hermes-maint autoprune on`)")
    retention = validate_retention(cfg.session("retention_days"))
    if retention is None:
        log.warning("sessions.retention_days=%r is invalid: it must be an integer number of days >= 0; "
                    "skipping this sweep", cfg.session("retention_days"))
        return skip(f"invalid sessions.retention_days {cfg.session('retention_days')!r} "
                    "(expected an integer >= 0)")
    report["retention_days"] = retention
    try:
        store = open_store(db)
    except RunLockHeld as exc:  # a sweep of ours (or a prune) is running: like Hermes's lock, skip
        return skip(f"another hermes-maint is working on this store ({str(exc).split(': ', 1)[-1]})")
    with store:
        try:
            with maintenance_lock(store.path):
                recover_interrupted(store)  # what a killed run of ours left goes back, swept or not
                claim = claim_marker(store, interval_s, now, force)
                if not claim.claimed:
                    hours = (now - claim.previous) / 3600
                    return skip(f"already swept {hours:.1f} h ago (min_interval_hours "
                                f"{interval_s / 3600:g}; --force to run anyway)")
                report["swept"] = True
                report["resumed"] = claim.resumed
                report["bytes_before"] = sum(store.file_sizes().values())
                report["reaped_ids"] = reap(store, reap_candidates(store, retention, now), now)
                # Archived sessions age out like any other (Hermes's own sweep does too): archiving
                # hides, only a pin keeps.
                plan = plan_prune(store, implicit_prune_filters(now, retention), now=now, include_archived=True,
                                  keep=frozenset(report["reaped_ids"]))
                result = execute_prune(store, plan)
                report["pruned_ids"] = result.deleted_ids
                report["pruned_messages"] = result.messages
                report["skipped_too_big"] = result.skipped_too_big
                report["skipped_out_of_step"] = result.skipped_out_of_step
                report["out_of_step"] = result.out_of_step
                report["removed_files"] = result.removed_files
                report["cancelled"] = batching.CANCEL.is_set()
                decision = VacuumDecision(False, "the sweep was cancelled") if report["cancelled"] else decide_vacuum(
                    store, deleted=len(result.deleted_ids), enabled=bool(cfg.session("vacuum_after_prune")),
                    min_interval_days=_number(cfg, "min_vacuum_interval_days", 30), now=now, holders=holders,
                    disk_usage=disk_usage, replicated=cfg.maint("replicated") is True)
                report["vacuum_reason"] = decision.reason
                if decision.run:
                    vacuum_in_place(store)
                    store.set_meta(VACUUM_KEY, str(time.time()))
                    report["vacuumed"] = True
                report["bytes_after"] = sum(store.file_sizes().values())
                report["bytes_freed"] = max(0, report["bytes_before"] - report["bytes_after"])
                report["seconds"] = round(time.monotonic() - started, 3)
                report["completed"] = not report["cancelled"]
                record_finished(store, report)
        except LockHeld as exc:
            report["lock_holders"] = [{"pid": h.pid, "uid": h.uid, "cmdline": h.cmdline} for h in exc.holders]
            if exc.foreign:  # another user keeps every sweep away: said, and the command exits 1
                report["lock_held_by_another_user"] = [{"pid": h.pid, "uid": h.uid} for h in exc.foreign]
                return skip(f"another user holds the auto-maintenance lock ({exc})")
            return skip(f"another process is sweeping ({exc})")
    log.info("sweep of %s: reaped %d, pruned %d sessions (%d messages), vacuum: %s (%s), %.1fs",
             db, len(report["reaped_ids"]), len(report["pruned_ids"]), report["pruned_messages"],
             "yes" if report["vacuumed"] else "no", report["vacuum_reason"], report["seconds"])
    return report


@dataclass(frozen=True)
class SweepRequest:
    """``hermes-maint sweep``'s options; every setting the prune in it reads is checked when it is made."""

    force: bool = False  # ignore min_interval_hours (never the lock)

    def __post_init__(self) -> None:
        check_settings()


def sweep_store(target: StoreTarget, req: SweepRequest, op: Operator) -> dict[str, Any]:
    """``hermes-maint sweep`` on one store, under its own config.yaml; then the low-disk question, when due."""
    cfg = target_config(target)
    report = run_sweep(target.path, cfg, force=req.force)
    report["config"] = str(cfg.path)
    retention = validate_retention(cfg.session("retention_days")) or DEFAULT_PRUNE_DAYS
    lines = low_disk_notice(target.path, cfg, retention)
    if lines:
        op.notice(lines, "hermes_maint.disk")
    report["low_disk_notice"] = lines
    return report
