"""A real Hermes reader in its own process: SessionDB.search_messages (FTS5) in a loop.

Usage: python -m tests.hermes_reader DB STOPFILE -> prints JSON: searches, failed, worst_latency_s
"""

import json
import sys
import time
from pathlib import Path


def main() -> None:
    from hermes_state import SessionDB

    db_path, stop = Path(sys.argv[1]), Path(sys.argv[2])
    db = SessionDB(db_path, read_only=True)
    searches = failed = 0
    worst = 0.0
    Path(str(stop) + ".reader-ready").write_text("1")
    words = ["deploy", "docker", "refactor", "auth", "test", "error", "live message"]
    while not stop.exists():
        started = time.monotonic()
        try:
            db.search_messages(words[searches % len(words)], limit=10)
            searches += 1
        except Exception as exc:  # noqa: BLE001 - any failure counts
            failed += 1
            print(f"search failed: {exc}", file=sys.stderr)
        worst = max(worst, time.monotonic() - started)
        time.sleep(0.02)
    db.close()
    print(json.dumps({"searches": searches, "failed": failed, "worst_latency_s": worst}))


if __name__ == "__main__":
    main()
