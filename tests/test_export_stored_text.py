"""Stored text that is not UTF-8 (issue 24, finding 12): a whole-store export skips each session holding
some, names it on stderr, exports every other one and exits 1; --json lists the skipped ids."""

import contextlib
import json
import sqlite3

import pytest

from maint.store.connection import open_store
from maint.store.text_check import unreadable_sessions
from tests.conftest import Cli
from tests.storegen import StoreBuilder

GOOD = ["g0", "g1", "g2"]


@contextlib.contextmanager
def good_store(path, layout="v22"):
    """A store of the clean sessions, open to add what a test needs beside them."""
    with StoreBuilder(path, layout=layout) as b:
        for n, sid in enumerate(GOOD):
            b.session(sid, age=50 + n, messages=3)
        yield b


def bad_store(path, layout="v22"):
    """Three clean sessions; one with a bad byte in a message, one in its title, one in its id."""
    with good_store(path, layout) as b:
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


def test_a_bad_byte_in_a_usage_row_names_its_session_and_blocks_no_other(tmp_path):
    """The jsonl record carries the session's session_model_usage rows (hostile try 15, S17): one bad byte in one
    of them is the session's stored text, named and skipped by the whole-store export (it stopped every export
    line), refused by a verified delete, found by doctor's daily check."""
    from maint.store.text_check import TextMark, unreadable_since

    path = tmp_path / "state.db"
    with good_store(path) as b:
        b.session("badusage", age=40, messages=2)
        b.raw.execute("INSERT INTO session_model_usage (session_id, model) VALUES ('badusage', CAST(x'41ff' AS TEXT))")
    out = tmp_path / "all.jsonl"
    result = Cli()("export", out, "--db", path)
    assert result.exit_code == 1, result.output
    assert "session badusage: stored text is not valid UTF-8 in session_model_usage.model; skipped" in result.stderr
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == sorted(GOOD, reverse=True)
    deleted = Cli()("export", f"{tmp_path}/vd/", "--session-id", "badusage", "--delete-after-verified", "--yes",
                    "--db", path)
    assert deleted.exit_code == 1 and "session_model_usage.model" in deleted.stderr
    with open_store(path, readonly=True) as s:
        assert s.scalar("SELECT COUNT(*) FROM sessions WHERE id = 'badusage'") == 1
        assert [u.id for u in unreadable_since(s, TextMark(10**9, 0.0)).bad] == ["badusage"]


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
    with good_store(path) as b:
        b.session("blobid", age=40, messages=2)
        b.raw.execute("UPDATE sessions SET id = CAST('hi' AS BLOB) WHERE id = 'blobid'")
    listed = Cli()("list", "--db", path)
    assert listed.exit_code == 0, listed.output
    assert "session b'hi': its id is not UTF-8 text; not listed" in listed.stderr
    out = tmp_path / "all.jsonl"
    exported = Cli()("export", out, "--db", path)
    assert exported.exit_code == 1, exported.output
    assert "session b'hi': stored text is not valid UTF-8 in sessions.id; skipped" in exported.stderr
    assert sorted(json.loads(line)["id"] for line in out.read_text().splitlines()) == GOOD
    pruned = Cli()("prune", "--db", path, "--older-than", "1d", "--dry-run")
    assert pruned.exit_code == 0, pruned.output
    assert "kept b'hi': its id is not UTF-8 text" in pruned.stdout
    doctor = Cli()("doctor", "--db", path, "--json")
    assert "b'hi' (sessions.id)" in doctor.stdout


