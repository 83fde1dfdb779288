"""doctor: each finding kind produced on a real store, and its own fix command making it go away."""

import json
import shlex
import sqlite3
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from maint.config import load_config
from maint.ops import history
from maint.ops.doctor import run_doctor
from maint.store.connection import has_wal_reset_bug, open_store
from maint.store.holders import HolderReport
from tests.conftest import Cli, LockHolder, file_hash, run_subprocess
from tests.storegen import StoreBuilder

Usage = namedtuple("Usage", "total used free")
PLENTY = lambda p: Usage(10**12, 10**11, 9 * 10**11)  # noqa: E731
LOW = lambda p: Usage(100 * 10**9, 99 * 10**9, 10**9)  # noqa: E731
HERMES = Path(sys.executable).with_name("hermes")
CONFIRMING = {"prune", "repair-fts", "recover", "repair-prompts", "repair-profiles", "repair-routing"}


def doctor(db, **kw):
    kw.setdefault("disk_usage", PLENTY)
    return run_doctor(db, load_config(), **kw)


def findings(report, kind, severity=None):
    return [f for f in report["findings"] if f["kind"] == kind and (severity is None or f["severity"] == severity)]


def only(report, kind, severity):
    found = findings(report, kind, severity)
    assert len(found) == 1, [f for f in report["findings"] if f["kind"] == kind]
    return found[0]


