"""Stored text that is not UTF-8 (issue 24, finding 12): a whole-store export skips each session holding
some, names it on stderr, exports every other one and exits 1; --json lists the skipped ids."""

import json

import pytest

from maint.store.connection import open_store
from maint.store.text_check import unreadable_sessions
from tests.conftest import Cli
from tests.storegen import StoreBuilder

GOOD = ["g0", "g1", "g2"]


def bad_store(path, layout="v22"):
    """Three clean sessions; one with a bad byte in a message, one in its title, one in its id."""
    with StoreBuilder(path, layout=layout) as b:
        for n, sid in enumerate(GOOD):
            b.session(sid, age=50 + n, messages=3)
        b.session("badmsg", age=40, messages=3)
        b.raw.execute("UPDATE messages SET content = CAST(x'ff41' AS TEXT) WHERE id = "
                      "(SELECT MIN(id) FROM messages WHERE session_id = 'badmsg')")
        b.session("badtitle", age=41, messages=2)
        b.raw.execute("UPDATE sessions SET title = CAST(x'41c3' AS TEXT) WHERE id = 'badtitle'")
        b.session("badid", age=42, messages=2)
        b.raw.execute("UPDATE sessions SET id = CAST(x'78ff' AS TEXT) WHERE id = 'badid'")
        b.raw.execute("UPDATE messages SET session_id = CAST(x'78ff' AS TEXT) WHERE session_id = 'badid'")
    return path


@pytest.fixture
def store(tmp_path):
    return bad_store(tmp_path / "state.db")


def named_on_stderr(result):
    err = result.stderr
    assert "session badmsg: stored text is not valid UTF-8 in messages.content; skipped" in err
    assert "session badtitle: stored text is not valid UTF-8 in sessions.title; skipped" in err
    assert "session x\\xff: stored text is not valid UTF-8 in sessions.id" in err
    assert "3 session(s) not exported" in err
    assert "give ids, titles and paths in UTF-8" not in err


def test_the_check_names_each_session_and_field(store):
    with open_store(store, readonly=True) as s:
        found = {u.id: u.fields for u in unreadable_sessions(s)}
    assert set(found) == {"badmsg", "badtitle", "x\\xff"}
    assert found["badmsg"] == ("messages.content",)
    assert found["badtitle"] == ("sessions.title",)
    assert found["x\\xff"][0] == "sessions.id"


@pytest.mark.parametrize("layout", ["v22", "v30"])
def test_fast_jsonl_skips_names_and_exports_the_rest(tmp_path, layout):
    store = bad_store(tmp_path / "state.db", layout)
    out = tmp_path / "all.jsonl"
    result = Cli()("export", out, "--db", store)
    assert result.exit_code == 1, result.output
    named_on_stderr(result)
    assert sorted(json.loads(line)["id"] for line in out.read_text().splitlines()) == GOOD


