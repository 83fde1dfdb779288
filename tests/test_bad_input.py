"""Bad input everywhere: one line naming the problem, the documented exit code, no traceback,
and the store's bytes unchanged."""

import os
import shutil

import pytest

from tests.conftest import file_hash, run_subprocess
from tests.storegen import StoreBuilder, small_store


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    path = tmp_path_factory.mktemp("tpl") / "state.db"
    with StoreBuilder(path) as b:
        b.session("old", age=200, messages=3)
        b.session("young", age=1, messages=3)
    return path


@pytest.fixture
def store(template, tmp_path):
    path = tmp_path / "state.db"
    shutil.copy(template, path)
    return path


S = "{store}"
CASES = [
    (["prune", "--db", S, "--older-than", "fortnight"], 2, "--older-than"),
    (["prune", "--db", S, "--newer-than", "-2h"], 2, "--newer-than"),
    (["prune", "--db", S, "--before", "2026-02-30"], 2, "--before"),
    (["prune", "--db", S, "--max-messages", "-1"], 2, "--max-messages"),
    (["prune", "--db", S, "--min-tokens", "1e3"], 2, "--min-tokens"),
    (["prune", "--db", S, "--max-cost", "free"], 2, "--max-cost"),
    (["prune", "--db", S, "--older-than", "1h", "--newer-than", "2h", "--yes"], 0, None),
    (["prune", "--db", S, "--older-than", "3h", "--newer-than", "1h"], 2, "empty window"),
    (["archive", "--db", S, "--yes"], 2, "at least one filter"),
    (["archive", "--db", S, "--min-tool-calls", "x"], 2, "--min-tool-calls"),
    (["list", "--db", S, "--limit", "-5"], 2, "--limit"),
    (["list", "--db", S, "--limit", "many"], 2, "--limit"),
    (["export", "-", "--db", S, "--format", "pdf"], 2, "--format"),
    (["export", "-", "--db", S, "--only", "assistant"], 2, "--only"),
    (["export", "-", "--db", S, "--lineage", "tree"], 2, "--lineage"),
    (["export", "-", "--db", S, "--upload"], 2, "--upload"),
    (["export", "-", "--db", S, "--session-id", "old", "--source", "cli"], 2, "--session-id"),
    (["export", "-", "--db", S, "--delete-after-verified"], 2, "--delete-after-verified"),
    (["export", "{tmp}/missing/dir/out.jsonl", "--db", S], 2, "does not exist"),
    (["set-journal-mode", "truncate", "--db", S], 2, "'truncate' is not one of 'wal', 'delete'"),
    (["repair-profiles", "--legacy-main", "merge"], 2, "--legacy-main"),
    (["autoprune", "maybe"], 2, "'maybe' is not one of 'on', 'off', 'later', 'status'"),
    (["stats", "--db", S, "--profile", "x"], 2, "mutually exclusive"),
    (["stats", "--profile", "../evil"], 2, "--profile"),
    (["prune", "--db", S, "--yes", "--bogus"], 2, "--bogus"),
    (["jobs", "run-once", "nope"], 2, "no job named"),
    (["list", "--db", S, "--workspace", ""], 2, "--workspace"),
    (["archive", "--db", S, "--idle", "--source", "cli", "--yes"], 2, "--idle"),
    (["delete", "nope", "--db", S, "--yes"], 1, "'nope'"),
    (["rename", "old", "\u200b", "--db", S], 2, "title:"),
    (["rename", "old", "x" * 101, "--db", S], 2, "at most 100"),
    (["pin", "old", "--db", S], 1, "version 22"),
    (["repair-routing", "--db", S, "--max-gap-seconds", "15m"], 2, "--max-gap-seconds"),
    (["doctor", "--db", S, "--fail-on", "error"], 2, "--fail-on"),
    (["doctor", "--db", S, "--metrics-file", "{tmp}/m.txt"], 2, "--metrics-file"),
    (["history", "--db", S, "--kind", "vacuum"], 2, "--kind"),
    (["history", "--db", S, "--limit", "0"], 2, "--limit"),
    (["recover", "--db", S, "--apply", "--dry-run"], 2, "contradict"),
    (["repair-fts", "--db", S, "--apply", "--dry-run"], 2, "contradict"),
    (["optimize", "--db", S, "--into", "{tmp}/missing/x.db"], 2, "--into"),
    (["optimize", "--db", S, "--into", S], 2, "already exists"),
    (["prune", "--db", S, "--yes", "--metrics-file", "{tmp}/nodir/m.prom"], 2, "--metrics-file"),
    (["jobs", "run-once", "nightly-sweep", "--metrics-file", "{tmp}/m.txt"], 2, "--metrics-file"),
    (["backup", "--db", S, "--keep", "0"], 2, "--keep"),
    (["backup", "--db", S, "--keep", "many"], 2, "--keep"),
    (["backup", "{tmp}/missing/dir", "--db", S], 2, "DEST"),
    (["restore", "{tmp}/nope.db", "--db", S, "--yes"], 2, "SNAPSHOT"),
    (["restore", "{store}", "--db", S, "--yes"], 2, "SNAPSHOT"),
    (["import", "{tmp}/nope.jsonl", "--db", S, "--yes"], 2, "FILE"),
    (["import", "{tmp}", "--db", S, "--yes"], 2, "FILE"),
]


