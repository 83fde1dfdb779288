"""Sweep and VACUUM benchmark, side by side on copies of the same generated store.

* our sweep (reap + prune + VACUUM) vs Hermes 0.19.0's SessionDB.maybe_auto_prune_and_vacuum;
* our in-place VACUUM vs the standard library sqlite3 VACUUM on copies of one pruned store.

    python bench/sweep_bench.py [--sessions N] [--messages-per-session M]
"""

import json
import subprocess
import sys
import textwrap

from common import store_args, CACHE, ROOT, base_store, copy_store, store_mb, write_result

SCRIPTS = {
    "ours_sweep": """
        from maint.config import Config; from maint.ops.sweep import run_sweep
        cfg = Config(path=Path('/nonexistent'), exists=True, sessions={'auto_prune': True})
        r = run_sweep(DB, cfg, force=True)
        OUT.update(pruned=len(r['pruned_ids']), vacuumed=r['vacuumed'], vacuum_reason=r['vacuum_reason'])
    """,
    "hermes_sweep": """
        from hermes_state import SessionDB
        db = SessionDB(DB); r = db.maybe_auto_prune_and_vacuum(retention_days=90, vacuum=True); db.close()
        OUT.update(pruned=r['pruned'], vacuumed=r['vacuumed'])
    """,
    "prune_only": """
        from maint.ops.prune import execute_prune, plan_prune; from maint.store.connection import open_store
        with open_store(DB) as s: execute_prune(s, plan_prune(s, None))
    """,
    "ours_vacuum": """
        from maint.store.connection import open_store; from maint.ops.vacuum import vacuum_in_place
        with open_store(DB) as s: vacuum_in_place(s)
    """,
    "sqlite3_vacuum": """
        import sqlite3; c = sqlite3.connect(DB); c.execute('VACUUM'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)')
        c.close()
    """,
}

RUNNER = """
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
DB = Path(sys.argv[1]); OUT = {{}}
t = time.perf_counter()
{body}
OUT.update(elapsed_s=time.perf_counter() - t,
           peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))
print(json.dumps(OUT))
"""


def run(name: str, db) -> dict:
    code = RUNNER.format(root=str(ROOT), body=textwrap.dedent(SCRIPTS[name]))
    proc = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed: {proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["mb_after"] = round(store_mb(db), 1)
    return out


def main() -> None:
    ap = store_args()
    args = ap.parse_args()
    src = base_store(args.sessions, args.messages_per_session, 600)
    rows = {}
    for name in ("hermes_sweep", "ours_sweep"):
        rows[name] = run(name, copy_store(src, CACHE / "run" / name))
    pruned = copy_store(src, CACHE / "run" / "pruned")
    run("prune_only", pruned)
    for name in ("sqlite3_vacuum", "ours_vacuum"):
        rows[name] = run(name, copy_store(pruned, CACHE / "run" / name))
    sweep_ratio = rows["hermes_sweep"]["elapsed_s"] / rows["ours_sweep"]["elapsed_s"]
    vacuum_ratio = rows["ours_vacuum"]["elapsed_s"] / rows["sqlite3_vacuum"]["elapsed_s"]
    print(f"\nsweep benchmark: {args.sessions * args.messages_per_session} messages, {store_mb(src):.0f} MB store")
    print(f"{'job':<16}{'seconds':>9}{'MB after':>10}{'RSS MB':>8}  notes")
    for name, r in rows.items():
        note = f"pruned {r['pruned']}, vacuumed {r['vacuumed']}" if "pruned" in r else ""
        print(f"{name:<16}{r['elapsed_s']:>9.1f}{r['mb_after']:>10.0f}{r['peak_rss_mb']:>8.0f}  {note}")
    print(f"sweep: ours is {sweep_ratio:.2f}x Hermes's speed; VACUUM: ours takes {vacuum_ratio:.2f}x sqlite3's time")
    write_result("sweep", {"store_messages": args.sessions * args.messages_per_session, "results": rows,
                           "sweep_speed_vs_hermes": sweep_ratio, "vacuum_time_vs_sqlite3": vacuum_ratio})


if __name__ == "__main__":
    main()
