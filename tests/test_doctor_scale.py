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
