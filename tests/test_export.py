"""export: selection, every format, safety of files, redaction, upload to a local hub, verified delete."""

import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from maint.export.redact import redact_text
from tests.conftest import REPO, file_hash, query, run_subprocess, session_ids
from tests.hf_fake import Hub
from tests.storegen import StoreBuilder, small_store


@pytest.fixture
def store(tmp_path):
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("old_cli", age=200, title="old work", messages=4)
        b.session("tg_chat", source="telegram", age=10, messages=3)
        b.session("open_one", age=1, ended=False, messages=2)
        b.session("c1", age=50, end_reason="compression", title="proj", messages=4)
        b.session("c2", age=40, parent="c1", title="proj #2", messages=2)
        b.session("pinned_arch", age=30, archived=1, messages=2)
        b.session("parent", age=20, messages=2)
        b.session("sub", source="subagent", age=20, parent="parent", model_config={"_delegate_from": "parent"},
                  messages=3)
        b.db.append_message("tg_chat", "assistant", "calling", tool_calls=[
            {"id": "call_1", "type": "function", "function": {"name": "terminal", "arguments": '{"cmd": "ls"}'}}])
        b.db.append_message("tg_chat", "tool", "file1\nfile2", tool_call_id="call_1", tool_name="terminal")
        b.db.append_message("tg_chat", "user", "<script>alert('x')</script> my key AKIAIOSFODNN7EXAMPLE")
        b.raw.execute("UPDATE messages SET active = 0, compacted = 1 WHERE session_id = 'c1' AND id = "
                      "(SELECT MIN(id) FROM messages WHERE session_id = 'c1')")
        b.raw.execute("UPDATE messages SET active = 0, compacted = 0 WHERE session_id = 'c1' AND id = "
                      "(SELECT MAX(id) FROM messages WHERE session_id = 'c1')")  # rewound: not displayed
    return db


def run_export(*args, env=None):
    result = run_subprocess("export", *map(str, args), env=env)
    return result


