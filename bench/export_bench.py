"""Export benchmark: our streaming jsonl export vs Hermes 0.19.0's export_all + json dump vs a plain pass.

The plain pass is one streaming read (sqlite3 rows -> json lines, no product logic). Each runs in its
own process on the same store; peak RSS is per process. The store is then doubled to show that our
memory stays flat as the store grows.

    python bench/export_bench.py [--sessions N] [--messages-per-session M]
"""

import json
import subprocess
import sys
import textwrap

from common import store_args, CACHE, ROOT, base_store, store_mb, write_result

SCRIPTS = {
    "ours": """
        import os
        from maint.export.pipeline import ExportRequest, plan_export, run_export
        from maint.store.connection import open_store
        if os.path.exists(OUT_PATH):
            os.unlink(OUT_PATH)
        with open_store(DB, readonly=True) as s:
            r = run_export(s, plan_export(s, ExportRequest(output=OUT_PATH)))
        OUT.update(messages=r["messages"])
    """,
    "hermes": """
        import json
        from hermes_state import SessionDB
        db = SessionDB(DB)
        data = db.export_all()
        with open(OUT_PATH, "w") as fh:
            for s in data:
                fh.write(json.dumps(s, default=str) + "\\n")
        OUT.update(messages=sum(len(s["messages"]) for s in data))
    """,
    "plain": """
        import json, sqlite3
        c = sqlite3.connect(DB)
        c.row_factory = sqlite3.Row
        n = 0
        with open(OUT_PATH, "w") as fh:
            for row in c.execute("SELECT * FROM messages ORDER BY session_id, id"):
                fh.write(json.dumps(dict(row)) + "\\n")
                n += 1
        OUT.update(messages=n)
    """,
}

RUNNER = """
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
DB = Path(sys.argv[1]); OUT_PATH = sys.argv[2]; OUT = {{}}
t = time.perf_counter()
{body}
OUT.update(elapsed_s=time.perf_counter() - t,
           peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))
print(json.dumps(OUT))
"""


def run(name, db):
    out_path = CACHE / "run" / f"export_{name}.jsonl"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    code = RUNNER.format(root=str(ROOT), body=textwrap.dedent(SCRIPTS[name]))
    proc = subprocess.run([sys.executable, "-c", code, str(db), str(out_path)], capture_output=True, text=True,
                          cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed: {proc.stderr}")
    out_path.unlink(missing_ok=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    ap = store_args()
    args = ap.parse_args()
    results = {}
    for scale in (1, 2):
        src = base_store(args.sessions * scale // 2 if scale == 1 else args.sessions, args.messages_per_session, 600)
        size = store_mb(src)
        rows = {name: run(name, src) for name in ("plain", "hermes", "ours")}
        results[f"{size:.0f}MB"] = rows
        print(f"\nexport benchmark: {rows['ours']['messages']} messages, {size:.0f} MB store")
        print(f"{'job':<8}{'seconds':>9}{'msg/s':>10}{'RSS MB':>8}")
        for name, r in rows.items():
            print(f"{name:<8}{r['elapsed_s']:>9.1f}{r['messages'] / r['elapsed_s']:>10.0f}{r['peak_rss_mb']:>8.0f}")
        print(f"ours: {rows['hermes']['elapsed_s'] / rows['ours']['elapsed_s']:.2f}x Hermes's speed, "
              f"{rows['plain']['elapsed_s'] / rows['ours']['elapsed_s']:.2f}x the plain pass")
    write_result("export", {"results": results})


if __name__ == "__main__":
    main()
