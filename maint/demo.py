"""``hermes-maint demo``: a realistic store to try every command on, built with plain SQL.

The layout is the current upstream one (v30: pinned/hidden flags, last_activity_at,
content-addressed system prompts, tool-name pins, turn leases, external-content FTS5 indexes
kept by insert, delete and update triggers), reduced to what the maintenance commands read and write
(upstream's triggers without their gates for a chunked index rebuild in progress, and the trigram
index without its cron/subagent exclusion). The sessions show
every rule (compression lineages, delegate children, branches, open, pinned and archived
sessions) and the skew of a real store: most conversations short, a few very long.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sqlite3
import time
from pathlib import Path

from maint import files
from maint.errors import MaintError, UsageError

DAY = 86400.0

V30_SCHEMA = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE system_prompts (hash TEXT PRIMARY KEY, prompt TEXT NOT NULL);
CREATE TABLE sessions (
    id TEXT PRIMARY KEY, source TEXT NOT NULL, created_source TEXT, user_id TEXT, session_key TEXT,
    chat_id TEXT, chat_type TEXT, thread_id TEXT, display_name TEXT, origin_json TEXT,
    expiry_finalized INTEGER DEFAULT 0, model TEXT, model_config TEXT, system_prompt TEXT,
    system_prompt_hash TEXT, parent_session_id TEXT, started_at REAL NOT NULL, ended_at REAL, end_reason TEXT,
    message_count INTEGER DEFAULT 0, tool_call_count INTEGER DEFAULT 0, input_tokens INTEGER DEFAULT 0,
    output_tokens INTEGER DEFAULT 0, cache_read_tokens INTEGER DEFAULT 0, cache_write_tokens INTEGER DEFAULT 0,
    reasoning_tokens INTEGER DEFAULT 0, cwd TEXT, git_branch TEXT, git_repo_root TEXT,
    billing_provider TEXT, billing_base_url TEXT, billing_mode TEXT, estimated_cost_usd REAL,
    actual_cost_usd REAL, cost_status TEXT, cost_source TEXT, pricing_version TEXT, title TEXT,
    title_source TEXT, last_activity_at REAL, api_call_count INTEGER DEFAULT 0, profile_name TEXT,
    rewind_count INTEGER NOT NULL DEFAULT 0, archived INTEGER NOT NULL DEFAULT 0,
    pinned INTEGER NOT NULL DEFAULT 0, hidden INTEGER NOT NULL DEFAULT 0, last_read_at REAL, tool_names TEXT,
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id),
    FOREIGN KEY (system_prompt_hash) REFERENCES system_prompts(hash)
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id), role TEXT NOT NULL,
    content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT, timestamp REAL NOT NULL,
    token_count INTEGER, finish_reason TEXT, reasoning TEXT, active INTEGER NOT NULL DEFAULT 1,
    compacted INTEGER NOT NULL DEFAULT 0, api_content TEXT, display_kind TEXT
);
CREATE TABLE session_model_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, model TEXT NOT NULL,
    billing_provider TEXT NOT NULL DEFAULT '', task TEXT NOT NULL DEFAULT '',
    input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, model, billing_provider, task)
);
CREATE TABLE state_meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE compression_locks (session_id TEXT PRIMARY KEY, holder TEXT NOT NULL,
    acquired_at REAL NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE session_turn_leases (conversation_id TEXT PRIMARY KEY, holder TEXT NOT NULL,
    acquired_at REAL NOT NULL, expires_at REAL NOT NULL);
CREATE INDEX idx_sessions_parent ON sessions(parent_session_id);
CREATE INDEX idx_messages_session ON messages(session_id, timestamp);
CREATE INDEX idx_sessions_system_prompt_hash ON sessions(system_prompt_hash);
CREATE INDEX idx_sessions_tool_names ON sessions(tool_names);
CREATE VIEW messages_fts_src AS
    SELECT id, CASE WHEN role = 'tool' THEN substr(COALESCE(content, ''), 1, 8192) ELSE content END AS content,
           tool_name, tool_calls FROM messages;
CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, tool_calls,
    content='messages_fts_src', content_rowid='id');
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) VALUES (new.id,
        CASE WHEN new.role = 'tool' THEN substr(COALESCE(new.content, ''), 1, 8192) ELSE new.content END,
        new.tool_name, new.tool_calls);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) VALUES ('delete', old.id,
        CASE WHEN old.role = 'tool' THEN substr(COALESCE(old.content, ''), 1, 8192) ELSE old.content END,
        old.tool_name, old.tool_calls);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, tool_name, tool_calls, role ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name OR old.tool_calls IS NOT new.tool_calls
      OR old.role IS NOT new.role) BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) VALUES ('delete', old.id,
        CASE WHEN old.role = 'tool' THEN substr(COALESCE(old.content, ''), 1, 8192) ELSE old.content END,
        old.tool_name, old.tool_calls);
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) VALUES (new.id,
        CASE WHEN new.role = 'tool' THEN substr(COALESCE(new.content, ''), 1, 8192) ELSE new.content END,
        new.tool_name, new.tool_calls);
END;
CREATE VIEW messages_fts_trigram_src AS
    SELECT m.id, m.content, m.tool_name FROM messages m WHERE m.role <> 'tool';
CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(content, tool_name,
    content='messages_fts_trigram_src', content_rowid='id', tokenize='trigram');
CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages WHEN new.role <> 'tool' BEGIN
    INSERT INTO messages_fts_trigram(rowid, content, tool_name) VALUES (new.id, new.content, new.tool_name);
END;
CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages WHEN old.role <> 'tool' BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name)
    VALUES ('delete', old.id, old.content, old.tool_name);
END;
CREATE TRIGGER messages_fts_trigram_update AFTER UPDATE OF content, tool_name, role ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name OR old.role IS NOT new.role) BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name)
    SELECT 'delete', old.id, old.content, old.tool_name WHERE old.role <> 'tool';
    INSERT INTO messages_fts_trigram(rowid, content, tool_name)
    SELECT new.id, new.content, new.tool_name WHERE new.role <> 'tool';
END;
INSERT INTO schema_version(version) VALUES (30);
"""


