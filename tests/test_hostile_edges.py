"""Findings of a hostile try (issue 18), each reproduced: links, special files, races, unknown schemas.

Every test here failed on the code before its fix.
"""

import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import REPO, file_hash, query, run_subprocess, session_ids
from tests.storegen import StoreBuilder


def _store(path, n=3, layout="v22"):
    with StoreBuilder(path, layout=layout) as b:
        for i in range(n):
            b.session(f"old{i}", age=200, messages=3)
        b.session("recent", age=1)
    return path


# -- 1, 2: files we write ------------------------------------------------------------------------

def test_planted_links_never_redirect_a_verified_export(tmp_path):
    store = _store(tmp_path / "state.db")
    out, outside = tmp_path / "shared", tmp_path / "victim.txt"
    out.mkdir()
    outside.write_text("precious\n")
    os.chmod(outside, 0o644)
    os.symlink(outside, out / ".hermes_session_old0.jsonl.partial")  # the old, guessable temporary name
    os.symlink(outside, out / "hermes_session_old0.jsonl")  # and the final name
    result = run_subprocess("export", out, "--db", store, "--session-id", "old0", "--delete-after-verified", "--yes")
    assert result.returncode == 1 and "is a symbolic link" in result.stderr
    assert outside.read_text() == "precious\n" and stat.S_IMODE(outside.stat().st_mode) == 0o644
    assert "old0" in session_ids(store)  # the only copy was not deleted
    assert os.path.islink(out / "hermes_session_old0.jsonl")
    assert os.path.islink(out / ".hermes_session_old0.jsonl.partial")


def test_old_temporary_name_link_is_not_followed(tmp_path):
    store = _store(tmp_path / "state.db")
    out, outside = tmp_path / "shared", tmp_path / "victim.txt"
    out.mkdir()
    outside.write_text("precious\n")
    os.symlink(outside, out / ".hermes_session_old0.jsonl.partial")
    result = run_subprocess("export", out, "--db", store, "--session-id", "old0", "--delete-after-verified", "--yes",
                            "--json")
    assert result.returncode == 0, result.stderr
    assert outside.read_text() == "precious\n"
    assert (out / "hermes_session_old0.jsonl").is_file() and not (out / "hermes_session_old0.jsonl").is_symlink()
    assert stat.S_IMODE((out / "hermes_session_old0.jsonl").stat().st_mode) == 0o600


@pytest.mark.parametrize("kind", ["fifo", "chardev", "dir"])
def test_export_refuses_special_destinations(kind, tmp_path):
    store = _store(tmp_path / "state.db")
    if kind == "fifo":
        target = tmp_path / "pipe"
        os.mkfifo(target)
    elif kind == "chardev":
        target = "/dev/full"
    else:
        target = tmp_path / "dir.jsonl"
        target.mkdir()
        target = str(target) + "/../dir.jsonl/../dir.jsonl"  # a path that names the folder without a slash
    result = run_subprocess("export", target, "--db", store, timeout=30)
    if kind == "dir":  # a folder is a folder: the file is named inside it
        assert result.returncode == 0, result.stderr
        return
    assert result.returncode == 1, result.stderr
    assert ("a FIFO" if kind == "fifo" else "a device") in result.stderr and "nothing was written" in result.stderr


def test_replacing_an_existing_export_says_so_and_keeps_a_narrower_mode(tmp_path):
    store = _store(tmp_path / "state.db")
    backup = tmp_path / "backup.jsonl"
    backup.write_text("yesterday\n")
    os.chmod(backup, 0o640)
    result = run_subprocess("export", backup, "--db", store)
    assert result.returncode == 0 and "replaced the existing file" in result.stderr
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600 & 0o640
    assert len(backup.read_text().splitlines()) == 4
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_manifest_that_is_not_ours_refuses_before_writing(tmp_path):
    store = _store(tmp_path / "state.db")
    out = tmp_path / "md"
    out.mkdir()
    (out / "manifest.jsonl").write_text("this is not json\n")
    result = run_subprocess("export", out, "--db", store, "--format", "md", "--source", "cli")
    assert result.returncode == 1 and "manifest.jsonl:1: not a manifest entry" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["manifest.jsonl"]


