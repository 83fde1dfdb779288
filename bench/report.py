"""`make bench`: run every benchmark, then print one table and write it to bench/results/report-latest.json.

For each job: ours against Hermes 0.19.0 and against plain SQL/sqlite3 on the same store in the same
run (ratios), peak RSS, and the live writer's worst append latency.
"""

import json
import subprocess
import sys

from common import RESULTS, ROOT, write_result

BENCHES = ("prune_bench.py", "sweep_bench.py", "export_bench.py", "load_bench.py", "redact_bench.py",
           "scale_bench.py")


def latest(name):
    return json.loads((RESULTS / f"{name}-latest.json").read_text())


def main():
    if "--no-run" not in sys.argv:
        for script in BENCHES:
            subprocess.run([sys.executable, str(ROOT / "bench" / script)], check=True, cwd=ROOT)
    prune, sweep, export, load, redact = (latest(n) for n in ("prune", "sweep", "export", "load", "redact"))
    p = prune["results"]
    big = list(export["results"].values())[-1]
    rows = [
        ("prune", p["ours"]["msgs_per_s"], "msg/s", p["ours"]["vs_hermes"], p["ours"]["vs_plain_sql"],
         p["ours"]["peak_rss_mb"], p["ours"]["writer_worst_ms"], p["hermes"]["writer_worst_ms"]),
        ("sweep", sweep["results"]["ours_sweep"]["elapsed_s"], "s", sweep["sweep_speed_vs_hermes"], None,
         sweep["results"]["ours_sweep"]["peak_rss_mb"], load["results"]["sweep"]["writer_worst_ms"], None),
        ("vacuum", sweep["results"]["ours_vacuum"]["elapsed_s"], "s", None,
         sweep["results"]["sqlite3_vacuum"]["elapsed_s"] / sweep["results"]["ours_vacuum"]["elapsed_s"],
         sweep["results"]["ours_vacuum"]["peak_rss_mb"], None, None),
        ("export", big["ours"]["messages"] / big["ours"]["elapsed_s"], "msg/s",
         big["hermes"]["elapsed_s"] / big["ours"]["elapsed_s"], big["plain"]["elapsed_s"] / big["ours"]["elapsed_s"],
         big["ours"]["peak_rss_mb"], None, None),
        # vs plain: export --redact against the unredacted export of the same store (median of the rounds'
        # ratios by the wall clock); vs Hermes: its export_all + redact_sensitive_text on that store
        ("redact jsonl", redact["summary"]["redacted"]["messages"] / redact["summary"]["redacted"]["median_s"],
         "msg/s", redact["verdicts"]["redacted_vs_hermes_redacted"]["median"],
         redact["verdicts"]["redacted_vs_plain"]["median"], redact["summary"]["redacted"]["peak_rss_mb"], None, None),
        ("redact trace", redact["summary"]["trace_redacted"]["messages"]
         / redact["summary"]["trace_redacted"]["median_s"], "msg/s", None,
         redact["verdicts"]["trace_redacted_vs_trace"]["median"], redact["summary"]["trace_redacted"]["peak_rss_mb"],
         None, None),
        ("archive", load["results"]["archive"]["seconds"], "s", None, None, None,
         load["results"]["archive"]["writer_worst_ms"], None),
        ("optimize", load["results"]["optimize"]["seconds"], "s", None, None, None,
         load["results"]["optimize"]["writer_worst_ms"], None),
        # the import of the old sessions beside the writers (load_bench.py's import job; absent from older results)
        *((("import", r["seconds"], "s", None, None, None, r["writer_worst_ms"], None),)
          if (r := load["results"].get("import")) else ()),
    ]
    def fmt(value, spec):
        width = int(spec.split(".")[0]) if spec[0].isdigit() else 0
        return "-".rjust(width) if value is None else format(value, spec)

    print(f"\n{'job':<13}{'ours':>10} {'unit':<6}{'vs Hermes':>10}{'vs plain':>10}{'RSS MB':>8}"
          f"{'writer worst ms':>17}{'Hermes writer worst':>21}")
    for job, ours, unit, vh, vp, rss, worst, hworst in rows:
        print(f"{job:<13}{fmt(ours, '10.1f')} {unit:<6}{fmt(vh, '10.2f')}{fmt(vp, '10.2f')}{fmt(rss, '8.0f')}"
              f"{fmt(worst, '17.0f')}{fmt(hworst, '21.0f')}")
    failures = {k: (v["failed_appends"], v["lost_messages"]) for k, v in load["results"].items()}
    print(f"failed appends / lost messages under load: {failures}")
    scale = latest("scale")
    big = str(scale["sizes"][-1])
    print(f"\nscale ({', '.join(str(n) for n in scale['sizes'])} sessions): seconds and peak RSS at {big}, growth")
    for name, verdict in scale["verdicts"].items():
        r = scale["results"][big][name]
        met = "" if "ok" not in verdict else ("  met" if verdict["ok"] else "  NOT MET")
        print(f"  {name:<16}{r['seconds']:>8.2f} s{r['peak_rss_mb']:>6.0f} MB  growth {verdict['growth']}{met}")
    write_result("report", {"rows": [dict(zip(("job", "ours", "unit", "vs_hermes", "vs_plain", "peak_rss_mb",
                                               "writer_worst_ms", "hermes_writer_worst_ms"), r)) for r in rows],
                            "load": load["results"], "scale": scale["verdicts"]})


if __name__ == "__main__":
    main()
