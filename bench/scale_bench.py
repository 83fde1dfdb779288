"""Scale benchmark: time and peak RSS of each command at three store sizes, and how they grow.

Stores are built once (cached under bench/.cache/) with plain SQL in the current upstream layout
(schema 31: V30 plus ``auto_archived``; FTS5 indexes kept by Hermes's triggers; the indexes
hermes-agent creates, :data:`HERMES_INDEXES`, in place before the first row as in a live store) with
a realistic shape: a year of history, most sessions short and a few with thousands of messages, compression
lineages, delegate children, branches, open, pinned, archived and hidden sessions, content-addressed
prompts and tool pins. Each command runs as its own CLI process; its peak RSS is that process's
``ru_maxrss`` (os.wait4). ``growth`` is time per session at the largest size over time per session
at the smallest (target <= 1.2 for the commands that scan the store; list and stats have absolute
targets instead). Read-only commands that finish in under 3 s run three times, under 1 s five times
(median time, highest RSS); the sweep runs on a fresh copy of the store with auto_prune on and VACUUM
off. Each store is read once before its commands run (a warm page cache for all). The package is
byte-compiled first, as an installed wheel is (a checkout run with
PYTHONDONTWRITEBYTECODE=1 compiles every module on every run: about 0.05 s). ``list_json`` is
``list --json``, which counts every conversation a user would see (the text output does not).

    python bench/scale_bench.py            # 10k, 30k and 100k sessions (about 1M messages at 100k)
    python bench/scale_bench.py --quick    # 1k, 3k and 10k: the edit loop
"""

import argparse
import compileall
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import CACHE, ROOT, messages_in, store_mb, write_result

from maint.demo import V30_SCHEMA
from tests.storegen import V31_ADDITIONS

DAY = 86400.0
FULL = (10_000, 30_000, 100_000)
QUICK = (1_000, 3_000, 10_000)
SOURCES = ("cli",) * 35 + ("telegram",) * 20 + ("cron",) * 25 + ("discord",) * 12 + ("api_server",) * 8
MODELS = ("gpt-5", "claude-sonnet-4.5", "qwen3-coder", "gemini-2.5-pro")
WORDS = ["deploy", "docker", "refactor", "auth", "test", "error", "migration", "cache", "review", "release", "日本語",
         "index", "query", "retry", "timeout", "config", "branch", "merge", "schema", "backup", "the", "a", "of", "to",
         "and", "in", "is", "it", "for", "on", "with", "as", "was", "at", "by", "an", "be", "this", "that", "function",
         "return", "value", "file", "path", "line", "request", "response", "token", "model", "session", "message",
         "tool", "call"]
# Flat-memory commands (RSS target) and their time-growth target; list/stats have absolute targets.
RSS_TARGET_MB, RSS_SPREAD = 100.0, 0.20
FLAT = ("prune_dry_run", "sweep", "archive_dry_run", "export", "repair_prompts")
ABSOLUTE_S = {"list": 0.3, "stats": 0.5}
# hermes-agent 0.19.0's SCHEMA_SQL, DEFERRED_INDEX_SQL and title index, less the ones whose columns or
# tables this layout lacks (handoff_state, platform_message_id, async_delegations); V30_SCHEMA has
# idx_sessions_parent and idx_messages_session already. Timings on a store without them would flatter
# every plan that could use them and hide the cost of keeping them up to date on deletes.
HERMES_INDEXES = """
CREATE INDEX idx_sessions_source ON sessions(source);
CREATE INDEX idx_sessions_source_id ON sessions(source, id);
CREATE INDEX idx_sessions_started ON sessions(started_at DESC);
CREATE INDEX idx_compression_locks_expires ON compression_locks(expires_at);
CREATE INDEX idx_session_model_usage_session ON session_model_usage(session_id);
CREATE INDEX idx_session_model_usage_model ON session_model_usage(model);
CREATE INDEX idx_messages_session_active ON messages(session_id, active, timestamp);
CREATE INDEX idx_messages_active_null ON messages(active) WHERE active IS NULL;
CREATE INDEX idx_sessions_session_key ON sessions(session_key, started_at DESC);
CREATE INDEX idx_sessions_gateway_peer ON sessions(source, user_id, chat_id, chat_type, thread_id, started_at DESC);
CREATE UNIQUE INDEX idx_sessions_title_unique ON sessions(title) WHERE title IS NOT NULL;
"""


