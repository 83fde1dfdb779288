"""A bench store written the way Hermes writes one: SessionDB, one message per transaction.

The bulk store (tests.storegen.bulk_store) inserts everything in one statement
and optimizes, so each FTS index is one tidy segment. A store Hermes filled
over months is made of one commit per message: every commit flushes a
segment into both FTS indexes, automerge folds them together level by level,
and each process's SessionDB runs 'optimize' every 1,000 of its own writes.
This builder reproduces that history in order of time (a fake clock inside
hermes_state), with Hermes's processes: a long-lived gateway SessionDB
(telegram, discord, cron, several chats interleaved) and a fresh SessionDB per
CLI run. Sizes are skewed: most sessions are short, a few run to thousands of
messages, and a few units are big (a compression lineage with its delegates).

    python bench/hermes_store.py [--messages N]   # builds (or reuses) bench/.cache/hermes_built_N/state.db
"""

import argparse
import random
import sys
import time
from pathlib import Path

from common import CACHE

DAY = 86400.0
SPAN_DAYS = 225  # with prune's 90-day rule, about 60 % of the history is old, as in the bulk store


class Clock:
    """Stands in for the time module inside hermes_state: the builder says what time it is."""

    def __init__(self, start: float):
        self.now = start
        self._real = time

    def __getattr__(self, name):
        return getattr(self._real, name)

    def time(self) -> float:
        return self.now


def _words(rng: random.Random) -> list[str]:
    base = ["the", "to", "a", "of", "and", "in", "is", "for", "that", "it", "on", "with", "file", "error", "test",
            "function", "deploy", "docker", "config", "auth", "token", "refactor", "python", "query", "日本語"]
    return base + [f"w{n}" for n in range(20000)]


def _text(rng: random.Random, words: list[str], nbytes: int) -> str:
    # Zipf-like: a few words are everywhere (long doclists), most are rare.
    out, size = [], 0
    while size < nbytes:
        w = words[min(len(words) - 1, int(rng.paretovariate(0.9)) - 1)]
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def _message(rng, words, i: int) -> dict:
    kind = i % 4
    if kind == 0:
        return {"role": "user", "content": _text(rng, words, rng.randint(30, 400))}
    if kind == 1:
        return {"role": "assistant", "content": _text(rng, words, rng.randint(80, 600)),
                "tool_calls": [{"id": f"c{i}", "function": {"name": "terminal", "arguments": "{}"}}]}
    if kind == 2:
        return {"role": "tool", "content": _text(rng, words, rng.randint(200, 2500)), "tool_name": "terminal"}
    return {"role": "assistant", "content": _text(rng, words, rng.randint(100, 1200))}


def _size(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.70:
        return rng.randint(2, 20)
    if r < 0.95:
        return rng.randint(21, 150)
    if r < 0.995:
        return rng.randint(151, 900)
    return rng.randint(1500, 3500)


def build(path: Path, messages: int, seed: int = 11) -> dict:
    """Fill *path* through SessionDB until it holds about *messages* messages."""
    import hermes_state
    from hermes_state import SessionDB

    rng = random.Random(seed)
    words = _words(rng)
    end = time.time()
    clock = Clock(end - SPAN_DAYS * DAY)
    real_time, hermes_state.time = hermes_state.time, clock
    path.parent.mkdir(parents=True, exist_ok=True)
    step = SPAN_DAYS * DAY / messages
    written = 0
    big_units = 0
    def open_db():
        db = SessionDB(path)
        db._conn.execute("PRAGMA synchronous=OFF")  # no fsync per commit: same rows and segments, minutes sooner
        return db

    try:
        gateway = open_db()
        # live chats on the gateway: [sid, remaining messages, lineage (parent, segments left), db]
        live: list[list] = []
        n = 0

        def new_session(db, source, parent=None, model_config=None, size=None):
            nonlocal n
            n += 1
            sid = f"{source}_{n:06d}"
            db.create_session(sid, source, model="gpt-5", parent_session_id=parent, model_config=model_config)
            return [sid, size if size is not None else _size(rng), db]

        while written < messages:
            r = rng.random()
            if r < 0.01 and len(live) < 6:
                # a CLI run: its own process, one session written straight through
                db = open_db()
                s = new_session(db, "cli")
                for i in range(s[1]):
                    clock.now += step
                    db.append_message(s[0], **_message(rng, words, i), timestamp=clock.now)
                    written += 1
                db.end_session(s[0], "cli_close")
                db.close()
                continue
            if r < 0.015 and len(live) < 6:
                live.append(new_session(gateway, rng.choice(["telegram", "discord", "cron"])) + [None])
            if 0.015 <= r < 0.0152 and big_units < max(1, messages // 40_000):
                # a long agent task: a compression lineage with delegated subagents (one unit for prune)
                big_units += 1
                root = new_session(gateway, "telegram", size=rng.randint(300, 500))
                root.append(("lineage", rng.randint(3, 5)))
                live.append(root)
            if not live:
                continue
            s = rng.choice(live)
            sid, left, db, lineage = s
            clock.now += step
            db.append_message(sid, **_message(rng, words, left), timestamp=clock.now)
            written += 1
            s[1] -= 1
            if lineage and rng.random() < 0.004:
                # a subagent of this task, written in the gateway process like the parent
                child = new_session(gateway, "delegate", model_config={"_delegate_from": sid},
                                    size=rng.randint(50, 250))
                live.append(child + [None])
            if s[1] > 0:
                continue
            live.remove(s)
            if lineage and lineage[1] > 1:
                db.end_session(sid, "compression")
                nxt = new_session(gateway, "telegram", parent=sid, size=rng.randint(300, 500))
                live.append(nxt + [("lineage", lineage[1] - 1)])
            else:
                db.end_session(sid, "done")
        for sid, _left, db, _lineage in live:
            db.end_session(sid, "done")
        gateway.close()
    finally:
        hermes_state.time = real_time
    return {"messages": written, "sessions": n, "big_units": big_units}


def hermes_built_store(messages: int) -> Path:
    """The cached store for *messages* (built on first use: minutes at 200k)."""
    path = CACHE / f"hermes_built_{messages}" / "state.db"
    if not path.exists():
        tmp = path.with_name("building.db")
        for suffix in ("", "-wal", "-shm"):
            Path(str(tmp) + suffix).unlink(missing_ok=True)
        started = time.time()
        info = build(tmp, messages)
        import sqlite3

        conn = sqlite3.connect(tmp)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        for suffix in ("-wal", "-shm"):
            Path(str(tmp) + suffix).unlink(missing_ok=True)
        tmp.rename(path)
        print(f"built {path} through SessionDB in {time.time() - started:.0f}s: {info}", file=sys.stderr)
    return path


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    print(hermes_built_store(ap.parse_args().messages))
