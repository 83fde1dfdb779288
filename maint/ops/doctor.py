"""doctor: a store's health in one read-only pass, each finding with the command that fixes it.

Every check reads; nothing here writes the config, and the store is opened
read-only, except that ``--full --record`` (the weekly job) notes when it ran and
what it found in one ``state_meta`` row of our own (:data:`FULL_CHECK_KEY`). The daily pass checks every
table and index (``quick_check`` one table at a time) and leaves to ``--full`` (the
weekly job) what costs most at 10 GB and changes least: FTS5's own check of its
index against the content (which a whole-file ``quick_check`` runs in SQLite >=
3.44), the file's page accounting, and the UTF-8 check of stored text that cannot
have changed since the last clean recorded full check (:func:`text_mark`; see
:meth:`Doctor.check_text` for the rule on what Hermes rewrites in place); the report
lists them under ``skipped``.

A finding has a severity (ok / warning / critical), one line saying what
was found and why it matters, and, unless it is ok, the exact command that makes
it go away. Thresholds follow Hermes's own ``doctor`` where it has one (a store
over 1 GiB, a WAL over 50 MiB) and can be tuned under ``hermes_maint.doctor`` in
config.yaml.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import apsw

from maint import PROG, json_text
from maint.config import Config, config_path_for, load_config
from maint.errors import CorruptStore, MaintError, UsageError
from maint.fmt import fmt_bytes
from maint.ops import fts, history
from maint.ops.diskcheck import disk_figures
from maint.ops.journal import HERMES_DEFAULT_JOURNAL_MODE, WAL_UNSAFE_FS, filesystem_type
from maint.ops.profiles import existing_profiles, profile_stores, scan_store, store_aliases
from maint.ops.prompts import scan as scan_prompts
from maint.ops.reap import reap_candidates
from maint.ops.recover import find_stray
from maint.ops.sweep import MIN_FREELIST_RATIO, validate_retention
from maint.ops.vacuum import detect_replication
from maint.settings import SETTINGS
from maint.store.connection import (NEWEST_KNOWN_SCHEMA, Store, busy_timeout_from_env, has_wal_reset_bug,
                                    header_journal_mode, open_store, schema_problem, sqlite_version)
from maint.store.holders import HolderReport, find_holders
from maint.store.targets import hermes_home

if TYPE_CHECKING:
    from maint.flow import Operator
    from maint.store.text_check import TextMark
    from maint.store.targets import StoreTarget

OK, WARNING, CRITICAL = "ok", "warning", "critical"
SEVERITIES = (OK, WARNING, CRITICAL)
RANK = {s: i for i, s in enumerate(SEVERITIES)}

MIB = 2**20
# hermes_maint.doctor.<key>: (default, unit in bytes or seconds, what it bounds)
THRESHOLDS: dict[str, tuple[float, int]] = {
    "db_warn_mb": (1024, MIB),  # Hermes's doctor: a state.db over 1 GiB
    "wal_warn_mb": (50, MIB),  # Hermes's doctor: a WAL over 50 MB means missed checkpoints
    "free_warn_mb": (16, MIB),  # free pages worth a VACUUM, with at least MIN_FREELIST_RATIO of the file
    "backup_max_age_hours": (48, 3600),  # a nightly backup plus a day of grace
}
SWEEP_GRACE_S = 3600  # the job loop's misfire grace
# doctor --full records when it ran and what it found here (our key prefix in Hermes's state_meta); the
# daily pass reads it and warns when the weekly full pass stopped running (a week and a day of grace).
FULL_CHECK_KEY = "hermes_maint.doctor.full_check"
FULL_CHECK_MAX_AGE_S = 8 * 86400
WEEKLY_JOB = "weekly-doctor-full"
NUMERIC_SESSION_KEYS = ("min_interval_hours", "min_vacuum_interval_days")
CHECKS = ("config", "integrity", "schema", "sizes", "holders", "journal_mode", "text", "repairs", "ages")
RESTORE = ("stop Hermes, then copy your last good backup over the store (a copy made with "
           "`hermes-maint optimize --into PATH` is one)")


@dataclass
class Finding:
    kind: str
    severity: str
    what: str
    fix: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "severity": self.severity, "what": self.what, "fix": self.fix, "data": self.data}


def fix_target(path: Path, profile: str | None) -> str:
    """The store-selection flags a fix command needs to reach this same store."""
    if profile:
        return f"--profile {shlex.quote(profile)}"
    try:
        if Path(path).resolve() == (hermes_home() / "state.db").resolve():
            return ""
    except OSError:
        pass
    return f"--db {shlex.quote(str(path))}"


def _age(seconds: float) -> str:
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


class Doctor:
    """One store's checks. Build with :func:`run_doctor`."""

    def __init__(self, path: Path, profile: str | None, cfg: Config, cfg_error: str | None, *, full: bool,
                 now: float, holders: Callable[[Path], HolderReport], disk_usage: Callable, home: Path | None,
                 on_progress: Callable[[int], None] = lambda n: None):
        self.path, self.profile, self.cfg, self.cfg_error = Path(path), profile, cfg, cfg_error
        self.full, self.now, self.holders_fn, self.disk_usage, self.home = full, now, holders, disk_usage, home
        self.target = fix_target(self.path, profile)
        self.findings: list[Finding] = []
        self.limits: dict[str, float] = {}
        self.holders: HolderReport | None = None
        self.on_progress = on_progress
        self.skipped: list[str] = []  # what the default pass leaves to --full, in the report
        self.full_result: str | None = None  # "ok" / "damage" once a whole-file integrity check ran
        self.text_mark: TextMark | None = None  # where a complete UTF-8 pass that found nothing stood

    # -- helpers -------------------------------------------------------------------------------
    def cmd(self, *words: str) -> str:
        return " ".join([PROG, *[w for w in words if w], self.target]).strip()

    def hermes(self, *words: str) -> str:
        """A Hermes command that opens this same store."""
        if self.profile:
            return " ".join(["hermes", "--profile", shlex.quote(self.profile), *words])
        if not self.target or self.path.name != "state.db":
            return " ".join(["hermes", *words])
        return " ".join([f"HERMES_HOME={shlex.quote(str(self.path.parent))}", "hermes", *words])

    def add(self, kind: str, severity: str, what: str, fix: str | None = None, **data: Any) -> None:
        self.findings.append(Finding(kind, severity, what, fix if severity != OK else None, data))

    def auto_prune_on(self) -> bool:
        return self.cfg.session("auto_prune") is True

    def retention(self) -> int:
        return validate_retention(self.cfg.session("retention_days")) or 90

    # -- config --------------------------------------------------------------------------------
    def check_config(self) -> None:
        if self.cfg_error:
            self.add("config", CRITICAL, f"{self.cfg_error}; Hermes cannot read it either, so every setting "
                                         "falls back to its default", f"edit {self.cfg.path} at the line named",
                     path=str(self.cfg.path))
        bad = []
        raw = self.cfg.session("retention_days")
        if validate_retention(raw) is None:
            bad.append(("retention_days", raw, "an integer number of days >= 0", "90",
                        "the sweep skips every run until it is fixed"))
        for key in NUMERIC_SESSION_KEYS:
            value = self.cfg.session(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                default = {"min_interval_hours": "24", "min_vacuum_interval_days": "30"}[key]
                bad.append((key, value, "a number >= 0", default, f"the sweep uses {default} instead"))
        auto = self.cfg.session("auto_prune")
        if self.cfg.has_session_key("auto_prune") and not isinstance(auto, bool):
            bad.append(("auto_prune", auto, "true or false", "true", "anything but true leaves the sweep off"))
        for key, value, accepted, suggested, effect in bad:
            fix = self.hermes("config", "set", f"sessions.{key}", suggested)
            self.add("config", WARNING, f"sessions.{key} is {value!r} in {self.cfg.path}, expected {accepted}: "
                                        f"{effect}", fix, key=key)
        maint_bad = []
        for key, (default, _unit) in THRESHOLDS.items():
            value = self.cfg.maint(f"doctor.{key}", default)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                    or not math.isfinite(value):
                maint_bad.append((f"doctor.{key}", value, "a number > 0", _num(default)))
                value = default
            self.limits[key] = float(value) * _unit
        replicated = self.cfg.maint("replicated", False)
        if not isinstance(replicated, bool):
            maint_bad.append(("replicated", replicated, "true or false", "true"))
        for key, value, accepted, suggested in maint_bad:
            fix = self.hermes("config", "set", f"hermes_maint.{key}", suggested)
            self.add("config", WARNING, f"hermes_maint.{key} is {value!r} in {self.cfg.path}, expected {accepted}; "
                                        "the default is used", fix, key=f"hermes_maint.{key}")
        if not self.cfg.has_session_key("auto_prune"):
            figures = disk_figures(self.path.parent, usage=self.disk_usage)
            if figures.low:
                self.add("config", WARNING, f"sessions.auto_prune is unset and the disk holding the store is low "
                                            f"({figures.free / 1e9:.1f} GB free of {figures.total / 1e9:.1f} GB): "
                                            "history grows until something prunes it",
                         self.cmd("autoprune", "on"), key="auto_prune", free=figures.free, total=figures.total)
        if not [f for f in self.findings if f.kind == "config"]:
            self.add("config", OK, f"config {'read from ' + str(self.cfg.path) if self.cfg.exists else 'absent'}: "
                                   f"auto_prune {self.cfg.session('auto_prune')}, retention_days {self.retention()}")

    # -- integrity, search indexes, schema ---------------------------------------------------------
    def check_integrity(self, store: Store) -> None:
        pragma = "integrity_check" if self.full else "quick_check"
        if not self.full:
            self.check_last_full(store)
        if header_journal_mode(self.path) != "wal" and self.holders and self.holders.holders:
            # In rollback mode our read holds SQLite's shared lock for the whole check, and a
            # Hermes commit waits for it (giving up after ~16 s): never make a live writer wait.
            self.add("integrity", WARNING, f"{pragma} not run: the store is in rollback-journal mode and held by "
                                           f"{self.holders.describe()}; a whole-file read would hold up its writes",
                     f"stop Hermes, then {self.cmd('doctor')}")
            return
        present = store.fts_tables
        by_fts: dict[str, list[str]] = {t: [] for t in present}
        general = []
        if self.full:
            for line in store.check_lines(pragma):
                owner = _owner(line, _root_pages(store), present)
                (by_fts[owner] if owner else general).append(line)
        else:
            tables = store.btree_tables()
            for table in tables:
                owner = next((t for t in sorted(present, key=len, reverse=True)
                              if table == t or table.startswith(t + "_")), None)
                for line in store.check_lines(pragma, table):
                    (by_fts[owner] if owner else general).append(f"{table}: {line}")
            self.skipped = [
                f"the search indexes' own consistency check ({', '.join(present)}: FTS5 index against content)"
                if present else "", "the file's page accounting (free list, pages no table uses)"]
            self.skipped = [s for s in self.skipped if s]
        if general:
            self.add("integrity", CRITICAL, f"{pragma} found damage ({general[0]}{' …' if len(general) > 1 else ''}): "
                                            "rows can be unreadable or lost; stop Hermes before it writes more",
                     RESTORE, lines=general[:20])
        elif self.full:
            self.add("integrity", OK, f"{pragma}: ok")
        else:
            self.add("integrity", OK, f"{pragma} of every table and index ({len(tables)} tables): ok; "
                                      f"left to --full: {'; '.join(self.skipped)}", tables=len(tables),
                     skipped=self.skipped)
        self.full_result = "damage" if general or any(by_fts.values()) else "ok"
        for table in fts.EXPECTED:
            if table not in present:
                continue
            bad = by_fts.get(table) or []
            short = [] if bad else fts.incomplete(store, table)
            if short:
                self.add("fts_index", WARNING, f"search index {short[0]}: searches miss the rest",
                         self.cmd("repair-fts", "--apply"), table=table, lines=short)
                continue
            if bad:
                self.add("fts_index", CRITICAL, f"search index {table} is damaged ({bad[0]}): searches miss or fail, "
                                                "and Hermes's message writes go through it", self.cmd("repair-fts",
                                                                                                      "--apply"),
                         table=table, lines=bad[:20])
            else:
                self.add("fts_index", OK, f"search index {table}: ok" + (
                    # FTS5's check against the messages is a write that holds Hermes's writers for its whole
                    # read (minutes at 10 GB): doctor never writes, repair-fts runs it (hostile try 5, H6).
                    ("" if fts.is_inline(store, table) else "; its check against the messages: repair-fts")
                    if self.full else " (its b-trees, and it holds every message; its own check runs with --full)"),
                         table=table)

    def check_last_full(self, store: Store) -> None:
        """When the last ``doctor --full`` ran and what it found (state_meta, :data:`FULL_CHECK_KEY`)."""
        last = last_full_check(store)
        weekly = f"the weekly job runs and records it: {PROG} jobs enable {WEEKLY_JOB}"
        if last is None:
            self.add("full_check", OK, f"no `{PROG} doctor --full --record` recorded on this store yet ({weekly})")
            return
        age = self.now - last["at"]
        if last["result"] != "ok":
            self.add("full_check", WARNING, f"the last full check ({_age(max(0.0, age))} ago) found damage; the "
                                            "daily check does not re-run the part that found it",
                     self.cmd("doctor", "--full", "--record"), at=last["at"], result=last["result"])
        elif age > FULL_CHECK_MAX_AGE_S:
            self.add("full_check", WARNING, f"the last full check was {_age(age)} ago (expected weekly): the search "
                                            "indexes' own check has not run since",
                     self.cmd("doctor", "--full", "--record"), at=last["at"])
        else:
            self.add("full_check", OK, f"last full check {_age(max(0.0, age))} ago: ok", at=last["at"])

    def check_interrupted(self, store: Store) -> None:
        from maint.ops.prune import interrupted

        left = interrupted(store)
        if left:
            self.add("interrupted_prune", WARNING, f"a prune stopped midway left {'; and '.join(left)}: the next "
                                                   "prune or sweep puts it back first",
                     self.cmd("repair-fts", "--apply"), left=left)
        else:
            self.add("interrupted_prune", OK, "no prune left anything half done")

    def check_schema(self, store: Store) -> None:
        version = store.schema_version
        layout = _fts_layout(store)
        problem = schema_problem(version)
        status = OK
        if problem and version.__class__ is not int:  # text, bytes, 32.5: a layout nobody can know
            status, what, version = WARNING, f"{problem}: hermes-maint reads this store but never writes it", None
        elif problem:
            what = (f"schema version {version}, newer than the v{NEWEST_KNOWN_SCHEMA} layout this hermes-maint "
                    "release knows: it reads this store but never writes it")
        else:
            what = f"schema version {version if version is not None else 'unknown (no schema_version table)'}"
        note = f"; opened {store.note}" if store.note else ""
        self.add("schema", status, f"{what}; FTS layout {layout}{note}", version=version, fts_layout=layout)
        present = set(store.fts_tables)
        missing = [t for t in fts.EXPECTED if t not in present]
        # A trigger still writing into a missing index makes every message insert fail.
        broken = sorted({t for t in missing for trig_sql in _trigger_sql(store) if fts.mentions(trig_sql, t)})
        fix = (f"{self.hermes('sessions', 'stats')} && {self.cmd('repair-fts', '--apply')}  # any Hermes command "
               "on this store recreates the missing index; repair-fts fills it")
        if broken:
            self.add("fts_layout", CRITICAL, f"Hermes's message triggers write into {', '.join(broken)}, which does "
                                             "not exist: every new message fails to save", fix, missing=missing)
        elif missing:
            self.add("fts_layout", WARNING, f"search index {', '.join(missing)} is missing: "
                                            f"{'substring/CJK' if 'messages_fts_trigram' in missing else 'full-text'} "
                                            "search finds nothing", fix, missing=missing)
        else:
            pending = _backfill_pending(store)
            self.add("fts_layout", OK, "both search indexes present" + (
                f"; Hermes is still filling the trigram index ({pending[0]} of {pending[1]})" if pending else ""))

    # -- size, WAL, free pages -----------------------------------------------------------------
    def check_sizes(self, store: Store) -> None:
        pages = store.page_stats()
        logical = pages["page_count"] * pages["page_size"]
        free_bytes = pages["freelist_count"] * pages["page_size"]
        share = pages["freelist_count"] / pages["page_count"] if pages["page_count"] else 0.0
        wal = store.file_sizes()["wal"]
        replica = detect_replication(self.path, configured=self.cfg.maint("replicated") is True,
                                     holders=self.holders)
        compact = self.cmd("optimize", "--into", shlex.quote(str(self.path) + ".compact")) if replica else None
        if logical > self.limits["db_warn_mb"]:
            if share >= MIN_FREELIST_RATIO:
                fix = compact or self.cmd("optimize")
            else:
                fix = (f"{self.cmd('prune', '--older-than', str(self.retention()), '--yes')} && "
                       f"{compact or self.cmd('optimize')}")
            limit = fmt_bytes(self.limits["db_warn_mb"])
            self.add("db_size", WARNING, f"state.db is {fmt_bytes(logical)} (over {limit})"
                                         + ("" if self.auto_prune_on() else "; sessions.auto_prune is off, so it "
                                                                            "only grows"),
                     fix, bytes=logical)
        else:
            self.add("db_size", OK, f"state.db is {fmt_bytes(logical)}", bytes=logical)
        if wal > self.limits["wal_warn_mb"]:
            held = bool(self.holders and self.holders.holders)
            why = ("normal while Hermes runs, but a checkpoint cannot finish while a reader holds an old snapshot"
                   if held else "no process holds the store, so this is a missed checkpoint")
            fix = "let Litestream checkpoint it (check that it runs)" if replica else self.cmd("optimize")
            limit = fmt_bytes(self.limits["wal_warn_mb"])
            self.add("wal_size", WARNING, f"the WAL is {fmt_bytes(wal)} (over {limit}): {why}", fix, bytes=wal)
        else:
            self.add("wal_size", OK, f"the WAL is {fmt_bytes(wal)}", bytes=wal)
        if share >= MIN_FREELIST_RATIO and free_bytes >= self.limits["free_warn_mb"]:
            self.add("free_pages", WARNING, f"{share:.0%} of the file ({fmt_bytes(free_bytes)}) is free pages that "
                                            "only a VACUUM gives back to the disk", compact or self.cmd("optimize"),
                     share=round(share, 4), bytes=free_bytes)
        else:
            self.add("free_pages", OK, f"{share:.1%} of the file is free pages ({fmt_bytes(free_bytes)})",
                     share=round(share, 4), bytes=free_bytes)

    # -- who holds it, replication, journal mode, SQLite -----------------------------------------
    def check_holders(self) -> None:
        report = self.holders
        if report is None:
            return
        if report.unknown:
            what = f"holder check incomplete ({report.describe()}): VACUUM and the repairs refuse until it completes"
        else:
            what = report.describe()
        self.add("holders", OK, what, pids=[h.pid for h in report.holders])
        self.check_maintenance_lock()
        replica = detect_replication(self.path, configured=self.cfg.maint("replicated") is True, holders=report)
        self.add("replication", OK, f"{replica.describe()}: in-place VACUUM is refused, optimize --into writes a copy"
                 if replica else "no replicator detected (Litestream process, .state.db-litestream folder, "
                                 "or hermes_maint.replicated)")

    def check_maintenance_lock(self) -> None:
        """Another user holding Hermes's auto-maintenance lock skips every sweep (ours and Hermes's) quietly."""
        from maint.store.locks import foreign_holders, held_message

        path, foreign = foreign_holders(self.path)
        if foreign:
            self.add("maintenance_lock", WARNING, held_message(path, foreign, foreign),
                     f"kill {' '.join(str(h.pid) for h in foreign)}  # then check who could open {path}",
                     pids=[h.pid for h in foreign], uids=sorted({h.uid for h in foreign}))

    def check_journal(self) -> None:
        mode = header_journal_mode(self.path)
        wanted = self.cfg.journal_mode
        fs = filesystem_type(self.path.parent)
        if mode == "wal" and fs in WAL_UNSAFE_FS:
            fix = (f"{self.cmd('set-journal-mode', 'delete')} && "
                   f"{self.hermes('config', 'set', 'database.journal_mode', 'delete')}")
            self.add("journal_mode", CRITICAL, f"the store is in WAL mode on {fs}: WAL shared memory silently "
                                               "corrupts there", fix)
        elif wanted in ("wal", "delete") and wanted != mode:
            self.add("journal_mode", WARNING, f"the file is in {mode} mode but {self.cfg.path} asks for {wanted}: "
                                              "the setting is not in effect (Hermes never downgrades a live WAL store)",
                     self.cmd("set-journal-mode", wanted) + "  # with Hermes stopped")
        else:
            self.add("journal_mode", OK, f"journal mode {mode} (file header)"
                     + (", as config.yaml asks" if wanted else
                        f"; database.journal_mode unset, so Hermes applies its default ({HERMES_DEFAULT_JOURNAL_MODE}) "
                        "when it opens the store"))
        ours, stdlib = sqlite_version(), sqlite3.sqlite_version
        if mode == "wal" and has_wal_reset_bug(stdlib):
            self.add("sqlite", WARNING, f"Python's sqlite3 here links SQLite {stdlib}, which has the WAL-reset "
                                        "corruption bug (3.7.0-3.51.2) and is what Hermes uses; a WAL store can be "
                                        "corrupted under concurrent writers",
                     f"{self.cmd('set-journal-mode', 'delete')} && "
                     f"{self.hermes('config', 'set', 'database.journal_mode', 'delete')}  "
                     "# or give Python a SQLite >= 3.51.3", stdlib=stdlib, ours=ours)
        else:
            self.add("sqlite", OK, f"SQLite {ours} (hermes-maint), {stdlib} (Python's sqlite3, Hermes)"
                     + (": the WAL-reset bug does not apply in rollback mode" if has_wal_reset_bug(stdlib) else ""),
                     stdlib=stdlib, ours=ours)

    # -- what the repairs would fix -------------------------------------------------------------
    def check_repairs(self, store: Store) -> None:
        for name, step in (("degraded_prompts", self.check_prompts), ("profiles", self.check_profiles),
                           ("interrupted", self.check_interrupted), ("orphans", self.check_orphans),
                           ("unrouted", self.check_unrouted), ("stray_messages", self.check_strays)):
            try:
                step(store)
            except UnicodeDecodeError:  # one session's bytes stop this step only (named by check_text)
                self.add(name, WARNING, f"the {name} check stopped at stored text that is not valid UTF-8 "
                                        "(the sessions holding it are named in the stored_text finding)",
                         "fix or delete those sessions, then run doctor again")

    def check_text(self, store: Store) -> None:
        """Stored text that is not UTF-8: exports skip those sessions, other commands may stop at them. The
        daily pass reads what can have changed since the last clean full check (:func:`text_mark`), every
        session row and stored prompt, and the messages of the sessions that gained one since; --full reads
        every row (and, recorded, moves the mark)."""
        from maint.store.text_check import TextMark, message_counter, unreadable_sessions, unreadable_since

        counter = message_counter(store)  # before the pass: a message added during it is past the mark
        mark = None if self.full else text_mark(store)
        stale = mark is not None and self.now - mark.at > FULL_CHECK_MAX_AGE_S
        if stale:  # a rewrite the daily pass does not read waits at most for the weekly pass, never longer
            mark = None
        if mark is not None and counter is not None and mark.message_id <= counter:
            since = unreadable_since(store, mark)
            bad = since.bad
            total = store.scalar("SELECT COUNT(*) FROM messages")
            rest = max(0, total - since.new_messages - since.older_messages)
            when = f"the last clean full check ({_age(max(0.0, self.now - mark.at))} ago, message id {mark.message_id})"
            scope = (f"checked {since.new_messages} message(s) added since {when}, {since.older_messages} older "
                     f"message(s) of the sessions that gained one, every session row and stored prompt; "
                     f"{rest} older message(s) not re-read (run --full for all)")
            self.skipped.append(f"the UTF-8 check of the {rest} message(s) stored before {when}, except in the "
                                "sessions that gained a message since")
            data = {"mark": mark.as_json(), "new_messages": since.new_messages,
                    "older_messages": since.older_messages, "not_reread": rest}
        else:
            bad = unreadable_sessions(store)
            if not bad and counter is not None and self.full:
                self.text_mark = TextMark(counter, self.now)
            why = "the last clean full check is over 8 days old" if stale else \
                "no clean full check recorded with a mark"
            scope = "checked every row" + ("" if self.full else
                                           f"; {why}: `{self.cmd('doctor', '--full', '--record')}` records one, "
                                           "and the daily pass then reads only what can have changed since")
            data = {"mark": None}
        if not bad:
            self.add("stored_text", OK, f"every stored text is valid UTF-8 ({scope})", **data)
            return
        self.add("stored_text", WARNING,
                 f"{len(bad)} session(s) hold stored text that is not valid UTF-8 (exports skip them): "
                 + "; ".join(f"{u.id} ({', '.join(u.fields)})" for u in bad[:10]) + (" …" if len(bad) > 10 else "")
                 + f" ({scope})",
                 "rewrite the bytes as UTF-8 with SQL, or delete those sessions",
                 sessions=[u.as_json() for u in bad[:50]], **data)

    def check_prompts(self, store: Store) -> None:
        prompts = scan_prompts(store)
        if prompts.verified:
            self.add("degraded_prompts", WARNING, f"{len(prompts.verified)} stored system prompt(s) verified "
                                                  "degraded (Skill Safety guidance missing while skill_manage is "
                                                  "pinned): those sessions run with a reduced prompt",
                     self.cmd("repair-prompts", "--apply"), ids=prompts.verified.ids[:50])
        else:
            self.add("degraded_prompts", OK, "no degraded stored prompt"
                     + (f" ({len(prompts.unverifiable)} unverifiable, left alone)" if prompts.unverifiable else ""))

    def check_orphans(self, store: Store) -> None:
        candidates = reap_candidates(store, self.retention(), self.now)
        if candidates:
            fix = (self.cmd("sweep", "--force") if self.auto_prune_on()
                   else f"{self.cmd('autoprune', 'on')} && {self.cmd('sweep')}")
            self.add("orphans", WARNING, f"{len(candidates)} open automation session(s) (cron, subagent, cli …) "
                                         f"inactive for over {self.retention()} days: never ended, so never pruned",
                     fix, ids=candidates[:50])
        else:
            self.add("orphans", OK, "no open automation session left behind")

    def check_strays(self, store: Store) -> None:
        strays = find_stray(store)
        if strays:
            n = sum(s.messages for s in strays)
            self.add("stray_messages", WARNING, f"{n} message(s) under {len(strays)} session id(s) with no session "
                                                "row: no listing, search or export reaches them",
                     self.cmd("recover", "--apply"), session_ids=[s.session_id for s in strays][:50], messages=n)
        else:
            self.add("stray_messages", OK, "every message has its session row")

    def check_profiles(self, store: Store) -> None:
        stores = profile_stores(self.home)
        mine = [name for name, p in stores.items() if _same(p, self.path)]
        if not mine:
            self.add("profiles", OK, "not a profile store under $HERMES_HOME: profile mix-ups not checked")
            return
        found = scan_store(store, mine[0], existing_profiles(self.home), None, store_aliases(self.home))
        movable = [f for f in found if f.action == "move"]
        other = [f for f in found if f.action != "move"]
        if movable:
            n = sum(len(f.session_ids) + len(f.routing_keys) for f in movable)
            self.add("profiles", WARNING, f"{n} row(s) here belong to another profile "
                                          f"({', '.join(sorted({str(f.owner) for f in movable}))}): that profile "
                                          "does not see them", f"{PROG} repair-profiles --apply  # stop the gateway "
                                                               "first", kinds=sorted({f.kind for f in movable}))
        for f in other:
            if f.kind == "legacy_main":
                fix = f"{PROG} repair-profiles --apply --legacy-main rekey  # or: --legacy-main move"
                what = f"{len(f.session_ids)} agent:main row(s) inside profile {mine[0]}'s store"
            elif f.kind == "odd_ids":
                fix = "look at them with sqlite3 (`SELECT rowid, * FROM sessions WHERE typeof(id) <> 'text'`)"
                what = str(f.reason)
            elif f.kind == "missing_profile":
                fix = f"hermes profile create {shlex.quote(str(f.owner))}  # or migrate the identity"
                what = f"{len(f.session_ids)} row(s) bound to profile {f.owner}, which does not exist"
            else:
                fix = f"{PROG} repair-profiles  # review; bindings stay with their session"
                what = f"{len(f.session_ids)} Telegram topic binding(s) keyed for profile {f.owner}"
            self.add("profiles", WARNING, what, fix, kind_found=f.kind)
        if not found:
            self.add("profiles", OK, f"no row of another profile in {mine[0]}'s store")

    def check_unrouted(self, store: Store) -> None:
        """What repair-routing would adopt: gateway rows with messages that lost their routing."""
        from maint.ops.routing import find_orphans, store_owner

        records = find_orphans(store, owner=store_owner(self.path), now=self.now)
        adoptable = [r for r in records if r["adoptable"]]
        unclear = [r for r in records if not r["adoptable"]]
        if adoptable:
            self.add("unrouted", WARNING, f"{len(adoptable)} gateway session(s) with messages lost their routing "
                                          "(repair-routing has the evidence to adopt them): after a restart those "
                                          "chats resume an older conversation",
                     f"{self.cmd('repair-routing', '--apply')}  # stop the gateway first",
                     ids=[r["orphan_id"] for r in adoptable][:50])
        else:
            self.add("unrouted", OK, "no gateway session that lost its routing"
                     + (f" and can be adopted ({len(unclear)} without unambiguous evidence: "
                        f"`{self.cmd('repair-routing')}` lists them, left to you)" if unclear else ""))

    # -- last sweep, VACUUM, backup ---------------------------------------------------------------
    def check_ages(self, store: Store) -> None:
        last_sweep = store.meta_time("last_auto_prune")
        interval_h = self.cfg.session("min_interval_hours")
        interval_h = interval_h if isinstance(interval_h, (int, float)) and not isinstance(interval_h, bool) \
            and interval_h >= 0 else 24
        limit = max(interval_h * 3600, 86400) + 86400 + SWEEP_GRACE_S
        if not self.auto_prune_on():
            self.add("last_sweep", OK, "sessions.auto_prune is off: no sweep is expected"
                     + (f" (last one {_age(self.now - last_sweep)} ago)" if last_sweep else ""))
        elif last_sweep is None:
            self.add("last_sweep", WARNING, "sessions.auto_prune is on but no sweep has run on this store yet: "
                                            "is the scheduler (hermes-maint jobs run) running?", self.cmd("sweep"))
        elif self.now - last_sweep > limit:
            self.add("last_sweep", WARNING, f"the last sweep was {_age(self.now - last_sweep)} ago (expected every "
                                            f"{interval_h:g} h, nightly): is the scheduler running?",
                     self.cmd("sweep"), at=last_sweep)
        else:
            self.add("last_sweep", OK, f"last sweep {_age(self.now - last_sweep)} ago", at=last_sweep)
        last_vacuum = store.meta_time("last_vacuum")
        days = self.cfg.session("min_vacuum_interval_days")
        self.add("last_vacuum", OK, (f"last VACUUM {_age(self.now - last_vacuum)} ago" if last_vacuum
                                     else "no VACUUM recorded") + f" (min_vacuum_interval_days {days}; the sweep "
                                                                  f"VACUUMs only when {MIN_FREELIST_RATIO:.0%} of "
                                                                  "pages are free)", at=last_vacuum)
        backup = history.latest(store, "backup")
        max_age = self.limits["backup_max_age_hours"]
        if backup is None:
            self.add("last_backup", OK, "no hermes-maint backup recorded for this store")
        elif self.now - backup.at > max_age:
            self.add("last_backup", WARNING, f"the last backup finished {_age(self.now - backup.at)} ago (over "
                                             f"{_age(max_age)}): a failure now loses everything since",
                     self.cmd("backup"), at=backup.at)
        else:
            self.add("last_backup", OK, f"last backup {_age(self.now - backup.at)} ago", at=backup.at)

    # -- the whole pass -----------------------------------------------------------------------
    def run(self) -> list[Finding]:
        self.check_config()
        self.on_progress(1)
        try:
            busy_ms = busy_timeout_from_env()
        except UsageError:  # a bad setting in config.yaml: check_config reported it; the store is still checked
            busy_ms = int(SETTINGS["busy_ms"].default)
        try:
            store = open_store(self.path, readonly=True, busy_timeout_ms=busy_ms)
        except CorruptStore as exc:  # a missing or non-Hermes file stays an error (exit 1), like everywhere
            self.add("open", CRITICAL, f"{exc}", RESTORE)
            return self.findings
        with store:
            self.holders = self.holders_fn(self.path)
            checks = (("integrity", self.check_integrity), ("schema", self.check_schema), ("sizes", self.check_sizes),
                      ("holders", lambda s: self.check_holders()), ("journal_mode", lambda s: self.check_journal()),
                      ("text", self.check_text), ("repairs", self.check_repairs), ("ages", self.check_ages))
            for name, check in checks:
                try:
                    check(store)
                except apsw.Error as exc:  # a damaged page stops one check, never the report
                    self.add(name, CRITICAL, f"the {name} check could not finish: {type(exc).__name__}: {exc}",
                             RESTORE)
                except UnicodeDecodeError:  # stored bytes that are not UTF-8: named by the text check
                    self.add(name, WARNING, f"the {name} check stopped at stored text that is not valid UTF-8 "
                                            "(the sessions holding it are named in the stored_text finding)",
                             "fix or delete those sessions, then run doctor again")
                self.on_progress(1)
        return self.findings


def _num(value: float) -> str:
    return f"{value:g}"


def _same(a: Path, b: Path) -> bool:
    """The same file, however reached (a linked folder or file, a hard link)."""
    from maint.ops.profiles import file_id

    fid = file_id(a)
    return fid is not None and fid == file_id(b)


def last_full_check(store: Store) -> dict[str, Any] | None:
    """The last ``doctor --full`` recorded on this store: {"at": seconds, "result": "ok" | "damage"}."""
    if not store.has_table("state_meta"):
        return None
    try:
        data = json_text.loads(store.get_meta(FULL_CHECK_KEY) or "")
        at = float(data["at"])
    except (ValueError, TypeError, KeyError):
        return None
    return {"at": at, "result": str(data.get("result"))} if math.isfinite(at) else None


def text_mark(store: Store) -> TextMark | None:
    """Where the last recorded full check that found the store clean (integrity and every stored text) stood:
    the daily pass re-reads only the messages added since, and those of the sessions that gained one."""
    from maint.store.text_check import TextMark

    if not store.has_table("state_meta"):
        return None
    try:
        data = json_text.loads(store.get_meta(FULL_CHECK_KEY) or "")
    except (ValueError, TypeError):
        return None
    if not isinstance(data, dict) or data.get("result") != "ok":
        return None
    return TextMark.from_json(data.get("text_mark"))


def record_full_check(path: Path, result: str, now: float, seconds: float,
                      mark: TextMark | None = None) -> str | None:
    """One state_meta row after a whole-file check, in a short write transaction; why not, when it could not.
    *mark* (a clean check only): where its UTF-8 pass stood, for the daily pass (:func:`text_mark`)."""
    value: dict[str, Any] = {"at": now, "result": result, "seconds": round(seconds, 1)}
    if mark is not None and result == "ok":
        value["text_mark"] = mark.as_json()
    try:
        with open_store(path) as store:
            if not store.has_table("state_meta"):
                return "the store has no state_meta table"
            with store.write() as conn:
                conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)",
                             (FULL_CHECK_KEY, json.dumps(value)))
    except MaintError as exc:
        return str(exc)
    return None


