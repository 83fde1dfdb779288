"""Builds Hermes stores for tests, the demo and benchmarks.

v22 stores come from the real producer, hermes-agent 0.19.0's SessionDB. The
current upstream layout (v30: pinned/hidden flags, last_activity_at,
content-addressed system_prompts, tool_names pin, turn leases, external-content
FTS) is not on PyPI, so :func:`create_v30_schema` lays it out from upstream's
schema, reduced to what the maintenance commands read and write.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

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
INSERT INTO schema_version(version) VALUES (30);
"""

SESSION_COLUMNS_SET_LATER = (
    "started_at", "ended_at", "end_reason", "title", "billing_provider", "input_tokens", "output_tokens",
    "actual_cost_usd", "estimated_cost_usd", "tool_call_count", "git_branch", "archived", "pinned", "hidden",
    "last_activity_at", "system_prompt_hash", "tool_names", "message_count",
)


class StoreBuilder:
    """Adds sessions with chosen ages and attributes to a store.

    ``layout="v22"`` writes through hermes-agent's SessionDB; ``"v30"`` uses
    the upstream layout above. Ages are in days before ``now``.
    """

    def __init__(self, path: Path, layout: str = "v22", now: float | None = None):
        self.path = Path(path)
        self.layout = layout
        self.now = time.time() if now is None else now
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if layout == "v22":
            from hermes_state import SessionDB

            self.db = SessionDB(self.path)
        else:
            self.db = None
            conn = sqlite3.connect(self.path)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(V30_SCHEMA)
            conn.close()
        self.raw = sqlite3.connect(self.path, isolation_level=None, timeout=30)

    def close(self) -> None:
        self.raw.close()
        if self.db is not None:
            self.db.close()

    def __enter__(self) -> StoreBuilder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def session(self, sid: str, *, source: str = "cli", age: float = 100.0, started_age: float | None = None,
                ended: bool = True, end_reason: str = "done", parent: str | None = None,
                model_config: dict | None = None, messages: int = 2, model: str = "gpt-5",
                user_id: str | None = None, chat_id: str | None = None, chat_type: str | None = None,
                session_key: str | None = None, cwd: str | None = None, system_prompt: str | None = None,
                **columns: Any) -> str:
        """``age`` = days since the last message; ``started_age`` defaults to age + 1."""
        started_age = age + 1 if started_age is None else started_age
        started = self.now - started_age * DAY
        last = self.now - age * DAY
        kw = dict(model=model, model_config=model_config, user_id=user_id, chat_id=chat_id, chat_type=chat_type,
                  session_key=session_key, parent_session_id=parent, cwd=cwd, system_prompt=system_prompt)
        if self.db is not None:
            self.db.create_session(sid, source, **kw)
            for i in range(messages):
                ts = started + (last - started) * (i + 1) / messages
                self.db.append_message(sid, "user" if i % 2 == 0 else "assistant",
                                       f"message {i} of {sid} about topic{i % 7}", timestamp=ts)
            if ended:
                self.db.end_session(sid, end_reason)
        else:
            self.raw.execute(
                "INSERT INTO sessions (id, source, model, model_config, user_id, chat_id, chat_type, session_key,"
                " parent_session_id, cwd, system_prompt, started_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (sid, source, model, json.dumps(model_config) if model_config else None, user_id, chat_id,
                 chat_type, session_key, parent, cwd, system_prompt, started))
            for i in range(messages):
                ts = started + (last - started) * (i + 1) / messages
                self.raw.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?,?,?,?)",
                                 (sid, "user" if i % 2 == 0 else "assistant",
                                  f"message {i} of {sid} about topic{i % 7}", ts))
            self.raw.execute("UPDATE sessions SET message_count = ? WHERE id = ?", (messages, sid))
            if ended:
                self.raw.execute("UPDATE sessions SET end_reason = ? WHERE id = ?", (end_reason, sid))
        sets = {"started_at": started, "ended_at": (last + 60 if ended else None)}
        if not ended:
            sets["end_reason"] = None
        sets.update(columns)
        self.set(sid, **sets)
        return sid

    def set(self, sid: str, **columns: Any) -> None:
        if not columns:
            return
        assign = ", ".join(f"{k} = ?" for k in columns)
        self.raw.execute(f"UPDATE sessions SET {assign} WHERE id = ?", (*columns.values(), sid))

    def prompt(self, text: str) -> str:
        """Store a content-addressed prompt (v30) and return its hash."""
        digest = hashlib.sha256(text.encode()).hexdigest()
        self.raw.execute("INSERT OR IGNORE INTO system_prompts(hash, prompt) VALUES (?, ?)", (digest, text))
        return digest

    def lock(self, sid: str, minutes: float = 10.0) -> None:
        self.raw.execute("INSERT OR REPLACE INTO compression_locks VALUES (?, 'test', ?, ?)",
                         (sid, self.now, self.now + minutes * 60))

    def usage(self, sid: str) -> None:
        self.raw.execute("INSERT INTO session_model_usage (session_id, model) VALUES (?, 'gpt-5')", (sid,))


