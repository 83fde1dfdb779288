"""Times a hand-edited store can hold (REAL affinity keeps ±inf, and years datetime cannot print) never crash a
command, and a --json report stays strict JSON (found by a hostile try: list, prune, delete and md/html export
ended in a traceback; a dry run printed -Infinity)."""

import json
import sqlite3

import pytest

from tests.conftest import run_subprocess
from tests.storegen import StoreBuilder

ODD = {"neg_inf": float("-inf"), "far_future": 1e17, "year_minus": -1e12}


def _strict(text: str):
    def refuse(name):
        raise AssertionError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def store(tmp_path):
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("normal", age=100, messages=2)
        for sid in ODD:
            b.session(sid, age=100, messages=0)
    c = sqlite3.connect(db)
    for sid, value in ODD.items():
        c.execute("UPDATE sessions SET started_at = ?, ended_at = ? WHERE id = ?", (value, value, sid))
    c.commit()
    c.close()
    return db


@pytest.mark.parametrize("args", [
    ["list", "--limit", "50"],
    ["prune", "--older-than", "30d", "--dry-run"],
    ["stats"],
])
def test_read_commands_print_odd_times(store, args):
    r = run_subprocess(*args, "--db", store)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("sid", list(ODD))
def test_delete_shows_an_odd_time_and_deletes(store, sid):
    r = run_subprocess("delete", sid, "--db", store, "--yes")
    assert r.returncode == 0, r.stderr
    assert sqlite3.connect(store).execute("SELECT count(*) FROM sessions WHERE id = ?", (sid,)).fetchone() == (0,)


@pytest.mark.parametrize("fmt", ["md", "html", "jsonl"])
def test_export_renders_odd_times(store, tmp_path, fmt):
    out = tmp_path / "out"
    r = run_subprocess("export", out, "--db", store, "--format", fmt, "--older-than", "1d")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr


def test_json_reports_are_strict_json_and_prune_goes_on(store):
    dry = run_subprocess("prune", "--older-than", "30d", "--dry-run", "--json", "--db", store)
    assert dry.returncode == 0, dry.stderr
    planned = _strict(dry.stdout)
    listed = run_subprocess("list", "--json", "--limit", "50", "--db", store)
    assert listed.returncode == 0, listed.stderr
    for line in listed.stdout.splitlines():
        _strict(line)
    done = run_subprocess("prune", "--older-than", "30d", "--yes", "--json", "--db", store)
    assert done.returncode == 0, done.stderr
    report = _strict(done.stdout)
    # Times outside the epoch window (1970 to 9999) date nothing, as upstream skips them: far_future, neg_inf
    # and year_minus cannot be dated, so they are never old. The normal one goes, as previewed.
    assert report["session_ids"] == planned["session_ids"], (report, planned)
    assert report["session_ids"] == ["normal"] and report["deleted"] == 1
    assert planned["oldest"]["id"] == "normal"


def test_what_cannot_be_dated_is_never_old_and_a_text_timestamp_hides_nothing(tmp_path):
    """A text started_at made a session count from time 0 (pruned though it ended yesterday), and one text
    message timestamp outranked every number in MAX (a message from yesterday no longer counted)."""
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("textstart", age=1, messages=0)
        b.session("textts", age=1, messages=3)
        b.session("old", age=100, messages=2)
    c = sqlite3.connect(db)
    c.execute("UPDATE sessions SET started_at = '2026-12-01' WHERE id = 'textstart'")
    c.execute("UPDATE messages SET timestamp = 'yesterday' WHERE id = (SELECT MIN(id) FROM messages "
              "WHERE session_id = 'textts')")
    c.commit()
    c.close()
    dry = run_subprocess("prune", "--older-than", "30d", "--dry-run", "--json", "--db", db)
    assert dry.returncode == 0, dry.stderr
    assert _strict(dry.stdout)["session_ids"] == ["old"]
    done = run_subprocess("prune", "--older-than", "30d", "--yes", "--json", "--db", db)
    report = _strict(done.stdout)
    assert done.returncode == 0 and report["session_ids"] == ["old"] and report["skipped_changed"] == [], done.stderr


@pytest.mark.parametrize("value", ["9223372036854775808", "99999999999999999999", "٣"])
def test_list_limit_out_of_range_or_not_ascii_is_a_usage_error(store, value):
    r = run_subprocess("list", "--limit", value, "--db", store)
    line, = r.stderr.strip().splitlines()
    assert r.returncode == 2 and "--limit" in line and "whole number from 0" in line and "Traceback" not in r.stderr


def test_archive_of_a_session_with_a_text_message_timestamp_is_not_taken_for_a_change(tmp_path):
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("textts", age=100, messages=3)
    c = sqlite3.connect(db)
    c.execute("UPDATE messages SET timestamp = 'yesterday' WHERE id = (SELECT MIN(id) FROM messages)")
    c.commit()
    c.close()
    r = run_subprocess("archive", "--older-than", "90d", "--yes", "--json", "--db", db)
    assert r.returncode == 0, r.stderr
    report = _strict(r.stdout)
    assert report["skipped_changed"] == [] and report["session_ids"] == ["textts"], report


@pytest.mark.parametrize("fmt", ["jsonl", "md", "html", "trace"])
def test_deeply_nested_tool_calls_do_not_stop_the_export(tmp_path, fmt):
    """One tool_calls nested 1,500 deep ended every export of the store in a RecursionError (hostile try): it is
    read as what it is, text that is not usable JSON."""
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("deep", age=100, messages=2)
        b.session("fine", age=100, messages=2)
    c = sqlite3.connect(db)
    c.execute("UPDATE messages SET role = 'assistant', tool_calls = ? WHERE id = (SELECT MAX(id) FROM messages "
              "WHERE session_id = 'deep')", ("[" * 1500 + "]" * 1500,))
    c.commit()
    c.close()
    out = tmp_path / "out"
    args = ["--session-id", "deep"] if fmt == "trace" else ["--older-than", "1d"]
    r = run_subprocess("export", out, "--db", db, "--format", fmt, *args)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    if fmt == "jsonl":
        lines = {json.loads(line)["id"]: json.loads(line) for line in out.read_text().splitlines()}
        assert set(lines) == {"deep", "fine"} and lines["deep"]["timings"]["tool_calls_emitted"] == 1