def jsonl(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_jsonl_single_session_full_backup_with_timings(store, tmp_path):
    out = tmp_path / "exports"
    out.mkdir()
    r = run_export(out, "--db", store, "--session-id", "c1")
    assert r.returncode == 0, r.stderr
    path = out / "hermes_session_c1.jsonl"
    (rec,) = jsonl(path.read_text())
    assert rec["id"] == "c1" and len(rec["messages"]) == 4  # compacted and rewound rows included
    assert {(m["active"], m["compacted"]) for m in rec["messages"]} == {(1, 0), (0, 1), (0, 0)}
    t = rec["timings"]
    assert t["available"] and t["complete"] is False and t["role_counts"] == {"user": 2, "assistant": 2}
    assert t["wall_clock_ms"] > 0 and len(t["intervals"]) == 4 and t["largest_gap_ms"] > 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_jsonl_bulk_takes_ended_includes_archived_and_no_filter_takes_all(store):
    r = run_export("-", "--db", store, "--older-than", "15")
    ids = {rec["id"] for rec in jsonl(r.stdout)}
    assert ids == {"old_cli", "c1", "c2", "pinned_arch", "parent", "sub"}
    everything = {rec["id"] for rec in jsonl(run_export("-", "--db", store).stdout)}
    assert everything == session_ids(store)


def test_timings_without_timestamps(tmp_path):
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("empty", messages=0)
    (rec,) = jsonl(run_export("-", "--db", db).stdout)
    assert rec["timings"]["available"] is False and rec["timings"]["unavailable_reason"]


def test_tool_calls_counted(store):
    (rec,) = jsonl(run_export("-", "--db", store, "--session-id", "tg").stdout)
    assert rec["timings"]["tool_calls_emitted"] == 1


def test_missing_session_id_exits_nonzero_without_file(store, tmp_path):
    out = tmp_path / "x.jsonl"
    r = run_export(out, "--db", store, "--session-id", "nope")
    assert r.returncode == 1 and "nope" in r.stderr and not out.exists()


def test_max_export_messages_refused(store, tmp_path):
    config = Path(store).parent / "config.yaml"  # the store's own home's config
    config.write_text("sessions:\n  max_export_messages: 3\n")
    out = tmp_path / "x.jsonl"
    r = run_export(out, "--db", store, "--session-id", "old_cli")
    assert r.returncode == 1 and "4 stored messages" in r.stderr and "max_export_messages" in r.stderr
    assert not out.exists()
    config.write_text("sessions:\n  max_export_messages: 0\n")
    assert run_export(out, "--db", store, "--session-id", "old_cli").returncode == 0


def test_dry_run_writes_nothing(store, tmp_path):
    out = tmp_path / "md"
    r = run_export(out, "--db", store, "--format", "md", "--source", "cli", "--dry-run", "--json")
    report = json.loads(r.stdout)
    assert report["dry_run"] is True
    assert "old_cli" in report["sessions"]
    assert not out.exists()  # not even the folder


def test_a_verified_delete_dry_run_creates_nothing_beside_the_store(store, tmp_path):
    """Hostile try 9, L2: `export --delete-after-verified --yes --dry-run` opened the store for writing: the run
    lock, -wal and -shm appeared beside a store at rest. A preview creates nothing, and says what would go."""
    before = sorted(os.listdir(tmp_path))
    out = tmp_path / "out"
    r = run_export(out, "--db", store, "--session-id", "old_cli", "--delete-after-verified", "--yes", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "would then delete 1 session(s) from the store once their copy is verified: old_cli" in r.stdout
    assert sorted(os.listdir(tmp_path)) == before and "old_cli" in session_ids(store)
    r = run_export(out, "--db", store, "--session-id", "old_cli", "--delete-after-verified", "--yes", "--dry-run",
                   "--json")
    assert json.loads(r.stdout)["would_delete"] == ["old_cli"] and sorted(os.listdir(tmp_path)) == before


def test_md_needs_a_filter(store, tmp_path):
    r = run_export(tmp_path / "md", "--db", store, "--format", "md")
    assert r.returncode == 2 and "needs at least one filter" in r.stderr


def test_md_display_transcript_and_manifest(store, tmp_path):
    out = tmp_path / "md"
    r = run_export(out, "--db", store, "--format", "md", "--session-id", "c1")
    assert r.returncode == 0, r.stderr
    text = (out / "c1.md").read_text()
    assert "message 0 of c1" in text and "archived by compaction" in text  # compacted turn shown
    assert "message 3 of c1" not in text  # rewound turn not shown
    (entry,) = jsonl((out / "manifest.jsonl").read_text())
    import hashlib
    assert entry["path"] == "c1.md" and entry["messages"] == 3 and entry["lineage_ids"] == ["c1"]
    assert entry["sha256"] == hashlib.sha256((out / "c1.md").read_bytes()).hexdigest()


def test_logical_lineage_and_qmd_front_matter(store, tmp_path):
    out = tmp_path / "q"
    r = run_export(out, "--db", store, "--format", "qmd", "--title", "proj", "--lineage", "logical")
    assert r.returncode == 0, r.stderr
    text = (out / "c1.qmd").read_text()
    assert text.startswith("---\ntitle: \"proj\"") and "format:" in text and "lineage: [\"c1\", \"c2\"]" in text
    assert "message 0 of c2" in text and not (out / "c2.qmd").exists()


def test_html_is_standalone_and_escaped(store, tmp_path):
    out = tmp_path / "s.html"
    r = run_export(out, "--db", store, "--format", "html", "--source", "telegram")
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html
    assert "<details" in html and "file1" in html
    assert "http" not in html.replace("http-equiv", "")  # no external CSS/JS/fonts
    several = tmp_path / "all.html"
    run_export(several, "--db", store, "--format", "html", "--older-than", "15")
    assert "<nav>" in several.read_text()


def test_user_prompts_jsonl_and_md(store, tmp_path):
    recs = jsonl(run_export("-", "--db", store, "--only", "user-prompts", "--session-id", "old_cli").stdout)
    assert [r["index"] for r in recs] == [0, 1] and recs[0]["session_id"] == "old_cli" and recs[0]["timestamp"]
    out = tmp_path / "p"
    run_export(out, "--db", store, "--only", "user-prompts", "--format", "md", "--session-id", "old_cli")
    text = (out / "old_cli.prompts.md").read_text()
    assert "message 0 of old_cli" in text and "message 1 of old_cli" not in text


def test_redact_masks_secrets_in_every_format(store, tmp_path):
    for fmt in ("jsonl", "html"):
        out = tmp_path / f"r.{fmt}"
        run_export(out, "--db", store, "--format", fmt, "--session-id", "tg", "--redact")
        assert "AKIAIOSFODNN7EXAMPLE" not in out.read_text() and "[REDACTED]" in out.read_text()
    trace = run_export("-", "--db", store, "--format", "trace", "--session-id", "tg").stdout
    assert "AKIAIOSFODNN7EXAMPLE" not in trace  # traces are redacted by default
    raw = run_export("-", "--db", store, "--format", "trace", "--session-id", "tg", "--no-redact").stdout
    assert "AKIAIOSFODNN7EXAMPLE" in raw


SECRETS = [
    "AKIAIOSFODNN7EXAMPLE", "sk-proj-abcdefghijklmnopqrstuvwxyzABCDEFGHIJ1234",
    "ghp_1234567890abcdefghijklmnopqrstuvwxyzAB", "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH",
    "xoxb-123456789012-1234567890123-abcdefghijklmnopqrstuvwx",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
]
CLEAN = ["commit 3f2a9c1e7b4d5a6f8e9d0c1b2a3f4e5d6c7b8a9f", "uuid 123e4567-e89b-12d3-a456-426614174000",
         "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "session 20250305_091523_a1b2c3d4 started", "see https://example.com/docs?page=2", "the token count was 512"]


@pytest.mark.parametrize("secret", SECRETS)
def test_redaction_corpus_secrets(secret):
    assert secret not in redact_text(f"value: {secret} end")


@pytest.mark.parametrize("text", ["password = 'Sup3rS3cret!'", "curl https://admin:hunter2pass@db.local/x",
                                  "Authorization: Bearer abcdefghijklmnop1234567890",
                                  "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"])
def test_redaction_corpus_shapes(text):
    redacted = redact_text(text)
    assert "[REDACTED]" in redacted
    assert not any(s in redacted for s in ("Sup3rS3cret", "hunter2pass", "abcdefghijklmnop123", "MIIEpAIBAA"))


@pytest.mark.parametrize("text", CLEAN)
def test_redaction_leaves_clean_text(text):
    assert redact_text(text) == text


def test_trace_shape_matches_hermes(store, tmp_path):
    lines = jsonl(run_export("-", "--db", store, "--format", "trace", "--session-id", "tg", "--no-redact").stdout)
    code = ("import json, sys; from hermes_state import SessionDB; from agent.trace_upload import build_trace_jsonl;"
            "from pathlib import Path; db = SessionDB(Path(sys.argv[1]));"
            "print(build_trace_jsonl(db.get_messages_as_conversation('tg_chat'), session_id='tg_chat', "
            "model='gpt-5', cwd='/tmp', redact=False))")
    theirs = jsonl(subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True, text=True,
                                  cwd=REPO).stdout)
    assert [(x["type"], x["message"]["role"]) for x in lines] == [(x["type"], x["message"]["role"]) for x in theirs]
    for ours, hermes in zip(lines, theirs):
        assert set(hermes) <= set(ours)
        content = ours["message"]["content"]
        if isinstance(content, list):
            assert [b["type"] for b in content] == [b["type"] for b in hermes["message"]["content"]]
    assert lines[1]["parentUuid"] == lines[0]["uuid"] and all(x["sessionId"] == "tg_chat" for x in lines)
    tool_use = next(b for x in lines for b in (x["message"]["content"] if isinstance(x["message"]["content"], list)
                                               else []) if b["type"] == "tool_use")
    assert tool_use["input"] == {"cmd": "ls"}


def test_bulk_trace_writes_one_file_per_session(store, tmp_path):
    out = tmp_path / "t"
    run_export(out, "--db", store, "--format", "trace", "--source", "cli", "--older-than", "100")
    assert sorted(p.name for p in out.iterdir()) == ["old_cli.trace.jsonl"]


def test_upload_to_local_hub_creates_private_repo(store, tmp_path):
    with Hub() as hub:
        env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": "hf_localtesttoken_abcdefghijklmnop"}
        out = tmp_path / "tg.trace.jsonl"
        r = run_export(out, "--db", store, "--format", "trace", "--session-id", "tg", "--upload", "--json", env=env)
        assert r.returncode == 0, r.stderr
        repo = hub.repos["tester/hermes-traces"]
        assert repo["private"] is True and repo["type"] == "dataset"
        assert repo["files"]["sessions/tg_chat.jsonl"] == out.read_bytes()
        assert env["HF_TOKEN"] not in r.stdout + r.stderr and env["HF_TOKEN"] in hub.token_seen
        hub.repos["tester/hermes-traces"]["private"] = False
        refused = run_export(out, "--db", store, "--format", "trace", "--session-id", "tg", "--upload", env=env)
        assert refused.returncode == 1 and "public" in refused.stderr and out.exists()
        allowed = run_export(out, "--db", store, "--format", "trace", "--session-id", "tg", "--upload", "--public",
                             env=env)
        assert allowed.returncode == 0, allowed.stderr


def test_upload_without_token_keeps_file(store, tmp_path):
    out = tmp_path / "tg.trace.jsonl"
    env = {k: "" for k in ("HF_TOKEN",)}
    r = run_export(out, "--db", store, "--format", "trace", "--session-id", "tg", "--upload", env=env)
    assert r.returncode == 1 and "HF_TOKEN" in r.stderr and out.exists()


def test_upload_refused_before_any_file_still_reports_the_files_under_json(store, tmp_path):
    """A consumer of --json learns what was written even when the upload is refused outright (exit 1)."""
    out = tmp_path / "tg.trace.jsonl"
    r = run_export(out, "--db", store, "--format", "trace", "--session-id", "tg", "--upload", "--json",
                   env={"HF_TOKEN": ""})
    assert r.returncode == 1 and out.exists()
    report = json.loads(r.stdout)
    assert report["files"] == [str(out)] and report["uploaded"] == [] and "HF_TOKEN" in report["upload_error"]
    line, = r.stderr.strip().splitlines()
    assert "HF_TOKEN" in line


def test_file_names_cannot_escape(tmp_path):
    from maint.export.files import inside, safe_name
    assert "/" not in safe_name("../../etc/passwd", ".md") and not safe_name("../x", "").startswith(".")
    from maint.errors import MaintError
    with pytest.raises(MaintError, match="outside"):
        inside(tmp_path, "../escape.md")


def test_failure_leaves_no_file_under_final_name(tmp_path):
    from maint.export.files import atomic_text
    target = tmp_path / "out.jsonl"
    with pytest.raises(RuntimeError):
        with atomic_text(target) as sink:
            sink.write("partial")
            raise RuntimeError("boom")
    assert not target.exists() and not list(tmp_path.iterdir())


# -- --delete-after-verified -------------------------------------------------------------------

def test_verified_delete_removes_session_and_children(store, tmp_path):
    out = tmp_path / "bk"
    r = run_export(out, "--db", store, "--session-id", "parent", "--delete-after-verified", "--yes", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert sorted(report["deleted"]) == ["parent", "sub"]
    assert {p.name for p in out.iterdir()} == {"hermes_session_parent.jsonl", "hermes_session_sub.jsonl"}
    assert not {"parent", "sub"} & session_ids(store)
    (rec,) = jsonl((out / "hermes_session_sub.jsonl").read_text())
    assert len(rec["messages"]) == 3


@pytest.mark.parametrize("named, sql, named_in_error", [
    ("old_cli", "UPDATE messages SET content = X'ff00696d6789504e47' WHERE id = (SELECT MIN(id) FROM messages "
                "WHERE session_id = 'old_cli')", "session old_cli: message {}'s content holds a BLOB (bytes)"),
    ("old_cli", "UPDATE sessions SET title = CAST('T' AS BLOB) WHERE id = 'old_cli'",
     "session old_cli: its row's title holds a BLOB (bytes)"),
    ("old_cli", "UPDATE sessions SET session_key = X'ff54' WHERE id = 'old_cli'",
     "session old_cli: its row's session_key holds a BLOB (bytes)"),
    ("old_cli", "INSERT INTO session_model_usage (session_id, model) VALUES ('old_cli', X'ff')",
     "session old_cli: a model_usage row's model holds a BLOB (bytes)"),
    ("parent", "UPDATE messages SET tool_name = X'00' WHERE session_id = 'sub'",  # a delegate child's
     "session sub: message {}'s tool_name holds a BLOB (bytes)"),
], ids=["content", "title", "session_key", "usage_model", "delegate_tool_name"])
def test_verified_delete_refuses_a_value_its_record_cannot_carry(store, tmp_path, named, sql, named_in_error):
    """Hostile try 15, S14: a BLOB in a text column (as any client writing bytes stores it) is written in the
    record as Python's bytes repr, and import stores that text: "verified and deleted", the bytes gone. The
    session is refused, named, before anything is exported or deleted."""
    with sqlite3.connect(store) as conn:
        conn.execute(sql)
        message = conn.execute("SELECT MIN(id) FROM messages WHERE typeof(content) = 'blob' OR "
                               "typeof(tool_name) = 'blob'").fetchone()[0]
    conn.close()
    before = file_hash(store)
    out = tmp_path / "bk"
    r = run_export(f"{out}/", "--db", store, "--session-id", named, "--delete-after-verified", "--yes")
    assert r.returncode == 1, r.stderr
    assert named_in_error.format(message) in r.stderr and "nothing was exported or deleted" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not out.exists() and file_hash(store) == before


@pytest.mark.parametrize("value", ["started_at a week ahead", "an infinite cost", "archived -1", "its own parent",
                                   "an empty role"])
def test_verified_delete_refuses_a_session_its_own_files_would_not_import_back(tmp_path, value):
    """Hostile try 15, S15: the files are the undo, but values export writes and import refuses (a time a clock
    ahead wrote, +Inf, archived -1, a self-parent, an empty role) passed: "verified and deleted", then `import` of
    that file refused it, and the session was in no store. The files now pass import's own reading first."""
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("s", age=30, messages=3)
    sql = {"started_at a week ahead": "UPDATE sessions SET started_at = strftime('%s','now') + 7 * 86400",
           "an infinite cost": "UPDATE sessions SET estimated_cost_usd = 1e999",
           "archived -1": "UPDATE sessions SET archived = -1",
           "its own parent": "UPDATE sessions SET parent_session_id = 's'",
           "an empty role": "UPDATE messages SET role = '' WHERE id = (SELECT MIN(id) FROM messages)"}[value]
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute(sql)
    conn.commit()
    conn.close()
    out = tmp_path / "bk"
    r = run_export(out, "--db", db, "--session-id", "s", "--delete-after-verified", "--yes")
    assert r.returncode == 1 and "would not import back" in r.stderr, r.stderr
    assert "s" in session_ids(db) and (out / "hermes_session_s.jsonl").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a folder to another user here")
@pytest.mark.parametrize("owner, mode, inside, refused", [
    (1002, 0o755, "", "is owned by another user (uid 1002)"),  # mallory's folder
    (0, 0o777, "", "is writable by every user without the sticky bit"),
    (0, 0o777, "new/", "is writable by every user without the sticky bit"),  # made inside such a folder
    (0, 0o770, "", None),  # root's private group: its own group only
    (0, 0o1777, "", None),  # sticky, like /tmp: only we may remove what we made
    (4321, 0o700, "", None),  # the store's owner's folder
])
def test_verified_delete_refuses_a_folder_another_user_could_empty(store, tmp_path, owner, mode, inside, refused):
    """Hostile try 4, G12: the verified copy is the only one once the session is deleted; left in mallory's
    folder (or one writable by all without the sticky bit) she could remove it the moment after. Refused in
    one line before anything is written, as config and job folders are."""
    os.chown(store, 4321, 4321)
    out = tmp_path / "out"
    out.mkdir()
    os.chown(out, owner, owner)
    os.chmod(out, mode)
    before = file_hash(store)
    r = run_export(f"{out}/{inside}", "--db", store, "--session-id", "old_cli", "--delete-after-verified", "--yes")
    if refused:
        assert r.returncode == 1 and refused in r.stderr and str(out) in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "nothing was exported or deleted" in r.stderr
        assert list(out.iterdir()) == [] and file_hash(store) == before
    else:
        assert r.returncode == 0, r.stderr
        assert "old_cli" not in session_ids(store) and list(out.rglob("hermes_session_old_cli.jsonl"))


def test_verified_delete_needs_session_id_and_yes(store, tmp_path):
    assert run_export(tmp_path / "x", "--db", store, "--delete-after-verified", "--source", "cli",
                      "--yes").returncode == 2
    assert run_export(tmp_path / "x", "--db", store, "--session-id", "old", "--delete-after-verified").returncode == 2


def test_verified_delete_md(store, tmp_path):
    out = tmp_path / "md"
    r = run_export(out, "--db", store, "--format", "md", "--session-id", "old_cli", "--delete-after-verified",
                   "--yes")
    assert r.returncode == 0, r.stderr
    assert "old_cli" not in session_ids(store) and "message 3 of old_cli" in (out / "old_cli.md").read_text()
    assert json.loads((out / "manifest.jsonl").read_text().splitlines()[0])["path"] == "old_cli.md"


@pytest.mark.parametrize("fmt", ["md", "qmd"])
def test_verified_delete_of_a_document_keeps_the_importable_record_beside_it(tmp_path, fmt):
    """Hostile try 5, H10: md/qmd with --delete-after-verified deleted the session keeping only the document:
    the command a tool call ran, the reasoning and the model config were gone, and `import` cannot read a
    document. The Sessions docs name md for this flag, so the full jsonl record is written and verified beside
    the document; importing it gives the session back, row for row."""
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.db.create_session("sess1", "cli", model="gpt-5", model_config={"temperature": 0.2})
        b.db.append_message("sess1", "user", "clear the cache please")
        b.db.append_message("sess1", "assistant", "ok", reasoning="QUIRK-42 reasoning", tool_calls=[
            {"id": "c1", "type": "function",
             "function": {"name": "terminal", "arguments": '{"command": "rm -rf /srv/app/cache"}'}}])
        b.db.append_message("sess1", "tool", "done", tool_call_id="c1", tool_name="terminal")
        b.db.end_session("sess1", "done")
        b.session("parent", age=20, messages=2)
        b.session("sub", source="subagent", age=20, parent="parent", model_config={"_delegate_from": "parent"},
                  messages=3)
    stored = {sid: (query(db, "SELECT * FROM sessions WHERE id = ?", sid),
                    query(db, "SELECT * FROM messages WHERE session_id = ? ORDER BY id", sid))
              for sid in ("sess1", "parent", "sub")}
    out = tmp_path / "out"
    for sid in ("sess1", "parent"):
        r = run_export(f"{out}/", "--db", db, "--format", fmt, "--session-id", sid, "--delete-after-verified",
                       "--yes", "--json")
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
    assert "rm -rf" not in (out / f"sess1.{fmt}").read_text()  # the document alone is lossy
    assert sorted(report["deleted"]) == ["parent", "sub"] and not session_ids(db) & set(stored)
    records = {f"hermes_session_{sid}.jsonl" for sid in stored}
    assert records <= {p.name for p in out.iterdir()} and {f"{sid}.{fmt}" for sid in stored} <= set(os.listdir(out))
    manifest = {e["path"]: e for e in jsonl((out / "manifest.jsonl").read_text())}
    assert records <= set(manifest)  # each record's SHA-256 is in the manifest, as its document's
    text = (out / "hermes_session_sess1.jsonl").read_text()
    assert "rm -rf /srv/app/cache" in text and "QUIRK-42" in text and "temperature" in text
    for sid in ("sess1", "parent", "sub"):
        r = run_subprocess("import", out / f"hermes_session_{sid}.jsonl", "--db", db, "--yes")
        assert r.returncode == 0, r.stderr
    for sid, (row, msgs) in stored.items():
        assert query(db, "SELECT * FROM sessions WHERE id = ?", sid) == row
        assert query(db, "SELECT * FROM messages WHERE session_id = ? ORDER BY id", sid) == msgs


def _pinned_family(path, pinned="sub"):
    """A parent with a delegate child, *pinned* pinned (a layout with Hermes's pinned column)."""
    with StoreBuilder(path, layout="v30") as b:
        b.session("parent", age=20, messages=2, **({"pinned": 1} if pinned == "parent" else {}))
        b.session("sub", source="subagent", age=20, parent="parent", model_config={"_delegate_from": "parent"},
                  messages=3, **({"pinned": 1} if pinned == "sub" else {}))
    return path


def test_verified_delete_treats_a_pinned_member_of_the_family_as_delete_does(tmp_path):
    """Hostile try 4, G17: one rule for a pinned member of the family in delete and the verified delete:
    refused (named, with the way out) unless --include-pinned; --include-pinned alone is a usage error."""
    store = _pinned_family(tmp_path / "pinned.db")
    before = file_hash(store)
    for cmd in (["export", tmp_path / "bk", "--session-id", "parent", "--delete-after-verified", "--yes"],
                ["delete", "parent", "--yes"]):
        r = run_subprocess(*cmd, "--db", store)
        assert r.returncode == 1 and "refusing to delete parent: sub is in its family" in r.stderr, r.stderr
        assert "--include-pinned" in r.stderr and file_hash(store) == before and not (tmp_path / "bk").exists()
    usage = run_export(tmp_path / "bk", "--db", store, "--session-id", "parent", "--include-pinned")
    assert usage.returncode == 2 and "--include-pinned only applies with --delete-after-verified" in usage.stderr
    r = run_export(tmp_path / "bk", "--db", store, "--session-id", "parent", "--delete-after-verified", "--yes",
                   "--include-pinned", "--json")
    assert r.returncode == 0 and sorted(json.loads(r.stdout)["deleted"]) == ["parent", "sub"], r.stderr


def test_verified_delete_refuses_a_pin_set_after_the_export(tmp_path, monkeypatch):
    """The pin is checked again inside the delete's write transaction, as busy sessions are."""
    store = _pinned_family(tmp_path / "pinned.db", pinned=None)
    from click.testing import CliRunner

    from maint.cli import app
    from maint.export import verified_delete as export_delete

    original = export_delete.delete_if_unchanged

    def pin_then_check(st, ids, prints, **kw):
        conn = sqlite3.connect(store)
        conn.execute("UPDATE sessions SET pinned = 1 WHERE id = 'sub'")
        conn.commit()
        conn.close()
        return original(st, ids, prints, **kw)

    monkeypatch.setattr(export_delete, "delete_if_unchanged", pin_then_check)
    result = CliRunner().invoke(app, ["export", str(tmp_path / "bk"), "--db", str(store), "--session-id",
                                      "parent", "--delete-after-verified", "--yes"])
    assert result.exit_code == 1 and "sub is in its family" in result.stderr and "files kept" in result.stderr
    assert {"parent", "sub"} <= session_ids(store)


@pytest.mark.parametrize("titled, deleted, named", [
    # hostile try 16, T4: another session of the store holds the title
    (("old_cli", "tg_chat"), "old_cli", "'Weekly plan', which session 'tg_chat' also has"),
    # try 17, U4: the family's own two files share it (a parent and its delegate)
    (("parent", "sub"), "parent", "'Weekly plan'"),
], ids=["store", "family"])
def test_verified_delete_refuses_a_title_its_undo_would_find_taken(store, tmp_path, titled, deleted, named):
    """A store of an older layout (no unique index on titles) with two sessions of one title: the verified delete
    went through, then its undo import refused a file for the title another session (or the family's other file,
    imported first) held. The files are proved against the store as the delete leaves it, and against each other."""
    conn = sqlite3.connect(store)
    conn.execute("DROP INDEX IF EXISTS idx_sessions_title_unique")  # as an older Hermes's store has none
    conn.execute(f"UPDATE sessions SET title = 'Weekly plan' WHERE id IN {titled}")
    conn.commit()
    conn.close()
    before = file_hash(store)
    r = run_export(tmp_path / "x", "--db", store, "--session-id", deleted, "--delete-after-verified", "--yes")
    assert r.returncode == 1 and "would not import back" in r.stderr, r.stderr
    assert named in r.stderr and file_hash(store) == before


def test_verified_delete_refuses_open_session(store, tmp_path):
    before = file_hash(store)
    r = run_export(tmp_path / "x", "--db", store, "--session-id", "open_one", "--delete-after-verified", "--yes")
    assert r.returncode == 1 and "open" in r.stderr and file_hash(store) == before


CHANGES_AFTER_THE_EXPORT = {
    # hostile try 16, T11: the user resumes the session in Hermes (ended_at and end_reason cleared, no message yet)
    "resumed": "db.reopen_session('old_cli')",
    # T2: a change the message fingerprint did not see: a title, a message's reasoning, a usage row
    "titled": "db.set_session_title('old_cli', 'Renamed late')",
    "reasoning": "db._conn.execute(\"UPDATE messages SET reasoning = 'late thought' WHERE session_id = 'old_cli'\");"
                 "db._conn.commit()",
    "usage": "db._conn.execute(\"UPDATE session_model_usage SET input_tokens = input_tokens + 1 WHERE "
             "session_id = 'old_cli'\"); db._conn.commit()",
}


@pytest.mark.parametrize("change", sorted(CHANGES_AFTER_THE_EXPORT))
def test_a_change_between_export_and_delete_refuses_it(store, tmp_path, monkeypatch, change):
    """What changes between the export's snapshot and the delete's transaction is in no file: the delete is
    refused whatever the change is (the row, any message column, the usage rows), and a resumed session too."""
    from click.testing import CliRunner
    from maint.cli import app
    from maint.export import verified_delete as export_delete

    if change == "usage":
        conn = sqlite3.connect(store)
        conn.execute("INSERT INTO session_model_usage (session_id, model, input_tokens, output_tokens) "
                     "VALUES ('old_cli', 'm-1', 5, 6)")
        conn.commit()
        conn.close()
    original = export_delete.delete_if_unchanged

    def change_then_check(st, ids, prints, **kw):
        code = ("import sys; from pathlib import Path; from hermes_state import SessionDB;"
                f"db = SessionDB(Path(sys.argv[1])); {CHANGES_AFTER_THE_EXPORT[change]}; db.close()")
        subprocess.run([sys.executable, "-c", code, str(store)], check=True, cwd=REPO)
        return original(st, ids, prints, **kw)

    monkeypatch.setattr(export_delete, "delete_if_unchanged", change_then_check)
    result = CliRunner().invoke(app, ["export", str(tmp_path / "bk"), "--db", str(store), "--session-id",
                                      "old_cli", "--delete-after-verified", "--yes"])
    assert result.exit_code == 1 and "refusing to delete" in result.stderr, result.stderr
    assert ("resumed since it was exported" if change == "resumed" else "changed since it was exported") \
        in result.stderr
    assert "old_cli" in session_ids(store) and (tmp_path / "bk" / "hermes_session_old_cli.jsonl").exists()


def test_writer_appending_between_export_and_delete_refuses(store, tmp_path, monkeypatch):
    """A Hermes writer appends to the session after the export is written: the delete must be refused."""
    from maint.export import verified_delete as export_delete

    original = export_delete.delete_if_unchanged

    def append_then_check(st, ids, prints, **kw):
        code = ("import sys; from pathlib import Path; from hermes_state import SessionDB;"
                "db = SessionDB(Path(sys.argv[1])); db.append_message('old_cli', 'user', 'late'); db.close()")
        st.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        subprocess.run([sys.executable, "-c", code, str(store)], check=True, cwd=REPO)
        return original(st, ids, prints, **kw)

    monkeypatch.setattr(export_delete, "delete_if_unchanged", append_then_check)
    from click.testing import CliRunner
    from maint.cli import app
    result = CliRunner().invoke(app, ["export", str(tmp_path / "bk"), "--db", str(store), "--session-id",
                                      "old_cli", "--delete-after-verified", "--yes"])
    assert result.exit_code == 1 and "changed since it was exported" in result.stderr
    assert "old_cli" in session_ids(store) and (tmp_path / "bk" / "hermes_session_old_cli.jsonl").exists()
    assert query(store, "SELECT COUNT(*) FROM messages WHERE session_id='old_cli'") == [(5,)]


# -- stored JSON nested past the bound ------------------------------------------------------------

def test_json_text_depth_counts_brackets_outside_strings_only():
    from maint import json_text

    texts = ('[1,[2,{"a":"[[[\\"]]"}]]', '"\\\\"[]', '["a\\\\",[1]]', "[")
    assert [json_text.depth(t) for t in texts] == [3, 1, 2, 1]
    cut_off = '[{"id": "c1", "function": {"arguments": "{\\"text\\": \\"' + 'x = [\\"a\\"]; ' * 40_000
    assert json_text.depth(cut_off) == 3


def _through_c(fn, n):
    """*fn* called below *n* calls through C (functools.partial), which spend the recursion limit unseen."""
    import functools

    return fn() if n == 0 else functools.partial(_through_c, fn, n - 1)()


def test_json_within_the_bound_parses_from_any_stack_depth_and_deeper_is_not_json():
    from maint import json_text

    bound = json_text.MAX_DEPTH
    assert _through_c(lambda: json_text.loads("[" * bound + "]" * bound), 600) is not None
    for nesting in (bound + 1, 1000, 100_000):
        with pytest.raises(ValueError, match="nested deeper"):
            _through_c(lambda n=nesting: json_text.loads("[" * n + "]" * n), 600)
    assert json_text.loads(json.dumps([{"a": "[{" * 300}])) == [{"a": "[{" * 300}]  # brackets in a string


@pytest.mark.parametrize("fmt", ["md", "html", "trace", "jsonl"])
def test_tool_calls_nested_100000_deep_export_in_every_format(tmp_path, fmt):
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("deep", age=5, messages=1)
        b.raw.execute("INSERT INTO messages (session_id, role, content, tool_calls, timestamp) "
                      "VALUES ('deep', 'assistant', 'x', ?, 1700000000)", ("[" * 100_000 + "]" * 100_000,))
    result = run_export(tmp_path / "out", "--db", db, "--session-id", "deep", "--format", fmt, "--json")
    assert result.returncode == 0, result.stderr
    (written,) = json.loads(result.stdout)["written"]
    assert written["messages"] >= 1 and "Traceback" not in result.stderr


def test_md_to_a_file_name_writes_that_file_not_a_folder(store, tmp_path):
    """Finding 19: `export out.md --format md` created a folder named out.md."""
    out = tmp_path / "out.md"
    r = run_export(out, "--db", store, "--format", "md", "--session-id", "c1")
    assert r.returncode == 0, r.stderr
    assert out.is_file() and "message 0 of c1" in out.read_text()
    bulk = run_export(tmp_path / "all.qmd", "--db", store, "--format", "qmd", "--source", "cli")
    assert bulk.returncode == 2 and "give a folder" in bulk.stderr
    assert not (tmp_path / "all.qmd").exists()


def test_a_bulk_trace_to_a_file_name_is_refused_not_made_a_folder(store, tmp_path):
    """Hostile try 12, P6: `export tr.jsonl --format trace --source cli` made a folder named tr.jsonl (md and qmd
    refuse the same); one session to tr.jsonl is that file."""
    for name, fmt in (("tr.jsonl", "trace"), ("T.Jsonl", "trace"), ("O1.MD", "md"), ("o.QMD", "qmd"),
                      ("o8.jsonl", "md"), ("o7.markdown", "md"), ("o6.md ", "md"), ("t.md", "trace")):  # R6
        bulk = run_export(tmp_path / name, "--db", store, "--format", fmt, "--source", "cli")  # Q2: any case
        assert bulk.returncode == 2 and "names one file" in bulk.stderr and "give a folder" in bulk.stderr, \
            (name, bulk.stderr)
        assert len(bulk.stderr.strip().splitlines()) == 1 and not (tmp_path / name).exists()
    one = run_export(tmp_path / "one.jsonl", "--db", store, "--format", "trace", "--session-id", "c1")
    assert one.returncode == 0, one.stderr
    assert (tmp_path / "one.jsonl").is_file()


def test_verified_delete_refuses_redact_and_a_prefix(store, tmp_path):
    """Finding 3 (issue 24): with --redact the only copy left had [REDACTED] where the data was; and re-running
    the command after the session was deleted matched and deleted another session by unique prefix."""
    before = session_ids(store)
    redacted = run_export(tmp_path / "bk", "--db", store, "--session-id", "old_cli", "--delete-after-verified",
                          "--yes", "--redact")
    assert redacted.returncode == 2 and "--redact" in redacted.stderr and not (tmp_path / "bk").exists()
    prefix = run_export(tmp_path / "bk", "--db", store, "--session-id", "old_c", "--delete-after-verified", "--yes")
    assert prefix.returncode == 2 and "not a whole session id" in prefix.stderr and not (tmp_path / "bk").exists()
    assert session_ids(store) == before


HOSTILE_QMD = ["```{python}\nimport os; os.system('touch /tmp/pwned')\n```", "inline `{python} 1 + 1` code",
               "{{< include /etc/passwd >}} and {{< env HF_TOKEN >}}", "````\nbreak out of the fence\n````",
               "<script>alert(1)</script> $x$ @cite"]


def test_qmd_stored_text_can_never_open_a_cell_or_leave_its_element(tmp_path):
    """Finding 8 (issue 24): a message holding a ```{python} fence became an executable Quarto cell; four
    backticks in tool output broke out of the text fence."""
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("q", age=5, messages=0, title="`{python} 2 + 2` {{< include x >}}", model="m`{r}`")
        for n, text in enumerate(HOSTILE_QMD):
            b.raw.execute("INSERT INTO messages (session_id, role, content, tool_name, timestamp) VALUES "
                          "('q', ?, ?, ?, ?)", ("tool" if n % 2 else "assistant", text, "t`{sh}`" if n % 2 else None,
                                                1700000000 + n))
    out = tmp_path / "q.qmd"
    result = run_export(out, "--db", db, "--format", "qmd", "--session-id", "q")
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    front, body = text.split("\n---\n", 1)
    assert front.startswith("---\n") and "{{<" not in front  # the front matter holds JSON strings only
    # ... and as Quarto reads them (hostile try 9, L12: YAML turned `\u003c` back into `<`, so a title
    # `{{< env HF_TOKEN >}}` was a shortcode in the document's metadata, which Quarto resolves)
    from ruamel.yaml import YAML

    meta = YAML(typ="safe", pure=True).load(front[4:])
    values = [meta["title"], *meta["hermes"].values()]
    shown = json.dumps(values)
    assert "{{<" not in shown and "`" not in shown and "{" not in shown, shown
    assert meta["title"].startswith("&#96;&#123;python&#125;")
    for char in "`{}$@":
        assert char not in body, (char, body)
    assert "&#96;&#96;&#96;&#123;python&#125;" in body and "&#123;&#123;&lt; include /etc/passwd" in body


def test_planted_links_never_redirect_a_verified_export(tmp_path):
    store = small_store(tmp_path / "state.db")
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
    store = small_store(tmp_path / "state.db")
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
    store = small_store(tmp_path / "state.db")
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
    store = small_store(tmp_path / "state.db")
    backup = tmp_path / "backup.jsonl"
    backup.write_text("yesterday\n")
    os.chmod(backup, 0o640)
    result = run_subprocess("export", backup, "--db", store)
    assert result.returncode == 0 and "replaced the existing file" in result.stderr
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600 & 0o640
    assert len(backup.read_text().splitlines()) == 4
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_manifest_that_is_not_ours_refuses_before_writing(tmp_path):
    store = small_store(tmp_path / "state.db")
    out = tmp_path / "md"
    out.mkdir()
    (out / "manifest.jsonl").write_text("this is not json\n")
    result = run_subprocess("export", out, "--db", store, "--format", "md", "--source", "cli")
    assert result.returncode == 1 and "manifest.jsonl:1: not a manifest entry" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["manifest.jsonl"]


@pytest.mark.parametrize("suffix", ["", "-wal"])
def test_export_never_replaces_a_store_or_its_wal(suffix, tmp_path):
    store = small_store(tmp_path / "state.db")
    keep = sqlite3.connect(store)
    keep.execute("PRAGMA wal_autocheckpoint=0")
    keep.execute("INSERT INTO sessions (id, source, started_at) VALUES ('in_wal', 'cli', 1)")
    keep.commit()
    target = Path(f"{store}{suffix}")
    before = target.read_bytes()
    result = run_subprocess("export", target, "--db", store)
    assert result.returncode == 1 and "refusing" in result.stderr and str(target) in result.stderr
    assert target.read_bytes() == before
    keep.close()
    assert "in_wal" in session_ids(store)


@pytest.mark.parametrize("name", ["state.db-journal", "state.db-wal", "state.db.hermes-maint.lock",
                                  "state.db.auto-maintenance.lock", "config.yaml"])
def test_export_never_writes_where_a_store_keeps_its_companions(name, tmp_path):
    """Hostile try 3, F8: an export to the absent state.db-journal was written (every read-only command then
    failed, and the next writable open deleted it as a journal); our lock and Hermes's config.yaml were
    replaced."""
    store = small_store(tmp_path / "state.db")
    before = sorted(os.listdir(tmp_path))
    result = run_subprocess("export", tmp_path / name, "--db", store)
    assert result.returncode == 1 and name in result.stderr and "refusing" in result.stderr
    assert sorted(os.listdir(tmp_path)) == before


def test_export_into_another_profiles_store_is_refused(tmp_path):
    store, other = small_store(tmp_path / "state.db"), small_store(tmp_path / "other.db")
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


def test_an_output_problem_names_the_output_not_the_store(tmp_path):
    store = small_store(tmp_path / "state.db")
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


def test_session_prefixes_are_case_sensitive(tmp_path):
    store = small_store(tmp_path / "state.db")
    result = run_subprocess("export", "--session-id", "OLD0", "--db", store)
    assert result.returncode == 1 and "no session matches 'OLD0'" in result.stderr
    assert run_subprocess("export", "--session-id", "old0", "--db", store).returncode == 0


@pytest.mark.parametrize("fmt, out", [("md", "docs"), ("html", "x.html"), ("trace", "traces"), ("jsonl", "x.jsonl"),
                                      ("qmd", "q")])
def test_a_bulk_export_matching_no_session_says_so(cli, store, tmp_path, fmt, out):
    """Hostile try 3, F18: it printed nothing and exited 0, as if something had been written."""
    r = cli("export", tmp_path / out, "--db", store, "--format", fmt, "--source", "nosuchsource")
    assert r.exit_code == 0, r.output
    assert "No session matches; nothing written" in r.stderr
    assert not (tmp_path / out).exists()
    dry = cli("export", tmp_path / out, "--db", store, "--format", fmt, "--source", "nosuchsource", "--dry-run")
    assert dry.exit_code == 0 and "No session matches; nothing would be written" in dry.stderr


@pytest.mark.parametrize("args, says", [
    (("--format", "jsonl", "--lineage", "logical"), "--lineage only applies to --format md or qmd"),
    (("--format", "jsonl", "--lineage", "segment"), "--lineage only applies to --format md or qmd"),
    (("--format", "html", "--lineage", "logical"), "--lineage only applies to --format md or qmd"),
    (("--format", "trace", "--public", "--source", "cli"), "--public only applies with --upload"),
    (("--format", "jsonl", "--yes"), "--yes only applies with --delete-after-verified"),
])
def test_an_export_flag_that_cannot_apply_is_refused(cli, store, tmp_path, args, says):
    """Hostile try 3, F26: these were silently ignored where --only with html is refused."""
    out = tmp_path / "out"
    r = cli("export", out, "--db", store, *args)
    assert r.exit_code == 2, r.output
    assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_lineage_still_applies_to_md(cli, store, tmp_path):
    r = cli("export", tmp_path / "docs", "--db", store, "--format", "md", "--title", "proj", "--lineage", "logical")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == ["c1.md", "manifest.jsonl"]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can set an access list naming another user here")
def test_verified_delete_refuses_a_folder_an_access_list_lets_another_user_write(store, tmp_path):
    """Hostile try 10, M2: a keeper folder another user may write through an ACL (its group bits are the mask,
    which looked like the owner's private group) was accepted; she then removed the only copy."""
    from tests.test_shared_store import _grant_by_access_list

    keep = tmp_path / "keep"
    keep.mkdir(mode=0o700)
    _grant_by_access_list(keep, 1002)
    r = run_export(f"{keep}/", "--db", store, "--session-id", "old_cli", "--delete-after-verified", "--yes")
    assert r.returncode == 1 and "writable by the users and groups of its access list" in r.stderr, r.stderr
    assert "old_cli" in session_ids(store) and list(keep.iterdir()) == []
