"""The daily doctor stays light at 10 GB: it checks every table and index one at a time and leaves FTS5's own
check and the page accounting to the weekly --full pass, which records when it ran; checked by the statements
run, not by time."""

import json
import re
import time
from collections import namedtuple

import apsw
import pytest

from maint.config import load_config
from maint.ops.doctor import FULL_CHECK_KEY, FULL_CHECK_MAX_AGE_S, run_doctor
from maint.store.holders import HolderReport
from tests.conftest import file_hash, query, run_subprocess
from tests.storegen import StoreBuilder

Usage = namedtuple("Usage", "total used free")
PLENTY = lambda p: Usage(10**12, 10**11, 9 * 10**11)  # noqa: E731


def doctor(db, **kw):
    return run_doctor(db, load_config(), disk_usage=PLENTY, holders=lambda p: HolderReport([], []), **kw)


@pytest.fixture(params=["v22", "v30"])
def db(request, hermes_home):
    path = hermes_home / "state.db"
    with StoreBuilder(path, layout=request.param) as b:
        for n in range(8):
            b.session(f"s{n}", age=1 + n, messages=4)
    return path


class Statements:
    def __init__(self):
        self.ran: list[str] = []

    def hook(self, conn):
        conn.exec_trace = lambda _c, sql, _b: self.ran.append(" ".join(sql.split())) or True

    def __enter__(self):
        apsw.connection_hooks.append(self.hook)
        return self

    def __exit__(self, *exc):
        apsw.connection_hooks.remove(self.hook)

    def checks(self):
        return [s for s in self.ran if re.match(r"PRAGMA (quick_check|integrity_check)", s, re.I)]


