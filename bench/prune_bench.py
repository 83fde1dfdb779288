"""Prune benchmark: ours vs Hermes 0.19.0's prune_sessions vs one plain SQL transaction.

Each contender runs on its own copy of the same store while a real Hermes
writer (separate process, SessionDB.append_message) appends every 10 ms. The
store is written through SessionDB a message at a time with realistic text
(bench/hermes_store.py: the segments, levels and term counts of a store Hermes
filled); the bulk-generated one (tests.storegen.bulk_store: one tidy FTS
segment, a small vocabulary) flatters a chunked delete and is only run on request.
Prints messages deleted per second, ratios, our longest lock, and the
writer's worst append and failures; writes the figures as JSON under bench/results/.

The writer's own FTS optimize (every 1,000 of its writes; seconds on these
stores whatever runs beside it) is off unless --hermes-optimize, so the worst
append measures the job; with it on, the worst append without those appends
is reported as well.

With --rounds N the contenders run N times, in an order rotated each round (the machine is shared:
load moves between runs, so a ratio is taken inside one round); the table and ``results`` are the round
with the median ratio of ours to plain SQL, and ``rounds`` keeps every round's ratios.

    python bench/prune_bench.py [--stores hermes,bulk] [--hermes-messages N] [--hermes-optimize] [--rounds N]
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import os

from common import store_args, CACHE, ROOT, base_store, copy_store, messages_in, store_mb, write_result
from fts_shape import shape
from hermes_store import hermes_built_store

CONTENDERS = ("idle", "plain_sql", "hermes", "ours")


def run_one(name: str, db: Path, interval: float, optimize: bool) -> dict:
    stop = db.parent / "stop"
    env = dict(os.environ, **({} if optimize else {"HERMES_WRITER_OPTIMIZE_EVERY": "0"}))
    writer = subprocess.Popen([sys.executable, "-m", "tests.hermes_writer", str(db), str(stop), str(interval)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
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
    optimizing = set(w["optimizing"])
    inside = [(n in optimizing, took) for n, (at, took) in enumerate(w["samples"]) if lo <= at <= hi] or [(0, 0.0)]
    result.update(writer_worst_ms=round(max(t for _, t in inside) * 1000, 1), writer_failures=w["failed"],
                  writer_appended=len(inside), writer_optimizes=sum(o for o, _ in inside),
                  writer_worst_ms_without_optimize=round(max([t for o, t in inside if not o] or [0.0]) * 1000, 1))
    result["msgs_per_s"] = result["messages"] / result["elapsed_s"] if result["elapsed_s"] else 0.0
    return result


def table(rows: dict) -> None:
    plain, hermes = rows["plain_sql"]["msgs_per_s"], rows["hermes"]["msgs_per_s"]
    header = (f"{'job':<11}{'deleted':>9}{'msg/s':>9}{'vs SQL':>8}{'vs Hermes':>10}{'lock ms':>9}{'(other)':>9}"
              f"{'worst ms':>10}{'w/o opt':>9}{'fails':>6}{'RSS MB':>8}")
    print(header)
    print("-" * len(header))
    # lock ms: our longest transaction; (other): the longest one not holding a unit of 1,000+ messages
    for name, r in rows.items():
        if name == "idle":
            print(f"{'idle':<11}{'-':>9}{'-':>9}{'-':>8}{'-':>10}{'-':>9}{'-':>9}{r['writer_worst_ms']:>10.0f}"
                  f"{r['writer_worst_ms_without_optimize']:>9.0f}{r['writer_failures']:>6}{'-':>8}")
            continue
        r["vs_plain_sql"] = r["msgs_per_s"] / plain if plain else None
        r["vs_hermes"] = r["msgs_per_s"] / hermes if hermes else None
        lock = f"{r['longest_lock_ms']:.0f}" if "longest_lock_ms" in r else "-"
        other = f"{r['longest_lock_ms_other_tx']:.0f}" if "longest_lock_ms_other_tx" in r else "-"
        print(f"{name:<11}{r['messages']:>9}{r['msgs_per_s']:>9.0f}{r['vs_plain_sql']:>8.2f}{r['vs_hermes']:>10.2f}"
              f"{lock:>9}{other:>9}{r['writer_worst_ms']:>10.0f}{r['writer_worst_ms_without_optimize']:>9.0f}"
              f"{r['writer_failures']:>6}{r['peak_rss_mb']:>8.0f}")


def main() -> None:
    ap = store_args()
    ap.add_argument("--bytes", type=int, default=600)
    ap.add_argument("--interval", type=float, default=0.01)
    ap.add_argument("--stores", default="hermes", help="which stores, comma-separated: hermes, bulk")
    ap.add_argument("--hermes-messages", type=int, default=50_000, help="size of the SessionDB-built store")
    ap.add_argument("--hermes-optimize", action="store_true", help="leave the writer's own FTS optimize on")
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--rounds", type=int, default=1, help="run the contenders this many times, order rotated")
    args = ap.parse_args()
    sources = {}
    for kind in args.stores.split(","):
        if kind == "bulk":
            sources["bulk"] = base_store(args.sessions, args.messages_per_session, args.bytes)
        elif kind == "hermes":
            sources["hermes_built"] = hermes_built_store(args.hermes_messages)
        else:
            raise SystemExit(f"unknown store {kind!r}")
    payload = {}
    for kind, src in sources.items():
        names = args.contenders.split(",")
        rounds = []
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            got = {}
            for name in order:
                db = copy_store(src, CACHE / "run" / name)
                got[name] = run_one(name, db, args.interval, args.hermes_optimize)
            rows = {name: got[name] for name in names}
            summary = {"order": order, "load_average": os.getloadavg()}
            if "ours" in rows:
                for other in ("plain_sql", "hermes"):
                    if other in rows and rows[other]["msgs_per_s"]:
                        summary[f"ours_vs_{other}"] = round(rows["ours"]["msgs_per_s"] / rows[other]["msgs_per_s"], 3)
                summary["ours_writer_worst_ms"] = rows["ours"]["writer_worst_ms"]
                summary["ours_longest_lock_ms"] = rows["ours"].get("longest_lock_ms")
            print(f"round {r + 1}: {summary}")
            rounds.append((summary, rows))
        rounds_sorted = sorted(rounds, key=lambda sr: sr[0].get("ours_vs_plain_sql", 0))
        rows = rounds_sorted[(len(rounds_sorted) - 1) // 2][1]
        fts = {t: {k: v[k] for k in ("levels", "segments", "data_rows", "idx_rows", "terms")}
               for t, v in shape(src).items()}
        messages = messages_in(src)
        print(f"\n{kind} store: {messages} messages, {store_mb(src):.0f} MB; "
              f"writer every {args.interval * 1000:.0f} ms, its FTS optimize {'on' if args.hermes_optimize else 'off'}")
        for t, v in fts.items():
            print(f"  {t}: {v['levels']} levels, {v['segments']} segments, {v['data_rows']} %_data rows")
        if "plain_sql" in rows and "hermes" in rows:
            table(rows)
        payload[kind] = {"store_messages": messages, "store_mb": round(store_mb(src), 1), "fts": fts,
                         "results": rows, "rounds": [summary for summary, _ in rounds]}
    write_result("prune", {"writer_interval_s": args.interval, "writer_optimize": args.hermes_optimize,
                           "machine_note": "2 cores shared with other engineers' benchmarks",
                           "load_average": os.getloadavg(), "stores": payload})


if __name__ == "__main__":
    main()
