"""Redaction benchmark: `export --redact` against the unredacted export and against Hermes's own redacted export.

The store is written through hermes-agent 0.19.0's SessionDB one message at a time, with the
mix an agent transcript has: prompts, replies with code, tool calls with JSON arguments (commands,
file writes whose content is itself JSON or YAML, patches, searches), tool results (listings, git
logs with SHAs, source files, JSON), and a credential from the test corpus in about 2 % of the
messages. Each contender runs in its own process on the same store, the page cache warm, the order
rotating between rounds:

* plain / redacted: our jsonl backup of every session (``export all.jsonl [--redact]``), as shipped;
* plain_one: the unredacted export in one process (HERMES_MAINT_EXPORT_PROCESSES=1), where that applies;
* hermes_redacted: Hermes's ``export_all`` + ``redact_session_data`` (its ``sessions export --redact``:
  ``redact_sensitive_text`` over every message) + one JSON line per session;
* trace / trace_redacted: our bulk trace export (one file per session), unredacted and redacted.

Ratios are per round (one side-by-side run of every contender), by the wall clock and by CPU time
(steadier on a shared machine); the figures reported are their medians and minima.

    python bench/redact_bench.py [--sessions N] [--messages-per-session M] [--rounds R] [--trace-rounds T]

The trace contenders (a file per session) take a minute or more each: --trace-rounds runs them in the first
T rounds only, so a run stays within a few minutes. The load average before and after is recorded.
"""

import json
import os
import random
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from common import CACHE, ROOT, store_mb, write_result
from tests.secret_corpus import Gen, secret_cases

PROSE = [
    "I looked at the failing test and the key issue is that the token count exceeds the limit",
    "Let me check the configuration file and run the migration again",
    "The password reset flow works now, but the session expired before the build finished",
    "We should refactor the auth module and add retries around the upload",
    "Deploy went fine on staging; production still shows the old version 2.4.1 of the service",
    "Can you summarise what changed since yesterday and open a pull request for it",
    "The benchmark shows the export is bound by JSON encoding, not by SQLite reads",
    "Here is the plan: read the logs, find the first error, then bisect the commits",
    "Das Deployment ist fehlgeschlagen, bitte prüfe die Logs",
    "ログを確認して、最初のエラーを探してください",
]
CODE = [
    "def load(path):\n    with open(path) as fh:\n        return json.load(fh)\n",
    "for i, row in enumerate(rows):\n    total += row['amount'] * rate\n",
    "api_key = os.environ['OPENAI_API_KEY']\nclient = OpenAI(api_key=api_key)\n",
    "if token_count > MAX_TOKENS:\n    raise ValueError('too long')\n",
    "SELECT id, title FROM sessions WHERE ended_at IS NOT NULL ORDER BY started_at DESC LIMIT 20;\n",
    "const res = await fetch(`/api/v1/items/${id}`, { headers: { 'Content-Type': 'application/json' } });\n",
    "class Cache:\n    def __init__(self, size=128):\n        self.size = size\n        self.items = {}\n",
]
CONFIGS = [
    {"server": {"host": "0.0.0.0", "port": 8080, "workers": 4}, "log_level": "info", "features": ["a", "b"]},
    {"database": {"url_env": "DATABASE_URL", "pool_size": 10}, "cache": {"ttl": 300, "max_tokens": 4096}},
    {"name": "web", "version": "2.4.1", "scripts": {"build": "vite build", "test": "vitest"}},
]
YAML = "services:\n  web:\n    image: nginx:1.27\n    ports:\n      - \"8080:80\"\n    environment:\n" \
       "      - LOG_LEVEL=info\n"