def bulk_store(path: Path, *, sessions: int, messages_per_session: int, old_share: float = 0.5,
               content_bytes: int = 600, seed: int = 7, now: float | None = None) -> dict[str, int]:
    """A large v22 store fast: schema from SessionDB, rows inserted in bulk (FTS via Hermes's triggers)."""
    from hermes_state import SessionDB

    now = time.time() if now is None else now
    SessionDB(Path(path)).close()
    rng = random.Random(seed)
    words = [f"w{n}" for n in range(4000)] + ["deploy", "docker", "refactor", "auth", "test", "error", "日本語"]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    old = 0
    for n in range(sessions):
        is_old = rng.random() < old_share
        old += is_old
        age = rng.uniform(95, 400) if is_old else rng.uniform(0.1, 60)
        started = now - (age + 1) * DAY
        last = now - age * DAY
        sid = f"bulk_{n:06d}"
        conn.execute("INSERT INTO sessions (id, source, model, started_at, ended_at, end_reason, message_count) "
                     "VALUES (?,?,?,?,?,?,?)",
                     (sid, rng.choice(["cli", "telegram", "cron", "discord"]), "gpt-5", started, last + 30,
                      "done", messages_per_session))
        rows = []
        for i in range(messages_per_session):
            text = " ".join(rng.choice(words) for _ in range(content_bytes // 6))
            rows.append((sid, "user" if i % 2 == 0 else "assistant", text,
                         started + (last - started) * (i + 1) / messages_per_session))
        conn.executemany("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?,?,?,?)", rows)
    conn.execute("COMMIT")
    # Hermes merges its FTS segments every 1000 writes ('optimize'); a live store looks like this,
    # not like one huge load still waiting for its merges.
    for table in ("messages_fts", "messages_fts_trigram"):
        conn.execute(f"INSERT INTO {table}({table}) VALUES('optimize')")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return {"sessions": sessions, "old_sessions": old, "messages": sessions * messages_per_session}


def build_demo(path: Path) -> None:
    """A small store that shows every rule: lineages, delegates, branches, open, pinned, archived."""
    path = Path(path)
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    with StoreBuilder(path) as b:
        b.session("demo_old_cli", age=200, title="old refactor", messages=6)
        b.session("demo_old_tg", source="telegram", age=120, messages=4, user_id="12345", chat_type="dm")
        b.session("demo_recent", age=2, title="current work", messages=8)
        b.session("demo_open_old", age=300, ended=False, messages=3)
        b.session("demo_chain_1", age=150, end_reason="compression", title="my project", messages=10)
        b.session("demo_chain_2", age=5, parent="demo_chain_1", title="my project #2", messages=4)
        b.session("demo_parent", age=130, title="orchestrator", messages=4)
        b.session("demo_subagent", source="subagent", age=129, parent="demo_parent",
                  model_config={"_delegate_from": "demo_parent"}, messages=6)
        b.session("demo_branch", age=1, parent="demo_parent", model_config={"_branched_from": "demo_parent"},
                  messages=2)
        b.session("demo_cron", source="cron", age=100, messages=2)


if __name__ == "__main__":
    import sys

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "demo/state.db")
    build_demo(target)
    print(f"demo store written to {target}")