def test_a_blob_id_of_the_same_bytes_as_a_text_id_leaves_the_text_session_alone(tmp_path):
    """Hostile try 17, U6: the skip matched a BLOB id by its bytes alone, so the text session of the same bytes
    (another row to SQLite, with its own messages) went out of the whole-store export too, named with the BLOB's
    reason, and prune's line named the text id as kept while it pruned it. Matched by bytes and kind; the BLOB
    row is named as bytes."""
    path = tmp_path / "state.db"
    with good_store(path) as b:
        b.session("twin", age=40, messages=2)
        b.raw.execute("INSERT INTO sessions (id, source, started_at) VALUES (CAST('twin' AS BLOB), 'cli', 1)")
    out = tmp_path / "all.jsonl"
    exported = Cli()("export", out, "--db", path)
    assert exported.exit_code == 1, exported.output
    assert "session b'twin': stored text is not valid UTF-8 in sessions.id; skipped" in exported.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in records) == sorted([*GOOD, "twin"])
    assert len(next(r for r in records if r["id"] == "twin")["messages"]) == 2
    pruned = Cli()("prune", "--db", path, "--older-than", "1d", "--dry-run", "--json")
    assert pruned.exit_code == 0, pruned.output
    report = json.loads(pruned.stdout)
    assert "twin" in report["session_ids"] and report["ids_not_utf8"] == ["b'twin'"], report


def test_a_null_id_beside_a_session_found_unreadable_while_exporting_names_both(tmp_path):
    """A row without an id (named at the selection) and a message found not UTF-8 while the bulk jsonl export
    wrote (named late) were sorted together by raw id: None against bytes, a TypeError and a traceback."""
    path = tmp_path / "state.db"
    with good_store(path) as b:
        b.raw.execute("INSERT INTO sessions (source, started_at) VALUES ('cli', 1)")
        b.session("badmsg", age=40, messages=3)
        b.raw.execute("UPDATE messages SET content = CAST(x'ff41' AS TEXT) WHERE id = "
                      "(SELECT MIN(id) FROM messages WHERE session_id = 'badmsg')")
    out = tmp_path / "all.jsonl"
    exported = Cli()("export", out, "--db", path, "--json")
    assert exported.exit_code == 1 and "Traceback" not in exported.output, exported.output
    assert [s["id"] for s in json.loads(exported.stdout)["skipped"]] == ["badmsg", "(NULL)"]
    assert sorted(json.loads(line)["id"] for line in out.read_text().splitlines()) == GOOD


def test_a_session_row_without_an_id_is_named_and_left_out(tmp_path):
    """Hostile try 16, T7: SQLite lets a TEXT primary key hold NULL (any sqlite3 client's INSERT without an id): one
    such row ended list, repair-routing (TypeError in shown_id), the whole-store export (IndexError), prune and
    archive plans (the lineage table's key refused it). Named as (NULL), left out; everything else goes on."""
    path = tmp_path / "state.db"
    with good_store(path) as b:
        b.raw.execute("INSERT INTO sessions (source, started_at) VALUES ('cli', 1)")
    listed = Cli()("list", "--db", path, "--json")
    assert listed.exit_code == 0, listed.output
    assert sorted(r["id"] for r in json.loads(listed.stdout)["sessions"]) == GOOD
    assert json.loads(listed.stdout)["unlisted_ids_not_utf8"] == ["(NULL)"]
    out = tmp_path / "all.jsonl"
    exported = Cli()("export", out, "--db", path)
    assert exported.exit_code == 1 and "session (NULL): stored text is not valid UTF-8 in sessions.id" in \
        exported.stderr, exported.output
    assert sorted(json.loads(line)["id"] for line in out.read_text().splitlines()) == GOOD
    for args in (["prune", "--older-than", "1d", "--dry-run"], ["archive", "--older-than", "1", "--dry-run"],
                 ["repair-routing"]):
        result = Cli()(*args, "--db", path)
        assert result.exit_code == 0 and "Traceback" not in result.output, (args, result.output)


def test_a_role_stored_as_a_blob_is_counted_under_its_shown_bytes(tmp_path):
    """Hostile try 3, F20: a message role stored as a BLOB became a bytes key of the timings block and stopped
    the jsonl export. It is counted under the bytes shown (``\\xff``), and every session is exported."""
    path = tmp_path / "state.db"
    with good_store(path) as b:
        b.raw.execute("UPDATE messages SET role = x'ff' WHERE session_id = 'g1'")
    out = tmp_path / "all.jsonl"
    exported = Cli()("export", out, "--db", path)
    assert exported.exit_code == 0, exported.output
    lines = {(d := json.loads(line))["id"]: d for line in out.read_text().splitlines()}
    assert sorted(lines) == GOOD
    assert lines["g1"]["timings"]["role_counts"] == {"\\xff": 3}