def btree_tables(db):
    return {r[0] for r in query(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND rootpage > 0")}


def test_daily_pass_checks_each_btree_table_and_never_the_whole_file(db):
    """A whole-file quick_check runs FTS5's own check in SQLite >= 3.44 (70 of 76 s on a 9 GB store)."""
    with Statements() as seen:
        r = doctor(db)
    checks = seen.checks()
    assert all(re.fullmatch(r"PRAGMA quick_check\('[^']+'\)", s) for s in checks), checks
    checked = {re.search(r"'([^']+)'", s).group(1) for s in checks}
    assert checked == btree_tables(db) | {"sqlite_master"}  # every table and its indexes, once each
    assert len(checks) == len(checked)
    assert not any(t in checked for t in ("messages_fts", "messages_fts_trigram"))  # no FTS5 virtual table
    assert r["skipped"] and any("FTS5" in s for s in r["skipped"]) and any("page accounting" in s for s in r["skipped"])
    assert "left to --full" in [f for f in r["findings"] if f["kind"] == "integrity"][0]["what"]


def test_full_pass_runs_one_whole_file_integrity_check_and_skips_nothing(db):
    with Statements() as seen:
        r = doctor(db, full=True)
    assert [s for s in seen.checks() if not re.search(r"\(", s)] == ["PRAGMA integrity_check"]
    assert r["skipped"] == [] and r["full_check_recorded"] is None


def test_damage_in_a_table_is_still_found_by_the_daily_pass(db):
    conn = apsw.Connection(str(db))
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'idx_messages_session'").fetchall()[0][0]
    size = conn.execute("PRAGMA page_size").fetchall()[0][0]
    conn.close()
    with open(db, "r+b") as fh:
        fh.seek((root - 1) * size)
        fh.write(b"\x0d" + b"\xff" * 64)  # a leaf page header with nonsense cell counts
    r = doctor(db)
    integrity = [f for f in r["findings"] if f["kind"] == "integrity"][0]
    assert integrity["severity"] == "critical" and "messages" in integrity["what"]


def test_record_notes_the_full_check_and_the_daily_pass_reports_its_age(db, hermes_home):
    env = {"HERMES_HOME": str(hermes_home)}
    before = file_hash(db)
    assert run_subprocess("doctor", "--full", "--db", db, env=env).returncode == 0
    assert file_hash(db) == before  # without --record, doctor writes nothing
    daily = doctor(db)
    assert [f["severity"] for f in daily["findings"] if f["kind"] == "full_check"] == ["ok"]
    assert "weekly-doctor-full" in [f for f in daily["findings"] if f["kind"] == "full_check"][0]["what"]

    result = run_subprocess("doctor", "--full", "--record", "--json", "--db", db, env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["full_check_recorded"] is True
    (value,) = query(db, "SELECT value FROM state_meta WHERE key = ?", FULL_CHECK_KEY)[0]
    noted = json.loads(value)
    assert noted["result"] == "ok" and abs(noted["at"] - time.time()) < 600
    assert query(db, "SELECT COUNT(*) FROM state_meta WHERE key LIKE 'hermes_maint.doctor.%'")[0][0] == 1

    fresh = [f for f in doctor(db)["findings"] if f["kind"] == "full_check"][0]
    assert fresh["severity"] == "ok" and "last full check" in fresh["what"]
    stale = [f for f in doctor(db, now=noted["at"] + FULL_CHECK_MAX_AGE_S + 3600)["findings"]
             if f["kind"] == "full_check"][0]
    assert stale["severity"] == "warning" and stale["fix"].startswith("hermes-maint doctor --full --record")


def test_a_recorded_damaged_full_check_stays_a_warning_in_the_daily_pass(db):
    import sqlite3

    conn = sqlite3.connect(db)
    conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)",
                 (FULL_CHECK_KEY, json.dumps({"at": time.time() - 60, "result": "damage"})))
    conn.commit()
    conn.close()
    f = [f for f in doctor(db)["findings"] if f["kind"] == "full_check"][0]
    assert f["severity"] == "warning" and "found damage" in f["what"]


def test_record_without_full_is_a_usage_error(db, hermes_home):
    before = file_hash(db)
    result = run_subprocess("doctor", "--record", "--db", db, env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 2 and "--record goes with --full" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and file_hash(db) == before


def test_weekly_full_job_ships_disabled_and_records(hermes_home, db):
    from maint.jobs.scheduler import load_catalogue

    jobs = {j.name: j for j in load_catalogue()}
    job = jobs["weekly-doctor-full"]
    assert not job.enabled and job.command == ["doctor", "--full", "--record", "--summary"]
    assert jobs["daily-doctor"].command == ["doctor", "--summary"]
    result = run_subprocess("jobs", "run-once", "weekly-doctor-full", "--db", db, env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    assert query(db, "SELECT COUNT(*) FROM state_meta WHERE key = ?", FULL_CHECK_KEY)[0][0] == 1


def test_prompt_scan_reads_each_shared_prompt_and_pin_once(hermes_home):
    """The daily doctor's degraded-prompt check: sessions share a few content-addressed prompts and pins, and
    each distinct one is read once per scan (it was two queries per session: half the daily doctor's time at
    200k sessions). The findings are the same."""
    from maint.ops.prompts import scan
    from maint.store.connection import open_store

    path = hermes_home / "state.db"
    with StoreBuilder(path, layout="v30") as b:
        degraded = b.prompt("You are Hermes (reduced).")
        healthy = b.prompt("You are Hermes.\n## Skill Safety\nbe careful")
        pin = b.prompt(json.dumps(["terminal", "skill_manage"]))
        for n in range(300):
            b.session(f"s{n:03d}", age=1, messages=1)
            b.set(f"s{n:03d}", system_prompt_hash=degraded if n % 3 == 0 else healthy, tool_names=pin)
    with Statements() as st, open_store(path, readonly=True) as store:
        found = scan(store)
    reads = [s for s in st.ran if "FROM system_prompts WHERE hash" in s]
    assert len(reads) <= 3  # before: 400 (each session's prompt, and the pin of each degraded one)
    assert list(found.verified.ids) == [f"s{n:03d}" for n in range(0, 300, 3)]
    assert len(found.unverifiable) == 0


def test_doctor_names_50_degraded_prompts_without_unpacking_the_rest(hermes_home, monkeypatch):
    """The finding lists 50 ids; it built an entry for every degraded session first (84,000 at 420k: +8 MB)."""
    from maint.ops import prompts

    path = hermes_home / "state.db"
    with StoreBuilder(path, layout="v30") as b:
        degraded = b.prompt("You are Hermes (reduced).")
        pin = b.prompt(json.dumps(["terminal", "skill_manage"]))
        for n in range(120):
            b.session(f"s{n:03d}", age=1, messages=1)
            b.set(f"s{n:03d}", system_prompt_hash=degraded, tool_names=pin)
    unpacked = []
    original = prompts.Findings.__getitem__
    monkeypatch.setattr(prompts.Findings, "__getitem__", lambda self, i: unpacked.append(i) or original(self, i))
    report = doctor(path)
    finding = next(f for f in report["findings"] if f["kind"] == "degraded_prompts")
    assert list(finding["data"]["ids"]) == [f"s{n:03d}" for n in range(50)]
    assert len(unpacked) <= 50  # before: 120


# -- the UTF-8 check of stored text: the daily pass reads what can have changed since the last clean full check --

def _raw(db, sql, *params):
    import sqlite3

    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(sql, params)
    conn.close()


def _append(db, sid, n, *, start=0):
    """*n* messages on session *sid* (created when missing), as Hermes adds them."""
    _raw(db, "INSERT OR IGNORE INTO sessions (id, source, started_at) VALUES (?, 'cli', ?)", sid, time.time())
    for i in range(start, start + n):
        _raw(db, "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
             sid, f"added {i} of {sid}", time.time())


def _decoded(monkeypatch):
    """Every stored text the UTF-8 check decodes (the raw bytes handed to ``maint_not_utf8``)."""
    from maint.store import text_check

    seen: list[bytes] = []
    real = text_check.not_utf8
    monkeypatch.setattr(text_check, "not_utf8", lambda raw: seen.append(raw) or real(raw))
    return seen


def _text(report):
    return [f for f in report["findings"] if f["kind"] == "stored_text"][0]


def test_a_clean_recorded_full_check_marks_where_its_utf8_pass_stood(db):
    r = doctor(db, full=True, record=True)
    assert r["full_check_recorded"] is True
    (value,) = query(db, "SELECT value FROM state_meta WHERE key = ?", FULL_CHECK_KEY)[0]
    top = query(db, "SELECT seq FROM sqlite_sequence WHERE name = 'messages'")[0][0]
    assert json.loads(value)["text_mark"]["message_id"] == top
    assert query(db, "SELECT COUNT(*) FROM state_meta WHERE key LIKE 'hermes_maint.%'")[0][0] == 1  # one row


def test_the_daily_pass_decodes_only_the_messages_added_since_the_mark(db, monkeypatch):
    """At 420k sessions the UTF-8 check of every stored text was 14 of the daily doctor's 23 s."""
    doctor(db, full=True, record=True)
    _append(db, "fresh", 3)
    seen = _decoded(monkeypatch)
    r = doctor(db)
    texts = b"\n".join(s for s in seen if s)
    assert b"added 0 of fresh" in texts and b"added 2 of fresh" in texts
    assert b"message 0 of s" not in texts  # no message stored before the mark is read again
    f = _text(r)
    assert f["severity"] == "ok" and f["data"]["new_messages"] == 3 and f["data"]["older_messages"] == 0
    assert f["data"]["not_reread"] == 32 and "run --full for all" in f["what"]
    assert any("UTF-8 check of the 32 message(s)" in s for s in r["skipped"])


def test_without_a_mark_the_daily_pass_reads_every_row_and_says_how_to_get_one(db, monkeypatch):
    seen = _decoded(monkeypatch)
    f = _text(doctor(db))
    assert f["data"]["mark"] is None and "doctor --full --record" in f["what"]
    assert b"message 0 of s" in b"\n".join(s for s in seen if s)


def test_bad_text_added_since_the_mark_is_found_by_the_daily_pass(db):
    doctor(db, full=True, record=True)
    _append(db, "fresh", 2)
    _raw(db, "UPDATE messages SET content = CAST(x'ff41' AS TEXT) WHERE id = (SELECT MAX(id) FROM messages)")
    f = _text(doctor(db))
    assert f["severity"] == "warning" and [s["id"] for s in f["data"]["sessions"]] == ["fresh"]


def test_rewritten_in_place_the_rule_for_each_table(db):
    """Hermes rewrites session rows at any time (title, model_config, end_reason …) and a message's api_content
    during its session's turn: the daily pass reads every session row, and every message of a session that
    gained one since the mark; an old message rewritten in a session that gained none waits for --full."""
    doctor(db, full=True, record=True)
    _raw(db, "UPDATE sessions SET title = CAST(x'41c3' AS TEXT) WHERE id = 's1'")
    old = "(SELECT MIN(id) FROM messages WHERE session_id = ?)"
    _raw(db, f"UPDATE messages SET content = CAST(x'ff41' AS TEXT) WHERE id = {old}", "s2")  # then a turn
    _append(db, "s2", 1, start=100)
    _raw(db, f"UPDATE messages SET content = CAST(x'ff42' AS TEXT) WHERE id = {old}", "s3")  # no turn since
    daily = _text(doctor(db))
    assert {s["id"]: s["fields"] for s in daily["data"]["sessions"]} == {
        "s1": ["sessions.title"], "s2": ["messages.content"]}
    assert daily["data"]["older_messages"] == 4
    full = _text(doctor(db, full=True, record=True))
    assert {s["id"] for s in full["data"]["sessions"]} == {"s1", "s2", "s3"}
    (value,) = query(db, "SELECT value FROM state_meta WHERE key = ?", FULL_CHECK_KEY)[0]
    assert "text_mark" not in json.loads(value)  # not clean: no mark, the daily pass reads every row again
    assert {s["id"] for s in _text(doctor(db))["data"]["sessions"]} == {"s1", "s2", "s3"}


def test_a_mark_past_the_counter_is_not_trusted(db):
    """A mark the store's counter never reached (the row copied in from another store) means a complete pass."""
    _raw(db, "INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)", FULL_CHECK_KEY,
         json.dumps({"at": time.time(), "result": "ok", "text_mark": {"message_id": 10**9, "at": time.time()}}))
    _raw(db, "UPDATE messages SET content = CAST(x'ff41' AS TEXT) WHERE id = (SELECT MIN(id) FROM messages)")
    f = _text(doctor(db))
    assert f["severity"] == "warning" and f["data"]["mark"] is None


def test_the_daily_utf8_check_never_scans_the_messages(db, hermes_home):
    """Messages past the mark are read by rowid, and older ones through their session: a plan that scans
    the messages table or one of its indexes, or looks up every session's messages and filters them, reads
    every message's entry (0.9 s of 4.5 M messages)."""
    import sqlite3

    conn = sqlite3.connect(db)
    for sql in ("CREATE INDEX IF NOT EXISTS idx_messages_session_active ON messages(session_id, active, timestamp)",
                "CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, timestamp)"):
        conn.execute(sql)  # the indexes hermes-agent keeps on messages
    conn.close()
    doctor(db, full=True, record=True)
    _append(db, "fresh", 2)
    ran: list[tuple[str, object]] = []

    def hook(conn):
        conn.exec_trace = lambda _c, sql, bindings: ran.append((sql, bindings)) or True

    from maint.store.connection import open_store
    from maint.store.text_check import unreadable_since
    from maint.ops.doctor import text_mark

    apsw.connection_hooks.append(hook)
    try:
        with open_store(db, readonly=True) as store:
            unreadable_since(store, text_mark(store))
    finally:
        apsw.connection_hooks.remove(hook)
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    conn.create_scalar_function("maint_not_utf8", lambda raw: 0, 1)  # to plan the statements
    reading = [(sql, b) for sql, b in ran if re.search(r"\bmessages\b", sql) and sql.lstrip().upper().startswith(
        ("SELECT", "WITH"))]
    assert reading
    for sql, bindings in reading:
        plan = " | ".join(r[-1] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, bindings or ()))
        assert not re.search(r"SCAN (m|messages)\b", plan), (sql, plan)
        assert "INTEGER PRIMARY KEY (rowid>?)" in plan, (sql, plan)  # not every session's messages, filtered


def test_a_stored_prompt_is_decoded_once_however_many_sessions_point_at_it(monkeypatch, hermes_home):
    """Joined to the sessions, the prompt check decoded a prompt once per session pointing at it, twice over
    (840,000 calls of the daily doctor's 1.35 M at 420k sessions)."""
    path = hermes_home / "state.db"
    with StoreBuilder(path, layout="v30") as b:
        shared = b.prompt("You are Hermes.")
        for n in range(40):
            b.session(f"s{n:02d}", age=1, messages=1)
            b.set(f"s{n:02d}", system_prompt_hash=shared, tool_names=shared)
    from maint.ops.doctor import text_mark
    from maint.store.connection import open_store
    from maint.store.text_check import unreadable_sessions, unreadable_since

    doctor(path, full=True, record=True)
    seen = _decoded(monkeypatch)
    with open_store(path, readonly=True) as store:
        assert unreadable_sessions(store) == []
        assert seen.count(b"You are Hermes.") == 1  # the complete pass (--full)
        seen.clear()
        assert unreadable_since(store, text_mark(store)).bad == []
        assert seen.count(b"You are Hermes.") == 1  # the daily pass


def test_prompt_scan_reads_only_the_sessions_that_can_have_a_degraded_prompt(hermes_home, monkeypatch):
    """Sessions pointing at a stored prompt that has the Skill Safety guidance (most of them) have nothing to
    report: the scan read each of 420,000 rows to learn that (2 of the daily doctor's 12 s). The findings are
    the same."""
    from maint.ops.prompts import scan
    from maint.store.connection import Store, open_store

    path = hermes_home / "state.db"
    with StoreBuilder(path, layout="v30") as b:
        degraded = b.prompt("You are Hermes (reduced).")
        healthy = b.prompt("You are Hermes.\n## Skill Safety\nbe careful")
        pin = b.prompt(json.dumps(["terminal", "skill_manage"]))
        for n in range(200):
            b.session(f"s{n:03d}", age=1, messages=1)
            b.set(f"s{n:03d}", system_prompt_hash=degraded if n % 50 == 0 else healthy, tool_names=pin)
        b.session("inline", age=1, messages=1, system_prompt="You are Hermes, inline and reduced.")
        b.set("inline", tool_names=pin)
        b.session("noprompt", age=1, messages=1)
        b.session("missing", age=1, messages=1)
        b.set("missing", system_prompt_hash="0" * 64, tool_names=pin)  # a hash with no stored prompt
    read = []
    real = Store.iter_rows

    def counting(self, sql, params=()):
        for row in real(self, sql, params):
            read.append(row["id"])
            yield row

    monkeypatch.setattr(Store, "iter_rows", counting)
    with open_store(path, readonly=True) as store:
        found = scan(store)
    assert list(found.verified.ids) == ["inline", "s000", "s050", "s100", "s150"]
    assert sorted(read) == ["inline", "s000", "s050", "s100", "s150"]  # before: all 203


def test_stray_messages_are_found_with_one_session_lookup_per_session_not_per_message(db):
    """The stray-message check looked the session row up for every message (1.8 s of the daily doctor at
    4.5 M messages); it now reads the distinct session ids in the index's order and looks each up once."""
    from maint.ops.recover import STRAY_SQL, find_stray

    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    plan = [r[-1] for r in conn.execute("EXPLAIN QUERY PLAN " + STRAY_SQL)]
    conn.close()
    lookup = next(i for i, line in enumerate(plan) if re.match(r"SEARCH s ", line))
    assert any(re.match(r"SCAN d\b", line) for line in plan[:lookup]), plan  # over the distinct ids
    assert not any(re.match(r"SCAN m\b", line) for line in plan), plan  # never a lookup per message row
    _raw(db, "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('gone', 'user', 'x', 5)")
    _raw(db, "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('gone', 'user', 'y', 7)")
    from maint.store.connection import open_store

    with open_store(db, readonly=True) as store:
        assert [(s.session_id, s.messages, s.first, s.last) for s in find_stray(store)] == [("gone", 2, 5.0, 7.0)]


def test_a_mark_over_8_days_old_means_a_complete_pass(db):
    """An old message rewritten in place in a session that gained none since waits for the weekly --full, and
    no longer: without it the daily pass reads every row again."""
    doctor(db, full=True, record=True)
    (value,) = query(db, "SELECT value FROM state_meta WHERE key = ?", FULL_CHECK_KEY)[0]
    at = json.loads(value)["at"]
    _raw(db, "UPDATE messages SET content = CAST(x'ff41' AS TEXT) WHERE id = (SELECT MIN(id) FROM messages)")
    assert _text(doctor(db, now=at + FULL_CHECK_MAX_AGE_S - 60))["severity"] == "ok"  # left to the weekly pass
    f = _text(doctor(db, now=at + FULL_CHECK_MAX_AGE_S + 60))
    assert f["severity"] == "warning" and f["data"]["mark"] is None and "over 8 days old" in f["what"]
