"""Prune benchmark: ours vs Hermes 0.19.0's prune_sessions vs one plain SQL transaction.

Each contender runs on its own copy of the same generated store while a real
Hermes writer (separate process, SessionDB.append_message) appends every 10 ms.
Prints messages deleted per second, ratios, and the writer's worst append
latency and failures; writes the figures as JSON under bench/results/.

    python bench/prune_bench.py [--sessions N] [--messages-per-session M] [--bytes B]
"""

import json
import subprocess
import sys
import time
from pathlib import Path

from common import store_args, CACHE, ROOT, base_store, copy_store, store_mb, write_result

CONTENDERS = ("idle", "plain_sql", "hermes", "ours")


def run_one(name: str, db: Path, interval: float) -> dict:
    stop = db.parent / "stop"
    writer = subprocess.Popen([sys.executable, "-m", "tests.hermes_writer", str(db), str(stop), str(interval)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not Path(str(stop) + ".ready").exists():
        if writer.poll() is not None:
            raise SystemExit(f"writer failed: {writer.stderr.read()}")
        time.sleep(0.05)
    time.sleep(2.0)  # let the writer's first commits (FTS automerge of the bulk load) pass
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "contenders.py"), name, str(db)],
                          capture_output=True, text=True, cwd=ROOT)
    time.sleep(0.5)
    stop.write_text("1")
    out, err = writer.communicate(timeout=120)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed: {proc.stderr}")
    result = json.loads(proc.stdout)
    w = json.loads(out.strip().splitlines()[-1])
    lo, hi = result.pop("window")
    inside = [took for at, took in w["samples"] if lo <= at <= hi] or [0.0]
    result.update(writer_worst_ms=round(max(inside) * 1000, 1), writer_failures=w["failed"],
                  writer_appended=len(inside))
    result["msgs_per_s"] = result["messages"] / result["elapsed_s"] if result["elapsed_s"] else 0.0
    return result


def main() -> None:
    ap = store_args()
    ap.add_argument("--bytes", type=int, default=600)
    ap.add_argument("--interval", type=float, default=0.01)
    args = ap.parse_args()
    src = base_store(args.sessions, args.messages_per_session, args.bytes)
    size_mb = store_mb(src)
    rows = {}
    for name in CONTENDERS:
        db = copy_store(src, CACHE / "run" / name)
        rows[name] = run_one(name, db, args.interval)
    plain, hermes = rows["plain_sql"]["msgs_per_s"], rows["hermes"]["msgs_per_s"]
    print(f"\nprune benchmark: {args.sessions * args.messages_per_session} messages, {size_mb:.0f} MB store, "
          f"writer every {args.interval * 1000:.0f} ms")
    header = (f"{'job':<11}{'deleted':>9}{'msg/s':>9}{'vs SQL':>8}{'vs Hermes':>10}"
              f"{'worst ms':>10}{'fails':>6}{'RSS MB':>8}")
    print(header)
    print("-" * len(header))
    for name, r in rows.items():
        if name == "idle":
            print(f"{'idle':<11}{'-':>9}{'-':>9}{'-':>8}{'-':>10}{r['writer_worst_ms']:>10.0f}"
                  f"{r['writer_failures']:>6}{'-':>8}")
            continue
        r["vs_plain_sql"] = r["msgs_per_s"] / plain if plain else None
        r["vs_hermes"] = r["msgs_per_s"] / hermes if hermes else None
        print(f"{name:<11}{r['messages']:>9}{r['msgs_per_s']:>9.0f}{r['vs_plain_sql']:>8.2f}{r['vs_hermes']:>10.2f}"
              f"{r['writer_worst_ms']:>10.0f}{r['writer_failures']:>6}{r['peak_rss_mb']:>8.0f}")
    write_result("prune", {"store_messages": args.sessions * args.messages_per_session,
                           "store_mb": round(size_mb, 1), "writer_interval_s": args.interval, "results": rows})


if __name__ == "__main__":
    main()
