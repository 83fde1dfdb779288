"""Builds Hermes stores for tests and benchmarks (the product's own demo store is :mod:`maint.demo`).

v22 stores come from the real producer, hermes-agent 0.19.0's SessionDB. The
current upstream layout (v30) is not on PyPI; its schema is the one the demo ships
(:data:`maint.demo.V30_SCHEMA`), laid out from upstream's and reduced to what the
maintenance commands read and write.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

from maint.demo import V30_SCHEMA

DAY = 86400.0

# Upstream's schema 31 adds the idle sweep's provenance flag; the demo (v30) predates it.
V31_ADDITIONS = """
ALTER TABLE sessions ADD COLUMN auto_archived INTEGER NOT NULL DEFAULT 0;
UPDATE schema_version SET version = 31;
"""

SESSION_COLUMNS_SET_LATER = (
    "started_at", "ended_at", "end_reason", "title", "billing_provider", "input_tokens", "output_tokens",
    "actual_cost_usd", "estimated_cost_usd", "tool_call_count", "git_branch", "archived", "pinned", "hidden",
    "last_activity_at", "system_prompt_hash", "tool_names", "message_count",
)


class StoreBuilder:
    """Adds sessions with chosen ages and attributes to a store.

    ``layout="v22"`` writes through hermes-agent's SessionDB; ``"v30"`` uses
    the upstream layout above, ``"v31"`` the same plus upstream's ``auto_archived``
    column. Ages are in days before ``now``.
    """

    def __init__(self, path: Path, layout: str = "v22", now: float | None = None):
        self.path = Path(path)
        self.layout = layout
        self.now = time.time() if now is None else now
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if layout == "v22":
            from hermes_state import SessionDB

            self.db = SessionDB(self.path)
            # A test store needs no fsync at each of SessionDB's commits (one per message): the rows,
            # triggers and checkpoints are SessionDB's own, built in a ninth of the time.
            self.db._conn.execute("PRAGMA synchronous=OFF")
        else:
            self.db = None
            conn = sqlite3.connect(self.path)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(V30_SCHEMA)
            if layout == "v31":
                conn.executescript(V31_ADDITIONS)
            conn.close()
        self.raw = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        self.raw.execute("PRAGMA synchronous=OFF")

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


def small_store(path: Path, n: int = 3, layout: str = "v22") -> Path:
    """n sessions 200 days old (old0, old1, ...) and one a day old ("recent"): enough for a refusal test."""
    with StoreBuilder(path, layout=layout) as b:
        for i in range(n):
            b.session(f"old{i}", age=200, messages=3)
        b.session("recent", age=1)
    return path


def recoded(src: Path, dst: Path, encoding: str = "UTF-16le") -> Path:
    """A copy of store *src* whose text is stored in *encoding* (valid SQLite: Python's sqlite3 reads it as text):
    the schema made first, so the store's own triggers index the rows as they go in."""
    s, d = sqlite3.connect(src), sqlite3.connect(dst)
    d.execute(f"PRAGMA encoding = '{encoding}'")
    rows = s.execute("SELECT type, name, sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY rowid").fetchall()
    virtual = {n for t, n, sql in rows if t == "table" and sql.upper().startswith("CREATE VIRTUAL")}
    shadow = {f"{v}_{suffix}" for v in virtual for suffix in ("data", "idx", "content", "docsize", "config")}
    plain = [n for t, n, sql in rows if t == "table" and n not in virtual | shadow and n != "sqlite_sequence"]
    for t, n, sql in rows:
        if t in ("table", "view", "trigger", "index") and n not in shadow and n != "sqlite_sequence":
            d.execute(sql)
    for n in plain:
        cols = [r[1] for r in s.execute(f'PRAGMA table_info("{n}")')]
        d.executemany(f'INSERT INTO "{n}" VALUES ({", ".join("?" * len(cols))})', s.execute(f'SELECT * FROM "{n}"'))
    d.commit()
    s.close()
    d.close()
    return dst
