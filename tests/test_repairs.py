"""Holder detection, set-journal-mode and repair-prompts against real processes and stores."""

import json
import os
import signal
import sqlite3
import subprocess
import sys

import pytest

from maint.store.holders import HolderReport, find_holders
from maint.ops.journal import HeldStore, header_bytes, set_journal_mode
from maint.errors import MaintError
from tests.conftest import run_subprocess
from tests.storegen import StoreBuilder, small_store

HOLD = ("import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1]); "
        "c.execute('SELECT COUNT(*) FROM sessions').fetchall(); c.execute('BEGIN'); "
        "c.execute('SELECT COUNT(*) FROM sessions').fetchall(); print('ready', flush=True); sys.stdin.read()")


@pytest.fixture
def store(tmp_path):
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("s1", messages=3)
    return db


class Holding:
    def __init__(self, db, code=HOLD):
        self.db, self.code = db, code

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", self.code, str(self.db)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        return self.proc

    def __exit__(self, *exc):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def test_holder_found_by_pid_including_shm_map(store):
    with Holding(store) as proc:
        report = find_holders(store)
        pids = {h.pid for h in report.holders}
        assert proc.pid in pids
        files = next(h.files for h in report.holders if h.pid == proc.pid)
        assert any("shm (mapped)" in f for f in files)
    assert find_holders(store).quiet


def test_wal_reader_with_only_shm_mapped_is_found(store):
    # libc mmap, then close the fd: only the mapping remains (Python's mmap module keeps a dup'd fd)
    code = ("import ctypes, mmap, os, sys; libc = ctypes.CDLL(None, use_errno=True);"
            "libc.mmap.restype = ctypes.c_void_p;"
            "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,"
            " ctypes.c_long];"
            "fd = os.open(sys.argv[1] + '-shm', os.O_RDWR | os.O_CREAT); os.ftruncate(fd, 32768);"
            "addr = libc.mmap(None, 32768, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0);"
            "assert addr not in (None, ctypes.c_void_p(-1).value); os.close(fd);"
            "print('ready', flush=True); sys.stdin.read()")
    with Holding(store, code) as proc:
        report = find_holders(store)
        assert [h.pid for h in report.holders] == [proc.pid]
        assert report.holders[0].files == ["state.db-shm (mapped)"]


def test_deleted_but_open_side_file_counts(store):
    code = ("import os, sys, time; f = open(sys.argv[1] + '-wal', 'ab'); print('ready', flush=True); sys.stdin.read()")
    with Holding(store, code) as proc:
        assert proc.pid in {h.pid for h in find_holders(store).holders}


def test_set_journal_mode_refuses_with_holder_naming_pid(store):
    with Holding(store) as proc:
        result = run_subprocess("set-journal-mode", "delete", "--db", store)
        assert result.returncode == 1 and f"pid {proc.pid}" in result.stderr
        forced = run_subprocess("set-journal-mode", "delete", "--db", store, "--force")
        assert forced.returncode == 1  # --force never waives a found holder
    assert header_bytes(store) == (2, 2)


def test_failed_check_refuses_unless_forced(store):
    failing = lambda p: HolderReport(unknown=["pid 7: access denied"])  # noqa: E731
    with pytest.raises(HeldStore, match="could not check"):
        set_journal_mode(store, "delete", holders=failing)
    result = set_journal_mode(store, "delete", force=True, holders=failing)
    assert result.after == "delete" and header_bytes(store) == (1, 1)


def test_round_trip_verified_by_header(store, cli):
    r = cli.json("set-journal-mode", "delete", "--db", store)
    assert r["before"] == "wal" and r["after"] == "delete" and r["header"] == [1, 1]
    r = cli.json("set-journal-mode", "wal", "--db", store)
    assert r["after"] == "wal" and header_bytes(store) == (2, 2)


def test_virtiofs_refuses_wal(store, tmp_path, monkeypatch):
    set_journal_mode(store, "delete")
    mounts = tmp_path / "mounts"
    mounts.write_text(f"rootfs / ext4 rw 0 0\nshare {tmp_path} virtiofs rw 0 0\n")
    monkeypatch.setenv("HERMES_MAINT_MOUNTS", str(mounts))
    with pytest.raises(MaintError, match="virtiofs"):
        set_journal_mode(store, "wal")
    assert header_bytes(store) == (1, 1)