class Transcript:
    def __init__(self, seed: int = 3):
        self.rng = random.Random(seed)
        self.secrets = [c.text for c in secret_cases(seed)]
        self.gen = Gen(seed)

    def prose(self, n: int) -> str:
        return ". ".join(self.rng.choice(PROSE) for _ in range(n)) + "."

    def secret_line(self) -> str:
        return self.rng.choice(self.secrets) if self.rng.random() < 0.02 else ""

    def tool_call(self) -> tuple[str, dict]:
        rng = self.rng
        kind = rng.random()
        extra = self.secret_line()
        if kind < 0.45:
            return "terminal", {"command": rng.choice(["ls -la src", "git log --oneline -5", "cat app/settings.py",
                                                       "pytest -q tests/test_api.py"]) + (" " + extra if extra
                                                                                          else "")}
        if kind < 0.65:
            return "read_file", {"path": f"src/module_{rng.randint(1, 99)}.py", "offset": 0, "limit": 200}
        if kind < 0.85:
            body = json.dumps(rng.choice(CONFIGS), indent=2) if rng.random() < 0.5 else YAML
            return "write_file", {"path": rng.choice(["config.json", "compose.yaml"]), "content": body + extra}
        return "web_search", {"query": self.prose(1)[:60], "max_results": 5}

    def tool_output(self) -> str:
        rng = self.rng
        kind = rng.random()
        if kind < 0.3:
            out = "\n".join(f"-rw-r--r-- 1 user user {rng.randint(100, 99999)} Mar {rng.randint(1, 28)} "
                            f"src/module_{rng.randint(1, 99)}.py" for _ in range(rng.randint(8, 24)))
        elif kind < 0.55:
            out = "\n".join(f"{rng.getrandbits(160):040x} fix: handle edge case {rng.randint(1, 999)}"
                            for _ in range(rng.randint(6, 20)))
        elif kind < 0.8:
            out = "".join(rng.choice(CODE) for _ in range(rng.randint(3, 10)))
        else:
            out = json.dumps({"items": [{"id": rng.randint(1, 10**6), "name": f"item-{rng.randint(1, 999)}",
                                         "updated": "2026-11-30T10:00:00Z"} for _ in range(rng.randint(6, 16))]})
        extra = self.secret_line()
        return json.dumps({"output": out + ("\n" + extra if extra else ""), "exit_code": 0, "error": None})

    def write_session(self, db, n_session: int, sid: str, n: int) -> None:
        db.create_session(sid, self.rng.choice(["cli", "telegram", "discord"]), model="gpt-5",
                          cwd="/home/user/project")
        db.set_session_title(sid, f"{self.rng.choice(['fix', 'refactor', 'deploy', 'review'])} #{n_session}")
        i = 0
        while i < n:
            db.append_message(sid, "user", self.prose(self.rng.randint(1, 3)) + " " + self.secret_line())
            call = f"call_{self.gen.b62(24)}"
            name, args = self.tool_call()
            db.append_message(sid, "assistant", self.prose(1), tool_calls=[
                {"id": call, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}])
            db.append_message(sid, "tool", self.tool_output(), tool_call_id=call, tool_name=name)
            db.append_message(sid, "assistant", self.prose(self.rng.randint(1, 4)) + "\n```python\n"
                              + self.rng.choice(CODE) + "```\n")
            i += 4
        db.end_session(sid, "done")


def build_store(sessions: int, per: int) -> Path:
    path = CACHE / f"redact_store_v4_{sessions}x{per}" / "state.db"  # v4: the corpus grew (hostile round 5)
    if not path.exists():
        from hermes_state import SessionDB

        tmp = path.with_name("building.db")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            Path(str(tmp) + suffix).unlink(missing_ok=True)
        started = time.time()
        db = SessionDB(tmp)
        db._conn.execute("PRAGMA synchronous=OFF")  # no fsync per commit: the same rows, minutes sooner
        t = Transcript()
        for n in range(sessions):
            t.write_session(db, n, f"20261201_{n:06d}_{t.gen.s('0123456789abcdef', 6)}", per)
        db._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
        for suffix in ("-wal", "-shm"):
            Path(str(tmp) + suffix).unlink(missing_ok=True)
        tmp.rename(path)
        print(f"generated {path} in {time.time() - started:.0f}s", file=sys.stderr)
    return path


