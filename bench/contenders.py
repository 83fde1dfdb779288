"""One prune contender, run in its own process so its peak RSS is its own.

Usage: python bench/contenders.py NAME DB  ->  prints JSON {elapsed_s, messages, sessions, peak_rss_mb}
NAME: ours | hermes | plain_sql | idle. Each deletes ended sessions inactive/started >= 90 days ago.
"""

import json
import resource
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DAYS = 90
EXTRA: dict = {}


BIG_UNIT = 1000  # messages: a unit this heavy is over a chunk, so it has a transaction of its own


def ours(db: Path) -> tuple[int, int]:
    import contextlib

    import maint.ops.prune as prune
    from maint.store.connection import open_store

    # Which transactions held a big unit, so their lock (the unit's own deletion) is reported apart.
    holds: list[tuple[float, int]] = []
    biggest = [0]
    with open_store(db) as store:
        plan = prune.plan_prune(store, None)
        unit_of = {sid: u.messages for u in plan.units for sid in u.session_ids}
        real_delete = prune.delete_sessions

        def delete_sessions(store, conn, ids):
            biggest[0] = max([biggest[0], *(unit_of.get(sid, 0) for sid in ids)])
            return real_delete(store, conn, ids)

        prune.delete_sessions = delete_sessions
        real_write = store.write

        @contextlib.contextmanager
        def write():
            biggest[0] = 0
            with real_write() as conn:
                started = time.monotonic()  # the lock is ours from here (BEGIN IMMEDIATE has returned)
                yield conn
            holds.append((time.monotonic() - started, biggest[0]))

        store.write = write
        result = prune.execute_prune(store, plan)
    EXTRA["longest_lock_ms"] = round(result.longest_lock_s * 1000, 1)
    EXTRA["longest_lock_ms_other_tx"] = round(max([h for h, b in holds if b < BIG_UNIT] or [0]) * 1000, 1)
    EXTRA["big_unit_tx"] = sum(b >= BIG_UNIT for _, b in holds)
    EXTRA["biggest_unit_messages"] = max([b for _, b in holds] or [0])
    EXTRA["transactions"] = result.transactions
    # the three longest transactions: (ms, the biggest unit's messages), to tell a unit's own lock from a chunk's
    EXTRA["top_holds"] = [(round(h * 1000, 1), b) for h, b in sorted(holds, reverse=True)[:3]]
    EXTRA["skipped_too_big"] = len(result.skipped_too_big)
    return result.messages, len(result.deleted_ids)


def _count(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    finally:
        conn.close()


def hermes(db: Path) -> tuple[int, int]:
    from hermes_state import SessionDB

    before = _count(db)
    sdb = SessionDB(db)
    n = sdb.prune_sessions(older_than_days=DAYS)
    sdb.close()
    return before - _count(db), n


def plain_sql(db: Path) -> tuple[int, int]:
    conn = sqlite3.connect(db, isolation_level=None, timeout=30)
    cutoff = time.time() - DAYS * 86400
    where = "SELECT id FROM sessions WHERE ended_at IS NOT NULL AND started_at < ?"
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(f"UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id IN ({where})", (cutoff,))
    msgs = conn.execute(f"DELETE FROM messages WHERE session_id IN ({where})", (cutoff,)).rowcount
    conn.execute(f"DELETE FROM session_model_usage WHERE session_id IN ({where})", (cutoff,))
    sessions = conn.execute(f"DELETE FROM sessions WHERE id IN ({where})", (cutoff,)).rowcount
    conn.execute("COMMIT")
    conn.close()
    return msgs, sessions


def idle(db: Path) -> tuple[int, int]:
    """No job: the writer's own latency on this store, for reference."""
    time.sleep(3)
    return 0, 0


def main() -> None:
    name, db = sys.argv[1], Path(sys.argv[2])
    started = time.perf_counter()
    window_start = time.monotonic()
    messages, sessions = {"ours": ours, "hermes": hermes, "plain_sql": plain_sql, "idle": idle}[name](db)
    elapsed = time.perf_counter() - started
    window_end = time.monotonic()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"name": name, "elapsed_s": elapsed, "messages": messages, "sessions": sessions,
                      "peak_rss_mb": round(rss_mb, 1), "window": [window_start, window_end], **EXTRA}))


if __name__ == "__main__":
    main()