def test_json_report_lists_the_skipped_ids(store, tmp_path):
    result = Cli()("export", tmp_path / "all.jsonl", "--db", store, "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert sorted(u["id"] for u in report["skipped"]) == ["badmsg", "badtitle", "x\\xff"]
    assert sorted(report["sessions"]) == GOOD


def test_jsonl_to_stdout_holds_only_the_clean_sessions(store):
    result = Cli()("export", "-", "--db", store)
    assert result.exit_code == 1
    assert sorted(json.loads(line)["id"] for line in result.stdout.splitlines()) == GOOD
    named_on_stderr(result)


@pytest.mark.parametrize("fmt, suffix", [("md", ".md"), ("qmd", ".qmd"), ("trace", ".trace.jsonl")])
def test_per_session_formats_skip_and_write_the_rest(store, tmp_path, fmt, suffix):
    folder = tmp_path / "out"
    result = Cli()("export", f"{folder}/", "--format", fmt, "--older-than", "1d", "--db", store)
    assert result.exit_code == 1, result.output
    named_on_stderr(result)
    assert sorted(p.name for p in folder.iterdir() if p.name.endswith(suffix)) == [g + suffix for g in GOOD]


def test_html_and_user_prompts_skip_and_write_the_rest(store, tmp_path):
    html = tmp_path / "all.html"
    result = Cli()("export", html, "--format", "html", "--db", store)
    assert result.exit_code == 1, result.output
    named_on_stderr(result)
    text = html.read_text()
    assert all(f"message 0 of {g}" in text for g in GOOD) and "badmsg" not in text
    prompts = tmp_path / "prompts.jsonl"
    result = Cli()("export", prompts, "--only", "user-prompts", "--db", store)
    assert result.exit_code == 1, result.output
    named_on_stderr(result)
    assert {json.loads(line)["session_id"] for line in prompts.read_text().splitlines()} == set(GOOD)


def test_one_named_session_with_bad_text_is_named_not_a_usage_error(store, tmp_path):
    result = Cli()("export", tmp_path / "one.jsonl", "--session-id", "badmsg", "--db", store)
    assert result.exit_code == 1
    assert "session badmsg: stored text is not valid UTF-8 in messages.content" in result.stderr
    assert not (tmp_path / "one.jsonl").exists()


def test_verified_delete_of_a_session_with_bad_text_deletes_nothing(store, tmp_path):
    result = Cli()("export", f"{tmp_path}/out/", "--session-id", "badmsg", "--delete-after-verified", "--yes",
                   "--db", store)
    assert result.exit_code == 1
    assert "session badmsg: stored text is not valid UTF-8" in result.stderr
    with open_store(store, readonly=True) as s:
        assert s.scalar("SELECT COUNT(*) FROM sessions WHERE id = 'badmsg'") == 1


def test_dry_run_names_what_it_would_skip(store):
    result = Cli()("export", "--dry-run", "--db", store)
    assert result.exit_code == 1
    assert "session badmsg: stored text is not valid UTF-8 in messages.content; would skip" in result.stderr


def test_a_session_id_stored_as_a_blob_is_named_and_left_out(tmp_path):
    """Hostile try 3, F20: an id stored as a BLOB (the TEXT column keeps it so) reached Python as bytes: `list`
    stopped on it. It is not UTF-8 text, as a bad byte is not: listed nowhere, named, never pruned."""
    path = tmp_path / "state.db"
    with StoreBuilder(path) as b:
        for n, sid in enumerate(GOOD):
            b.session(sid, age=50 + n, messages=3)
        b.session("blobid", age=40, messages=2)
        b.raw.execute("UPDATE sessions SET id = CAST('hi' AS BLOB) WHERE id = 'blobid'")
    listed = Cli()("list", "--db", path)
    assert listed.exit_code == 0, listed.output
    assert "session hi: its id is not UTF-8 text; not listed" in listed.stderr
    out = tmp_path / "all.jsonl"
    exported = Cli()("export", out, "--db", path)
    assert exported.exit_code == 1, exported.output
    assert "session hi: stored text is not valid UTF-8 in sessions.id; skipped" in exported.stderr
    assert sorted(json.loads(line)["id"] for line in out.read_text().splitlines()) == GOOD
    pruned = Cli()("prune", "--db", path, "--older-than", "1d", "--dry-run")
    assert pruned.exit_code == 0, pruned.output
    assert "kept hi: its id is not UTF-8 text" in pruned.stdout
    doctor = Cli()("doctor", "--db", path, "--json")
    assert "hi (sessions.id)" in doctor.stdout


def test_a_role_stored_as_a_blob_is_counted_under_its_shown_bytes(tmp_path):
    """Hostile try 3, F20: a message role stored as a BLOB became a bytes key of the timings block and stopped
    the jsonl export. It is counted under the bytes shown (``\\xff``), and every session is exported."""
    path = tmp_path / "state.db"
    with StoreBuilder(path) as b:
        for n, sid in enumerate(GOOD):
            b.session(sid, age=50 + n, messages=3)
        b.raw.execute("UPDATE messages SET role = x'ff' WHERE session_id = 'g1'")
    out = tmp_path / "all.jsonl"
    exported = Cli()("export", out, "--db", path)
    assert exported.exit_code == 0, exported.output
    lines = {(d := json.loads(line))["id"]: d for line in out.read_text().splitlines()}
    assert sorted(lines) == GOOD
    assert lines["g1"]["timings"]["role_counts"] == {"\\xff": 3}