def apply_fix(fix, home):
    """Run a finding's fix command as an operator would (answering yes where it asks)."""
    for part in fix.split("&&"):
        args = shlex.split(part, comments=True)
        if args[0] == "hermes-maint":
            args = args[1:]
            if args[0] in CONFIRMING and "--yes" not in args:
                args.append("--yes")
            result = Cli()(*args)
            assert result.exit_code == 0, (args, result.output)
        else:
            assert args[0] == "hermes", fix
            done = subprocess.run([str(HERMES), *args[1:]], env={"HERMES_HOME": str(home), "PATH": "/usr/bin:/bin"},
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, (args, done.stdout, done.stderr)


def healthy_mode(db):
    """Rollback journaling: the store is then clean even where Python's SQLite has the WAL-reset bug."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=delete")
    conn.close()


@pytest.fixture
def store(hermes_home):
    db = hermes_home / "state.db"
    with StoreBuilder(db) as b:
        for n in range(20):
            b.session(f"s{n}", age=1 + n, messages=6)
    healthy_mode(db)
    return db


def test_clean_store_has_only_ok_findings(store):
    r = doctor(store)
    assert r["worst"] == "ok" and r["counts"]["warning"] == r["counts"]["critical"] == 0
    kinds = {f["kind"] for f in r["findings"]}
    assert {"integrity", "fts_index", "schema", "fts_layout", "db_size", "wal_size", "free_pages", "holders",
            "replication", "journal_mode", "sqlite", "config", "degraded_prompts", "profiles", "orphans",
            "stray_messages", "last_sweep", "last_vacuum", "last_backup"} <= kinds
    assert all(f["fix"] is None for f in r["findings"])


def test_doctor_never_writes_the_store(store, hermes_home):
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: -1\n")
    with StoreBuilder(store) as b:
        b.session("orphan", source="cron", age=300, ended=False)
    before = file_hash(store)
    inode = store.stat().st_ino
    result = run_subprocess("doctor", "--json", "--full", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    assert file_hash(store) == before and store.stat().st_ino == inode
    r = json.loads(result.stdout)
    assert r["full"] and only(r, "integrity", "ok")["what"].startswith("integrity_check")


# -- integrity -------------------------------------------------------------------------------

def _corrupt_index_page(db):
    conn = sqlite3.connect(db)
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'idx_messages_session'").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(db, "r+b") as fh:  # an index b-tree page turned into a table page: SQLite sees a malformed tree
        fh.seek((root - 1) * size)
        fh.write(b"\x0d")


def test_integrity_damage_is_critical_and_a_good_copy_fixes_it(store, tmp_path, hermes_home):
    copy = tmp_path / "good.db"
    Cli()("optimize", "--db", store, "--into", copy)
    _corrupt_index_page(store)
    f = only(doctor(store), "integrity", "critical")
    assert "idx_messages_session" in " ".join(f["data"]["lines"]) or "Tree" in f["what"]
    assert "backup" in f["fix"] and "optimize --into" in f["fix"]
    copy.replace(store)  # the fix: Hermes stopped, the last good copy moved over the store
    r = doctor(store)
    assert only(r, "integrity", "ok") and r["counts"]["critical"] == 0


def test_truncated_store_is_a_critical_finding_not_a_crash(store, tmp_path):
    copy = tmp_path / "good.db"
    Cli()("optimize", "--db", store, "--into", copy)
    data = store.read_bytes()
    store.write_bytes(data[: len(data) // 2])
    r = doctor(store)
    assert only(r, "open", "critical")["fix"].startswith("stop Hermes") and r["worst"] == "critical"
    copy.replace(store)
    assert not findings(doctor(store), "open")


def test_missing_store_is_an_error_exit_1(tmp_path):
    result = run_subprocess("doctor", "--db", tmp_path / "nope.db")
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1
    assert "no such store" in result.stderr and "Traceback" not in result.stderr


# -- search indexes -----------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["v22", "v30"])
def test_damaged_search_index_is_critical_and_repair_fts_fixes_it(hermes_home, layout):
    db = hermes_home / "state.db"
    with StoreBuilder(db, layout=layout) as b:
        for n in range(20):
            b.session(f"s{n}", age=1, messages=6)
    healthy_mode(db)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE messages_fts_data SET block = zeroblob(length(block)) "
                 "WHERE id = (SELECT MAX(id) FROM messages_fts_data)")
    conn.commit()
    conn.close()
    # FTS5's own check of the index against its content is the weekly full pass's (the daily one says so).
    daily = doctor(db)
    assert any("FTS5 index against content" in s for s in daily["skipped"])
    r = doctor(db, full=True)
    f = only(r, "fts_index", "critical")
    assert f["data"]["table"] == "messages_fts" and f["fix"] == "hermes-maint repair-fts --apply"
    assert only(r, "integrity", "ok")  # the damage is attributed to the index, not to the store
    assert [x["data"]["table"] for x in findings(r, "fts_index", "ok")] == ["messages_fts_trigram"]
    apply_fix(f["fix"], hermes_home)
    after = doctor(db, full=True)
    assert len(findings(after, "fts_index", "ok")) == 2 and after["worst"] == "ok"
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'topic3'"
                                       ).fetchone()[0] > 0


@pytest.mark.parametrize("keep_triggers,severity", [(False, "warning"), (True, "critical")])
def test_missing_search_index_and_hermes_recreates_it(store, hermes_home, keep_triggers, severity):
    conn = sqlite3.connect(store)
    if not keep_triggers:
        for trig in ("messages_fts_trigram_insert", "messages_fts_trigram_delete", "messages_fts_trigram_update"):
            conn.execute(f"DROP TRIGGER IF EXISTS {trig}")
    conn.execute("DROP TABLE messages_fts_trigram")
    conn.commit()
    conn.close()
    f = only(doctor(store), "fts_layout", severity)
    assert "messages_fts_trigram" in f["what"]
    assert f["fix"].startswith("hermes sessions stats && hermes-maint repair-fts --apply")
    apply_fix(f["fix"], hermes_home)
    healthy_mode(store)
    r = doctor(store)
    assert only(r, "fts_layout", "ok") and r["worst"] == "ok"
    assert sqlite3.connect(store).execute("SELECT COUNT(*) FROM messages_fts_trigram WHERE messages_fts_trigram "
                                          "MATCH 'topic3'").fetchone()[0] > 0


# -- size, WAL, free pages ----------------------------------------------------------------------

def _config(home, text):
    (home / "config.yaml").write_text(text)


def test_large_store_warns_and_prune_then_optimize_shrinks_it(hermes_home):
    db = hermes_home / "state.db"
    with StoreBuilder(db) as b:
        for n in range(60):
            b.session(f"old{n}", age=200, messages=30)
        b.session("young", age=1, messages=2)
    healthy_mode(db)
    _config(hermes_home, "hermes_maint:\n  doctor:\n    db_warn_mb: 0.5\n")
    f = only(doctor(db), "db_size", "warning")
    assert "auto_prune is off" in f["what"]
    assert f["fix"] == "hermes-maint prune --older-than 90 --yes && hermes-maint optimize"
    apply_fix(f["fix"], hermes_home)
    assert only(doctor(db), "db_size", "ok")


def test_large_wal_warns_and_optimize_checkpoints_it(store, hermes_home):
    _config(hermes_home, "hermes_maint:\n  doctor:\n    wal_warn_mb: 0.1\n")
    conn = sqlite3.connect(store)
    conn.execute("PRAGMA journal_mode=wal")
    conn.close()
    with open_store(store) as st:  # our connection keeps the WAL file on close (as beside live Hermes)
        st.conn.execute("PRAGMA wal_autocheckpoint=0")
        with st.write() as c:
            for i in range(200):
                c.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES ('s1', 'user', ?, 1)",
                          ("x" * 1000 + str(i),))
    f = only(doctor(store), "wal_size", "warning")
    assert "missed checkpoint" in f["what"] and f["fix"] == "hermes-maint optimize"
    apply_fix(f["fix"], hermes_home)
    assert only(doctor(store), "wal_size", "ok")["data"]["bytes"] < 0.1 * 2**20


def _emptied(db):
    """A store whose deleted messages left well over a quarter of its pages free."""
    with StoreBuilder(db) as b:
        for n in range(60):
            b.session(f"old{n}", age=1, messages=30)
    healthy_mode(db)
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM messages WHERE session_id <> 'old0'")
    conn.commit()
    conn.close()
    return db


def test_free_pages_warn_and_optimize_returns_them(hermes_home):
    store = _emptied(hermes_home / "state.db")
    _config(hermes_home, "hermes_maint:\n  doctor:\n    free_warn_mb: 0.01\n")
    f = only(doctor(store), "free_pages", "warning")
    assert f["data"]["share"] >= 0.25 and f["fix"] == "hermes-maint optimize"
    apply_fix(f["fix"], hermes_home)
    assert only(doctor(store), "free_pages", "ok")


def test_replicated_store_fix_is_a_copy_not_an_in_place_vacuum(hermes_home):
    store = _emptied(hermes_home / "state.db")
    _config(hermes_home, "hermes_maint:\n  replicated: true\n  doctor:\n    free_warn_mb: 0.01\n")
    r = doctor(store)
    f = only(r, "free_pages", "warning")
    assert f["fix"] == f"hermes-maint optimize --into {store}.compact"
    assert "replicated by a replicator" in only(r, "replication", "ok")["what"]
    before = file_hash(store)
    apply_fix(f["fix"], hermes_home)  # the copy is compact; swapping it in is the operator's step
    assert file_hash(store) == before
    assert only(doctor(Path(f"{store}.compact")), "free_pages", "ok")


# -- journal mode and SQLite ----------------------------------------------------------------------

def test_journal_mode_disagreeing_with_config_and_its_fix(store, hermes_home):
    conn = sqlite3.connect(store)
    conn.execute("PRAGMA journal_mode=wal")
    conn.close()
    _config(hermes_home, "database:\n  journal_mode: delete\n")
    f = only(doctor(store), "journal_mode", "warning")
    assert f["fix"].startswith("hermes-maint set-journal-mode delete")
    apply_fix(f["fix"], hermes_home)
    assert only(doctor(store), "journal_mode", "ok")


def test_wal_on_virtiofs_is_critical(store, hermes_home, tmp_path, monkeypatch):
    conn = sqlite3.connect(store)
    conn.execute("PRAGMA journal_mode=wal")
    conn.close()
    mounts = tmp_path / "mounts"
    mounts.write_text(f"myfs {hermes_home} virtiofs rw 0 0\n")
    monkeypatch.setenv("HERMES_MAINT_MOUNTS", str(mounts))
    f = only(doctor(store), "journal_mode", "critical")
    assert "virtiofs" in f["what"]
    apply_fix(f["fix"], hermes_home)
    assert only(doctor(store), "journal_mode", "ok") and load_config().journal_mode == "delete"


def test_stdlib_wal_reset_bug_is_named_for_a_wal_store(store, hermes_home):
    conn = sqlite3.connect(store)
    conn.execute("PRAGMA journal_mode=wal")
    conn.close()
    buggy = has_wal_reset_bug(sqlite3.sqlite_version)
    r = doctor(store)
    assert bool(findings(r, "sqlite", "warning")) is buggy
    assert sqlite3.sqlite_version in findings(r, "sqlite")[0]["what"]
    if buggy:  # this machine's Python links an affected SQLite: the fix must clear it
        apply_fix(only(r, "sqlite", "warning")["fix"], hermes_home)
        assert only(doctor(store), "sqlite", "ok")


# -- config ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,key", [
    ("sessions:\n  retention_days: -5\n", "sessions.retention_days"),
    ("sessions:\n  min_interval_hours: soon\n", "sessions.min_interval_hours"),
    ("hermes_maint:\n  doctor:\n    wal_warn_mb: lots\n", "hermes_maint.doctor.wal_warn_mb"),
])
def test_invalid_config_values_and_hermes_config_set_fixes_them(store, hermes_home, text, key):
    _config(hermes_home, text)
    f = only(doctor(store), "config", "warning")
    assert key in f["what"] and f["fix"].startswith(f"hermes config set {key} ")
    apply_fix(f["fix"], hermes_home)
    assert only(doctor(store), "config", "ok")


def test_auto_prune_unset_on_a_low_disk(store, hermes_home):
    f = only(doctor(store, disk_usage=LOW), "config", "warning")
    assert "auto_prune is unset" in f["what"] and f["fix"] == "hermes-maint autoprune on"
    apply_fix(f["fix"], hermes_home)
    assert only(doctor(store, disk_usage=LOW), "config", "ok")


def test_malformed_config_is_critical_and_doctor_still_checks_the_store(store, hermes_home):
    _config(hermes_home, "sessions:\n  auto_prune: [\n")
    result = run_subprocess("doctor", "--json", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    r = json.loads(result.stdout)
    f = only(r, "config", "critical")
    assert "config.yaml:" in f["what"] and only(r, "integrity", "ok")
    _config(hermes_home, "sessions:\n  auto_prune: false\n")
    assert only(doctor(store), "config", "ok")


# -- what the repairs would fix ---------------------------------------------------------------------

def test_degraded_prompts_and_repair_prompts(hermes_home):
    db = hermes_home / "state.db"
    with StoreBuilder(db, layout="v30") as b:
        pin = b.prompt(json.dumps(["terminal", "skill_manage"]))
        b.session("bad", system_prompt="You are Hermes. ## Memory only", tool_names=pin)
        b.session("good", system_prompt="You are Hermes. ## Skill Safety ...", tool_names=pin)
    healthy_mode(db)
    f = only(doctor(db), "degraded_prompts", "warning")
    assert f["data"]["ids"] == ["bad"] and f["fix"] == "hermes-maint repair-prompts --apply"
    apply_fix(f["fix"], hermes_home)
    assert only(doctor(db), "degraded_prompts", "ok")


def test_stray_profile_rows_and_repair_profiles(hermes_home):
    db = hermes_home / "state.db"
    with StoreBuilder(db) as b:
        b.session("mine", session_key="agent:main:telegram:dm:7", age=1)
        b.session("c1", source="telegram", session_key="agent:coder:telegram:dm:1", age=1, messages=4)
    with StoreBuilder(hermes_home / "profiles" / "coder" / "state.db") as b:
        b.session("own", session_key="agent:coder:discord:group:3", age=1)
    healthy_mode(db)
    f = only(doctor(db, home=hermes_home), "profiles", "warning")
    assert "coder" in f["what"] and f["fix"].startswith("hermes-maint repair-profiles --apply")
    apply_fix(f["fix"], hermes_home)
    assert only(doctor(db, home=hermes_home), "profiles", "ok")
    coder = doctor(hermes_home / "profiles" / "coder" / "state.db", profile="coder", home=hermes_home)
    assert only(coder, "profiles", "ok")


def test_orphans_to_reap_and_the_sweep(store, hermes_home):
    _config(hermes_home, "sessions:\n  auto_prune: true\n")
    with StoreBuilder(store) as b:
        b.session("stuck_cron", source="cron", age=200, ended=False)
    healthy_mode(store)
    f = only(doctor(store), "orphans", "warning")
    assert f["data"]["ids"] == ["stuck_cron"] and f["fix"] == "hermes-maint sweep --force"
    apply_fix(f["fix"], hermes_home)
    assert only(doctor(store), "orphans", "ok")


def _stray(db, sid="lost_1", n=3, ts=1.7e9):
    conn = sqlite3.connect(db)  # the standard library leaves foreign keys off, as a crashed writer might
    for i in range(n):
        conn.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
                     (sid, f"stranded {i}", ts + i))
    conn.commit()
    conn.close()


def test_stray_messages_and_recover(store, hermes_home):
    _stray(store)
    f = only(doctor(store), "stray_messages", "warning")
    assert f["data"] == {"session_ids": ["lost_1"], "messages": 3} and f["fix"] == "hermes-maint recover --apply"
    apply_fix(f["fix"], hermes_home)
    assert only(doctor(store), "stray_messages", "ok")


# -- ages ---------------------------------------------------------------------------------------------

def test_no_sweep_yet_while_auto_prune_is_on(store, hermes_home):
    _config(hermes_home, "sessions:\n  auto_prune: true\n")
    f = only(doctor(store), "last_sweep", "warning")
    assert "no sweep has run" in f["what"] and f["fix"] == "hermes-maint sweep"
    apply_fix(f["fix"], hermes_home)
    assert only(doctor(store), "last_sweep", "ok")


def test_stale_sweep_marker(store, hermes_home):
    _config(hermes_home, "sessions:\n  auto_prune: true\n")
    with open_store(store) as st:
        st.set_meta("last_auto_prune", "1700000000")
    f = only(doctor(store, now=1700000000 + 3 * 86400), "last_sweep", "warning")
    assert "3.0 days ago" in f["what"]
    assert only(doctor(store, now=1700000000 + 86400), "last_sweep", "ok")


def test_old_backup_warns(store, hermes_home):
    with open_store(store) as st:
        history.append(st, "backup", {"snapshot": {"sessions": 20}}, seconds=1.0, now=1700000000)
    f = only(doctor(store, now=1700000000 + 3 * 86400), "last_backup", "warning")
    assert f["fix"] == "hermes-maint backup"
    assert only(doctor(store, now=1700000000 + 3600), "last_backup", "ok")


# -- the command -------------------------------------------------------------------------------------

def test_fail_on_and_summary_exit_codes(store, hermes_home):
    env = {"HERMES_HOME": str(hermes_home)}
    assert run_subprocess("doctor", "--fail-on", "warning", env=env).returncode == 0
    _stray(store)
    warn = run_subprocess("doctor", "--summary", "--fail-on", "warning", env=env)
    assert warn.returncode == 1 and warn.stdout.count("\n") == 1
    assert "WARNING - 0 critical, 1 warning" in warn.stdout and "stray_messages (warning)" in warn.stdout
    assert run_subprocess("doctor", "--summary", "--fail-on", "critical", env=env).returncode == 0
    assert run_subprocess("doctor", "--summary", env=env).returncode == 0


def test_text_output_names_the_fix(store, hermes_home):
    _stray(store)
    result = run_subprocess("doctor", env={"HERMES_HOME": str(hermes_home)})
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "stray_messages" in line)
    assert lines[at].strip().startswith("WARNING") and lines[at + 1].strip() == "fix: hermes-maint recover --apply"


def test_all_profiles_one_json_line_each_and_profile_fix_flags(store, hermes_home):
    other = hermes_home / "profiles" / "coder" / "state.db"
    with StoreBuilder(other) as b:
        b.session("c", age=1)
    healthy_mode(other)
    _stray(other)
    result = run_subprocess("doctor", "--all-profiles", "--json", env={"HERMES_HOME": str(hermes_home)})
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["profile"] for r in reports] == [None, "coder"]
    assert only(reports[1], "stray_messages", "warning")["fix"] == "hermes-maint recover --apply --profile coder"


@pytest.mark.parametrize("args,needle", [(["--fail-on", "error"], "--fail-on"),
                                          (["--summary", "--json"], "exclusive")])
def test_bad_flags(store, hermes_home, args, needle):
    result = run_subprocess("doctor", *args, env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 2 and needle in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_holders_are_named(store):
    r = doctor(store, holders=lambda p: HolderReport())
    assert only(r, "holders", "ok")["what"] == "no other process holds the store"


def test_missing_search_index_fix_reaches_a_profile_store(hermes_home):
    db = hermes_home / "profiles" / "coder" / "state.db"
    with StoreBuilder(db) as b:
        b.session("c", messages=4)
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE messages_fts")  # its triggers stay: every message write would fail
    conn.commit()
    conn.close()
    f = only(doctor(db, profile="coder"), "fts_layout", "critical")
    assert f["fix"].startswith("hermes --profile coder sessions stats && hermes-maint repair-fts --apply --profile "
                               "coder")
    apply_fix(f["fix"], hermes_home)
    assert only(doctor(db, profile="coder"), "fts_layout", "ok")
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'topic1'"
                                       ).fetchone()[0] == 1


def test_rollback_store_held_by_a_writer_is_not_read_whole(store, hermes_home):
    with LockHolder(store) as holder:  # a live writer on a rollback-journal store
        f = only(doctor(store), "integrity", "warning")
        assert f"pid {holder.proc.pid}" in f["what"] and f["fix"] == "stop Hermes, then hermes-maint doctor"
        assert not findings(doctor(store), "fts_index")
    assert only(doctor(store), "integrity", "ok")


def test_gateway_rows_that_lost_their_routing_and_repair_routing(hermes_home):
    from tests.test_repair_routing import build

    db = build(hermes_home / "state.db", "v30")
    healthy_mode(db)
    f = only(doctor(db), "unrouted", "warning")
    assert sorted(f["data"]["ids"]) == ["dc_child", "tg_orphan"]
    assert f["fix"].startswith("hermes-maint repair-routing --apply")
    apply_fix(f["fix"], hermes_home)
    after = only(doctor(db), "unrouted", "ok")
    assert "5 without unambiguous evidence" in after["what"]  # ambiguous ones stay the operator's call


def test_a_profile_is_checked_against_its_own_config(store, hermes_home):
    coder = hermes_home / "profiles" / "coder"
    with StoreBuilder(coder / "state.db") as b:
        b.session("c", age=1)
    healthy_mode(coder / "state.db")
    (coder / "config.yaml").write_text("sessions:\n  retention_days: -1\n")

    def check():
        result = run_subprocess("doctor", "--profile", "coder", "--json", env={"HERMES_HOME": str(hermes_home)})
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    f = only(check(), "config", "warning")
    assert str(coder / "config.yaml") in f["what"]
    assert f["fix"] == "hermes --profile coder config set sessions.retention_days 90"
    apply_fix(f["fix"], hermes_home)
    assert only(check(), "config", "ok")
    assert only(doctor(store), "config", "ok")  # the default store's config was never the problem


def test_stored_text_not_utf8_is_a_finding_naming_the_sessions_and_the_rest_still_runs(tmp_path):
    """Finding 12 of issue 24: one bad byte made doctor exit 2 naming no session."""
    from tests.test_export_stored_text import bad_store

    store = bad_store(tmp_path / "state.db")
    result = Cli()("doctor", "--db", store, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    found = only(report, "stored_text", "warning")
    assert {(s["id"], s["fields"][0]) for s in found["data"]["sessions"]} == {
        ("badmsg", "messages.content"), ("badtitle", "sessions.title"), ("x\\xff", "sessions.id")}
    assert "x\\xff (sessions.id" in found["what"]
    for kind in ("integrity", "holders", "last_backup", "orphans", "stray_messages"):
        assert findings(report, kind), kind