def _bad(b, sid, sql):
    b.raw.execute(sql.replace("SID", f"'{sid}'"))


FIRST = "(SELECT MIN(id) FROM messages WHERE session_id = SID)"


def many_bad_store(path, layout):
    """Bad bytes wherever the SQL-built jsonl line takes them in a way of its own; a clean session between."""
    with StoreBuilder(path, layout=layout) as b:
        b.session("clean_a", age=60, messages=3)
        cases = {
            "content": f"UPDATE messages SET content = CAST(x'41ff' AS TEXT) WHERE id = {FIRST}",
            "role": f"UPDATE messages SET role = CAST(x'75ff' AS TEXT) WHERE id = {FIRST}",  # the role counts
            "tool_name": f"UPDATE messages SET tool_name = CAST(x'c3' AS TEXT) WHERE id = {FIRST}",
            # the JSON tool_calls is written as SQLite re-reads it
            "calls": f"UPDATE messages SET role = 'assistant', tool_calls = CAST(x'5b7b2261223a2241ff227d5d' "
                     f"AS TEXT) WHERE id = {FIRST}",
            # a timestamp that is text: the line goes to the reference renderer
            "text_ts": f"UPDATE messages SET content = CAST(x'ff' AS TEXT), timestamp = 'soon' WHERE id = {FIRST}",
            "later_row": "UPDATE messages SET content = CAST(x'e282' AS TEXT) WHERE id = "
                         "(SELECT MAX(id) FROM messages WHERE session_id = SID)",
            "title_and_content": f"UPDATE messages SET content = CAST(x'ff' AS TEXT) WHERE id = {FIRST}; "
                                 "UPDATE sessions SET title = CAST(x'ff' AS TEXT) WHERE id = SID",
            "system_prompt": "UPDATE sessions SET system_prompt = CAST(x'ff' AS TEXT) WHERE id = SID",
        }
        for n, (sid, sql) in enumerate(cases.items()):
            b.session(sid, age=50 - n, messages=4)
            for part in sql.split("; "):
                _bad(b, sid, part)
        if layout == "v30":  # a prompt by hash: the session's own system_prompt column is not written
            bad_prompt = b.prompt("p")
            b.raw.execute("UPDATE system_prompts SET prompt = CAST(x'70ff' AS TEXT) WHERE hash = ?", (bad_prompt,))
            b.session("by_hash", age=30, messages=2, system_prompt_hash=bad_prompt, tool_names="")
            good_prompt = b.prompt("fine")
            b.session("hidden_column", age=29, messages=2, system_prompt_hash=good_prompt, tool_names="")
            b.raw.execute("UPDATE sessions SET system_prompt = CAST(x'ff' AS TEXT) WHERE id = 'hidden_column'")
        b.session("clean_z", age=1, messages=3)
    return path


@pytest.mark.parametrize("layout", ["v22", "v30"])
@pytest.mark.parametrize("redact", [False, True])
@pytest.mark.parametrize("line_bytes", [None, 600])
def test_the_bulk_jsonl_export_skips_what_its_plan_would(tmp_path, monkeypatch, layout, redact, line_bytes):
    """The bulk jsonl export checks the messages' text in the lines it builds (not in a pass of its own before):
    it skips and names exactly the sessions, with the fields, that the dry run (which reads every text first)
    names, on every way a line is built: by SQLite, by the redactor, by the reference renderer (a line SQLite
    gives back, or one too big to build whole)."""
    if line_bytes is not None:
        monkeypatch.setattr("maint.export.fast_jsonl.LINE_BYTES", line_bytes)
    store = many_bad_store(tmp_path / "state.db", layout)
    extra = ["--redact"] if redact else []
    planned = Cli()("export", tmp_path / "all.jsonl", "--db", store, "--dry-run", "--json", *extra)
    assert planned.exit_code == 1, planned.output
    out = tmp_path / "all.jsonl"
    ran = Cli()("export", out, "--db", store, "--json", *extra)
    assert ran.exit_code == 1, ran.output
    plan, report = json.loads(planned.stdout), json.loads(ran.stdout)
    with open_store(store, readonly=True) as s:
        full = [u.as_json() for u in unreadable_sessions(s)]
    assert report["skipped"] == plan["skipped"] == full
    assert len(full) == (10 if layout == "v30" else 8)
    assert {"id": "title_and_content", "fields": ["sessions.title", "messages.content"]} in full
    assert report["sessions"] == plan["sessions"] == ["clean_a", "clean_z"]
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["clean_a", "clean_z"]
    assert report["messages"] == 6
    plain = Cli()("export", out, "--db", store, *extra)
    dry = Cli()("export", out, "--db", store, "--dry-run", *extra)
    assert plain.exit_code == dry.exit_code == 1
    named = [line for line in plain.stderr.splitlines() if "session(s)" in line or "warning" in line]
    assert len(named) == len(full) + 1
    assert "\n".join(named).replace("; skipped", "; would skip") in dry.stderr.replace("would not be", "not")