def message_count(rng: random.Random) -> int:
    """Most sessions short, a few long, a handful with thousands of messages (about 9.5 on average)."""
    r = rng.random()
    if r < 0.90:
        return rng.randint(1, 8)
    if r < 0.995:
        return rng.randint(10, 60)
    if r < 0.9997:
        return rng.randint(100, 600)
    return rng.randint(2000, 5000)


class Builder:
    def __init__(self, conn: sqlite3.Connection, rng: random.Random, now: float):
        self.conn, self.rng, self.now = conn, rng, now
        self.corpus = " ".join(rng.choice(WORDS) for _ in range(400_000))
        self.prompts = []
        for n in range(24):
            text = f"You are Hermes (prompt {n}). " + self.text(3000) + ("\n## Skill Safety\n" if n % 5 else "")
            digest = f"{n:064x}"
            conn.execute("INSERT INTO system_prompts(hash, prompt) VALUES (?, ?)", (digest, text))
            self.prompts.append(digest)
        pins = json.dumps(["terminal", "read_file", "skill_manage", "memory"])
        conn.execute("INSERT INTO system_prompts(hash, prompt) VALUES (?, ?)", ("f" * 64, pins))
        self.count = 0

    def text(self, n: int) -> str:
        start = self.rng.randrange(0, len(self.corpus) - n - 1)
        return self.corpus[start:start + n]

    def session(self, sid: str, *, last: float, source: str, parent: str | None = None, end_reason: str = "done",
                model_config: dict | None = None, messages: int | None = None, **flags: object) -> float:
        """Returns when it started."""
        rng = self.rng
        n = message_count(rng) if messages is None else messages
        started = last - rng.uniform(60, 600) * max(1, n)
        ended = None if flags.pop("open", False) else last + 30
        config = {"model": rng.choice(MODELS), "temperature": 0.7, **(model_config or {})}
        self.conn.execute(
            "INSERT INTO sessions (id, source, model, model_config, parent_session_id, started_at, ended_at,"
            " end_reason, message_count, last_activity_at, title, cwd, git_repo_root, system_prompt_hash, tool_names,"
            " input_tokens, output_tokens, estimated_cost_usd, archived, pinned, hidden, session_key, user_id)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (sid, source, config["model"], json.dumps(config), parent, started, ended,
             None if ended is None else end_reason, n, last,
             f"{self.text(24).strip()} {sid}" if rng.random() < 0.6 else None,
             f"/home/u/projects/p{rng.randrange(40)}", None, rng.choice(self.prompts), "f" * 64,
             n * 900, n * 300, n * 0.002, int(flags.get("archived", 0)), int(flags.get("pinned", 0)),
             int(flags.get("hidden", 0)), f"agent:main:{source}:dm:{rng.randrange(500)}", str(rng.randrange(500))))
        rows = []
        for i in range(n):
            ts = started + (last - started) * (i + 1) / n
            role = "user" if i % 3 == 0 else "tool" if i % 3 == 2 else "assistant"
            if role == "tool":
                rows.append((sid, role, self.text(rng.randint(200, 1500)), "terminal", None, ts))
            elif role == "assistant":
                calls = json.dumps([{"id": f"c{i}", "function": {"name": "terminal", "arguments": "{}"}}]) \
                    if rng.random() < 0.4 else None
                rows.append((sid, role, self.text(rng.randint(80, 700)), None, calls, ts))
            else:
                rows.append((sid, role, self.text(rng.randint(20, 240)), None, None, ts))
        self.conn.executemany("INSERT INTO messages (session_id, role, content, tool_name, tool_calls, timestamp) "
                              "VALUES (?,?,?,?,?,?)", rows)
        self.count += 1
        return started

    def conversation(self, n: int, last: float) -> None:
        """One user conversation: usually one session, sometimes a lineage, a delegate family or a branch."""
        rng = self.rng
        source = rng.choice(SOURCES)
        flags = {"open": rng.random() < 0.02, "pinned": rng.random() < 0.005, "archived": rng.random() < 0.03,
                 "hidden": rng.random() < 0.002}
        sid = f"{time.strftime('%Y%m%d_%H%M%S', time.gmtime(last))}_{n:06x}"
        roll = rng.random()
        if roll < 0.04:  # compression lineage: 2-5 segments, the last one live
            segments = rng.randint(2, 5)
            parent = None
            for k in range(segments):
                seg_last = last - (segments - 1 - k) * rng.uniform(0.05, 2) * DAY
                self.session(f"{sid}_{k}", last=seg_last, source=source, parent=parent,
                             end_reason="compression" if k < segments - 1 else "done",
                             **(flags if k == segments - 1 else {}))
                parent = f"{sid}_{k}"
        elif roll < 0.10:  # delegate family: a parent and 1-3 subagent runs
            self.session(sid, last=last, source=source, **flags)
            for k in range(rng.randint(1, 3)):
                self.session(f"{sid}_sub{k}", last=last - rng.uniform(0, 0.01) * DAY, source="subagent",
                             parent=sid, model_config={"_delegate_from": sid}, messages=rng.randint(2, 30))
        elif roll < 0.11:  # a branch: a separate conversation from the same parent
            self.session(sid, last=last - DAY, source=source, end_reason="branched")
            self.session(f"{sid}_br", last=last, source=source, parent=sid,
                         model_config={"_branched_from": sid}, **flags)
        else:
            self.session(sid, last=last, source=source, **flags)


