"""A big jsonl export shared with a second process writes exactly the one-process bytes, and anything
wrong with the second process costs only time (maint/export/second_process.py)."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from maint.errors import UsageError
from maint.export import render
from maint.export import second_process as sp
from maint.store.connection import open_store
from tests.conftest import run_subprocess
from tests.test_export_fast import FALLBACK, _all_ids, _expected, awkward_store
from tests.storegen import StoreBuilder


class _Spy:
    """What the second process reported: None when the first process did its part itself."""

    def __init__(self, monkeypatch):
        self.results, self.codes = [], []
        result = sp._Helper.result

        def spy(helper):
            got = result(helper)
            self.results.append(got)
            self.codes.append(helper.proc.returncode)
            return got

        monkeypatch.setattr(sp._Helper, "result", spy)


def _shared(db, ids, folder, processes=2):
    out, fell_back = [], []
    with open_store(db, readonly=True) as store, store.snapshot():
        def reference(sid):
            fell_back.append(sid)
            return render.write_jsonl_session(store, sid, out.append, False)

        n = sp.write_shared(store, ids, lambda b: out.append(b.decode()), reference, folder, processes)
    return "".join(out), n, fell_back


@pytest.mark.parametrize("layout", ["v22", "v31"])
def test_the_second_half_built_by_a_second_process_is_the_reference_bytes(tmp_path, monkeypatch, layout):
    db = awkward_store(tmp_path / "state.db", layout)
    ids = _all_ids(db)
    ids = ids[len(ids) // 2:] + ids[:len(ids) // 2]  # any order the plan gives is kept
    monkeypatch.setattr(sp, "SPLIT_MESSAGES", 1)
    spy = _Spy(monkeypatch)
    with open_store(db, readonly=True) as store:
        start = sp.split_point(store, ids)
    assert 0 < start < len(ids)
    assert set(FALLBACK) & set(ids[start:])  # the second process takes the reference way for some of its own
    text, n, fell_back = _shared(db, ids, tmp_path)
    expected, messages = _expected(db, ids)
    assert spy.results and spy.results[0] is not None and spy.codes == [0]
    assert text == expected
    assert n == messages
    assert set(fell_back) <= set(ids[:start])  # this process rendered only its own half
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("state.db")) == []


def test_a_killed_second_process_costs_time_not_bytes(tmp_path, monkeypatch):
    db = awkward_store(tmp_path / "state.db", "v31")
    ids = _all_ids(db)
    monkeypatch.setattr(sp, "SPLIT_MESSAGES", 1)
    monkeypatch.setenv("HERMES_MAINT_CRASH_AT", "export_second_process")
    spy = _Spy(monkeypatch)
    text, n, _ = _shared(db, ids, tmp_path)
    assert spy.codes == [-signal.SIGKILL] and spy.results == [None]
    assert (text, n) == _expected(db, ids)


def test_a_session_gone_in_the_second_half_fails_as_one_process_does(tmp_path, monkeypatch):
    db = awkward_store(tmp_path / "state.db", "v31")
    ids = _all_ids(db) + ["nope"]
    monkeypatch.setattr(sp, "SPLIT_MESSAGES", 1)
    spy = _Spy(monkeypatch)
    with pytest.raises(IndexError):
        _shared(db, ids, tmp_path)
    assert spy.results == [None] and spy.codes == [1]


def test_small_selections_ids_that_are_not_text_and_one_process_stay_in_this_process(tmp_path, monkeypatch):
    db = awkward_store(tmp_path / "state.db", "v31")
    ids = _all_ids(db)
    spy = _Spy(monkeypatch)
    with open_store(db, readonly=True) as store:
        assert sp.split_point(store, ids) is None  # far below SPLIT_MESSAGES
        monkeypatch.setattr(sp, "SPLIT_MESSAGES", 1)
        assert sp.split_point(store, ids + [7]) is None
        assert sp.split_point(store, ids[:1]) is None
    assert _shared(db, ids, tmp_path, processes=1)[0] == _expected(db, ids)[0]
    assert spy.results == []


def test_another_file_at_the_store_path_is_refused_by_the_second_process(tmp_path):
    db = awkward_store(tmp_path / "state.db", "v31")
    st = os.stat(db)
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        done = subprocess.run([sys.executable, "-m", "maint.export.second_process", str(db), str(st.st_dev),
                               str(st.st_ino + 1), str(fd), str(os.getpid())],
                              input=json.dumps(["plain"]).encode() + b"\n", capture_output=True, pass_fds=(fd,),
                              timeout=60)
    finally:
        os.close(fd)
    assert done.returncode == 1 and done.stdout == b""
    assert (tmp_path / "out").read_bytes() == b""


@pytest.mark.parametrize("value", ["3", "0", "1.5", "two"])
def test_the_processes_setting_is_checked(monkeypatch, value):
    monkeypatch.setenv(sp.PROCESSES_ENV, value)
    with pytest.raises(UsageError, match=sp.PROCESSES_ENV):
        sp.export_processes()


def test_the_processes_setting_takes_one_or_two_within_the_cores(monkeypatch):
    cores = len(os.sched_getaffinity(0))
    monkeypatch.setenv(sp.PROCESSES_ENV, "1")
    assert sp.export_processes() == 1
    monkeypatch.delenv(sp.PROCESSES_ENV)
    assert sp.export_processes() == min(2, cores)


def _big_store(path, sessions=60, per=700):
    """Above SPLIT_MESSAGES, so the command shares the work as an operator's would."""
    with StoreBuilder(path, layout="v31") as b:
        for n in range(sessions):
            b.session(f"s{n:03d}", age=90 - n, messages=0)
        rows = [(f"s{n:03d}", "user" if k % 2 else "assistant", f"message {n}/{k} " * 8, 1.7e9 + n * 1000 + k)
                for n in range(sessions) for k in range(per)]
        b.raw.executemany("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)", rows)
        b.raw.execute("UPDATE sessions SET message_count = (SELECT COUNT(*) FROM messages m "
                      "WHERE m.session_id = sessions.id)")
    assert sessions * per >= sp.SPLIT_MESSAGES
    return path


