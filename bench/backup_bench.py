"""Backup benchmark: our snapshot against sqlite3's `.backup` on the same store, beside a live Hermes writer.

Contenders, each while one real Hermes writer (SessionDB.append_message) appends every 10 ms:

* hermes-maint ``backup`` and ``backup --compact`` (the CLI, verification and fsync included);
* the sqlite3 shell's ``.backup`` (when the ``sqlite3`` program is installed): 100-page steps, each its own
  read transaction, restarted whenever the writer commits in between;
* Python's ``sqlite3.Connection.backup`` (the stand-in for ``.backup`` asked for when the shell is missing):
  one step holding one read transaction, no verification, no fsync.

The store is read once before the runs so every contender finds it in the page cache. Reported: seconds,
the writer's worst append inside each run's window (also without the appends that ran Hermes's own FTS
optimize, every 1,000 writes, seconds long on a big index whatever else runs), failed appends, and whether
the run finished within ``--timeout`` seconds. The first row is the writer alone, for ``--idle`` seconds.

The last row is ``backup`` of a rollback-journal copy of the store beside a writer committing every 10 ms
(SQLite's busy handler, as Hermes's SessionDB would turn the store back to WAL): each step is its own read
transaction with a pause after it, so the writer's worst append is what our steps cost it; with commits
that frequent the copy restarts until it is refused (tests/test_backup.py checks that refusal and that the
writer is never locked out; the wait is measured here).

    python bench/backup_bench.py [--sessions N] [--messages-per-session M] [--timeout S] [--no-rollback]
"""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from common import CACHE, ROOT, base_store, store_args, store_mb, write_result

sys.path.insert(0, str(ROOT))
from tests.live import LiveHermes  # noqa: E402 - needs the sys.path entry above

STDLIB = ("import sqlite3, sys; s = sqlite3.connect(sys.argv[1]); d = sqlite3.connect(sys.argv[2]); s.backup(d);"
          "d.close(); s.close()")


IDLE = [sys.executable, "-c", "import sys, time; time.sleep(float(sys.argv[1]))"]


def contenders(db: Path, idle_s: float) -> dict:
    """name -> argv for a run writing into the folder it is given; "writer alone" is the baseline."""
    found = {
        "writer alone (no job)": lambda out: [*IDLE, str(idle_s)],
        "hermes-maint backup": lambda out: [sys.executable, "-m", "maint", "backup", str(out), "--db", str(db),
                                            "--json"],
        "hermes-maint backup --compact": lambda out: [sys.executable, "-m", "maint", "backup", str(out), "--db",
                                                      str(db), "--compact", "--json"],
        "python sqlite3 .backup()": lambda out: [sys.executable, "-c", STDLIB, str(db), str(out / "copy.db")],
    }
    if shutil.which("sqlite3"):
        found["sqlite3 shell .backup"] = lambda out: ["sqlite3", str(db), f".backup '{out / 'copy.db'}'"]
    return found


BACKUPS = ("hermes-maint backup", "hermes-maint backup --compact", "python sqlite3 .backup()", "sqlite3 shell .backup")


def _stored(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = 'live_writer_0'").fetchone()[0]
    finally:
        conn.close()


ROLLBACK_WRITER = """
import json, sqlite3, sys, time
from pathlib import Path
db, stop = sys.argv[1], Path(sys.argv[2])
c = sqlite3.connect(db, timeout=30, isolation_level=None)
assert c.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
c.execute("INSERT INTO sessions (id, source, started_at) VALUES ('rollback_writer', 'cli', ?)", (time.time(),))
ok = failed = 0
samples = []
Path(str(stop) + ".ready").write_text("1")
while not stop.exists():
    started = time.monotonic()
    try:
        c.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES ('rollback_writer', 'user', "
                  "'live message', ?)", (time.time(),))
        ok += 1
    except sqlite3.OperationalError:
        failed += 1
    samples.append((started, time.monotonic() - started))
    time.sleep(0.01)
print(json.dumps({"appended": ok, "failed": failed, "samples": samples}))
"""


def rollback_row(db: Path, run_dir: Path, timeout: float) -> dict:
    """hermes-maint backup of a rollback-journal copy of *db* beside a writer committing every 10 ms."""
    folder = run_dir / "rollback"
    folder.mkdir()
    copy = folder / "state.db"
    shutil.copy(db, copy)
    conn = sqlite3.connect(copy)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    stop = folder / "stop"
    writer = subprocess.Popen([sys.executable, "-c", ROLLBACK_WRITER, str(copy), str(stop)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    while not Path(str(stop) + ".ready").exists():
        if writer.poll() is not None:
            raise SystemExit(f"rollback writer failed: {writer.stderr.read()}")
        time.sleep(0.05)
    time.sleep(1.0)
    lo = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "maint", "backup", str(folder / "out"), "--db", str(copy),
                               "--json"], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "HERMES_HOME": str(folder)})
        finished, code, err, stdout = True, proc.returncode, proc.stderr, proc.stdout
    except subprocess.TimeoutExpired:
        finished, code, err, stdout = False, None, "", ""
    hi = time.monotonic()
    stop.write_text("1")
    w = json.loads(writer.communicate(timeout=120)[0])
    stored = sqlite3.connect(copy).execute("SELECT COUNT(*) FROM messages WHERE session_id = 'rollback_writer'"
                                           ).fetchone()[0]
    worst = max((took for at, took in w["samples"] if lo <= at <= hi), default=0.0)
    row = {"seconds": round(hi - lo, 2), "finished": finished, "exit_code": code,
           "writer_worst_ms": round(worst * 1000, 1), "writer_worst_without_own_optimize_ms": round(worst * 1000, 1),
           "hermes_optimizes_in_window": 0, "failed_appends": w["failed"], "lost_messages": w["appended"] - stored}
    if finished and code == 0:
        snap = json.loads(stdout)["snapshot"]
        row.update(snapshot_mb=round(snap["bytes"] / 2**20, 1), steps=snap["steps"], restarts=snap["restarts"],
                   longest_step_ms=snap["longest_step_ms"], copy_s=snap["copy_seconds"],
                   verify_s=snap["verify_seconds"])
    elif finished:
        row["error"] = err.strip()[-300:]
    shutil.rmtree(folder, ignore_errors=True)
    return row


