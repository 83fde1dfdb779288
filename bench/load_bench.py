"""Load benchmark: each maintenance job on a copy of the 200k-message store while three real Hermes
writers append every 10 ms and a reader searches FTS. Reports, per job, the writers' worst append
latency inside the job's window, failed appends and lost messages, the reader's failures, and our
longest lock where the job reports it (prune, import). The first row, idle, is the writers and the
reader alone for IDLE_S: what Hermes does to itself (its own FTS optimize every 1,000 writes and its
checkpoints hold the lock for seconds). The import row puts back the sessions older than 90 days,
exported and deleted before the writers start (tests/test_import.py checks its correctness beside
patient writers; the lock it holds and the wait it costs them are measured here).

    python bench/load_bench.py [--jobs idle,prune,archive,sweep,optimize,import]
"""

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from common import store_args, CACHE, ROOT, base_store, copy_store, write_result

sys.path.insert(0, str(ROOT))
from tests.live import LiveHermes  # noqa: E402 - needs the sys.path entry above

IDLE_S = 12.0
JOBS = {
    "idle": None,
    "prune": ["prune", "--yes", "--json"],
    "archive": ["archive", "--older-than", "30", "--yes"],
    "sweep": ["sweep", "--force"],
    "optimize": ["optimize"],
    "import": ["import", "{export}", "--yes", "--json"],
}


def export_and_delete_old(db: Path) -> Path:
    """The sessions older than 90 days, exported to a jsonl file beside *db* and then deleted; the file."""
    out = db.parent / "old.jsonl"
    with open(out, "w") as fh:
        subprocess.run([sys.executable, "-m", "maint", "export", "-", "--db", str(db), "--older-than", "90"],
                       stdout=fh, check=True, cwd=ROOT)
    ids = json.dumps([json.loads(line)["id"] for line in out.read_text().splitlines()])
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DELETE FROM messages WHERE session_id IN (SELECT value FROM json_each(?))", (ids,))
        conn.execute("DELETE FROM sessions WHERE id IN (SELECT value FROM json_each(?))", (ids,))
    conn.close()
    return out


def main():
    ap = store_args()
    ap.add_argument("--jobs", default=",".join(JOBS), help="comma-separated subset of: " + ", ".join(JOBS))
    args = ap.parse_args()
    src = base_store(args.sessions, args.messages_per_session, 600)
    rows = {}
    for name, argv in JOBS.items():
        if name not in args.jobs.split(","):
            continue
        db = copy_store(src, CACHE / "run" / f"load_{name}")
        home = db.parent
        (home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
        if name == "import":
            exported = str(export_and_delete_old(db))
            argv = [a.replace("{export}", exported) for a in argv]
        with LiveHermes(db, writers=3, interval=0.01) as live:
            time.sleep(2.0)
            lo = time.monotonic()
            if argv is None:
                time.sleep(IDLE_S)
                returncode, stderr, stdout = 0, "", ""
            else:
                full = [sys.executable, "-m", "maint", *argv] + ([] if name == "sweep" else ["--db", str(db)])
                proc = subprocess.run(full, cwd=ROOT, capture_output=True, text=True,
                                      env={**__import__("os").environ, "HERMES_HOME": str(home)})
                returncode, stderr, stdout = proc.returncode, proc.stderr, proc.stdout
            hi = time.monotonic()
            figures = live.finish()
        if returncode != 0:
            raise SystemExit(f"{name} failed: {stderr}")
        worst = max((took for w in figures["writers"] for at, took in w["samples"] if lo <= at <= hi), default=0.0)
        rows[name] = {
            "seconds": round(hi - lo, 1), "writer_worst_ms": round(worst * 1000, 1),
            "failed_appends": sum(w["failed"] for w in figures["writers"]),
            "lost_messages": sum(w["appended"] - figures["stored"][w["session_id"]] for w in figures["writers"]),
            "reader_failures": figures["reader"]["failed"], "reader_worst_ms": round(
                figures["reader"]["worst_latency_s"] * 1000, 1),
        }
        if "--json" in (argv or []):
            rows[name]["longest_lock_ms"] = json.loads(stdout).get("longest_lock_ms")
    print(f"\nload benchmark: 3 Hermes writers (10 ms) + 1 FTS reader, {args.sessions * args.messages_per_session} "
          "messages")
    print(f"{'job':<10}{'seconds':>9}{'worst append ms':>17}{'failed':>8}{'lost':>6}{'reader fails':>14}"
          f"{'our lock ms':>13}")
    for name, r in rows.items():
        lock = f"{r['longest_lock_ms']:.0f}" if r.get("longest_lock_ms") is not None else "-"
        print(f"{name:<10}{r['seconds']:>9.1f}{r['writer_worst_ms']:>17.0f}{r['failed_appends']:>8}"
              f"{r['lost_messages']:>6}{r['reader_failures']:>14}{lock:>13}")
    write_result("load", {"results": rows})
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