@pytest.mark.slow
def test_cli_export_of_a_big_store_is_the_reference_bytes_with_one_or_two_processes(tmp_path):
    db = _big_store(tmp_path / "state.db")
    outs = {}
    for processes in ("1", "2"):
        out = tmp_path / f"out{processes}.jsonl"
        result = run_subprocess("export", out, "--db", db, env={sp.PROCESSES_ENV: processes})
        assert result.returncode == 0, result.stderr
        outs[processes] = out.read_bytes()
    assert outs["1"] == outs["2"] == _expected(db, _all_ids(db))[0].encode("utf-8")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("state.db")) == \
        ["out1.jsonl", "out2.jsonl"]


def test_cli_refuses_a_bad_processes_setting_before_writing(tmp_path):
    db = awkward_store(tmp_path / "state.db", "v31")
    out = tmp_path / "out.jsonl"
    result = run_subprocess("export", out, "--db", db, env={sp.PROCESSES_ENV: "4"})
    assert result.returncode == 2
    assert sp.PROCESSES_ENV in result.stderr and "'4'" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def _second_processes(db):
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    args = fh.read().split(b"\0")
            except OSError:
                continue
            if b"maint.export.second_process" in args and str(db).encode() in args:
                found.append(int(pid))
    return found


@pytest.mark.slow
def test_a_killed_export_leaves_no_second_process_and_no_file(tmp_path):
    db = _big_store(tmp_path / "state.db", sessions=80)
    folder = tmp_path / "out"
    folder.mkdir()
    result = run_subprocess("export", folder / "all.jsonl", "--db", db,
                            env={sp.PROCESSES_ENV: "2", "HERMES_MAINT_CRASH_AT": "export_shared"})
    assert result.returncode == -signal.SIGKILL  # killed with its second process at work
    deadline = time.monotonic() + 60
    while _second_processes(db) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _second_processes(db) == []
    # The temporary files have no name; only the partial output (atomic_text's, as for any kill) remains.
    assert [p.name for p in folder.iterdir() if not p.name.endswith(".partial")] == []
    assert len(list(folder.iterdir())) == 1
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA quick_check").fetchone() == ("ok",)
    conn.close()


WRITER = """
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
n = 0
print("writing", flush=True)
while True:
    n += 1
    c.execute("UPDATE sessions SET title = ?", ("v%d" % n,))
    time.sleep(0.001)
"""


def test_both_halves_are_read_from_one_state_while_commits_go_on(tmp_path, monkeypatch):
    db = awkward_store(tmp_path / "state.db", "v31")
    ids = _all_ids(db)
    monkeypatch.setattr(sp, "SPLIT_MESSAGES", 1)
    spy = _Spy(monkeypatch)
    say = sp._Helper._say

    def slow_go(helper, word):  # a slow scheduler between this process's snapshot and the second one's
        if word == b"go":
            time.sleep(0.05)
        return say(helper, word)

    monkeypatch.setattr(sp._Helper, "_say", slow_go)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline() == "writing\n"
        time.sleep(0.1)
        text, n, _ = _shared(db, ids, tmp_path)
        assert writer.poll() is None  # it was kept waiting, never failed
    finally:
        writer.kill()
        writer.wait()
    assert spy.results and spy.results[0] is not None
    titles = {json.loads(line)["title"] for line in text.split("\n") if line}
    assert len(titles) == 1 and titles != {"plain one"}, titles


def test_a_snapshot_that_has_read_already_is_not_shared(tmp_path, monkeypatch):
    db = awkward_store(tmp_path / "state.db", "v31")
    ids = _all_ids(db)
    monkeypatch.setattr(sp, "SPLIT_MESSAGES", 1)
    spy = _Spy(monkeypatch)
    out = []
    with open_store(db, readonly=True) as store, store.snapshot():
        store.scalar("SELECT COUNT(*) FROM sessions")
        sp.write_shared(store, ids, lambda b: out.append(b.decode()),
                        lambda sid: render.write_jsonl_session(store, sid, out.append, False), tmp_path, 2)
    assert spy.results == []
    assert "".join(out) == _expected(db, ids)[0]
