"""Export and import against Hermes itself (hermes-agent 0.19.0, the test dependency) as the oracle.

Stores are built through Hermes's ``SessionDB``, one message at a time, with realistic tool calls
(several calls per turn, JSON arguments with non-ASCII text, tool results), multimodal content,
reasoning details, a delegate child and a compression continuation. Then:

* Hermes's ``import_sessions`` of our jsonl gives the store its import of its own ``export_all``
  gives (sessions, messages, tool calls), and ``get_messages`` returns tool calls as a list;
* our ``import`` of Hermes's ``hermes sessions export`` (bulk, ``export_all``; and one session,
  ``export_session``), of upstream's current format (ported below from upstream's
  ``hermes_state_portability.py`` / ``hermes_state_messages.py``) and of our older format
  (tool_calls as the stored string) gives back the store it was exported from, row for row;
* our line carries every key Hermes's line carries, with the same values where Hermes writes the
  stored value (our extra keys: ``timings``, ``system_prompts``, ``model_usage``, ``kept_children``);
* our line's ``model_usage`` (the session's ``session_model_usage`` rows, which Hermes's line lacks) is
  ignored by Hermes's import and put back by ours.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hermes_state import SessionDB

from tests.conftest import run_subprocess
from tests.storegen import StoreBuilder

T0 = 1_765_000_000.0
HERMES = str(Path(sys.executable).with_name("hermes"))


def _calls(n: int) -> list[dict]:
    return [{"id": f"call_{n}a", "type": "function",
             "function": {"name": "terminal",
                          "arguments": json.dumps({"command": f"ls -la ~/proj{n}", "timeout": 30})}},
            {"id": f"call_{n}b", "type": "function",
             "function": {"name": "read_file", "arguments": json.dumps({"path": f"/home/u/ノート{n}.md",
                                                                       "note": "café \"quoted\" \\ back"})}}]


def _conversation(db: SessionDB, sid: str, turns: int, t: float) -> float:
    """User turn, assistant with two tool calls, two tool results, assistant answer; one message per call."""
    for n in range(turns):
        content = ([{"type": "text", "text": f"look at this {n}"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]
                   if n == 0 else f"next step {n}, ünïcödé")
        db.append_message(sid, "user", content, timestamp=t)
        calls = _calls(n)
        db.append_message(sid, "assistant", "", tool_calls=calls, finish_reason="tool_calls", token_count=42,
                          reasoning="think", reasoning_details=[{"type": "reasoning.text", "text": "plan"}],
                          timestamp=t + 1)
        for i, call in enumerate(calls):
            db.append_message(sid, "tool", json.dumps({"output": f"result {i}", "exit_code": 0}),
                              tool_name=call["function"]["name"], tool_call_id=call["id"], timestamp=t + 2 + i)
        db.append_message(sid, "assistant", f"done {n}", finish_reason="stop", timestamp=t + 5)
        t += 10
    return t


def hermes_store(path: Path) -> Path:
    db = SessionDB(path)
    try:
        t = T0
        db.create_session("s1", "cli", model="claude-sonnet", system_prompt="You are Hermes.", cwd="/home/u/proj")
        t = _conversation(db, "s1", 3, t)
        # per-model usage, as Hermes's agent loop records it (session_model_usage: our line carries the rows)
        db.update_token_counts("s1", input_tokens=1200, output_tokens=340, model="claude-sonnet",
                               estimated_cost_usd=0.0123, billing_provider="anthropic", api_call_count=3)
        db.update_token_counts("s1", input_tokens=50, output_tokens=7, model="gpt-5-mini",
                               billing_provider="openai", api_call_count=1)
        db.create_session("s1_sub", "subagent", model="claude-haiku", parent_session_id="s1",
                          model_config={"_delegate_from": "s1"})
        t = _conversation(db, "s1_sub", 1, t)
        db.end_session("s1_sub", "completed")
        db.end_session("s1", "compression")
        db.create_session("s2", "cli", model="claude-sonnet", parent_session_id="s1")
        t = _conversation(db, "s2", 2, t)
        db.set_session_title("s2", "proj — continued")
        db.create_session("tg", "telegram", model="gpt-5", user_id="42")
        _conversation(db, "tg", 1, t)
        db.end_session("tg", "user_exit")
    finally:
        db.close()
    return path


def empty_store(path: Path) -> Path:
    SessionDB(path).close()
    return path


def rows(path: Path, table: str, order: str, drop: tuple[str, ...] = ()) -> list[dict]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        return [{k: v for k, v in dict(r).items() if k not in drop}
                for r in conn.execute(f"SELECT * FROM {table} ORDER BY {order}")]
    finally:
        conn.close()


def our_export(db: Path, *args: str) -> list[dict]:
    r = run_subprocess("export", "-", "--db", str(db), *args)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def hermes_export(db: Path, out: Path, *args: str) -> Path:
    """``hermes sessions export`` itself, on the store's HERMES_HOME."""
    env = {**os.environ, "HERMES_HOME": str(db.parent)}
    r = subprocess.run([HERMES, "sessions", "export", str(out), *args], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and out.exists(), r.stdout + r.stderr
    return out


def our_import(db: Path, file: Path) -> dict:
    r = run_subprocess("import", str(file), "--db", str(db), "--yes", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def write_lines(path: Path, records: list[dict]) -> Path:
    """One JSON line per record as ``hermes sessions export`` writes them; ASCII where a text holds a lone
    surrogate (UTF-8 cannot carry it, a JSON escape can)."""
    def line(r: dict) -> str:
        text = json.dumps(r, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = json.dumps(r)
        return text + "\n"
    path.write_text("".join(line(r) for r in records), encoding="utf-8")
    return path


@pytest.fixture
def source(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    return hermes_store(home / "state.db")


def test_hermes_imports_our_export_as_it_imports_its_own(tmp_path, source):
    ours = our_export(source)
    assert [len(r["model_usage"]) for r in ours if r["id"] == "s1"] == [2]  # a key Hermes's import must ignore
    db = SessionDB(source)
    theirs = db.export_all()
    db.close()
    a, b = SessionDB(tmp_path / "from_ours.db"), SessionDB(tmp_path / "from_theirs.db")
    try:
        got = a.import_sessions(ours)
        want = b.import_sessions(theirs)
        assert got["ok"] and got["imported"] == want["imported"] == 4, got
        for sid in ("s1", "s1_sub", "s2", "tg"):
            assert a.get_session(sid) == b.get_session(sid)
            mine, oracle = a.get_messages(sid), b.get_messages(sid)
            assert [{k: v for k, v in m.items() if k != "id"} for m in mine] == \
                [{k: v for k, v in m.items() if k != "id"} for m in oracle]
            calls = [m["tool_calls"] for m in mine if m["role"] == "assistant" and m["tool_calls"]]
            assert calls and all(isinstance(c, list) for c in calls)  # not the double-encoded string
            if sid == "s1":
                assert calls[0] == _calls(0)
    finally:
        a.close()
        b.close()
    # the stored rows too (tool_calls: json.dumps of the same list), fresh message ids aside
    assert rows(tmp_path / "from_ours.db", "messages", "session_id, id", ("id",)) == \
        rows(tmp_path / "from_theirs.db", "messages", "session_id, id", ("id",))
    assert rows(tmp_path / "from_ours.db", "sessions", "id") == rows(tmp_path / "from_theirs.db", "sessions", "id")


def test_our_import_of_our_export_brings_back_the_usage_rows_hermes_import_leaves_out(tmp_path, source):
    """Hostile try 15, S17: our line carried no session_model_usage rows, so a verified delete's undo lost the
    per-model split. Ours carries them and puts them back; Hermes's import reads the same line and leaves them
    out (it restores conversations, not accounting)."""
    file = write_lines(tmp_path / "ours.jsonl", our_export(source))
    (tmp_path / "mine").mkdir()
    mine = empty_store(tmp_path / "mine" / "state.db")
    our_import(mine, file)
    assert rows(mine, "session_model_usage", "session_id, model") == rows(source, "session_model_usage",
                                                                          "session_id, model")
    assert len(rows(source, "session_model_usage", "model")) == 2
    db = SessionDB(tmp_path / "hermes.db")
    try:
        assert db.import_sessions([json.loads(line) for line in file.read_text().splitlines()])["imported"] == 4
    finally:
        db.close()
    assert rows(tmp_path / "hermes.db", "session_model_usage", "model") == []


def test_our_line_has_hermes_keys_and_values(source):
    ours = {r["id"]: r for r in our_export(source)}
    db = SessionDB(source)
    try:
        theirs = {r["id"]: r for r in db.export_all()}
    finally:
        db.close()
    assert ours.keys() == theirs.keys()
    for sid, line in ours.items():
        oracle = theirs[sid]
        assert list(oracle)[:-1] == [k for k in line if k in oracle][:-1]  # Hermes's keys, in its order
        assert set(line) - set(oracle) <= {"timings", "system_prompts", "model_usage", "kept_children"}
        for key in oracle:
            if key != "messages":
                assert line[key] == oracle[key], key
        assert len(line["messages"]) == len(oracle["messages"])
        assert line["messages"] == oracle["messages"]  # tool_calls and multimodal content parsed, as Hermes's
        assert any(isinstance(m["content"], list) for m in line["messages"])  # each opens with image parts


@pytest.mark.parametrize("how", ["bulk", "one"])
def test_we_import_hermes_sessions_export_back_to_the_same_store(tmp_path, source, how):
    out = tmp_path / "hermes.jsonl"
    if how == "bulk":
        hermes_export(source, out)  # export_all
        ids = ["s1", "s1_sub", "s2", "tg"]
    else:
        hermes_export(source, out, "--session-id", "s2")  # export_session
        ids = ["s2"]
    line = json.loads(out.read_text(encoding="utf-8").splitlines()[0])
    assert any(isinstance(m.get("tool_calls"), list) for m in line["messages"])  # Hermes's own format
    target = empty_store(tmp_path / "target.db")
    report = our_import(target, out)
    assert sorted(report["imported"]) == ids and report["renumbered"] == []
    # one session alone: its parent is not in the store, so it is unlinked (as Hermes's import does)
    assert report["detached"] == ([] if how == "bulk" else ["s2"])
    drop = () if how == "bulk" else ("parent_session_id",)
    assert rows(target, "sessions", "id", drop) == [r for r in rows(source, "sessions", "id", drop) if r["id"] in ids]
    assert rows(target, "messages", "id") == [r for r in rows(source, "messages", "id") if r["session_id"] in ids]
    a, b = SessionDB(target), SessionDB(source)
    try:
        assert a.get_messages("s2") == b.get_messages("s2")
    finally:
        a.close()
        b.close()


def test_we_import_our_older_format_with_tool_calls_as_the_stored_string(tmp_path, source):
    records = our_export(source)
    conn = sqlite3.connect(source)
    stored = dict(conn.execute("SELECT id, tool_calls FROM messages WHERE tool_calls IS NOT NULL").fetchall())
    conn.close()
    older = copy.deepcopy(records)
    for rec in older:
        rec.pop("last_active")
        for m in rec["messages"]:
            if m["tool_calls"] is not None:
                m["tool_calls"] = stored[m["id"]]  # what the export wrote before issue 25
    target = empty_store(tmp_path / "target.db")
    our_import(target, write_lines(tmp_path / "older.jsonl", older))
    assert rows(target, "messages", "id") == rows(source, "messages", "id")
    assert rows(target, "sessions", "id") == rows(source, "sessions", "id")
    # and the new format brings back the same bytes
    target2 = empty_store(tmp_path / "target2.db")
    our_import(target2, write_lines(tmp_path / "new.jsonl", records))
    assert rows(target2, "messages", "id") == rows(source, "messages", "id")


# -- upstream's current format (hermes_state_portability.export_session / export_all, ported) ----------

def upstream_export(path: Path) -> list[dict]:
    """Upstream's export_all, from its code: get_session resolves system_prompt through system_prompts
    (``_session_row_dict``), search_sessions adds last_active, get_messages decodes content, tool_calls
    and display_metadata and keeps ``_compressed_summary`` only when set."""
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    out = []
    try:
        for s in conn.execute("SELECT s.*, COALESCE(sp.prompt, s.system_prompt) AS _system_prompt_resolved, "
                              "COALESCE((SELECT MAX(timestamp) FROM messages m WHERE m.session_id = s.id), "
                              "s.started_at) AS last_active FROM sessions s "
                              "LEFT JOIN system_prompts sp ON sp.hash = s.system_prompt_hash ORDER BY s.id"):
            data = dict(s)
            resolved = data.pop("_system_prompt_resolved")
            data["system_prompt"] = resolved
            messages = []
            for row in conn.execute("SELECT * FROM messages WHERE session_id = ? AND active = 1 ORDER BY id",
                                    (data["id"],)):
                msg = dict(row)
                if msg.pop("_compressed_summary", 0):
                    msg["_compressed_summary"] = True
                c = msg.get("content")
                if isinstance(c, str) and c.startswith("\x00json:"):
                    msg["content"] = json.loads(c[len("\x00json:"):])
                if msg.get("tool_calls"):
                    msg["tool_calls"] = json.loads(msg["tool_calls"])
                if msg.get("display_metadata") is not None:
                    msg["display_metadata"] = json.loads(msg["display_metadata"])
                messages.append(msg)
            out.append({**data, "messages": messages})
    finally:
        conn.close()
    return out


def test_we_import_upstreams_current_export(tmp_path):
    src, dst = tmp_path / "src" / "state.db", tmp_path / "dst" / "state.db"
    upstream_columns = ("ALTER TABLE messages ADD COLUMN display_metadata TEXT",
                        "ALTER TABLE messages ADD COLUMN _compressed_summary INTEGER DEFAULT 0")
    with StoreBuilder(dst, layout="v31") as b:
        for sql in upstream_columns:
            b.raw.execute(sql)
    with StoreBuilder(src, layout="v31") as b:
        for sql in upstream_columns:
            b.raw.execute(sql)
        b.session("u1", age=5, messages=0)
        prompt = "You are Hermes, upstream edition."
        b.set("u1", system_prompt_hash=b.prompt(prompt))
        for n, (role, calls) in enumerate([("user", None), ("assistant", _calls(1)), ("tool", None)]):
            b.raw.execute("INSERT INTO messages (session_id, role, content, tool_calls, timestamp, display_metadata, "
                          "_compressed_summary) VALUES ('u1', ?, ?, ?, ?, ?, ?)",
                          (role, f"m{n}", json.dumps(calls) if calls else None, b.now - 5 * 86400 + n,
                           json.dumps({"task_count": n}) if role == "tool" else None, 1 if n == 0 else 0))
    assert hashlib.sha256(prompt.encode()).hexdigest() == rows(src, "sessions", "id")[0]["system_prompt_hash"]
    records = upstream_export(src)
    assert records[0]["system_prompt"] == prompt and isinstance(records[0]["messages"][1]["tool_calls"], list)
    assert records[0]["messages"][2]["display_metadata"] == {"task_count": 2}
    (ours,) = our_export(src)  # ours writes these fields as upstream does
    assert [m["display_metadata"] for m in ours["messages"]] == [None, None, {"task_count": 2}]
    assert [m["tool_calls"] for m in ours["messages"]] == [m.get("tool_calls") for m in records[0]["messages"]]
    assert ours["system_prompt"] == prompt
    report = our_import(dst, write_lines(tmp_path / "upstream.jsonl", records))
    assert report["imported"] == ["u1"] and report["prompts_dropped"] == []
    assert rows(dst, "sessions", "id") == rows(src, "sessions", "id")  # system_prompt NULL, the hash kept
    assert rows(dst, "system_prompts", "hash") == rows(src, "system_prompts", "hash")
    assert rows(dst, "messages", "id") == rows(src, "messages", "id")
    again = tmp_path / "again" / "state.db"  # and ours, read back by our import
    with StoreBuilder(again, layout="v31") as b:
        for sql in upstream_columns:
            b.raw.execute(sql)
    our_import(again, write_lines(tmp_path / "ours.jsonl", [ours]))
    assert rows(again, "messages", "id") == rows(src, "messages", "id")
    assert rows(again, "sessions", "id") == rows(src, "sessions", "id")


# -- tool_calls that are not plain JSON: kept as the stored string (the decision) -----------------------

def test_tool_calls_not_plain_json_stay_the_stored_string_and_odd_json_comes_back(tmp_path, source):
    conn = sqlite3.connect(source)
    conn.execute("UPDATE messages SET tool_calls = '{oops' WHERE id = (SELECT MIN(id) FROM messages "
                 "WHERE role = 'assistant' AND tool_calls IS NOT NULL)")
    conn.execute("UPDATE messages SET tool_calls = '[1e400]' WHERE id = (SELECT MAX(id) FROM messages "
                 "WHERE role = 'assistant' AND tool_calls IS NOT NULL)")
    # JSON our importer took only as column values before: an integer past 64 bits, an escaped lone surrogate
    odd = '[{"id": 123456789012345678901234567890, "note": "\\ud800"}]'
    conn.execute("UPDATE messages SET tool_calls = ? WHERE id = (SELECT MIN(id) FROM messages "
                 "WHERE session_id = 's2' AND tool_calls IS NOT NULL)", (odd,))
    conn.commit()
    conn.close()
    records = our_export(source)
    calls = [m["tool_calls"] for r in records for m in r["messages"] if m["tool_calls"] is not None]
    assert "{oops" in calls and "[1e400]" in calls and sum(isinstance(c, list) for c in calls) == len(calls) - 2
    assert [{"id": 123456789012345678901234567890, "note": "\ud800"}] in calls
    target = empty_store(tmp_path / "target.db")
    our_import(target, write_lines(tmp_path / "x.jsonl", records))
    assert rows(target, "messages", "id") == rows(source, "messages", "id")


def test_redacted_export_keeps_the_format_and_masks_tool_call_arguments(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    db = SessionDB(home / "state.db")
    db.create_session("k", "cli")
    secret = "sk-" + "A1b2C3d4E5f6G7h8J9k0L1m2"
    db.append_message("k", "assistant", "", tool_calls=[{"id": "call_1", "type": "function", "function": {
        "name": "terminal", "arguments": json.dumps({"command": f"curl -H 'Authorization: Bearer {secret}' x",
                                                     "api_key": secret})}}], timestamp=T0)
    db.append_message("k", "assistant", "", tool_calls=_calls(0), timestamp=T0 + 1)
    db.append_message("k", "user", [{"type": "text", "text": f"use OPENAI_API_KEY={secret} please"}], timestamp=T0 + 2)
    db.close()
    (line,) = our_export(home / "state.db", "--redact")
    first, second, _ = (m["tool_calls"] for m in line["messages"])
    parts = line["messages"][2]["content"]
    assert isinstance(parts, list) and parts[0]["text"] == "use OPENAI_API_KEY=[REDACTED] please"
    assert isinstance(first, list) and secret not in json.dumps(first)
    assert json.loads(first[0]["function"]["arguments"])["api_key"] == "[REDACTED]"
    assert second == _calls(0)  # nothing to mask: the same parsed list as without --redact


# -- archive: ours against 0.19.0's SessionDB.archive_sessions on identical copies ---------------------

def _archive_store(path: Path, *, old_root_live_tip: bool) -> Path:
    with StoreBuilder(path) as b:
        b.session("old", age=60)
        b.session("old_tg", source="telegram", age=45)
        b.session("recent", age=2)
        b.session("open_old", age=50, ended=False)
        b.session("seg1", age=80, end_reason="compression")  # a compression lineage, every segment old
        b.session("seg2", age=70, parent="seg1")
        b.session("run", source="subagent", age=60, parent="old", model_config={"_delegate_from": "old"})
        if old_root_live_tip:  # a conversation still in use whose first segment is old
            b.session("live1", age=90, end_reason="compression")
            b.session("live2", age=1, started_age=1.5, parent="live1")
    return path


def _archived(path: Path) -> dict[str, int]:
    return {r["id"]: r["archived"] for r in rows(path, "sessions", "id")}


def _both_archives(tmp_path: Path, old_root_live_tip: bool, *filters: str, **hermes_filters) -> tuple[dict, dict]:
    ours = _archive_store(tmp_path / "ours" / "state.db", old_root_live_tip=old_root_live_tip)
    theirs = _archive_store(tmp_path / "theirs" / "state.db", old_root_live_tip=old_root_live_tip)
    r = run_subprocess("archive", *filters, "--db", str(ours), "--yes", "--json")
    assert r.returncode == 0, r.stderr
    db = SessionDB(theirs)
    try:
        db.archive_sessions(**hermes_filters)
    finally:
        db.close()
    return _archived(ours), _archived(theirs)


@pytest.mark.parametrize("filters,hermes", [
    (("--older-than", "30"), lambda: {"older_than_days": 30}),
    (("--older-than", "30", "--source", "telegram"), lambda: {"older_than_days": 30, "source": "telegram"}),
    (("--newer-than", "10"), lambda: {"started_after": time.time() - 10 * 86400}),
])
def test_archive_selects_and_marks_what_hermes_archive_does(tmp_path, filters, hermes):
    ours, theirs = _both_archives(tmp_path, False, *filters, **hermes())
    assert ours == theirs
    assert any(ours.values())


def test_archive_judges_a_compression_lineage_by_its_live_tip_where_0_19_0_archives_it_whole(tmp_path):
    """The documented difference (000 doc, archive: an old compression segment alone never matches the
    age filter, so a conversation in use is not hidden because its history is long): 0.19.0 selects the
    old first segment and archives the whole lineage, live tip included; we leave the lineage alone."""
    ours, theirs = _both_archives(tmp_path, True, "--older-than", "30", older_than_days=30)
    assert theirs["live1"] == theirs["live2"] == 1
    assert ours["live1"] == ours["live2"] == 0
    assert {k: v for k, v in ours.items() if not k.startswith("live")} == \
        {k: v for k, v in theirs.items() if not k.startswith("live")}


def test_a_prompt_stored_by_hash_is_written_where_upstreams_import_takes_it(tmp_path):
    """Upstream's get_session writes the prompt the hash names in system_prompt, and its import_sessions
    stores it from there (``_store_system_prompt``, sha256): our line does the same, so that import keeps the
    prompt, and ours puts the row back as it was (system_prompt NULL, the hash). Redacted, the prompt text is
    masked there too."""
    db = tmp_path / "state.db"
    secret = "ghp_" + "Zx9" * 12
    prompt = f"You are Hermes. GITHUB_TOKEN={secret}"
    with StoreBuilder(db, layout="v31") as b:
        b.session("p1", age=3, messages=2)
        b.set("p1", system_prompt_hash=b.prompt(prompt))
    (line,) = our_export(db)
    assert line["system_prompt"] == prompt and line["system_prompts"] == {line["system_prompt_hash"]: prompt}
    assert hashlib.sha256(line["system_prompt"].encode("utf-8")).hexdigest() == line["system_prompt_hash"]
    (masked,) = our_export(db, "--redact")
    assert secret not in json.dumps(masked) and masked["system_prompt"] == "You are Hermes. GITHUB_TOKEN=[REDACTED]"
    target = tmp_path / "t" / "state.db"
    with StoreBuilder(target, layout="v31"):
        pass
    our_import(target, write_lines(tmp_path / "p.jsonl", [line]))
    assert rows(target, "sessions", "id") == rows(db, "sessions", "id")
    assert rows(target, "system_prompts", "hash") == rows(db, "system_prompts", "hash")