OURS = """
    import os, shutil
    {env}
    from maint.export.pipeline import ExportRequest, plan_export, run_export
    from maint.selection.filters import Filters
    from maint.store.connection import open_store
    shutil.rmtree(OUT_DIR, ignore_errors=True)
    OUT_DIR.mkdir(parents=True)
    if FMT == "jsonl":  # one backup file, as `export all.jsonl [--redact]`
        req = ExportRequest(fmt="jsonl", output=str(OUT_DIR / "all.jsonl"), redact=REDACT)
    else:  # one file per session, as a bulk trace export (every session: a filter that takes all)
        req = ExportRequest(fmt="trace", output=str(OUT_DIR) + "/", redact=REDACT, filters=Filters(min_messages=0))
    with open_store(DB, readonly=True) as s:
        OUT.update(messages=run_export(s, plan_export(s, req))["messages"])
"""
SCRIPTS = {
    "plain": ("jsonl", False, ""),
    "plain_one": ("jsonl", False, 'os.environ["HERMES_MAINT_EXPORT_PROCESSES"] = "1"'),
    "redacted": ("jsonl", True, ""),
    "trace": ("trace", False, ""),
    "trace_redacted": ("trace", True, ""),
}
HERMES = """
    import json
    from hermes_state import SessionDB
    from hermes_cli.session_export_md import redact_session_data
    db = SessionDB(DB)
    n = 0
    with open(OUT_DIR / "all.jsonl", "w") as fh:
        for s in db.export_all():
            fh.write(json.dumps(redact_session_data(s), ensure_ascii=False) + "\\n")
            n += len(s["messages"])
    OUT.update(messages=n)
"""
RUNNER = """
import json, resource, shutil, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
DB, OUT_DIR, OUT = Path(sys.argv[1]), Path(sys.argv[2]), {{}}
FMT, REDACT = {fmt!r}, {redact!r}
OUT_DIR.mkdir(parents=True, exist_ok=True)
t = time.perf_counter()
{body}
use = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
OUT.update(elapsed_s=time.perf_counter() - t, cpu_s=use.ru_utime + use.ru_stime + kids.ru_utime + kids.ru_stime,
           peak_rss_mb=round(max(use.ru_maxrss, kids.ru_maxrss) / 1024, 1),
           output_mb=round(sum(p.stat().st_size for p in OUT_DIR.iterdir()) / 2**20, 1))
shutil.rmtree(OUT_DIR)
print(json.dumps(OUT))
"""
NAMES = ["plain", "plain_one", "redacted", "hermes_redacted", "trace", "trace_redacted"]