def build_store(path: Path, sessions: int, seed: int = 15) -> None:
    tmp = path.with_name(path.name + ".building")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{tmp}{suffix}").unlink(missing_ok=True)
    started = time.time()
    conn = sqlite3.connect(tmp, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(V30_SCHEMA + V31_ADDITIONS + HERMES_INDEXES)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("BEGIN")
    rng = random.Random(seed)
    b = Builder(conn, rng, time.time())
    # Hermes appends as time goes by: rows (and their rowids, and their ids, which start with the
    # time) come in time order, so conversations are written oldest first.
    lasts = sorted(b.now - rng.uniform(0.01, 365) * DAY for _ in range(sessions))
    n = 0
    while b.count < sessions:
        b.conversation(n, lasts[min(n, len(lasts) - 1)])
        n += 1
        if n % 2000 == 0:
            conn.execute("COMMIT")
            conn.execute("BEGIN")
    conn.execute("COMMIT")
    # Hermes merges its FTS segments as it writes; a live store looks like this, not like one bulk load.
    for table in ("messages_fts", "messages_fts_trigram"):
        conn.execute(f"INSERT INTO {table}({table}) VALUES('optimize')")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    counts = conn.execute("SELECT (SELECT COUNT(*) FROM sessions), (SELECT COUNT(*) FROM messages)").fetchone()
    conn.close()
    os.replace(tmp, path)
    print(f"built {path}: {counts[0]} sessions, {counts[1]} messages, {store_mb(path):.0f} MB "
          f"in {time.time() - started:.0f}s", file=sys.stderr)


def store_for(sessions: int) -> Path:
    path = CACHE / f"scale_v3_{sessions}" / "state.db"  # v3: with Hermes's indexes
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        build_store(path, sessions)
    return path


def measure(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one CLI process."""
    with open(os.devnull, "wb") as sink:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "maint", *args], stdout=sink, stderr=subprocess.PIPE,
                                env=env, cwd=ROOT)
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0,):
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}): {err.decode(errors='replace')[-2000:]}")
    return elapsed, usage.ru_maxrss / 1024


def warm(path: Path) -> None:
    """Read the store once, so that no command pays for bringing it from disk (the first one would)."""
    with open(path, "rb") as fh:
        while fh.read(1 << 20):
            pass


def run_size(sessions: int, work: Path) -> dict[str, dict]:
    src = store_for(sessions)
    warm(src)
    home = work / "home"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    (home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 90\n"
                                      "  vacuum_after_prune: false\n  max_export_messages: 0\n")
    env = {**os.environ, "HERMES_HOME": str(home)}
    out = work / "export.jsonl"
    reads = {
        "help": ["--help"],
        "stats": ["stats", "--db", str(src)],
        "list": ["list", "--db", str(src)],
        "list_json": ["list", "--db", str(src), "--json"],
        "prune_dry_run": ["prune", "--db", str(src), "--dry-run", "--json"],
        "archive_dry_run": ["archive", "--db", str(src), "--older-than", "30", "--dry-run", "--json"],
        "export": ["export", str(out), "--db", str(src)],
        "repair_prompts": ["repair-prompts", "--db", str(src), "--json"],
    }
    results = {}
    for name, args in reads.items():
        runs = [measure(args, env)]
        if runs[0][0] < 3.0:
            runs += [measure(args, env) for _ in range(2 if runs[0][0] >= 1.0 else 4)]
        results[name] = {"seconds": statistics.median(r[0] for r in runs), "peak_rss_mb": max(r[1] for r in runs)}
        out.unlink(missing_ok=True)
    copy = work / "copy" / "state.db"
    shutil.rmtree(copy.parent, ignore_errors=True)
    copy.parent.mkdir(parents=True)
    shutil.copy2(src, copy)
    os.sync()
    seconds, rss = measure(["sweep", "--db", str(copy), "--force", "--json"], env)
    results["sweep"] = {"seconds": seconds, "peak_rss_mb": rss}
    shutil.rmtree(copy.parent, ignore_errors=True)
    return results


def verdicts(sizes: tuple[int, ...], table: dict[int, dict[str, dict]]) -> dict[str, dict]:
    small, big = sizes[0], sizes[-1]
    out = {}
    for name in table[small]:
        t_small, t_big = table[small][name]["seconds"], table[big][name]["seconds"]
        growth = (t_big / big) / (t_small / small) if t_small else None
        rss = [table[n][name]["peak_rss_mb"] for n in sizes]
        row = {"growth": round(growth, 2) if growth is not None else None, "rss_spread": round(rss[-1] / rss[0] - 1, 3)}
        if name in FLAT:
            row["ok"] = growth <= 1.2 and rss[-1] <= RSS_TARGET_MB and rss[-1] <= rss[0] * (1 + RSS_SPREAD)
        elif name in ABSOLUTE_S:
            row["ok"] = t_big <= ABSOLUTE_S[name]
        out[name] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1k, 3k and 10k sessions instead of 10k, 30k and 100k")
    args = ap.parse_args()
    sizes = QUICK if args.quick else FULL
    compileall.compile_dir(str(ROOT / "maint"), quiet=1)
    work = CACHE / "run" / "scale"
    table = {}
    for n in sizes:
        table[n] = run_size(n, work)
    shutil.rmtree(work, ignore_errors=True)
    judged = verdicts(sizes, table)
    stores = {n: {"mb": round(store_mb(store_for(n))), "messages": messages_in(store_for(n))} for n in sizes}
    head = "".join(f"{f'{n // 1000}k s':>10}{'MB':>6}" for n in sizes)
    print("\nscale benchmark: " + ", ".join(f"{n} sessions / {stores[n]['messages']} messages / {stores[n]['mb']} MB"
                                            for n in sizes))
    print(f"{'command':<17}{head}{'growth':>8}  target")
    for name in table[sizes[0]]:
        cells = "".join(f"{table[n][name]['seconds']:>10.2f}{table[n][name]['peak_rss_mb']:>6.0f}" for n in sizes)
        v = judged[name]
        target = ("RSS <= 100 MB, +20 % max, growth <= 1.2" if name in FLAT else
                  f"<= {ABSOLUTE_S[name]} s at {sizes[-1] // 1000}k" if name in ABSOLUTE_S else "-")
        mark = "" if "ok" not in v else ("  met" if v["ok"] else "  NOT MET")
        print(f"{name:<17}{cells}{v['growth'] if v['growth'] is not None else '-':>8}  {target}{mark}")
    write_result("scale-quick" if args.quick else "scale",
                 {"sizes": sizes, "stores": stores, "results": {str(n): table[n] for n in sizes}, "verdicts": judged})


if __name__ == "__main__":
    main()
