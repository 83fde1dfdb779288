"""Config trust and bounds: what steers us (config.yaml, job files, our rows in state_meta) is obeyed only
when we may trust it, and never parsed past a depth or size that could crash or exhaust a run."""

import json
import os
import sqlite3
import stat

import pytest

from maint import files
from tests.conftest import run_subprocess, session_ids
from tests.storegen import StoreBuilder


def _store(path, n=6):
    with StoreBuilder(path) as b:
        for i in range(n):
            b.session(f"old{i}", age=200 + i, messages=2)
        b.session("young", age=1, messages=2)
    return path


def _st(uid, mode=0o100600):
    return os.stat_result((mode, 0, 0, 1, uid, uid, 0, 0, 0, 0))


def test_only_our_roots_or_the_folder_owners_unwritable_files_are_trusted():
    me = os.geteuid()
    other = me + 1000
    assert files.untrusted_by(_st(me)) is None
    assert files.untrusted_by(_st(0)) is None
    assert files.untrusted_by(_st(other), also_trusted=other) is None
    assert "another user" in files.untrusted_by(_st(other), also_trusted=me + 1)
    assert "its group" in files.untrusted_by(_st(me, 0o100664))
    assert "every user" in files.untrusted_by(_st(me, 0o100606))


def test_a_config_planted_beside_a_store_in_a_shared_folder_is_refused(tmp_path):
    """Finding 4: another user's config.yaml beside a --db store in a sticky shared folder was obeyed:
    `sessions: {auto_prune: true, retention_days: 0}` made the owner's sweep delete 160 of 162 sessions."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    db = _store(shared / "state.db")
    planted = shared / "config.yaml"
    planted.write_text("sessions: {auto_prune: true, retention_days: 0}\n")
    if os.geteuid() == 0:
        os.chown(planted, 4321, 4321)  # another (non-root) user's file
        expected = "owned by another user"
    else:
        os.chmod(planted, 0o666)  # a file any user could have written
        expected = "writable by every user"
    before = session_ids(db)
    result = run_subprocess("sweep", "--db", db, "--json")
    assert result.returncode == 2 and expected in result.stderr and "config" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and session_ids(db) == before


def test_a_job_file_writable_by_others_is_refused(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: j\ncommand: [sweep]\ntrigger: {cron: '30 3 * * *'}\nenabled: true\n")
    os.chmod(job, 0o666)
    result = run_subprocess("jobs", "list", "--jobs-dir", tmp_path)
    assert result.returncode == 2 and "writable by every user" in result.stderr, result.stderr
    os.chmod(job, 0o644)
    assert run_subprocess("jobs", "list", "--jobs-dir", tmp_path).returncode == 0


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)) + "sessions: {}\n"


def test_a_yaml_alias_bomb_is_refused_before_it_expands(hermes_home):
    """Finding 11: a billion-laughs config.yaml made `autoprune on|off` take 1.4 GB and run on."""
    db = _store(hermes_home / "state.db")
    (hermes_home / "config.yaml").write_text(BOMB)
    os.chmod(hermes_home / "config.yaml", 0o600)
    for args in (["autoprune", "on"], ["autoprune", "off"], ["sweep", "--db", db]):
        result = run_subprocess(*args, env={"HERMES_HOME": str(hermes_home)}, timeout=120)
        assert result.returncode == 2 and "expands" in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert (hermes_home / "config.yaml").read_text() == BOMB


def test_deeply_nested_yaml_is_one_line_everywhere_it_is_read(hermes_home, tmp_path):
    """Finding 17: YAML nested ~1,000 deep crashed every command (config.yaml) and `jobs list` (a job file)."""
    _store(hermes_home / "state.db")
    deep = "hermes_maint: " + "[" * 1000 + "]" * 1000 + "\n"
    (hermes_home / "config.yaml").write_text(deep)
    os.chmod(hermes_home / "config.yaml", 0o600)
    result = run_subprocess("sweep", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 2 and "nested deeper" in result.stderr and "Traceback" not in result.stderr
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "deep.yaml").write_text("name: " + "[" * 1000 + "]" * 1000 + "\n")
    listed = run_subprocess("jobs", "list", "--jobs-dir", jobs)
    assert listed.returncode == 2 and "nested deeper" in listed.stderr and "Traceback" not in listed.stderr


def _meta(db, key, value):
    conn = sqlite3.connect(db)
    conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)", (key, value))
    conn.commit()
    conn.close()


def test_our_rows_in_state_meta_nested_deep_are_skipped_not_fatal(hermes_home):
    """Finding 17: a history row or hermes_maint.sweep_run nested ~1,000 deep crashed `history` and every
    nightly sweep with RecursionError."""
    db = _store(hermes_home / "state.db")
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    os.chmod(hermes_home / "config.yaml", 0o600)
    deep = "[" * 100_000 + "]" * 100_000
    _meta(db, "hermes_maint.history.sweep.000001", deep)
    _meta(db, "hermes_maint.sweep_run", deep)
    history = run_subprocess("history", "--db", db, "--json")
    assert history.returncode == 0, history.stderr
    swept = run_subprocess("sweep", "--db", db, "--json")
    assert swept.returncode == 0, swept.stderr
    assert len(json.loads(swept.stdout)["pruned_ids"]) >= 6 and "Traceback" not in swept.stderr
    assert stat.S_IMODE(os.stat(db).st_mode)  # the store is still there and readable


@pytest.mark.parametrize("kind", ["fifo", "too big"])
def test_a_config_that_is_not_a_small_regular_file_is_refused_at_once(hermes_home, kind):
    path = hermes_home / "config.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(b"# " + b"x" * (64 << 20) + b"\n")
    result = run_subprocess("sweep", env={"HERMES_HOME": str(hermes_home)}, timeout=120)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