def test_the_bulk_jsonl_plan_reads_no_message_text(tmp_path, monkeypatch):
    """The plan of a bulk jsonl export checks the session rows and prompts only: the export reads every message's
    text once, in the lines it builds. The dry run still reads every text (it writes no line)."""
    from maint.export.pipeline import ExportRequest, plan_export
    from maint.store import connection, text_check

    store = tmp_path / "state.db"
    with StoreBuilder(store) as b:
        for n in range(5):
            b.session(f"s{n}", age=10 + n, messages=20)
    checked = []
    real = connection.not_utf8
    for module in (connection, text_check):
        monkeypatch.setattr(module, "not_utf8", lambda raw: checked.append(raw) or real(raw))
    with open_store(store, readonly=True) as s:
        plan_export(s, ExportRequest(output=str(tmp_path / "all.jsonl")))
        assert 0 < len(checked) <= 5  # one a session row
        checked.clear()
        plan_export(s, ExportRequest(output=str(tmp_path / "all.jsonl"), dry_run=True))
        assert len(checked) >= 100  # and one a message


def test_a_row_without_an_id_is_named_by_the_daily_doctor_and_the_full_one_alike(tmp_path):
    """The whole-store export skips a row without an id and names it; the doctor's full stored-text check did not
    (it asked `id IN (scope)`, which never matches NULL) while the daily one (a clean full check recorded before
    the row came) did: both name it now."""
    path = tmp_path / "state.db"
    with good_store(path):
        pass
    assert Cli()("doctor", "--db", path, "--full", "--record").exit_code == 0
    with contextlib.closing(sqlite3.connect(path)) as c:
        c.execute("INSERT INTO sessions (source, started_at) VALUES ('cli', 1)")
        c.commit()
    for args in (["--full"], []):
        doctor = json.loads(Cli()("doctor", "--db", path, "--json", *args).stdout)
        text = next(f for f in doctor["findings"] if f["kind"] == "stored_text")
        assert text["data"]["sessions"] == [{"id": "(NULL)", "fields": ["sessions.id"]}], (args, text)
        assert ("since" in text["what"]) == (args == []), text["what"]  # the daily pass read only what changed


def test_the_latest_session_traced_is_that_row_not_a_blob_of_its_bytes(tmp_path):
    """Hostile try 18, V2 (U6's variant): `export - --format trace` without an id checked the most recent session
    by its id's bytes, so an old BLOB row of the same bytes made it skip the text session: nothing traced."""
    path = tmp_path / "state.db"
    with good_store(path) as b:
        b.session("twin", age=1, messages=2)  # the most recent
        b.raw.execute("INSERT INTO sessions (id, source, started_at) VALUES (CAST('twin' AS BLOB), 'cli', 1)")
    traced = Cli()("export", "-", "--format", "trace", "--db", path)
    assert traced.exit_code == 0, traced.output
    lines = [json.loads(line) for line in traced.stdout.splitlines() if line.strip()]
    assert lines and "skipped" not in traced.stderr, traced.output