@pytest.mark.parametrize("args,code,needle", CASES, ids=[" ".join(c[0][:4]) for c in CASES])
def test_bad_flag_values(store, tmp_path, hermes_home, args, code, needle):
    before = file_hash(store)
    argv = [a.replace("{store}", str(store)).replace("{tmp}", str(tmp_path)) for a in args]
    result = run_subprocess(*argv, env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    if needle:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], result.stderr
        assert file_hash(store) == before


@pytest.mark.parametrize("kind", ["text", "truncated", "directory", "missing", "empty", "other_sqlite"])
def test_bad_store_files(tmp_path, store, kind):
    target = tmp_path / "bad.db"
    if kind == "text":
        target.write_text("hello\n")
    elif kind == "truncated":
        data = store.read_bytes()
        target.write_bytes(data[: len(data) // 3])
    elif kind == "directory":
        target.mkdir()
    elif kind == "empty":
        target.write_bytes(b"")
    elif kind == "other_sqlite":
        import sqlite3
        conn = sqlite3.connect(target)
        conn.execute("CREATE TABLE t(x)")
        conn.commit()
        conn.close()
    before = file_hash(target) if target.is_file() else None
    for argv in (["prune", "--yes"], ["stats"], ["optimize"], ["archive", "--source", "cli", "--yes"],
                 ["export", "-"], ["repair-prompts", "--apply", "--yes"], ["recover", "--apply", "--yes"],
                 ["repair-fts", "--apply", "--yes"], ["history"], ["optimize", "--into", tmp_path / "c.db"],
                 ["backup"]):
        result = run_subprocess(*argv, "--db", target)
        assert result.returncode == 1, (argv, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    if before is not None:
        assert file_hash(target) == before
    if kind == "missing":
        assert not target.exists()


def test_unreadable_config(hermes_home, store):
    (hermes_home / "config.yaml").mkdir()  # unreadable as a file, even for root
    result = run_subprocess("sweep", "--db", store, env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 2 and "config.yaml" in result.stderr and "Traceback" not in result.stderr


def test_malformed_config(hermes_home, store):
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: [\n")
    result = run_subprocess("sweep", "--db", store, env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 2 and "config.yaml:" in result.stderr and len(result.stderr.splitlines()) == 1


def test_job_file_with_bad_trigger(tmp_path):
    (tmp_path / "j.yaml").write_text("name: j\ncommand: [sweep]\ntrigger: {cron: '99 * * * *'}\n")
    result = run_subprocess("jobs", "list", "--jobs-dir", tmp_path)
    assert result.returncode == 2 and "j.yaml" in result.stderr and "trigger.cron" in result.stderr


@pytest.mark.parametrize("kind", ["text", "truncated", "directory", "empty", "other_sqlite"])
def test_bad_snapshot_files(tmp_path, store, kind):
    """restore refuses a SNAPSHOT that is not an intact Hermes store; the live store's bytes stay."""
    snap = tmp_path / "snap.db"
    if kind == "text":
        snap.write_text("hello\n")
    elif kind == "truncated":
        data = store.read_bytes()
        snap.write_bytes(data[: len(data) // 3])
    elif kind == "directory":
        snap.mkdir()
    elif kind == "empty":
        snap.write_bytes(b"")
    else:
        import sqlite3
        conn = sqlite3.connect(snap)
        conn.execute("CREATE TABLE t(x)")
        conn.commit()
        conn.close()
    before = file_hash(store)
    result = run_subprocess("restore", snap, "--db", store, "--yes", env={"HERMES_HOME": str(tmp_path)})
    assert result.returncode in (1, 2), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert file_hash(store) == before and not (tmp_path / "state-snapshots").exists()


@pytest.mark.parametrize("value", ["0001-01-01", "9999999999d", "1e400", "nan"])
def test_out_of_range_times_are_one_line_errors(value, tmp_path):
    store = small_store(tmp_path / "state.db")
    result = run_subprocess("prune", "--db", store, "--before", value, "--dry-run")
    assert result.returncode == 2 and result.stderr.startswith("hermes-maint: error: --before:")
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args", [["repair-prompts", ""], ["repair-prompts", "", "--apply", "--yes"],
                                  ["export", "--session-id", ""]])
def test_an_empty_session_id_names_no_session(args, tmp_path):
    store = small_store(tmp_path / "state.db")
    before = file_hash(store)
    result = run_subprocess(*args, "--db", store)
    assert result.returncode == 1 and "empty session id" in result.stderr
    assert file_hash(store) == before


def test_arguments_that_are_not_utf8_are_usage_errors(tmp_path):
    store = small_store(tmp_path / "state.db")
    bad = os.fsdecode(b"a\xffb")
    for args in (["delete", bad, "--dry-run"], ["export", "-", "--session-id", bad], ["repair-prompts", bad]):
        result = run_subprocess(*args, "--db", store)
        assert result.returncode == 2 and "not valid UTF-8" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("args", [["--db", "{a}", "--db", "{b}"], ["--db={a}", "--db", "{b}"],
                                  ["--older-than", "1d", "--older-than=2d", "--db", "{b}"]])
def test_an_option_given_twice_is_refused_not_the_last_kept(tmp_path, args):
    """Hostile try 3, F13: `prune --db a.db --db b.db` acted on b.db without a word."""
    a, b = small_store(tmp_path / "a.db"), small_store(tmp_path / "b.db")
    before = (file_hash(a), file_hash(b))
    result = run_subprocess("prune", *[x.format(a=a, b=b) for x in args], "--yes")
    assert result.returncode == 2 and "was given more than once" in result.stderr, result.stderr
    assert (file_hash(a), file_hash(b)) == before
