"""Redaction benchmark: `export --redact` against the unredacted export of the same store.

The store is written through hermes-agent 0.19.0's SessionDB one message at a time, with the
mix an agent transcript has: prompts, replies with code, tool calls with JSON arguments, tool
results (listings, git logs with SHAs, source files, JSON), and a credential in about 2 % of the
messages. Each export runs in its own process on the same store, jsonl and trace, three rounds
alternating redacted and unredacted; the ratio is redacted throughput / unredacted throughput
(best round of each), by the wall clock and by the process's CPU time (steadier on a shared machine).

    python bench/redact_bench.py [--sessions N] [--messages-per-session M] [--rounds R]
"""

import json
import random
import subprocess
import sys
import textwrap
import time

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
]


class Transcript:
    def __init__(self, seed: int = 3):
        self.rng = random.Random(seed)
        self.secrets = [c.text for c in secret_cases(seed)]
        self.gen = Gen(seed)

    def prose(self, n: int) -> str:
        return ". ".join(self.rng.choice(PROSE) for _ in range(n)) + "."

    def secret_line(self) -> str:
        return self.rng.choice(self.secrets) if self.rng.random() < 0.02 else ""

    def tool_output(self) -> str:
        rng = self.rng
        kind = rng.random()
        if kind < 0.3:
            out = "\n".join(f"-rw-r--r-- 1 user user {rng.randint(100, 99999)} Mar {rng.randint(1, 28)} "
                            f"src/module_{rng.randint(1, 99)}.py" for _ in range(rng.randint(4, 12)))
        elif kind < 0.55:
            out = "\n".join(f"{rng.getrandbits(160):040x} fix: handle edge case {rng.randint(1, 999)}"
                            for _ in range(rng.randint(3, 10)))
        elif kind < 0.8:
            out = "".join(rng.choice(CODE) for _ in range(rng.randint(2, 6)))
        else:
            out = json.dumps({"items": [{"id": rng.randint(1, 10**6), "name": f"item-{rng.randint(1, 999)}",
                                         "updated": "2026-11-30T10:00:00Z"} for _ in range(rng.randint(3, 8))]})
        extra = self.secret_line()
        return json.dumps({"output": out + ("\n" + extra if extra else ""), "exit_code": 0, "error": None})

    def write_session(self, db, sid: str, n: int) -> None:
        db.create_session(sid, self.rng.choice(["cli", "telegram", "discord"]), model="gpt-5",
                          cwd="/home/user/project")
        db.set_session_title(sid, f"{self.rng.choice(['fix', 'refactor', 'deploy', 'review'])} {sid[-4:]}")
        i = 0
        while i < n:
            db.append_message(sid, "user", self.prose(self.rng.randint(1, 3)) + " " + self.secret_line())
            call = f"call_{self.gen.b62(24)}"
            args = {"command": self.rng.choice(["ls -la src", "git log --oneline -5", "cat app/settings.py",
                                                "pytest -q tests/test_api.py"]) + " " + self.secret_line()}
            db.append_message(sid, "assistant", self.prose(1), tool_calls=[
                {"id": call, "type": "function", "function": {"name": "terminal", "arguments": json.dumps(args)}}])
            db.append_message(sid, "tool", self.tool_output(), tool_call_id=call, tool_name="terminal")
            db.append_message(sid, "assistant", self.prose(self.rng.randint(1, 4)) + "\n```python\n"
                              + self.rng.choice(CODE) + "```\n")
            i += 4
        db.end_session(sid, "done")


def build_store(sessions: int, per: int):
    path = CACHE / f"redact_store_{sessions}x{per}" / "state.db"
    if not path.exists():
        from hermes_state import SessionDB

        path.parent.mkdir(parents=True, exist_ok=True)
        started = time.time()
        db = SessionDB(path)
        t = Transcript()
        for n in range(sessions):
            t.write_session(db, f"20261201_{n:06d}_{t.gen.s('0123456789abcdef', 6)}", per)
        db.close()
        print(f"generated {path} in {time.time() - started:.0f}s", file=sys.stderr)
    return path


RUNNER = """
import json, shutil, sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from maint.export.pipeline import ExportPlan, ExportRequest, run_export
from maint.export.selection import select_sessions
from maint.selection.filters import Filters
from maint.store.catalog import load_sessions
from maint.store.connection import open_store
DB, OUT, FMT, REDACT = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
shutil.rmtree(OUT, ignore_errors=True)
OUT.mkdir(parents=True)
t, cpu = time.perf_counter(), time.process_time()
with open_store(DB, readonly=True) as s:
    catalog = load_sessions(s)
    chosen = select_sessions(s, None, Filters(), catalog)
    if FMT == "jsonl":  # one backup file, as `export all.jsonl --redact`
        entries = [{{"path": str(OUT / "all.jsonl"), "ids": [x.id for x in chosen]}}]
    else:  # one file per session, as a bulk trace export
        entries = [{{"path": str(OUT / (x.id + ".trace.jsonl")), "ids": [x.id]}} for x in chosen]
    plan = ExportPlan(ExportRequest(fmt=FMT, output=str(OUT), redact=REDACT), catalog, chosen, entries, None, None, [])
    n = run_export(s, plan)["messages"]
print(json.dumps({{"messages": n, "elapsed_s": time.perf_counter() - t, "cpu_s": time.process_time() - cpu}}))
shutil.rmtree(OUT)
"""


def run(db, fmt: str, redact: bool) -> dict:
    out = CACHE / "run" / f"redact_{fmt}_{int(redact)}"
    out.parent.mkdir(parents=True, exist_ok=True)
    code = RUNNER.format(root=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(db), str(out), fmt, str(int(redact))],
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"export {fmt} redact={redact} failed: {proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=400)
    ap.add_argument("--messages-per-session", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    db = build_store(args.sessions, args.messages_per_session)
    results = {}
    print(f"\nredaction benchmark: {store_mb(db):.0f} MB store written by Hermes's SessionDB")
    print(f"{'format':<8}{'plain msg/s':>13}{'redacted msg/s':>16}{'ratio':>8}{'ratio (CPU time)':>18}")
    for fmt in ("jsonl", "trace"):
        plain, redacted = [], []
        for _ in range(args.rounds):
            plain.append(run(db, fmt, False))
            redacted.append(run(db, fmt, True))
        row = {"messages": plain[0]["messages"]}
        for clock in ("elapsed_s", "cpu_s"):
            best_plain = max(r["messages"] / r[clock] for r in plain)
            best_red = max(r["messages"] / r[clock] for r in redacted)
            suffix = "" if clock == "elapsed_s" else "_cpu"
            row.update({f"plain_msgs_per_s{suffix}": best_plain, f"redacted_msgs_per_s{suffix}": best_red,
                        f"ratio{suffix}": best_red / best_plain})
        row["rounds"] = {"plain": plain, "redacted": redacted}
        results[fmt] = row
        print(f"{fmt:<8}{row['plain_msgs_per_s']:>13.0f}{row['redacted_msgs_per_s']:>16.0f}{row['ratio']:>8.2f}"
              f"{row['ratio_cpu']:>18.2f}")
    write_result("redact", {"store_mb": round(store_mb(db), 1), "results": results})


if __name__ == "__main__":
    main()
