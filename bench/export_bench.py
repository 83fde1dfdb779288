"""Export benchmark: our streaming jsonl export vs Hermes 0.19.0's export_all + json dump vs a plain pass.

The plain pass is one streaming read (sqlite3 rows -> json lines, no product logic); ours runs as shipped.
Each runs in its own process on the same store, writing to the same folder; the store is read once first so the page
cache is warm for all three, and the order rotates between rounds (--runs). Every contender runs from compiled
bytecode, as an installed package does (pip compiles Hermes's at install; ours, an editable checkout, is compiled
by an untimed import first, even where PYTHONDONTWRITEBYTECODE is set: it cost each of our runs 0.1 s).
Figures are min and median per contender (wall and CPU seconds: on a shared machine CPU time is the steadier
figure), and the ratios of each round. The store is then doubled to show that our memory stays flat as the store
grows.

    python bench/export_bench.py [--sessions N] [--messages-per-session M] [--runs R]
"""

import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

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

NAMES = ["plain", "hermes", "ours"]

RUNNER = """
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
DB = Path(sys.argv[1]); OUT_PATH = sys.argv[2]; OUT = {{}}
t = time.perf_counter()
{body}
use = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = use.ru_utime + use.ru_stime + kids.ru_utime + kids.ru_stime
OUT.update(elapsed_s=time.perf_counter() - t, cpu_s=round(cpu, 3),
           peak_rss_mb=round(max(use.ru_maxrss, kids.ru_maxrss) / 1024, 1))
print(json.dumps(OUT))
"""


# What each contender imports, compiled (and its bytecode written) once before the timed rounds.
IMPORTS = {"ours": "import maint.export.pipeline, maint.export.fast_jsonl, maint.store.connection, maint.config",
           "hermes": "import hermes_state", "plain": "import sqlite3"}
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def compile_contenders():
    for name in NAMES:
        subprocess.run([sys.executable, "-c", IMPORTS[name]], check=True, cwd=ROOT, env=ENV)


def run(name, db):
    out_path = CACHE / "run" / f"export_{name}.jsonl"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    code = RUNNER.format(root=str(ROOT), body=textwrap.dedent(SCRIPTS[name]))
    proc = subprocess.run([sys.executable, "-c", code, str(db), str(out_path)], capture_output=True, text=True,
                          cwd=ROOT, env=ENV)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed: {proc.stderr}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    row["output_mb"] = round(out_path.stat().st_size / 2**20, 1)
    out_path.unlink(missing_ok=True)
    return row


def warm(db):
    """Read the store once so the page cache holds it for every contender alike."""
    for suffix in ("", "-wal"):
        path = Path(str(db) + suffix)
        if path.exists():
            with open(path, "rb") as fh:
                while fh.read(1 << 24):
                    pass


def summary(runs):
    """min and median seconds per contender, and the per-run ratios (each from one side-by-side round)."""
    out = {}
    for name in NAMES:
        times = sorted(r[name]["elapsed_s"] for r in runs)
        cpu = sorted(r[name]["cpu_s"] for r in runs)
        out[name] = {"elapsed_s": round(statistics.median(times), 3),  # what bench/report.py reads
                     "min_s": round(times[0], 3), "median_s": round(statistics.median(times), 3),
                     "cpu_min_s": cpu[0], "cpu_median_s": round(statistics.median(cpu), 3),
                     "peak_rss_mb": max(r[name]["peak_rss_mb"] for r in runs),
                     "messages": runs[0][name]["messages"], "output_mb": runs[0][name]["output_mb"]}
    for other in ("hermes", "plain"):
        ratios = sorted(r[other]["elapsed_s"] / r["ours"]["elapsed_s"] for r in runs)
        cpu = sorted(r[other]["cpu_s"] / r["ours"]["cpu_s"] for r in runs)
        out[f"ours_vs_{other}"] = {"min": round(ratios[0], 2), "median": round(statistics.median(ratios), 2),
                                   "cpu_median": round(statistics.median(cpu), 2)}
    return out


def main():
    ap = store_args()
    ap.add_argument("--runs", type=int, default=3, help="side-by-side rounds per store (order rotates)")
    args = ap.parse_args()
    compile_contenders()
    results = {}
    for scale in (1, 2):
        src = base_store(args.sessions * scale // 2 if scale == 1 else args.sessions, args.messages_per_session, 600)
        size = store_mb(src)
        warm(src)
        runs = []
        for i in range(args.runs):
            order = NAMES[i % len(NAMES):] + NAMES[:i % len(NAMES)]
            runs.append({name: run(name, src) for name in order})
        s = summary(runs)
        results[f"{size:.0f}MB"] = {**s, "runs": runs}
        print(f"\nexport benchmark: {s['ours']['messages']} messages, {size:.0f} MB store, {args.runs} rounds")
        print(f"{'job':<8}{'min s':>8}{'median s':>10}{'cpu s':>8}{'msg/s':>10}{'RSS MB':>8}{'out MB':>8}")
        for name in NAMES:
            r = s[name]
            print(f"{name:<8}{r['min_s']:>8.2f}{r['median_s']:>10.2f}{r['cpu_median_s']:>8.2f}"
                  f"{r['messages'] / r['median_s']:>10.0f}{r['peak_rss_mb']:>8.0f}{r['output_mb']:>8.0f}")
        print(f"ours: {s['ours_vs_hermes']['median']:.2f}x Hermes's speed (min {s['ours_vs_hermes']['min']:.2f}), "
              f"{s['ours_vs_plain']['median']:.2f}x the plain pass (min {s['ours_vs_plain']['min']:.2f}); "
              f"CPU time: {s['ours_vs_hermes']['cpu_median']:.2f}x Hermes, "
              f"{s['ours_vs_plain']['cpu_median']:.2f}x plain")
    write_result("export", {"results": results})


if __name__ == "__main__":
    main()