def main() -> None:
    ap = store_args()
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--idle", type=float, default=30.0, help="seconds the writer runs alone, as a baseline")
    ap.add_argument("--no-rollback", action="store_true", help="leave out the rollback-journal row")
    args = ap.parse_args()
    db = base_store(args.sessions, args.messages_per_session, 600)
    run_dir = CACHE / "run" / "backup"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    with open(db, "rb") as fh:  # warm the page cache: every contender reads from memory
        while fh.read(1 << 24):
            pass
    rows = {}
    for n, (name, make) in enumerate(contenders(db, args.idle).items()):
        out = run_dir / f"c{n}"
        out.mkdir()
        argv = make(out)
        for left in db.parent.glob("live.stop*"):  # the previous run's stop and ready files
            left.unlink()
        before = _stored(db)
        with LiveHermes(db, writers=1, interval=0.01, reader=False) as live:
            time.sleep(1.0)
            lo = time.monotonic()
            try:
                proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout,
                                      env={**os.environ, "HERMES_HOME": str(run_dir)})
                finished, code, err, stdout = True, proc.returncode, proc.stderr, proc.stdout
            except subprocess.TimeoutExpired:
                finished, code, err, stdout = False, None, "", ""
            hi = time.monotonic()
            figures = live.finish()
        w = figures["writers"][0]
        window = [(i, took) for i, (at, took) in enumerate(w["samples"]) if lo <= at <= hi]
        worst = max((took for _, took in window), default=0.0)
        own = set(w.get("optimizing", []))
        worst_other = max((took for i, took in window if i not in own), default=0.0)
        row = {"seconds": round(hi - lo, 2), "finished": finished, "exit_code": code,
               "writer_worst_ms": round(worst * 1000, 1), "writer_worst_without_own_optimize_ms":
               round(worst_other * 1000, 1), "hermes_optimizes_in_window": len(own & {i for i, _ in window}),
               "failed_appends": w["failed"],
               "lost_messages": w["appended"] - (figures["stored"][w["session_id"]] - before)}
        if name.startswith("hermes-maint") and finished and code == 0:
            snap = json.loads(stdout)["snapshot"]
            row.update(snapshot_mb=round(snap["bytes"] / 2**20, 1), steps=snap["steps"], restarts=snap["restarts"],
                       longest_step_ms=snap["longest_step_ms"], copy_s=snap["copy_seconds"],
                       verify_s=snap["verify_seconds"])
        elif finished and code:
            row["error"] = err.strip()[-300:]
        rows[name] = row
        shutil.rmtree(out, ignore_errors=True)
    if not args.no_rollback:
        rows["hermes-maint backup (rollback)"] = rollback_row(db, run_dir, args.timeout)
    base = rows.get("sqlite3 shell .backup") if rows.get("sqlite3 shell .backup", {}).get("finished") else None
    base = base or rows["python sqlite3 .backup()"]
    print(f"\nbackup benchmark: {args.sessions * args.messages_per_session} messages, {store_mb(db):.0f} MB store, "
          "one Hermes writer appending every 10 ms")
    print(f"{'contender':<32}{'seconds':>9}{'vs .backup':>12}{'worst ms':>10}{'w/o own opt.':>14}{'failed':>8}"
          f"{'lost':>6}  notes")
    for name, r in rows.items():
        ratio = f"{r['seconds'] / base['seconds']:.2f}" if r["finished"] and name in BACKUPS else "-"
        note = "did not finish" if not r["finished"] else r.get("error", "")
        if "steps" in r:
            note = (f"{r['snapshot_mb']} MB, {r['steps']} steps, {r['restarts']} restarts; copy {r['copy_s']:.2f}s, "
                    f"verify {r['verify_s']:.2f}s")
        print(f"{name:<32}{r['seconds']:>9.2f}{ratio:>12}{r['writer_worst_ms']:>10.0f}"
              f"{r['writer_worst_without_own_optimize_ms']:>14.0f}{r['failed_appends']:>8}{r['lost_messages']:>6}"
              f"  {note}")
    write_result("backup", {"store_messages": args.sessions * args.messages_per_session,
                            "store_mb": round(store_mb(db), 1), "baseline": "sqlite3 shell .backup" if base is
                            rows.get("sqlite3 shell .backup") else "python sqlite3 .backup()", "results": rows})


if __name__ == "__main__":
    main()
