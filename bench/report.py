"""`make bench`: run every benchmark, then write docs/benchmarks.md from bench/results/ and print a summary.

    python bench/report.py            # run the benchmarks (long), then render
    python bench/report.py --no-run   # render docs/benchmarks.md from the committed results only
    python bench/report.py --check    # exit 1 when docs/benchmarks.md is not what the results say

The page is a pure function of bench/results/*-latest.json (tests/test_docs.py checks it), so a figure
quoted anywhere else is a copy that goes stale: link to the page instead. Each table names the run it
comes from (its `when` and machine). For each job: ours against Hermes 0.19.0 and against plain
SQL/sqlite3 on the same store in the same run (ratios), peak RSS, and the live writer's worst append.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from common import RESULTS, ROOT, write_result

BENCHES = ("prune_bench.py", "sweep_bench.py", "export_bench.py", "load_bench.py", "redact_bench.py",
           "scale_bench.py")
PAGE = ROOT / "docs" / "benchmarks.md"


def latest(name: str, results: Path = RESULTS) -> dict | None:
    path = results / f"{name}-latest.json"
    return json.loads(path.read_text()) if path.exists() else None


def _n(value, spec: str = ",.0f", none: str = "–") -> str:
    return none if value is None else format(value, spec)


def _ratio(value) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _table(head: list[str], rows: list[list[str]], right: set[int] | None = None) -> str:
    right = right if right is not None else set(range(1, len(head)))
    lines = ["| " + " | ".join(head) + " |",
             "| " + " | ".join("---:" if i in right else "---" for i in range(len(head))) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _run(d: dict) -> str:
    when = d.get("when", "?")
    if len(when) == 18 and when[10] == "T":  # 2026-12-04T055552Z
        when = f"{when[:10]} {when[11:13]}:{when[13:15]} UTC"
    return f"_Run {when} on {d.get('machine', '?')}._"


def prune_stores(prune: dict) -> dict[str, dict]:
    """{store name: {"results": ..., facts}} for both result layouts: one store (older) or several."""
    if "stores" in prune:
        return prune["stores"]
    return {"bulk": {k: v for k, v in prune.items() if k not in ("benchmark", "when", "machine")}}


PRUNE_LABELS = {"idle": "writer alone (no job)", "plain_sql": "plain SQL, one transaction",
                "hermes": "Hermes 0.19.0 `prune_sessions`", "ours": "hermes-maint `prune`"}
STORE_LABELS = {"bulk": "bulk-generated store", "hermes_built": "store written through Hermes's `SessionDB`"}


def section_prune(prune: dict) -> str:
    out = ["## Prune beside a live Hermes writer\n",
           "`bench/prune_bench.py`: on copies of one store, our prune, Hermes 0.19.0's `SessionDB.prune_sessions` "
           "and one plain SQL transaction, each beside a live Hermes writer appending every "
           f"{prune.get('writer_interval_s', 0.01) * 1000:.0f} ms (its own FTS optimize "
           f"{'on' if prune.get('writer_optimize') else 'off'}). Targets: the writer's worst append ≤ 300 ms, "
           "≥ 0.9× one plain SQL transaction.\n", _run(prune) + "\n"]
    for name, store in prune_stores(prune).items():
        res = store["results"]
        facts = [f"{store['store_messages']:,} messages" if "store_messages" in store else None,
                 f"{store['store_mb']:.0f} MB" if "store_mb" in store else None]
        fts = store.get("fts", {}).get("messages_fts")
        if fts:
            facts.append(f"{fts['levels']} FTS levels")
        out.append(f"### {STORE_LABELS.get(name, name)} ({', '.join(f for f in facts if f)})\n")
        rows = []
        for key, r in res.items():
            rows.append([PRUNE_LABELS.get(key, key), _n(r.get("msgs_per_s") or None), _ratio(r.get("vs_plain_sql"))
                         if key != "idle" else "–", _ratio(r.get("vs_hermes")) if key != "idle" else "–",
                         _n(r.get("longest_lock_ms"), ".0f") + (" ms" if r.get("longest_lock_ms") else ""),
                         f"{r['writer_worst_ms']:,.0f} ms", str(r.get("writer_failures", r.get("failed_appends", 0))),
                         _n(r.get("peak_rss_mb"), ".0f") + " MB"])
        out.append(_table(["contender", "msg/s", "vs plain SQL", "vs Hermes", "longest lock", "writer's worst append",
                           "failed appends", "peak RSS"], rows))
        if len(store.get("rounds", [])) > 1:
            out.append(f"{len(store['rounds'])} rounds, the order rotated; the table is the median round. Ours vs "
                       "plain SQL, the writer's worst append beside ours, the load: " + "; ".join(
                           f"{r.get('ours_vs_plain_sql', 0):.2f}×, {r.get('ours_writer_worst_ms', 0):,.0f} ms, "
                           f"{r['load_average'][0]:.1f}" for r in store["rounds"]) + ".\n")
    return "\n".join(out)


def section_sweep(sweep: dict) -> str:
    r = sweep["results"]
    rows = [["Hermes 0.19.0 `maybe_auto_prune_and_vacuum`", f"{r['hermes_sweep']['elapsed_s']:.1f}",
             f"{r['hermes_sweep']['peak_rss_mb']:.0f} MB",
             f"prunes {r['hermes_sweep']['pruned']:,} sessions, then VACUUMs unconditionally"],
            ["hermes-maint `sweep`", f"{r['ours_sweep']['elapsed_s']:.1f}", f"{r['ours_sweep']['peak_rss_mb']:.0f} MB",
             f"{sweep['sweep_speed_vs_hermes']:.2f}× Hermes's speed; VACUUM "
             + ("done" if r["ours_sweep"]["vacuumed"] else f"held back: {r['ours_sweep'].get('vacuum_reason')}")],
            ["`sqlite3` VACUUM of the pruned store", f"{r['sqlite3_vacuum']['elapsed_s']:.1f}",
             f"{r['sqlite3_vacuum']['peak_rss_mb']:.0f} MB", ""],
            ["hermes-maint in-place VACUUM", f"{r['ours_vacuum']['elapsed_s']:.1f}",
             f"{r['ours_vacuum']['peak_rss_mb']:.0f} MB", f"{sweep['vacuum_time_vs_sqlite3']:.2f}× the `sqlite3` time"]]
    return "\n".join(["## Sweep and VACUUM\n",
                      f"`bench/sweep_bench.py` on a {sweep.get('store_messages', 0):,}-message store.\n",
                      _run(sweep) + "\n", _table(["job", "seconds", "peak RSS", "notes"], rows, {1, 2})])


EXPORT_LABELS = {"plain": "plain pass (sqlite3 rows → json lines)", "hermes": "Hermes 0.19.0 `export_all` + json dump",
                 "ours_one": "hermes-maint `export`, one process", "ours": "hermes-maint `export`"}


def _vs(res: dict, other: str, name: str) -> float:
    """How many times faster *name* ran than *other*: the median of the rounds' ratios (each round ran them side by
    side), or the ratio of the medians for results without rounds."""
    rounds = [r for r in res.get("runs", []) if other in r and name in r]
    if rounds:
        return statistics.median(r[other]["elapsed_s"] / r[name]["elapsed_s"] for r in rounds)
    return res[other]["median_s"] / res[name]["median_s"]


def section_export(export: dict) -> str:
    out = ["## Export (jsonl, everything)\n",
           "`bench/export_bench.py`: each contender in its own process on the same store, writing to the same "
           "folder, the store read once first so the page cache is warm for all, the order rotating between "
           "rounds; \"vs\" is the median of the rounds' ratios. Target: ≥ 1.5× Hermes's `export_all`.\n",
           _run(export) + "\n"]
    for size, res in export["results"].items():
        contenders = [k for k in res if isinstance(res[k], dict) and "median_s" in res[k]]
        msgs = res[contenders[0]]["messages"]
        labels = dict(EXPORT_LABELS)
        if "ours_one" in res:  # a run from before the second-process export was removed
            labels["ours"] = "hermes-maint `export` with its second process (removed since)"
        rows = [[labels.get(k, k), f"{res[k]['median_s']:.2f} ({res[k]['min_s']:.2f})",
                 f"{res[k]['cpu_median_s']:.2f}", f"{res[k]['peak_rss_mb']:.0f} MB",
                 f"{_vs(res, 'hermes', k):.2f}×" if "hermes" in res else "–",
                 f"{_vs(res, 'plain', k):.2f}×" if "plain" in res else "–"]
                for k in contenders]
        out.append(f"### {msgs:,} messages, {size}\n")
        out.append(_table(["contender", "median s (min)", "CPU s", "peak RSS", "vs Hermes", "vs plain"], rows))
    return "\n".join(out)


def section_redact(redact: dict) -> str:
    s, v = redact["summary"], redact["verdicts"]
    labels = {"plain": "export, unredacted", "plain_one": "export, unredacted, one process",
              "redacted": "export `--redact`", "hermes_redacted": "Hermes `export_all` + `redact_sensitive_text`",
              "trace": "trace, `--no-redact`", "trace_redacted": "trace (redacted by default)"}
    most = max(r.get("rounds", 0) for r in s.values())
    rows = [[labels.get(k, k) + (f", {r['rounds']} of {most} rounds" if r.get("rounds", most) < most else ""),
             f"{r['messages'] / r['median_s']:,.0f}", f"{r['median_s']:.2f}",
             f"{r['cpu_median_s']:.2f}", f"{r['peak_rss_mb']:.0f} MB"] for k, r in s.items()]
    verdicts = [[k.replace("_vs_", " vs ").replace("_", " "), f"{x['median']:.2f}×", f"{x['cpu_median']:.2f}×"]
                for k, x in v.items()]
    out = ["## Redaction\n",
           f"`bench/redact_bench.py`: a {redact['messages']:,}-message, {redact['store_mb']:.0f} MB store written "
           "through hermes-agent's `SessionDB` (prompts, replies with code, tool calls with JSON arguments, tool "
           "results, a credential in about 2 % of the messages), exported with and without redaction, each in "
           "its own process, median of the rounds.\n", _run(redact) + "\n",
           *([f"Load average (1 min) {redact['loadavg']['before'][0]:.2f} before the rounds, "
              f"{redact['loadavg']['after'][0]:.2f} after.\n"] if "loadavg" in redact else []),
           _table(["run", "msg/s", "median s", "CPU s", "peak RSS"], rows),
           _table(["ratio", "by the wall clock", "by CPU time"], verdicts)]
    gate = redact.get("gate")
    if gate:
        names = {"re2_set_gate": "the RE2 set gate (as shipped)", "stdlib_re_gate": "the same patterns in `re`",
                 "no_gate_full_rules": "every rule on every text, no gate"}
        rows = [[names.get(k, k), f"{g['cpu_s']:.2f}", f"{g['measured_on']:,}"]
                for k, g in gate.items() if isinstance(g, dict)]
        out.append(f"The gate over the store's {gate['texts']:,} texts ({gate['text_mb']:.0f} MB), CPU seconds for "
                   "all of them (the slower two measured on a share of the texts and scaled):\n")
        out.append(_table(["gate", "CPU s for all texts", "texts measured"], rows))
    return "\n".join(out)


def section_load(load: dict) -> str:
    rows = [["none: writers and reader alone" if k == "idle" else k, f"{r['seconds']:.1f}",
             f"{r['writer_worst_ms']:,.0f} ms", str(r["failed_appends"]), str(r["lost_messages"]),
             str(r.get("reader_failures", 0))] for k, r in load["results"].items()]
    return "\n".join(["## Under load\n",
                      "`bench/load_bench.py`: three Hermes writers appending every 10 ms and an FTS reader on a "
                      "200k-message store, each job run beside them. Every 1,000 writes a Hermes writer runs an FTS "
                      "`optimize` that holds the lock for seconds, whatever else runs.\n", _run(load) + "\n",
                      _table(["job", "seconds", "writers' worst append", "failed appends", "lost messages",
                              "failed searches"], rows)])


def section_backup(backup: dict) -> str:
    rows = []
    for k, r in backup["results"].items():
        rows.append([k, f"{r['seconds']:.1f}", f"{r['writer_worst_ms']:,.0f} ms",
                     f"{r['writer_worst_without_own_optimize_ms']:,.0f} ms", str(r["failed_appends"]),
                     f"{r['copy_s']:.1f} + {r['verify_s']:.1f}" if "copy_s" in r else "–"])
    return "\n".join(["## Backup (not part of `make bench`)\n",
                      f"`bench/backup_bench.py`: a {backup.get('store_messages', 0):,}-message, "
                      f"{backup.get('store_mb', 0):.0f} MB store warm in the page cache, each contender beside one "
                      f"Hermes writer appending every 10 ms; the baseline is the {backup.get('baseline', '?')}. A run "
                      "long enough to meet the writer's own FTS optimize shows it in the worst append; the next "
                      "column leaves those appends out.\n", _run(backup) + "\n",
                      _table(["contender", "seconds", "writer's worst append", "same, without Hermes's own optimize",
                              "failed appends", "copy + verify s"], rows)])


def section_scale(scale: dict) -> str:
    sizes = [str(n) for n in scale["sizes"]]
    commands = scale.get("commands", {})
    head = ["command"] + [f"{int(n):,} sessions, {scale['stores'][n]['messages']:,} messages, "
                          f"{scale['stores'][n]['mb']:,} MB" for n in sizes] + ["growth", "target"]
    rows = []
    for name, verdict in scale["verdicts"].items():
        cells = [f"{scale['results'][n][name]['seconds']:.2f} s, {scale['results'][n][name]['peak_rss_mb']:.0f} MB"
                 for n in sizes]
        met = "–" if "ok" not in verdict else ("met" if verdict["ok"] else "NOT MET")
        label = commands.get(name, name)
        cmd, _, note = label.partition(" (")
        growth = f"{verdict['growth']}" + (f" (CPU {verdict['cpu_growth']})" if "cpu_growth" in verdict else "")
        rows.append([f"`{cmd}`" + (f" ({note}" if note else ""), *cells, growth, met])
    live = scale["results"][sizes[-1]].get("prune_live", {})
    load = scale.get("load", {})
    facts = []
    if load:
        facts.append("The 1-minute load average before and after each size's commands, on a machine of "
                     f"{scale.get('cpus', '?')} cores shared with other work: "
                     + ", ".join(f"{int(n) // 1000}k {load[n][0]:.2f} → {load[n][1]:.2f}" for n in sizes if n in load))
    if "writer_worst_ms" in live:
        worst = max(scale["results"][n]["prune_live"]["writer_worst_ms"] for n in sizes)
        failures = sum(scale["results"][n]["prune_live"]["writer_failures"] for n in sizes)
        facts.append(f"The live writer beside the real prune: worst append {worst:,.0f} ms, {failures} failed")
    again = scale.get("remeasured") or {}
    if again:
        facts.append("Measured again after a fix (the other rows are that run's): "
                     + ", ".join(f"`{commands.get(n, n).partition(' (')[0]}` ({r['when']}, load {r['load']:.2f}"
                                 f"{'; ' + r['note'] if r.get('note') else ''})" for n, r in again.items()))
    return "\n".join(["## Scale\n",
                      f"`{scale.get('invocation', 'bench/scale_bench.py')}` "
                      f"({' and '.join(f'{int(n):,}' for n in sizes)} sessions; `--big` is 60k and 420k, the "
                      "sizes users report; `--quick` 1k and 10k, the edit loop): stores in the current upstream "
                      "layout with every index hermes-agent 0.19.0 creates, a year of history written oldest first, "
                      "most sessions short and a few with thousands of messages, lineages, subagent families, "
                      "branches, open, pinned, archived and hidden sessions, built once and reused. Each command "
                      "runs as its own process on the warm store; peak RSS is that process's `ru_maxrss` "
                      "(file-backed pages counted); growth is the time per session at the larger size over the time "
                      "per session at the smaller (in brackets, where recorded, the same ratio in CPU seconds, "
                      "which a shared machine does not stretch). Targets (issue 28): RSS ≤ 100 MB and within +20 % "
                      "of the smaller size for every command; growth ≤ 1.2 for the commands that scan the store; "
                      "`stats` ≤ 0.5 s, `list` ≤ 0.3 s and the daily `doctor` ≤ 15 s at the larger size; beside the "
                      "prune, the writer's worst append ≤ 300 ms with no failure. Where the growth of a delete is "
                      "SQLite's own, see docs/design/big-stores.md.\n",
                      _run({**scale, "when": scale.get("when_full_run", scale.get("when"))})
                      + "".join(f" {f}." for f in facts) + "\n", _table(head, rows)])


def summary_rows(results: Path = RESULTS) -> list[tuple]:
    """The one-line-per-job summary `make bench` prints (and report-latest.json keeps)."""
    prune, sweep, export, load, redact = (latest(n, results) for n in ("prune", "sweep", "export", "load", "redact"))
    stores = prune_stores(prune)
    rows = []
    for name, store in stores.items():
        p = store["results"]
        rows.append((f"prune ({name})", p["ours"]["msgs_per_s"], "msg/s", p["ours"]["vs_hermes"],
                     p["ours"]["vs_plain_sql"], p["ours"]["peak_rss_mb"], p["ours"]["writer_worst_ms"],
                     p["hermes"]["writer_worst_ms"]))
    big = list(export["results"].values())[-1]
    rows += [
        ("sweep", sweep["results"]["ours_sweep"]["elapsed_s"], "s", sweep["sweep_speed_vs_hermes"], None,
         sweep["results"]["ours_sweep"]["peak_rss_mb"], load["results"]["sweep"]["writer_worst_ms"], None),
        ("vacuum", sweep["results"]["ours_vacuum"]["elapsed_s"], "s", None,
         sweep["results"]["sqlite3_vacuum"]["elapsed_s"] / sweep["results"]["ours_vacuum"]["elapsed_s"],
         sweep["results"]["ours_vacuum"]["peak_rss_mb"], None, None),
        ("export", big["ours"]["messages"] / big["ours"]["median_s"], "msg/s",
         _vs(big, "hermes", "ours"), _vs(big, "plain", "ours"),
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
    return rows


def section_summary(rows: list[tuple]) -> str:
    table = [[job, f"{ours:,.1f} {unit}", _ratio(vh), _ratio(vp), _n(rss, ".0f"), _n(worst, ",.0f"), _n(hworst, ",.0f")]
             for job, ours, unit, vh, vp, rss, worst, hworst in rows]
    return "\n".join(["## Summary\n",
                      "One row per job, from the sections below (\"writer worst\" for sweep, archive and optimize is "
                      "from the run under load, with three writers).\n",
                      _table(["job", "ours", "vs Hermes", "vs plain", "peak RSS MB", "writer's worst append ms",
                              "Hermes's prune: writer's worst ms"], table)])


HEAD = """\
# Benchmarks