# -- 4: snapshots --------------------------------------------------------------------------------

def test_repair_profiles_snapshots_are_private(hermes_home):
    with StoreBuilder(hermes_home / "state.db") as b:
        b.session("c1", session_key="agent:coder:telegram:dm:1", messages=2, age=1)
    with StoreBuilder(hermes_home / "profiles" / "coder" / "state.db") as b:
        b.session("own", age=1)
    result = run_subprocess("repair-profiles", "--apply", "--yes", "--json", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    folder = json.loads(result.stdout)["snapshot"]
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    files = os.listdir(folder)
    assert files and all(stat.S_IMODE(os.stat(os.path.join(folder, f)).st_mode) == 0o600 for f in files)


# -- 5: a FIFO as the store ----------------------------------------------------------------------

@pytest.mark.parametrize("args", [["stats"], ["list"], ["prune", "--dry-run"], ["export", "-"],
                                  ["set-journal-mode", "delete"], ["repair-prompts"], ["optimize"]])
def test_a_fifo_as_the_store_is_refused_at_once(args, tmp_path):
    fifo = tmp_path / "state.db"
    os.mkfifo(fifo)
    result = run_subprocess(*args, "--db", fifo, timeout=30)
    assert result.returncode == 1
    assert result.stderr.strip() == f"hermes-maint: error: {fifo}: is a FIFO, not a store file; refusing to open it"


# -- 7: values at the edge -----------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0001-01-01", "9999999999d", "1e400", "nan"])
def test_out_of_range_times_are_one_line_errors(value, tmp_path):
    store = _store(tmp_path / "state.db")
    result = run_subprocess("prune", "--db", store, "--before", value, "--dry-run")
    assert result.returncode == 2 and result.stderr.startswith("hermes-maint: error: --before:")
    assert len(result.stderr.strip().splitlines()) == 1


# -- 8: repair-profiles over a bad store ---------------------------------------------------------

def test_report_only_repair_profiles_goes_on_past_a_bad_store(hermes_home):
    with StoreBuilder(hermes_home / "state.db") as b:
        b.session("c1", session_key="agent:coder:telegram:dm:1", messages=2, age=1)
    (hermes_home / "profiles" / "broken").mkdir(parents=True)
    (hermes_home / "profiles" / "broken" / "state.db").write_text("not sqlite\n")
    with StoreBuilder(hermes_home / "profiles" / "coder" / "state.db") as b:
        b.session("own", age=1)
    env = {"HERMES_HOME": str(hermes_home)}
    result = run_subprocess("repair-profiles", "--json", env=env)
    assert result.returncode == 0, result.stderr
    kinds = {f["kind"] for f in json.loads(result.stdout)["findings"]}
    assert kinds == {"unreadable_store", "stray_sessions"}
    before = file_hash(hermes_home / "state.db")
    applied = run_subprocess("repair-profiles", "--apply", "--yes", env=env)
    assert applied.returncode == 1 and "cannot be read" in applied.stderr
    assert file_hash(hermes_home / "state.db") == before


# -- 9: two of us at once ------------------------------------------------------------------------

def test_a_second_writer_of_ours_is_refused_naming_the_first(tmp_path):
    store = _store(tmp_path / "state.db")
    code = ("import sys; from maint.store.runlock import run_lock; lock = run_lock(sys.argv[1]);"
            "print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code, str(store)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=REPO)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = file_hash(store)
        for args in (["prune", "--yes"], ["archive", "--source", "cli", "--yes"], ["optimize"]):
            result = run_subprocess(*args, "--db", store)
            assert result.returncode == 1
            assert f"another hermes-maint (pid {holder.pid}) is working on this store" in result.stderr
        assert file_hash(store) == before
        assert run_subprocess("stats", "--db", store).returncode == 0  # readers are never refused
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert run_subprocess("prune", "--db", store, "--yes").returncode == 0


def test_two_prunes_at_once_never_report_the_same_session(tmp_path):
    store = tmp_path / "state.db"
    with StoreBuilder(store) as b:
        for i in range(300):
            b.session(f"s{i}", age=200, messages=4)
    results = []

    def prune():
        results.append(run_subprocess("prune", "--db", store, "--yes", "--json"))

    threads = [threading.Thread(target=prune) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reported = [set(json.loads(r.stdout)["session_ids"]) for r in results if r.returncode == 0]
    refused = [r for r in results if r.returncode == 1]
    assert all("another hermes-maint" in r.stderr for r in refused)
    assert len(reported) + len(refused) == 2
    assert set.union(*reported) == {f"s{i}" for i in range(300)}
    assert len(reported) == 1 or not (reported[0] & reported[1])
    assert session_ids(store) == set()


def test_our_lock_file_is_never_followed(tmp_path):
    store = _store(tmp_path / "state.db")
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    os.symlink(victim, f"{store}.hermes-maint.lock")
    result = run_subprocess("prune", "--db", store, "--yes")
    assert result.returncode == 1 and "cannot create our run lock" in result.stderr
    assert victim.read_text() == "keep\n"


# -- 10: schemas we do not know ------------------------------------------------------------------

def test_a_newer_schema_is_read_but_never_written(tmp_path):
    store = _store(tmp_path / "state.db", layout="v30")
    conn = sqlite3.connect(store)
    conn.execute("INSERT INTO schema_version(version) VALUES (99)")
    conn.execute("CREATE TABLE future_things (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    before = file_hash(store)
    for args in (["prune", "--yes"], ["optimize"], ["sweep", "--force"], ["autoprune", "later"],
                 ["archive", "--source", "cli", "--yes"]):
        result = run_subprocess(*args, "--db", store, env={"HERMES_HOME": str(home)})
        assert result.returncode == 1, (args, result.stderr)
        assert "schema version 99 is newer than this hermes-maint knows" in result.stderr
    preview = run_subprocess("prune", "--dry-run", "--db", store)  # a preview only reads: it runs, warned
    assert preview.returncode == 0 and "newer than this hermes-maint knows (31); reading only" in preview.stderr
    assert file_hash(store) == before
    stats = run_subprocess("stats", "--db", store, "--json")
    assert stats.returncode == 0 and json.loads(stats.stdout)["schema_version"] == 99
    assert "newer than this hermes-maint knows" in stats.stderr


def test_set_journal_mode_refuses_a_newer_schema(tmp_path):
    store = _store(tmp_path / "state.db", layout="v30")
    conn = sqlite3.connect(store)
    conn.execute("INSERT INTO schema_version(version) VALUES (99)")
    conn.commit()
    conn.close()
    result = run_subprocess("set-journal-mode", "delete", "--db", store)
    assert result.returncode == 1 and "schema version 99" in result.stderr
    assert query(store, "PRAGMA journal_mode") == [("wal",)]


def test_a_foreign_key_from_an_unknown_table_is_reported_before_any_delete(tmp_path):
    store = _store(tmp_path / "state.db", layout="v30")
    conn = sqlite3.connect(store)
    conn.execute("CREATE TABLE session_notes (id INTEGER PRIMARY KEY, session_id TEXT REFERENCES sessions(id))")
    conn.execute("INSERT INTO session_notes(session_id) VALUES ('old1')")
    conn.commit()
    conn.close()
    before = file_hash(store)
    for args in (["prune", "--yes"], ["prune", "--dry-run"]):
        result = run_subprocess(*args, "--db", store)
        assert result.returncode == 1
        assert "session_notes.session_id -> sessions" in result.stderr and str(store) in result.stderr
    assert file_hash(store) == before
    assert session_ids(store) == {"old0", "old1", "old2", "recent"}


# -- 15: holder refusal on one line --------------------------------------------------------------

def test_a_holder_with_a_multi_line_command_line_is_named_on_one_line(tmp_path):
    store = _store(tmp_path / "state.db")
    code = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('select 1'); print('ok', flush=True); " \
           "sys.stdin.read()"
    holder = subprocess.Popen([sys.executable, "-c", code, str(store), "line one\nline two"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ok"
        result = run_subprocess("set-journal-mode", "delete", "--db", store)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert result.returncode == 1 and f"pid {holder.pid}" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "line one\\nline two" in result.stderr


# -- 12: a sweep that did not finish -------------------------------------------------------------

def _sweep_home(tmp_path, n=40):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    with StoreBuilder(home / "state.db") as b:
        for i in range(n):
            b.session(f"old{i}", age=200, messages=3)
        b.session("recent", age=1)
    return home


def test_a_killed_sweep_is_resumed_by_the_next_run_not_skipped(tmp_path):
    home = _sweep_home(tmp_path)
    # one session a transaction, however fast the machine (see BATCH_MS in tests/crash/test_crash.py)
    env = {"HERMES_HOME": str(home), "HERMES_MAINT_BATCH_MS": "0.001", "HERMES_MAINT_CRASH_AT": "tx_committed:3"}
    killed = run_subprocess("sweep", "--json", env=env)
    assert killed.returncode == -9
    left = session_ids(home / "state.db")
    assert "recent" in left and len(left) > 1  # part-way
    again = run_subprocess("sweep", "--json", env={"HERMES_HOME": str(home)})
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["swept"] and report["resumed"] and report["completed"] and not report["cancelled"]
    assert session_ids(home / "state.db") == {"recent"}
    third = json.loads(run_subprocess("sweep", "--json", env={"HERMES_HOME": str(home)}).stdout)
    assert third["swept"] is False and "already swept" in third["skipped_reason"]


def test_a_cancelled_sweep_says_so_and_is_resumed(tmp_path, monkeypatch):
    from maint.config import load_config
    from maint.ops.sweep import run_sweep
    from maint.store import batching

    home = _sweep_home(tmp_path)
    monkeypatch.setenv("HERMES_HOME", str(home))
    batching.CANCEL.set()  # SIGTERM reached the job loop before the first batch
    try:
        report = run_sweep(home / "state.db", load_config())
    finally:
        batching.CANCEL.clear()
    assert report["swept"] and report["cancelled"] and not report["completed"]
    assert report["pruned_ids"] == [] and report["vacuumed"] is False
    resumed = run_sweep(home / "state.db", load_config())
    assert resumed["resumed"] and resumed["completed"] and len(resumed["pruned_ids"]) == 40


def test_a_hermes_claim_inside_the_interval_is_still_respected(tmp_path):
    import time

    home = _sweep_home(tmp_path)
    conn = sqlite3.connect(home / "state.db")
    conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES ('last_auto_prune', ?)", (str(time.time()),))
    conn.commit()
    conn.close()
    report = json.loads(run_subprocess("sweep", "--json", env={"HERMES_HOME": str(home)}).stdout)
    assert report["swept"] is False and "already swept" in report["skipped_reason"]


# -- a second hostile try, on the reworked command layer -----------------------------------------

@pytest.mark.parametrize("suffix", ["", "-wal"])
def test_export_never_replaces_a_store_or_its_wal(suffix, tmp_path):
    store = _store(tmp_path / "state.db")
    keep = sqlite3.connect(store)
    keep.execute("PRAGMA wal_autocheckpoint=0")
    keep.execute("INSERT INTO sessions (id, source, started_at) VALUES ('in_wal', 'cli', 1)")
    keep.commit()
    target = Path(f"{store}{suffix}")
    before = target.read_bytes()
    result = run_subprocess("export", target, "--db", store)
    assert result.returncode == 1 and "is a SQLite database or its journal" in result.stderr
    assert target.read_bytes() == before
    keep.close()
    assert "in_wal" in session_ids(store)


def test_export_into_another_profiles_store_is_refused(tmp_path):
    store, other = _store(tmp_path / "state.db"), _store(tmp_path / "other.db")
    before = file_hash(other)
    result = run_subprocess("export", other, "--db", store)
    assert result.returncode == 1 and str(other) in result.stderr and file_hash(other) == before


def test_ids_that_sanitize_alike_never_share_a_file(tmp_path):
    store = tmp_path / "state.db"
    ids = ["a/b", "a_b", "a:b", "..", "...", "日本", "中国", "x" * 300]
    with StoreBuilder(store) as b:
        for sid in ids:
            b.session(sid, age=200, messages=2)
    out = tmp_path / "out"
    result = run_subprocess("export", out, "--format", "md", "--end-reason", "done", "--db", store, "--json")
    assert result.returncode == 0, result.stderr
    files = sorted(p.name for p in out.iterdir() if p.name != "manifest.jsonl")
    assert len(files) == len(ids) and all(len(f.encode()) < 200 for f in files)
    manifest = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert sorted(m["lineage_ids"][0] for m in manifest) == sorted(ids)


def test_trace_upload_without_output_goes_through_a_private_temporary_file(tmp_path):
    from tests.hf_fake import Hub

    store = _store(tmp_path / "state.db")
    with Hub() as hub:
        result = run_subprocess("export", "--format", "trace", "--session-id", "old0", "--upload", "--db", store,
                                "--json", env={"HF_TOKEN": "hf_test_token", "HF_ENDPOINT": hub.url})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["files"] == [] and len(report["uploaded"]) == 1
    assert not list(tmp_path.glob("**/*.trace.jsonl"))


def test_all_profiles_reports_what_it_cannot_look_at(hermes_home):
    _store(hermes_home / "profiles" / "good" / "state.db")
    os.symlink(hermes_home / "nowhere", hermes_home / "state.db")  # a dangling default store
    os.symlink("loop", hermes_home / "profiles" / "loop")  # a profile folder that is a link loop
    result = run_subprocess("stats", "--all-profiles", "--json", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 1
    reports = {r["profile"]: r for r in map(json.loads, result.stdout.splitlines())}
    assert set(reports) == {None, "good", "loop"}
    assert "error" in reports[None] and "broken or looping link" in reports["loop"]["error"]
    assert reports["good"]["sessions"] == 4


def test_list_never_sends_stored_escape_sequences_to_the_terminal(tmp_path):
    store = tmp_path / "state.db"
    with StoreBuilder(store) as b:
        b.session("evil", age=1, title="\x1b[2J\x1b]0;pwned\x07\nsecond line")
    result = run_subprocess("list", "--db", store)
    assert result.returncode == 0 and "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\\x1b[2J" in result.stdout and len(result.stdout.strip().splitlines()) == 3


def test_an_output_problem_names_the_output_not_the_store(tmp_path):
    store = _store(tmp_path / "state.db")
    os.symlink(tmp_path / "elsewhere", tmp_path / "link.jsonl")
    result = run_subprocess("export", tmp_path / "link.jsonl", "--db", store)
    assert result.returncode == 1
    assert result.stderr.startswith(f"hermes-maint: error: {tmp_path / 'link.jsonl'}: is a symbolic link")


def test_verified_delete_refuses_to_split_a_compression_lineage(tmp_path):
    store = tmp_path / "state.db"
    with StoreBuilder(store) as b:
        b.session("seg1", age=200, end_reason="compression", messages=3)
        b.session("seg2", age=100, parent="seg1", messages=3)
    before = file_hash(store)
    result = run_subprocess("export", tmp_path / "bk", "--db", store, "--session-id", "seg1",
                            "--delete-after-verified", "--yes")
    assert result.returncode == 1 and "segments of a compression lineage (seg1 -> seg2)" in result.stderr
    assert file_hash(store) == before and not (tmp_path / "bk").exists()


@pytest.mark.parametrize("args", [["repair-prompts", ""], ["repair-prompts", "", "--apply", "--yes"],
                                  ["export", "--session-id", ""]])
def test_an_empty_session_id_names_no_session(args, tmp_path):
    store = _store(tmp_path / "state.db")
    before = file_hash(store)
    result = run_subprocess(*args, "--db", store)
    assert result.returncode == 1 and "empty session id" in result.stderr
    assert file_hash(store) == before


def test_session_prefixes_are_case_sensitive(tmp_path):
    store = _store(tmp_path / "state.db")
    result = run_subprocess("export", "--session-id", "OLD0", "--db", store)
    assert result.returncode == 1 and "no session matches 'OLD0'" in result.stderr
    assert run_subprocess("export", "--session-id", "old0", "--db", store).returncode == 0


def test_malformed_tuning_variables_do_not_crash(tmp_path):
    store = _store(tmp_path / "state.db")
    result = run_subprocess("stats", "--db", store, env={"HERMES_MAINT_CRASH_AT": "tx_begun:x"})
    assert result.returncode == 0 and "Traceback" not in result.stderr
    # A number setting that is not a number is refused, not ignored (tests/test_settings.py has the rest).
    result = run_subprocess("stats", "--db", store, env={"HERMES_MAINT_BUSY_MS": "²"})
    line, = result.stderr.strip().splitlines()
    assert result.returncode == 2 and "HERMES_MAINT_BUSY_MS='²'" in line and "at most 3600000" in line, line


def test_arguments_that_are_not_utf8_are_usage_errors(tmp_path):
    store = _store(tmp_path / "state.db")
    bad = os.fsdecode(b"a\xffb")
    for args in (["delete", bad, "--dry-run"], ["export", "-", "--session-id", bad], ["repair-prompts", bad]):
        result = run_subprocess(*args, "--db", store)
        assert result.returncode == 2 and "not valid UTF-8" in result.stderr and "Traceback" not in result.stderr


def test_a_nan_idle_threshold_archives_nothing(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("sessions:\n  auto_archive: true\n  auto_archive_days: .nan\n")
    with StoreBuilder(home / "state.db", layout="v31") as b:
        b.session("fresh", age=1)
    result = run_subprocess("sweep", "--json", env={"HERMES_HOME": str(home)})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["auto_archived_ids"] == []
    assert query(home / "state.db", "SELECT archived FROM sessions WHERE id = 'fresh'") == [(0,)]
    idle = run_subprocess("archive", "--idle", "--dry-run", env={"HERMES_HOME": str(home)})
    assert idle.returncode == 2 and "auto_archive_days: bad value" in idle.stderr


def test_two_jobs_of_one_process_never_change_one_store_at_once(tmp_path, monkeypatch):
    """The job loop runs jobs as threads of one process: the run lock is per thread within it, so an
    overlapping prune and sweep cannot both hold FTS5's settings or the index notes (each would
    save the other's held values as Hermes's); nested opens by one thread still share it. Another
    job waits for the store a while (a skipped sweep holds it only for its notice and history row),
    then is refused."""
    import threading

    import maint.store.runlock as runlock
    from maint.store.connection import open_store
    from maint.store.runlock import RunLockHeld

    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("a", messages=2)
    seen = []

    def other_job():
        try:
            open_store(db).close()
            seen.append("opened")
        except RunLockHeld as exc:
            seen.append(str(exc))

    monkeypatch.setattr(runlock, "THREAD_WAIT_S", 0.05)
    with open_store(db) as store:
        with open_store(db):  # nested, same thread: shared
            pass
        t = threading.Thread(target=other_job)
        t.start()
        t.join()
        assert store.get_meta("x") is None
    assert len(seen) == 1 and "another job of this hermes-maint" in seen[0], seen
    monkeypatch.setattr(runlock, "THREAD_WAIT_S", 60.0)
    store = open_store(db)
    t = threading.Thread(target=other_job)  # waits while the store is held, opens once it is let go
    t.start()
    t.join(0.2)
    assert t.is_alive() and len(seen) == 1
    seen.append("released")
    store.close()
    t.join(60)
    assert seen[1:] == ["released", "opened"]