def run(name: str, db: Path) -> dict:
    if name == "hermes_redacted":
        fmt, redact, body = "jsonl", True, HERMES
    else:
        fmt, redact, env = SCRIPTS[name]
        body = OURS.format(env=env)
    code = RUNNER.format(root=str(ROOT), fmt=fmt, redact=redact, body=textwrap.dedent(body))
    out = CACHE / "run" / f"redact_{name}"
    proc = subprocess.run([sys.executable, "-c", code, str(db), str(out)], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed: {proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def warm(db: Path) -> None:
    with open(db, "rb") as fh:
        while fh.read(1 << 24):
            pass


def ratios(runs: list[dict], num: str, den: str) -> dict | None:
    """How fast *num* is against *den* (den's time / num's time), round by round."""
    runs = [r for r in runs if num in r and den in r]
    if not runs:
        return None  # --trace-rounds 0: the trace contenders did not run
    wall = sorted(r[den]["elapsed_s"] / r[num]["elapsed_s"] for r in runs)
    cpu = sorted(r[den]["cpu_s"] / r[num]["cpu_s"] for r in runs)
    return {"median": round(statistics.median(wall), 2), "min": round(wall[0], 2),
            "cpu_median": round(statistics.median(cpu), 2), "cpu_min": round(cpu[0], 2)}


def gate_figures(db: Path) -> dict:
    """Why the gate is RE2's: the same question (can any rule match this text?) asked of every text
    column of the store by RE2's set matcher, by the standard library's re (the same patterns), and
    the full rules run on every text with no gate. CPU seconds, one process, texts in memory."""
    import re

    import apsw

    from maint.export import redact

    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    texts = [v for row in conn.execute("SELECT content, tool_calls FROM messages") for v in row
             if isinstance(v, str) and len(v) >= 8]
    conn.close()
    data = [t.encode() for t in texts]
    patterns = ("|".join((redact._GATE_NAME, redact._GATE_PAIR, redact._GATE_CLI)), redact._GATE_SHAPES,
                redact._GATE_PLACES, redact._GATE_B64)
    # RE2 spells a code point \x{a0}; re wants \u00a0 (on str: the texts are searched decoded)
    stdlib = re.compile(re.sub(r"\\x\{([0-9a-f]+)\}", lambda m: f"\\u{int(m.group(1), 16):04x}", "|".join(patterns)))
    out = {"texts": len(texts), "text_mb": round(sum(map(len, data)) / 2**20, 1)}

    def timed(name, fn, items, limit=None):
        items = items if limit is None else items[:limit]
        started = time.process_time()
        hits = sum(1 for x in items if fn(x))
        seconds = time.process_time() - started
        scale = len(texts) / len(items)
        out[name] = {"cpu_s": round(seconds * scale, 2), "hits": round(hits * scale),
                     "measured_on": len(items)}

    timed("re2_set_gate", redact.gate, data)
    timed("stdlib_re_gate", stdlib.search, texts, limit=20_000)  # slow: a sample, scaled to all texts
    timed("no_gate_full_rules", lambda t: redact._find(t, t.lower(), redact._words(t.lower())), texts, limit=40_000)
    return out


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=4000)
    ap.add_argument("--messages-per-session", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trace-rounds", type=int, default=None, help="rounds that run the trace contenders (all)")
    args = ap.parse_args()
    trace_rounds = args.rounds if args.trace_rounds is None else args.trace_rounds
    db = build_store(args.sessions, args.messages_per_session)
    warm(db)
    load_before = os.getloadavg()
    runs = []
    for i in range(args.rounds):
        names = [n for n in NAMES if i < trace_rounds or not n.startswith("trace")]
        order = names[i % len(names):] + names[:i % len(names)]
        runs.append({name: run(name, db) for name in order})
    load_after = os.getloadavg()
    messages = runs[0]["plain"]["messages"]
    summary = {}
    for name in NAMES:
        rs = [r[name] for r in runs if name in r]
        if not rs:
            continue
        summary[name] = {"median_s": round(statistics.median(r["elapsed_s"] for r in rs), 3),
                         "min_s": round(min(r["elapsed_s"] for r in rs), 3),
                         "cpu_median_s": round(statistics.median(r["cpu_s"] for r in rs), 3),
                         "peak_rss_mb": max(r["peak_rss_mb"] for r in rs), "rounds": len(rs),
                         "output_mb": rs[0]["output_mb"], "messages": rs[0]["messages"]}
    verdicts = {"redacted_vs_plain": ratios(runs, "redacted", "plain"),
                "redacted_vs_plain_one": ratios(runs, "redacted", "plain_one"),
                "redacted_vs_hermes_redacted": ratios(runs, "redacted", "hermes_redacted"),
                "trace_redacted_vs_trace": ratios(runs, "trace_redacted", "trace")}
    size = store_mb(db)
    gates = gate_figures(db)
    print(f"\nredaction benchmark: {messages} messages, {size:.0f} MB store written by Hermes's SessionDB, "
          f"{args.rounds} rounds")
    print(f"{'contender':<17}{'median s':>10}{'min s':>8}{'cpu s':>8}{'msg/s':>10}{'RSS MB':>8}{'out MB':>8}")
    for name in summary:
        r = summary[name]
        print(f"{name:<17}{r['median_s']:>10.2f}{r['min_s']:>8.2f}{r['cpu_median_s']:>8.2f}"
              f"{r['messages'] / r['median_s']:>10.0f}{r['peak_rss_mb']:>8.0f}{r['output_mb']:>8.0f}")
    for name, v in verdicts.items():
        if v is None:
            continue
        print(f"{name:<28} {v['median']:.2f}x (min {v['min']:.2f}; CPU time {v['cpu_median']:.2f}x, "
              f"min {v['cpu_min']:.2f})")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    print(f"gate over {gates['texts']} texts ({gates['text_mb']} MB): RE2 set {gates['re2_set_gate']['cpu_s']} s, "
          f"stdlib re {gates['stdlib_re_gate']['cpu_s']} s, no gate (every rule on every text) "
          f"{gates['no_gate_full_rules']['cpu_s']} s CPU")
    write_result("redact", {"store_mb": round(size, 1), "messages": messages, "sessions": args.sessions,
                            "summary": summary, "verdicts": verdicts, "gate": gates, "runs": runs,
                            "loadavg": {"before": [round(x, 2) for x in load_before],
                                        "after": [round(x, 2) for x in load_after]}})


if __name__ == "__main__":
    main()