WORDS = ("deploy", "docker", "refactor", "auth", "test", "error", "migration", "cache", "review", "release",
         "日本語", "index", "query", "retry", "timeout", "config", "branch", "merge", "schema", "backup")


def build_demo(path: Path, *, now: float | None = None, seed: int = 7) -> dict[str, int]:
    """Create a new demo store at *path* (refusing an existing file); returns its session and message counts."""
    path = Path(path).expanduser()
    if any(os.path.lexists(f"{path}{suffix}") for suffix in ("", "-wal", "-shm")):
        raise UsageError(f"{path}: already exists; the demo never overwrites a store (choose another path)")
    with files.Folder.open(path.parent, create=True, parents=True, follow_links=True) as folder:
        os.close(folder.create(path.name))
    try:
        return _fill(path, now, seed)
    except (sqlite3.Error, OSError) as exc:  # a full disk, say: leave nothing half-built behind
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                os.unlink(f"{path}{suffix}")
        raise MaintError(f"{path}: could not build the demo store ({exc}); nothing was left behind") from None


def _fill(path: Path, now: float | None, seed: int) -> dict[str, int]:
    now = time.time() if now is None else now
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(V30_SCHEMA)
        conn.execute("BEGIN")
        demo = _Demo(conn, now, random.Random(seed))
        demo.named()
        demo.generated(150)
        conn.execute("COMMIT")
        counts = {"sessions": conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0],
                  "messages": conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]}
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return counts


class _Demo:
    def __init__(self, conn: sqlite3.Connection, now: float, rng: random.Random):
        self.conn, self.now, self.rng = conn, now, rng

    def session(self, sid: str, *, source: str = "cli", age: float, messages: int, ended: bool = True,
                end_reason: str = "done", parent: str | None = None, model_config: dict | None = None,
                **columns: object) -> None:
        started = self.now - (age + 1 + messages / 200) * DAY
        last = self.now - age * DAY
        self.conn.execute(
            "INSERT INTO sessions (id, source, model, model_config, parent_session_id, started_at, ended_at,"
            " end_reason, message_count, last_activity_at, cwd) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (sid, source, self.rng.choice(["gpt-5", "claude-sonnet-4.5", "qwen3-coder"]),
             json.dumps(model_config) if model_config else None, parent, started, last + 60 if ended else None,
             end_reason if ended else None, messages, last, f"/home/demo/projects/p{self.rng.randrange(5)}"))
        rows = []
        for i in range(messages):
            text = " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(4, 60)))
            rows.append((sid, "user" if i % 2 == 0 else "assistant", f"{text} ({i})",
                         started + (last - started) * (i + 1) / messages))
        self.conn.executemany("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?,?,?,?)", rows)
        if columns:
            assign = ", ".join(f"{k} = ?" for k in columns)
            self.conn.execute(f"UPDATE sessions SET {assign} WHERE id = ?", (*columns.values(), sid))

    def named(self) -> None:
        """One session per rule the commands apply."""
        s = self.session
        s("demo_old_cli", age=200, messages=6, title="old refactor")
        s("demo_old_tg", source="telegram", age=120, messages=4, user_id="12345", chat_type="dm")
        s("demo_recent", age=2, messages=8, title="current work")
        s("demo_open_old", age=300, messages=3, ended=False)
        s("demo_chain_1", age=150, messages=10, end_reason="compression", title="my project")
        s("demo_chain_2", age=5, messages=4, parent="demo_chain_1", title="my project #2")
        s("demo_parent", age=130, messages=4, title="orchestrator")
        s("demo_subagent", source="subagent", age=129, messages=6, parent="demo_parent",
          model_config={"_delegate_from": "demo_parent"})
        s("demo_branch", age=1, messages=2, parent="demo_parent", model_config={"_branched_from": "demo_parent"})
        s("demo_cron", source="cron", age=100, messages=2)
        s("demo_pinned_old", age=250, messages=5, title="keep me", pinned=1)
        s("demo_archived", age=40, messages=3, title="hidden away", archived=1)

    def generated(self, count: int) -> None:
        """Most conversations short, a few with hundreds of messages, over about a year."""
        for n in range(count):
            r = self.rng.random()
            messages = self.rng.randint(2, 12) if r < 0.85 else self.rng.randint(40, 120) if r < 0.97 \
                else self.rng.randint(300, 600)
            self.session(f"demo_{n:04d}", source=self.rng.choice(["cli", "cli", "telegram", "discord", "cron"]),
                         age=self.rng.uniform(0.05, 400), messages=messages)
