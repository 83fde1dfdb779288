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
messages, and a few units are big (a compression lineage with its delegates);
message sizes are log-normal with a long tail (tool output up to 40 KB).

The text is what agents write: mostly a project's recurring names, with
one-off hashes, ids, numbers, base64 and Japanese. Its trigram index has about
1,000 times the distinct terms of a text drawn from a small word list (2.2
million against 1,800 at 50k messages), and that
is what makes deleting in many short transactions cost more than in one: each
commit writes every term its deletes touched. A store of word-list text made a
chunked prune look 1.7x as fast as one SQL transaction; on this text it was 0.70x
(a held-out store Hermes filled: 0.74-0.86x; bench/results/prune-mechanisms.json).

    python bench/hermes_store.py [--messages N]   # builds (or reuses) bench/.cache/hermes_built_v2_N/state.db
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


COMMON = ["the", "to", "a", "of", "and", "in", "is", "for", "that", "it", "on", "with", "this", "be", "are", "was",
          "as", "at", "by", "from", "not", "or", "you", "we", "can", "if", "file", "error", "test", "function",
          "deploy", "docker", "config", "auth", "token", "refactor", "python", "query", "build", "run", "fix"]
KANA_KANJI = [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0x4E00, 0x4E00 + 1500)]
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _words(rng: random.Random) -> list[str]:
    """The names a long history repeats: identifiers, paths and terms of its projects (a Zipf head over them)."""
    parts = ["get", "set", "user", "session", "data", "load", "parse", "handler", "client", "cache", "index", "model",
             "item", "list", "path", "value", "result", "request", "response", "store", "message", "worker", "queue"]
    out = list(COMMON)
    for n in range(20000):
        a, b = rng.choice(parts), rng.choice(parts)
        out.append(rng.choice([f"{a}_{b}{n % 97}", f"{a}{b.title()}{n}", f"src/{a}/{b}_{n}.py", f"w{n}"]))
    return out


def _token(rng: random.Random, words: list[str]) -> str:
    """One token of what agents and tools write: mostly the project's own names, some one-off strings
    (hashes, ids, numbers, base64, Japanese) that give the trigram index a long tail of distinct terms."""
    r = rng.random()
    if r < 0.80:
        return words[min(len(words) - 1, int(rng.paretovariate(0.9)) - 1)]
    if r < 0.86:
        return f"{rng.getrandbits(rng.choice((28, 40, 160))):x}"
    if r < 0.92:
        return str(rng.randint(0, 10 ** rng.randint(1, 9)))
    if r < 0.96:
        return "".join(rng.choice(B64) for _ in range(rng.randint(8, 40)))
    return "".join(rng.choice(KANA_KANJI) for _ in range(rng.randint(3, 15)))


def _text(rng: random.Random, words: list[str], nbytes: int) -> str:
    out, size = [], 0
    while size < nbytes:
        w = _token(rng, words)
        out.append(w)
        size += len(w.encode()) + 1
    return " ".join(out)


def _bytes(rng: random.Random, median: int, cap: int) -> int:
    """A message's size: log-normal around *median*, a long tail (file reads, logs) up to *cap*."""
    return max(10, min(cap, int(rng.lognormvariate(0, 1.1) * median)))


def _message(rng, words, i: int) -> dict:
    kind = i % 4
    if kind == 0:
        return {"role": "user", "content": _text(rng, words, _bytes(rng, 150, 8000))}
    if kind == 1:
        return {"role": "assistant", "content": _text(rng, words, _bytes(rng, 250, 6000)),
                "tool_calls": [{"id": f"c{i}", "function": {"name": "terminal", "arguments": "{}"}}]}
    if kind == 2:
        return {"role": "tool", "content": _text(rng, words, _bytes(rng, 900, 40000)), "tool_name": "terminal"}
    return {"role": "assistant", "content": _text(rng, words, _bytes(rng, 400, 8000))}


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
    path = CACHE / f"hermes_built_v2_{messages}" / "state.db"
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