def test_a_mount_point_whose_name_is_not_utf8_does_not_stop_the_switch(store, tmp_path, monkeypatch):
    """A user's FUSE mount may have any name: /proc/mounts was read as UTF-8 text (a traceback-free refusal of
    every switch, "text that is not valid UTF-8"); the store's own mount is still found."""
    set_journal_mode(store, "delete")
    mounts = tmp_path / "mounts"
    mounts.write_bytes(b"rootfs / ext4 rw 0 0\nfuse /home/bob/odd-\xff fuse rw 0 0\n"
                       + f"share {tmp_path} virtiofs rw 0 0\n".encode())
    monkeypatch.setenv("HERMES_MAINT_MOUNTS", str(mounts))
    with pytest.raises(MaintError, match="virtiofs"):
        set_journal_mode(store, "wal")


def test_killed_writer_commits_survive_switch_to_delete(tmp_path):
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("w", ended=False)
    code = ("import sqlite3, sys, os, time; c = sqlite3.connect(sys.argv[1], isolation_level=None);"
            "c.execute('PRAGMA wal_autocheckpoint=0');"
            "[c.execute(\"INSERT INTO messages(session_id, role, content, timestamp) VALUES ('w','user',?,1)\", "
            "(f'kept {i}',)) for i in range(50)]; print('ready', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert os.path.getsize(str(db) + "-wal") > 0
    result = run_subprocess("set-journal-mode", "delete", "--db", db, "--json")
    assert result.returncode == 0, result.stderr
    assert header_bytes(db) == (1, 1)
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*) FROM messages WHERE content LIKE 'kept %'").fetchone() == (50,)
    conn.close()


def test_config_disagreement_is_reported(store, hermes_home, cli):
    (hermes_home / "config.yaml").write_text("database:\n  journal_mode: wal\n")
    r = cli.json("set-journal-mode", "delete", "--db", store)
    assert "journal_mode: delete" in r["config_advice"]


def test_bad_mode_is_usage_error(store, cli):
    result = cli("set-journal-mode", "memory", "--db", store)
    assert result.exit_code == 2
    assert "'memory' is not one of 'wal', 'delete'" in result.stderr


def test_works_on_any_sqlite_store(tmp_path):
    db = tmp_path / "kanban.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE tasks(id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    assert set_journal_mode(db, "delete").after == "delete"


# -- repair-prompts ------------------------------------------------------------------------------

HEALTHY = "You are Hermes.\n\n## Skill Safety Rule\n1. reload skills before use"
DEGRADED = "You are a maintenance agent with a reduced toolset."


@pytest.fixture
def prompt_store(tmp_path):
    db = tmp_path / "state.db"
    with StoreBuilder(db, layout="v30") as b:
        pin_skill = b.prompt(json.dumps({"tools": [{"function": {"name": "terminal"}},
                                                   {"function": {"name": "skill_manage"}}]}))
        b.session("bad_hash", system_prompt_hash=b.prompt(DEGRADED), tool_names=pin_skill)
        b.session("bad_inline", system_prompt=DEGRADED, tool_names=json.dumps(["terminal", "skill_manage"]))
        b.session("healthy", system_prompt=HEALTHY, tool_names=json.dumps(["skill_manage"]))
        b.session("no_pin", system_prompt=DEGRADED)
        b.session("memory_only", system_prompt=DEGRADED, tool_names=json.dumps(["memory"]))
        b.session("garbled_pin", system_prompt=DEGRADED, tool_names="{not json")
        b.session("no_skill_tool", system_prompt=DEGRADED, tool_names=json.dumps(["terminal"]))
    return db


def test_report_only_by_default(prompt_store, cli):
    before = prompt_store.read_bytes()
    r = cli.json("repair-prompts", "--db", prompt_store)
    assert sorted(r["verified"]) == ["bad_hash", "bad_inline"]
    reasons = {u["id"]: u["reason"] for u in r["unverifiable"]}
    assert set(reasons) == {"no_pin", "memory_only", "garbled_pin"} and "memory-only" in reasons["memory_only"]
    assert r["cleared"] == [] and prompt_store.read_bytes() == before


def test_apply_json_clears_only_verified(prompt_store, cli):
    r = cli.json("repair-prompts", "--db", prompt_store, "--apply", "--yes")
    assert sorted(r["cleared"]) == ["bad_hash", "bad_inline"]
    conn = sqlite3.connect(prompt_store)
    rows = dict(conn.execute("SELECT id, COALESCE(system_prompt, system_prompt_hash) FROM sessions"))
    conn.close()
    assert rows["bad_hash"] is None and rows["bad_inline"] is None
    assert rows["healthy"] == HEALTHY and rows["no_pin"] == DEGRADED and rows["memory_only"] == DEGRADED
    assert cli.json("repair-prompts", "--db", prompt_store, "--apply", "--yes")["cleared"] == []