What the suite does not time, measured here: throughput against Hermes 0.19.0 and plain SQL, the live
writer's latency beside each job, memory at scale. Generated by `bench/report.py --no-run` from
`bench/results/*-latest.json` (one file per benchmark, earlier figures in git history); do not edit by
hand: `make bench` reruns everything and rewrites this page, and `tests/test_docs.py` fails when it is
not what the results say. The machine is this project's 2-core Linux build VM, shared with other work
unless a section says otherwise, so read small differences as noise.
"""


ONE_OFF = (  # (where, what was measured): figures a module's design rests on, measured once while it was written
    ("`maint/ops/importer.py` (`import_batcher`)",
     "inserting is uneven: on a 20k-message store one chunk of 200 messages took 5 ms and the next 70 ms, as FTS5 "
     "merged its segments; imports aim at half the prune target"),
    ("`maint/store/sqlutil.py` (`IdList`)",
     "a Python list of 100,000 session ids is about 8 MB of objects; the packed list about a third of that"),
    ("`maint/ops/sweep.py` (`_write_report`)",
     "a sweep report naming 90k pruned sessions is 2.5 MB of JSON; built as one string it cost four copies in memory"),
)


def section_one_off() -> str:
    return "\n".join(["## One-off measurements behind the code\n",
                      "Figures a module's design rests on, measured once while it was written (not rerun by "
                      "`make bench`):\n", _table(["where", "what was measured"], [list(r) for r in ONE_OFF], set())])


def render(results: Path = RESULTS) -> str:
    parts = [HEAD, section_summary(summary_rows(results))]
    for name, section in (("prune", section_prune), ("export", section_export), ("sweep", section_sweep),
                          ("load", section_load), ("redact", section_redact), ("scale", section_scale),
                          ("backup", section_backup)):
        data = latest(name, results)
        if data is not None:
            parts.append(section(data))
    parts.append(section_one_off())
    return "\n".join(p.rstrip("\n") + "\n" for p in parts)


def print_summary(rows: list[tuple]) -> None:
    def fmt(value, spec):
        width = int(spec.split(".")[0]) if spec[0].isdigit() else 0
        return "-".rjust(width) if value is None else format(value, spec)

    print(f"\n{'job':<20}{'ours':>10} {'unit':<6}{'vs Hermes':>10}{'vs plain':>10}{'RSS MB':>8}"
          f"{'writer worst ms':>17}{'Hermes writer worst':>21}")
    for job, ours, unit, vh, vp, rss, worst, hworst in rows:
        print(f"{job:<20}{fmt(ours, '10.1f')} {unit:<6}{fmt(vh, '10.2f')}{fmt(vp, '10.2f')}{fmt(rss, '8.0f')}"
              f"{fmt(worst, '17.0f')}{fmt(hworst, '21.0f')}")


def main(argv: list[str]) -> int:
    if "--check" in argv:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != render():
            print(f"{PAGE} is stale: run python bench/report.py --no-run", file=sys.stderr)
            return 1
        return 0
    ran = "--no-run" not in argv
    if ran:
        for script in BENCHES:
            subprocess.run([sys.executable, str(ROOT / "bench" / script)], check=True, cwd=ROOT)
    rows = summary_rows()
    PAGE.write_text(render(), encoding="utf-8")
    print_summary(rows)
    print(f"\nwrote {PAGE.relative_to(ROOT)}")
    if ran:  # a re-render changes no result file
        write_result("report", {"rows": [dict(zip(("job", "ours", "unit", "vs_hermes", "vs_plain", "peak_rss_mb",
                                                   "writer_worst_ms", "hermes_writer_worst_ms"), r)) for r in rows],
                                "load": latest("load")["results"], "scale": latest("scale")["verdicts"]})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
