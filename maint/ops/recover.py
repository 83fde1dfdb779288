"""recover: messages whose session row is missing get a ``recovered`` placeholder session.

Such stray messages are written by a process that lost its session row (a
crash between two writes, a hand-made delete with foreign keys off): no
listing, search result or export reaches them. A placeholder row with the
missing id makes them a conversation again. It is left *open* on purpose,
with source ``recovered``: the sweep's orphan reaping closes it like any
other stateful source once it has been inactive for ``retention_days``, and
prune deletes it a retention period after that (the Sessions documentation).
Nothing is deleted and no message is changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from maint.fmt import fmt_time
from maint.store.connection import Store, open_store

if TYPE_CHECKING:
    from maint.flow import Operator
    from maint.store.targets import StoreTarget

RECOVERED_SOURCE = "recovered"

# The session row is looked up once per distinct session id of the messages (read in the session index's
# order), then the stray ones' messages counted: a lookup per message was 1.8 s of the daily doctor's 12 at
# 4.5 M messages (0.7 s this way).
STRAY_SQL = """
WITH stray(session_id) AS MATERIALIZED (
    SELECT d.session_id FROM (SELECT DISTINCT session_id FROM messages) d
    WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = d.session_id))
SELECT m.session_id AS session_id, COUNT(*) AS messages, MIN(m.timestamp) AS first, MAX(m.timestamp) AS last
FROM stray CROSS JOIN messages m ON m.session_id = stray.session_id
GROUP BY m.session_id
ORDER BY m.session_id
"""


@dataclass
class Stray:
    session_id: str
    messages: int
    first: float | None
    last: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "messages": self.messages, "first": self.first, "last": self.last}


def find_stray(store: Store) -> list[Stray]:
    """Every session id that messages point to but no session row has, with its message count and span."""
    return [Stray(r["session_id"], r["messages"], r["first"], r["last"]) for r in store.iter_rows(STRAY_SQL)]


def placeholder_row(store: Store, stray: Stray, now: float) -> dict[str, Any]:
    """The columns of a placeholder session, limited to the ones this store's schema has."""
    started = stray.first if stray.first is not None else now
    row: dict[str, Any] = {"id": stray.session_id, "source": RECOVERED_SOURCE, "started_at": started}
    optional = {"message_count": stray.messages, "last_activity_at": stray.last if stray.last is not None else started}
    row.update({k: v for k, v in optional.items() if store.has_column("sessions", k)})
    return row


def recover(store: Store, strays: list[Stray], now: float | None = None,
            on_progress: Callable[[int], None] = lambda n: None) -> tuple[list[str], int, list[dict[str, Any]]]:
    """One ``BEGIN IMMEDIATE`` transaction per session id: re-checked inside it, then the placeholder inserted.

    Returns (recovered ids, messages they hold, skipped ``{session_id, reason}``).
    """
    now = time.time() if now is None else now
    done: list[str] = []
    held = 0
    skipped: list[dict[str, Any]] = []
    for stray in strays:
        with store.write() as conn:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (stray.session_id,)).fetchone():
                skipped.append({"session_id": stray.session_id, "reason": "its session row exists again"})
            else:
                count, first, last = conn.execute(
                    "SELECT COUNT(*), MIN(timestamp), MAX(timestamp) FROM messages WHERE session_id = ?",
                    (stray.session_id,)).fetchone()
                if not count:
                    skipped.append({"session_id": stray.session_id, "reason": "its messages are gone"})
                else:
                    row = placeholder_row(store, Stray(stray.session_id, count, first, last), now)
                    cols = list(row)
                    conn.execute(f"INSERT INTO sessions ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                                 list(row.values()))
                    done.append(stray.session_id)
                    held += count
        on_progress(1)
    return done, held, skipped


def recover_store(target: StoreTarget, op: Operator, *, apply: bool = False) -> dict[str, Any]:
    """``hermes-maint recover`` on one store: the stray messages; with *apply*, once the operator agrees,
    a placeholder session for each id, one transaction each."""
    with open_store(target.path, readonly=not apply) as store:
        strays = find_stray(store)
        report = {"apply": apply, "dry_run": not apply, "stray_sessions": [s.as_dict() for s in strays],
                  "stray_messages": sum(s.messages for s in strays), "recovered": [], "recovered_messages": 0,
                  "skipped": []}
        if not apply or not strays:
            return report
        op.confirm(f"Create {len(strays)} placeholder session(s) in {target.path}?", [
            f"{report['stray_messages']} message(s) under {len(strays)} session id(s) with no session row:",
            *[f"  {s.session_id}  {s.messages} message(s), {fmt_time(s.first)} .. {fmt_time(s.last)}"
              for s in strays[:20]],
            *([f"  … {len(strays) - 20} more"] if len(strays) > 20 else [])])
        with op.progress(len(strays), "Recovering") as tick:
            done, held, skipped = recover(store, strays, on_progress=tick)
        report.update(recovered=done, recovered_messages=held, skipped=skipped)
        return report
