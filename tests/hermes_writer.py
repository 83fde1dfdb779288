"""A real Hermes writer in its own process: SessionDB.append_message in a loop.

Usage: python -m tests.hermes_writer DB STOPFILE [interval_s] [session_id]
Appends until STOPFILE exists, then prints one JSON line: appended, failed,
worst_latency_s, session_id, ``samples`` ([monotonic start, latency] per
append) so a benchmark can take the worst inside its own time window, and
``optimizing`` (indices of the samples whose append also ran Hermes's own FTS
optimize, which it does every 1,000 writes and which takes seconds on a big store).

HERMES_WRITER_OPTIMIZE_EVERY sets Hermes's optimize cadence (0: never), so a benchmark can
measure the job beside it rather than Hermes's own multi-second optimize.

HERMES_WRITER_PATIENCE_MS makes it stricter than Hermes: that busy timeout and no
retries, so any wait for the lock longer than that is a failed append.
"""

import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    from hermes_state import SessionDB

    db_path, stop = Path(sys.argv[1]), Path(sys.argv[2])
    interval = float(sys.argv[3]) if len(sys.argv) > 3 else 0.01
    sid = sys.argv[4] if len(sys.argv) > 4 else f"writer_{os.getpid()}"
    db = SessionDB(db_path)
    patience = os.environ.get("HERMES_WRITER_PATIENCE_MS")
    if patience:
        db._conn.execute(f"PRAGMA busy_timeout={int(patience)}")
        db._WRITE_MAX_RETRIES = 1
    cadence = os.environ.get("HERMES_WRITER_OPTIMIZE_EVERY")
    if cadence is not None and cadence.isdigit():
        db._OPTIMIZE_EVERY_N_WRITES = int(cadence) or 10**12
    db.create_session(sid, "cli")
    appended = failed = 0
    worst = 0.0
    samples = []
    optimizing = []  # indices of the appends that also ran Hermes's own FTS optimize (every 1,000 writes)
    every = getattr(db, "_OPTIMIZE_EVERY_N_WRITES", 0)
    ready = Path(str(stop) + ".ready")
    ready.write_text("1")
    while not stop.exists():
        started = time.monotonic()
        try:
            db.append_message(sid, "user", f"live message {appended}")
            appended += 1
        except Exception as exc:  # noqa: BLE001 - any failure counts
            failed += 1
            print(f"append failed: {exc}", file=sys.stderr)
        took = time.monotonic() - started
        worst = max(worst, took)
        if every and getattr(db, "_write_count", 1) % every == 0:
            optimizing.append(len(samples))
        samples.append((round(started, 4), round(took, 5)))
        time.sleep(interval)
    db.close()
    print(json.dumps({"appended": appended, "failed": failed, "worst_latency_s": worst, "session_id": sid,
                      "samples": samples, "optimizing": optimizing}))


if __name__ == "__main__":
    main()