def _root_pages(store: Store) -> dict[int, str]:
    return {r[0]: r[1] for r in store.conn.execute(
        "SELECT rootpage, name FROM sqlite_master WHERE rootpage > 0")}


def _owner(line: str, roots: dict[int, str], fts_tables: list[str]) -> str | None:
    """The FTS index an integrity line is about: named in it, or owning the b-tree ('Tree N') it names."""
    names = [line]
    m = re.match(r"Tree (\d+) ", line)
    if m and int(m.group(1)) in roots:
        names.append(roots[int(m.group(1))])
    for table in sorted(fts_tables, key=len, reverse=True):
        for text in names:
            if fts.mentions(text, table) or text.startswith(table + "_"):
                return table
    return None


def _trigger_sql(store: Store) -> list[str]:
    return [r[0] or "" for r in store.conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages'")]


def _fts_layout(store: Store) -> str:
    sql = store.scalar("SELECT sql FROM sqlite_master WHERE name = 'messages_fts'") or ""
    if not sql:
        return "none"
    kind = "external-content" if "content=" in sql.replace(" ", "").lower() else "inline (legacy)"
    version = store.get_meta("fts_storage_version")
    return f"{kind}, fts_storage_version {version if version is not None else 'unset'}"


def _backfill_pending(store: Store) -> tuple[int, int] | None:
    try:
        high = int(store.get_meta("fts_rebuild_high_water") or "")
    except ValueError:
        return None
    try:
        done = int(store.get_meta("fts_rebuild_progress") or "0")
    except ValueError:
        done = 0
    return (done, high) if done < high else None


def summarize(findings: list[Finding]) -> tuple[dict[str, int], str]:
    counts = {s: 0 for s in SEVERITIES}
    for f in findings:
        counts[f.severity] += 1
    worst = max((f.severity for f in findings), key=RANK.__getitem__, default=OK)
    return counts, worst


def run_doctor(path: Path, cfg: Config, *, profile: str | None = None, cfg_error: str | None = None,
               full: bool = False, now: float | None = None,
               holders: Callable[[Path], HolderReport] = find_holders, disk_usage: Callable = shutil.disk_usage,
               home: Path | None = None, on_progress: Callable[[int], None] = lambda n: None,
               record: bool = False) -> dict[str, Any]:
    """Every check on one store; the report carries each finding, the counts and the worst severity, and what
    the default pass left to *full*. *record* (with *full*): note the result in the store's state_meta."""
    started = time.monotonic()
    now = time.time() if now is None else now
    doctor = Doctor(Path(path), profile, cfg, cfg_error, full=full, now=now, holders=holders,
                    disk_usage=disk_usage, home=home, on_progress=on_progress)
    findings = doctor.run()
    recorded = None
    if record and full and doctor.full_result is not None:
        why_not = record_full_check(Path(path), doctor.full_result, now, time.monotonic() - started,
                                    doctor.text_mark)
        recorded = True if why_not is None else f"not recorded: {why_not}"
    counts, worst = summarize(findings)
    return {"store": str(path), "profile": profile, "checked_at": now, "full": full,
            "findings": [f.as_dict() for f in findings], "counts": counts, "worst": worst,
            "skipped": doctor.skipped, "full_check_recorded": recorded,
            "seconds": round(time.monotonic() - started, 3)}


def doctor_store(target: StoreTarget, op: Operator, *, full: bool = False, record: bool = False) -> dict[str, Any]:
    """``hermes-maint doctor`` on one store; a config.yaml that cannot be read is a finding, not a stop."""
    path = config_path_for(target.path, target.profile)
    try:
        cfg, cfg_error = load_config(path, store=target.path), None
    except UsageError as exc:
        cfg, cfg_error = Config(path=path, exists=True), str(exc)
    with op.progress(len(CHECKS), "Checking") as tick:
        return run_doctor(target.path, cfg, profile=target.profile, cfg_error=cfg_error, full=full, on_progress=tick,
                          record=record)


def fails(report: dict[str, Any], level: str | None) -> bool:
    """--fail-on LEVEL: a finding at that level or worse exists."""
    return level is not None and RANK[report["worst"]] >= RANK[level]


def summary_line(report: dict[str, Any]) -> str:
    c = report["counts"]
    where = report["store"] + (f" (profile {report['profile']})" if report.get("profile") else "")
    bad = [f"{f['kind']} ({f['severity']})" for f in report["findings"] if f["severity"] != OK]
    head = f"{PROG} doctor {where}: {report['worst'].upper()} - {c['critical']} critical, " \
           f"{c['warning']} warning, {c['ok']} ok"
    return head + (f": {', '.join(bad)}" if bad else "")