def test_targeted_clear_even_when_healthy_takes_a_whole_id_without_a_terminal(prompt_store, cli):
    """The destructive-operation contract: without a confirmation at a terminal, a prefix is refused (it could
    name another session once the one meant is gone); the whole id clears even a healthy prompt."""
    refused = cli("repair-prompts", "heal", "--db", prompt_store, "--apply", "--yes")
    assert refused.exit_code == 2 and "not a whole session id" in refused.stderr and "'healthy'" in refused.stderr
    r = cli.json("repair-prompts", "healthy", "--db", prompt_store, "--apply", "--yes")
    assert r["cleared"] == ["healthy"]


def test_apply_json_is_the_documented_non_interactive_form(prompt_store):
    """Issue 25: `repair-prompts --apply --json` is documented as the automation form; it was refused without
    --yes."""
    result = run_subprocess("repair-prompts", "--db", prompt_store, "--apply", "--json", input="")
    assert result.returncode == 0, result.stderr
    assert sorted(json.loads(result.stdout)["cleared"]) == ["bad_hash", "bad_inline"]


def test_apply_without_tty_or_yes_refused(prompt_store, cli):
    result = cli("repair-prompts", "--db", prompt_store, "--apply")
    assert result.exit_code == 2 and "not a terminal" in result.stderr
    ok = cli("repair-prompts", "--db", prompt_store, "--apply", "--yes")
    assert ok.exit_code == 0 and "Restart a running gateway" in ok.stdout


def test_apply_refused_while_held(prompt_store):
    with Holding(prompt_store) as proc:
        result = run_subprocess("repair-prompts", "--db", prompt_store, "--apply", "--json")
    assert result.returncode == 1 and f"pid {proc.pid}" in result.stderr


def test_a_holder_with_a_multi_line_command_line_is_named_on_one_line(tmp_path):
    store = small_store(tmp_path / "state.db")
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


def test_a_prompt_stored_as_a_blob_is_read_as_the_text_it_holds(prompt_store, cli):
    """Found by a BLOB in every column (after hostile try 3, F20): a system prompt stored as bytes stopped
    repair-prompts and doctor with a TypeError. It is read as the text it holds (bad bytes shown)."""
    conn = sqlite3.connect(prompt_store)
    conn.execute("UPDATE sessions SET system_prompt = ? WHERE id IN ('bad_inline', 'healthy')",
                 (DEGRADED.encode() + b"\xff",))
    conn.execute("UPDATE system_prompts SET prompt = CAST(prompt AS BLOB)")
    conn.commit()
    conn.close()
    r = cli.json("repair-prompts", "--db", prompt_store)
    assert sorted(r["verified"]) == ["bad_hash", "bad_inline", "healthy"]
    doctor = cli("doctor", "--db", prompt_store)
    assert doctor.exit_code in (0, 1) and "prompt" in doctor.stdout


@pytest.mark.parametrize("where", ["inline", "stored", "pin"])
def test_a_prompt_that_is_not_utf8_is_named_and_the_rest_repaired(prompt_store, cli, where):
    """Hostile try 9, L7 (second command): one session's inline prompt, or a stored prompt it points at, that is
    not UTF-8 stopped repair-prompts for the whole store, report and --apply alike. That session is reported
    unverifiable and left alone; the others are repaired; named by the operator it is still cleared."""
    conn = sqlite3.connect(prompt_store)
    if where == "inline":
        conn.execute("UPDATE sessions SET system_prompt = CAST(X'41ff' AS TEXT) WHERE id = 'no_skill_tool'")
    elif where == "stored":
        conn.execute("INSERT INTO system_prompts (hash, prompt) VALUES ('h_bad', CAST(X'41ff' AS TEXT))")
        conn.execute("UPDATE sessions SET system_prompt = NULL, system_prompt_hash = 'h_bad' "
                     "WHERE id = 'no_skill_tool'")
    else:
        conn.execute("UPDATE sessions SET tool_names = CAST(X'5bff5d' AS TEXT) WHERE id = 'no_skill_tool'")
    conn.commit()
    conn.close()
    r = cli.json("repair-prompts", "--db", prompt_store, "--apply", "--yes")
    assert sorted(r["cleared"]) == ["bad_hash", "bad_inline"]
    reasons = {u["id"]: u["reason"] for u in r["unverifiable"]}
    assert "not UTF-8 text; left alone" in reasons["no_skill_tool"]
    named = cli.json("repair-prompts", "no_skill_tool", "--db", prompt_store, "--apply", "--yes")
    assert named["cleared"] == ["no_skill_tool"]
