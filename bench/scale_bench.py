"""Scale benchmark: time and peak RSS of every command at two store sizes, and how they grow.

Stores are built once and reused from bench/.cache/scale_v3_N/ (``--big``: 60k and 420k sessions, as users
report them: 10-17 GB stores; our text is shorter, so 420k sessions are 5.9 GB here). They are written with
plain SQL in the current upstream layout (schema 31: V30 plus ``auto_archived``; FTS5 indexes kept by Hermes's
triggers; the indexes hermes-agent creates, :data:`HERMES_INDEXES`, in place before the first row as in a live
store), not through hermes-agent 0.19.0's ``SessionDB``: it writes schema 22, which has no pins, archive flags
or content-addressed prompts, and opened on a schema-31 store it adds inline-layout UPDATE triggers over the
external-content search indexes (see :func:`hermes_writer`). The shape is realistic: a year of history, most
sessions short and a few with thousands of messages, compression lineages, delegate children, branches, open,
pinned, archived and hidden sessions, content-addressed prompts and tool pins.

Each command runs as its own CLI process; its peak RSS is that process's ``ru_maxrss`` (os.wait4),
which counts file-backed pages too (a memory-mapped store counts, as in a container's memory
limit). ``growth`` is time per session at the larger size over time per session at the smaller
(target <= 1.2 for the commands that scan the store; list, stats and the daily doctor have absolute
targets instead); the RSS rule (<= 100 MB, and within +20 % of the smaller size) holds for every
command. Read-only commands that finish in under 3 s run three times, under 1 s five times (median
time, highest RSS). The sweep and the real prune run on fresh copies of the store, the prune beside
a live Hermes writer (:func:`hermes_writer`: SessionDB's write path, a message every 10 ms in its own
process): its worst append must stay <= 300 ms with no failure. ``backup`` writes a verified
snapshot, ``optimize --into`` a compacted copy, both removed
after. The daily ``doctor`` runs on a copy as the weekly ``doctor --full --record`` leaves it, a week of
messages before the newest (:func:`weekly_checked_copy`). Each store is read once before its commands run
(a warm page cache for all).

    python bench/scale_bench.py            # 10k and 60k sessions
    python bench/scale_bench.py --big      # 60k and 420k (5.9 GB, 4.5M messages; the 420k build took 20 min here)
    python bench/scale_bench.py --big --only doctor,doctor_full   # those rows again, into scale-latest.json
    python bench/scale_bench.py --sizes 60000,200000
    python bench/scale_bench.py --quick    # 1k and 10k: the edit loop
"""

import argparse
import compileall
import contextlib
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

from common import CACHE, RESULTS, ROOT, messages_in, store_mb, write_result

from maint.demo import V30_SCHEMA
from tests.storegen import V31_ADDITIONS

DAY = 86400.0
DEFAULT = (10_000, 60_000)
BIG = (60_000, 420_000)
QUICK = (1_000, 10_000)
SOURCES = ("cli",) * 35 + ("telegram",) * 20 + ("cron",) * 25 + ("discord",) * 12 + ("api_server",) * 8
MODELS = ("gpt-5", "claude-sonnet-4.5", "qwen3-coder", "gemini-2.5-pro")
WORDS = ["deploy", "docker", "refactor", "auth", "test", "error", "migration", "cache", "review", "release", "日本語",
         "index", "query", "retry", "timeout", "config", "branch", "merge", "schema", "backup", "the", "a", "of", "to",
         "and", "in", "is", "it", "for", "on", "with", "as", "was", "at", "by", "an", "be", "this", "that", "function",
         "return", "value", "file", "path", "line", "request", "response", "token", "model", "session", "message",
         "tool", "call"]
# Every command: RSS <= 100 MB and within +20 % of the smaller size. The commands that scan the store:
# time per session grows <= 1.2x; list, stats and the daily doctor have absolute targets at the largest size.
RSS_TARGET_MB, RSS_SPREAD, GROWTH_TARGET = 100.0, 0.20, 1.2
SCANNING = ("prune_dry_run", "prune_live", "sweep", "archive_dry_run", "export", "repair_prompts", "backup",
            "doctor_full", "optimize_into")
ABSOLUTE_S = {"list": 0.3, "stats": 0.5, "doctor": 15.0}
# What each row ran, as an operator types it (STORE: the store under test; the result files and the
# benchmarks page name rows by this).
COMMANDS = {
    "help": "--help",
    "stats": "stats",
    "list": "list",
    "list_json": "list --json",
    "prune_dry_run": "prune --dry-run --json",
    "archive_dry_run": "archive --older-than 30 --dry-run --json",
    "export": "export OUT.jsonl (everything)",
    "repair_prompts": "repair-prompts --json",
    "doctor": "doctor --json (the daily check, a week after a clean --full --record)",
    "doctor_full": "doctor --full --json",
    "backup": "backup DIR --json (snapshot verified)",
    "optimize_into": "optimize --into COPY --json",
    "prune_live": "prune --yes --json beside a live Hermes writer",
    "sweep": "sweep --force --json (prunes about 90 %)",
}
WRITER_WORST_MS = 300.0
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
    """The cached store, built on first use in a process of its own (the benchmark's own memory stays small:
    a child's ``ru_maxrss`` starts from its parent's RSS at the fork)."""
    path = CACHE / f"scale_v3_{sessions}" / "state.db"  # v3: with Hermes's indexes
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, __file__, "--build", str(sessions)], check=True, cwd=ROOT)
    return path


def hermes_writer(db: Path, stop: Path, interval: float) -> None:
    """A live Hermes appending messages, as hermes-agent's SessionDB writes them: Python's sqlite3, a 1 s busy
    timeout, ``BEGIN IMMEDIATE`` with up to 15 tries 20-150 ms apart (``_execute_write``), one message and its
    session's counters per transaction, every 10 ms. Prints the same JSON line as tests/hermes_writer.py.

    hermes-agent 0.19.0's own SessionDB cannot be this writer: it writes schema 22, and opened on this
    schema-31 store it adds its inline-layout UPDATE triggers over the external-content search indexes,
    after which the first message update fails as "database disk image is malformed"."""
    import random

    conn = sqlite3.connect(db, timeout=1.0, isolation_level=None, check_same_thread=False)
    sid = f"writer_{os.getpid()}"
    now = time.time()
    conn.execute("INSERT INTO sessions (id, source, started_at, message_count) VALUES (?, 'cli', ?, 0)", (sid, now))
    ready = Path(str(stop) + ".ready")
    ready.write_text("1")
    appended = failed = 0
    samples = []
    while not stop.exists():
        started = time.monotonic()
        for attempt in range(15):
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    at = time.time()
                    conn.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
                                 (sid, f"live message {appended} about deploy and docker", at))
                    conn.execute("UPDATE sessions SET message_count = message_count + 1, last_activity_at = ? "
                                 "WHERE id = ?", (at, sid))
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                appended += 1
                break
            except sqlite3.OperationalError as exc:
                if ("locked" in str(exc).lower() or "busy" in str(exc).lower()) and attempt < 14:
                    time.sleep(random.uniform(0.020, 0.150))
                    continue
                failed += 1
                print(f"append failed: {exc}", file=sys.stderr)
                break
        samples.append((round(started, 4), round(time.monotonic() - started, 5)))
        time.sleep(interval)
    conn.close()
    print(json.dumps({"appended": appended, "failed": failed, "samples": samples, "optimizing": []}))


def measure(args: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(seconds, peak RSS in MB, file-backed pages included, CPU seconds) of one CLI process. CPU time is the
    figure a shared machine does not stretch: on 2 cores at load 3, a job waits for a core a third of the time."""
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
    return elapsed, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def warm(path: Path) -> None:
    """Read the store once, so that no command pays for bringing it from disk (the first one would)."""
    with open(path, "rb") as fh:
        while fh.read(1 << 20):
            pass


CONFIG = ("sessions:\n  auto_prune: true\n  retention_days: 90\n  vacuum_after_prune: false\n"
          "  max_export_messages: 0\n")


def with_config(folder: Path) -> None:
    """The bench's config.yaml beside a store: a ``--db`` store's folder is its home, whose config it reads
    (never the runner's: docs/configuration.md), so each store's folder carries it."""
    (folder / "config.yaml").write_text(CONFIG)
    os.chmod(folder / "config.yaml", 0o600)


def fresh_copy(src: Path, work: Path, name: str) -> Path:
    folder = work / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    shutil.copy2(src, folder / "state.db")
    (folder / "sessions").mkdir()
    with_config(folder)
    os.sync()  # the copy's write-back must not run during the measured job
    return folder / "state.db"


@contextlib.contextmanager
def live_writer(db: Path, interval: float = 0.01):
    """A live Hermes (:func:`hermes_writer`) appending to *db* in its own process; yields a dict that
    holds its figures once the block ends: appended, failures and the worst append inside the block."""
    stop = db.parent / "writer.stop"
    env = dict(os.environ)
    writer = subprocess.Popen([sys.executable, __file__, "--writer", str(db), str(stop), str(interval)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    while not Path(str(stop) + ".ready").exists():
        if writer.poll() is not None:
            raise SystemExit(f"writer failed: {writer.stderr.read()}")
        time.sleep(0.05)
    time.sleep(1.0)
    figures: dict = {}
    lo = time.monotonic()
    try:
        yield figures
    finally:
        hi = time.monotonic()
        time.sleep(0.5)
        stop.write_text("1")
        out, err = writer.communicate(timeout=300)
    w = json.loads(out.strip().splitlines()[-1])
    inside = [took for at, took in w["samples"] if lo <= at <= hi] or [0.0]
    figures.update(writer_appended=len(inside), writer_failures=w["failed"],
                   writer_worst_ms=round(max(inside) * 1000, 1))


def weekly_checked_copy(src: Path, work: Path) -> Path:
    """The store as the daily doctor finds it: the weekly ``doctor --full --record`` found it clean a week ago,
    and a week of messages (at the year's average rate) came since; its note is written as that job writes it.
    A copy (with reflinks where the file system has them): the cached store is never written."""
    from maint.ops.doctor import FULL_CHECK_KEY

    folder = work / "daily"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with_config(folder)
    copy = folder / "state.db"
    for suffix in ("", "-wal"):
        if Path(f"{src}{suffix}").exists():
            subprocess.run(["cp", "--reflink=auto", f"{src}{suffix}", f"{copy}{suffix}"], check=True)
    conn = sqlite3.connect(copy)
    total, top = conn.execute("SELECT COUNT(*), MAX(id) FROM messages").fetchone()
    at = time.time() - 7 * DAY
    mark = {"message_id": top - round(total * 7 / 365), "at": at}
    conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)",
                 (FULL_CHECK_KEY, json.dumps({"at": at, "result": "ok", "seconds": 0, "text_mark": mark})))
    conn.commit()
    conn.close()
    os.sync()
    warm(copy)
    return copy


def run_size(sessions: int, work: Path, only: frozenset[str] | None = None) -> dict[str, dict]:
    src = store_for(sessions)
    (src.parent / "sessions").mkdir(exist_ok=True)  # every Hermes home has one: prune and sweep look there
    warm(src)
    home = work / "home"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    with_config(home)
    with_config(src.parent)
    env = {**os.environ, "HERMES_HOME": str(home)}
    out = work / "export.jsonl"
    snaps = work / "snapshots"
    compact = work / "compact.db"
    daily = weekly_checked_copy(src, work) if only is None or "doctor" in only else None
    reads = {
        "help": ["--help"],
        "stats": ["stats", "--db", str(src)],
        "list": ["list", "--db", str(src)],
        "list_json": ["list", "--db", str(src), "--json"],
        "prune_dry_run": ["prune", "--db", str(src), "--dry-run", "--json"],
        "archive_dry_run": ["archive", "--db", str(src), "--older-than", "30", "--dry-run", "--json"],
        "export": ["export", str(out), "--db", str(src)],
        "repair_prompts": ["repair-prompts", "--db", str(src), "--json"],
        "doctor": ["doctor", "--db", str(daily), "--json"] if daily else [],
        "doctor_full": ["doctor", "--full", "--db", str(src), "--json"],
        "backup": ["backup", str(snaps), "--db", str(src), "--json"],
        "optimize_into": ["optimize", "--db", str(src), "--into", str(compact), "--json"],
    }
    results = {}
    for name, args in reads.items():
        if only is not None and name not in only:
            continue
        runs = []
        while True:
            shutil.rmtree(snaps, ignore_errors=True)
            snaps.mkdir(mode=0o700, parents=True)
            compact.unlink(missing_ok=True)
            out.unlink(missing_ok=True)
            runs.append(measure(args, env))
            if runs[0][0] >= 3.0 or len(runs) >= (3 if runs[0][0] >= 1.0 else 5):
                break
        results[name] = {"seconds": statistics.median(r[0] for r in runs), "peak_rss_mb": max(r[1] for r in runs),
                         "cpu_s": round(statistics.median(r[2] for r in runs), 3)}
        print(f"{sessions:>8} {COMMANDS[name]:<48}{results[name]['seconds']:>9.2f} s"
              f"{results[name]['peak_rss_mb']:>7.0f} MB  load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    shutil.rmtree(snaps, ignore_errors=True)
    shutil.rmtree(work / "daily", ignore_errors=True)
    compact.unlink(missing_ok=True)
    out.unlink(missing_ok=True)
    if only is not None and "prune_live" not in only and "sweep" not in only:
        return results
    copy = fresh_copy(src, work, "prune")
    with live_writer(copy) as writer:
        seconds, rss, cpu = measure(["prune", "--db", str(copy), "--yes", "--json"], env)
    results["prune_live"] = {"seconds": seconds, "peak_rss_mb": rss, "cpu_s": round(cpu, 3), **writer}
    print(f"{sessions:>8} {COMMANDS['prune_live']:<48}{seconds:>9.2f} s{rss:>7.0f} MB  writer {writer}",
          file=sys.stderr, flush=True)
    shutil.rmtree(copy.parent, ignore_errors=True)
    copy = fresh_copy(src, work, "sweep")
    seconds, rss, cpu = measure(["sweep", "--db", str(copy), "--force", "--json"], env)
    results["sweep"] = {"seconds": seconds, "peak_rss_mb": rss, "cpu_s": round(cpu, 3)}
    print(f"{sessions:>8} {COMMANDS['sweep']:<48}{seconds:>9.2f} s{rss:>7.0f} MB", file=sys.stderr, flush=True)
    shutil.rmtree(copy.parent, ignore_errors=True)
    return results


def verdicts(sizes: tuple[int, ...], table: dict[int, dict[str, dict]]) -> dict[str, dict]:
    small, big = sizes[0], sizes[-1]
    out = {}
    for name in table[small]:
        t_small, t_big = table[small][name]["seconds"], table[big][name]["seconds"]
        growth = (t_big / big) / (t_small / small) if t_small else None
        rss = [table[n][name]["peak_rss_mb"] for n in sizes]
        rss_ok = rss[-1] <= RSS_TARGET_MB and rss[-1] <= rss[0] * (1 + RSS_SPREAD)
        row = {"growth": round(growth, 2) if growth is not None else None, "rss_spread": round(rss[-1] / rss[0] - 1, 3),
               "rss_ok": rss_ok}
        cpu = [table[n][name].get("cpu_s") for n in (small, big)]
        if all(cpu):  # the same ratio in CPU time (rows measured since it was recorded)
            row["cpu_growth"] = round((cpu[1] / big) / (cpu[0] / small), 2)
        if name in SCANNING:
            row["ok"] = rss_ok and growth is not None and growth <= GROWTH_TARGET
        elif name in ABSOLUTE_S:
            row["ok"] = rss_ok and t_big <= ABSOLUTE_S[name]
        elif name != "help":
            row["ok"] = rss_ok
        if name == "prune_live":
            worst = max(table[n][name]["writer_worst_ms"] for n in sizes)
            failures = sum(table[n][name]["writer_failures"] for n in sizes)
            row.update(writer_worst_ms=worst, writer_failures=failures)
            row["ok"] = row["ok"] and worst <= WRITER_WORST_MS and failures == 0
        out[name] = row
    return out


TARGETS = {"prune_live": f"as scanning, and the writer's worst append <= {WRITER_WORST_MS:.0f} ms, 0 failures"}


def main() -> None:
    ap = argparse.ArgumentParser()
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="1k and 10k sessions instead of 10k and 60k")
    group.add_argument("--big", action="store_true", help="60k and 420k sessions (about 9 GB): the sizes users have")
    group.add_argument("--sizes", help="two or more comma-separated session counts, smallest first")
    ap.add_argument("--only", help="comma-separated rows (result names) to measure again at the sizes of "
                                   "bench/results/scale-latest.json, replacing theirs there")
    ap.add_argument("--build", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--writer", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build:
        path = CACHE / f"scale_v3_{args.build}" / "state.db"
        build_store(path, args.build)
        return
    if args.writer:
        hermes_writer(Path(args.writer[0]), Path(args.writer[1]), float(args.writer[2]))
        return
    if args.sizes:
        sizes = tuple(int(n) for n in args.sizes.split(","))
        if len(sizes) < 2 or list(sizes) != sorted(sizes):
            ap.error(f"--sizes {args.sizes!r}: expected two or more session counts, smallest first")
    else:
        sizes = QUICK if args.quick else BIG if args.big else DEFAULT
    compileall.compile_dir(str(ROOT / "maint"), quiet=1)
    work = CACHE / "run" / "scale"
    table, load = {}, {}
    only = frozenset(args.only.split(",")) if args.only else None
    previous = None
    if only is not None:
        previous = json.loads((RESULTS / "scale-latest.json").read_text())
        sizes = tuple(previous["sizes"])
        if not only <= set(COMMANDS):
            ap.error(f"--only {args.only!r}: expected names among {', '.join(COMMANDS)}")
    for n in sizes:
        before = os.getloadavg()
        table[n] = run_size(n, work, only)
        if previous is not None:  # the other rows as the full run measured them
            table[n] = {name: table[n].get(name, row) for name, row in previous["results"][str(n)].items()}
        # 1-minute load average before and after this size's commands (the machine is shared)
        load[n] = [round(before[0], 2), round(os.getloadavg()[0], 2)]
        if previous is not None:
            load[n] = previous["load"][str(n)]
    shutil.rmtree(work, ignore_errors=True)
    judged = verdicts(sizes, table)
    stores = {n: {"mb": round(store_mb(store_for(n))), "messages": messages_in(store_for(n))} for n in sizes}
    head = "".join(f"{f'{n // 1000}k s':>10}{'MB':>6}" for n in sizes)
    print("\nscale benchmark: " + ", ".join(f"{n} sessions / {stores[n]['messages']} messages / {stores[n]['mb']} MB"
                                            for n in sizes))
    print(f"{'command':<48}{head}{'growth':>8}  target")
    for name in table[sizes[0]]:
        cells = "".join(f"{table[n][name]['seconds']:>10.2f}{table[n][name]['peak_rss_mb']:>6.0f}" for n in sizes)
        v = judged[name]
        rss_rule = f"RSS <= {RSS_TARGET_MB:.0f} MB, +{RSS_SPREAD:.0%} max"
        target = TARGETS.get(name) or (f"{rss_rule}, growth <= {GROWTH_TARGET}" if name in SCANNING else
                                       f"{rss_rule}, <= {ABSOLUTE_S[name]} s at {sizes[-1] // 1000}k"
                                       if name in ABSOLUTE_S else rss_rule if name != "help" else "-")
        mark = "" if "ok" not in v else ("  met" if v["ok"] else "  NOT MET")
        print(f"{COMMANDS[name]:<48}{cells}{v['growth'] if v['growth'] is not None else '-':>8}  {target}{mark}")
    extra = {}
    if previous is not None:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        # the real prune and the sweep run together (each on its own fresh copy): either asked measures both
        measured = set(only) | ({"prune_live", "sweep"} if {"prune_live", "sweep"} & set(only) else set())
        extra["remeasured"] = {**previous.get("remeasured", {}),
                               **{name: {"when": when, "load": round(os.getloadavg()[0], 2)}
                                  for name in sorted(measured)}}
        extra["invocation"] = previous.get("invocation")
        extra["when_full_run"] = previous.get("when_full_run", previous["when"])
    write_result("scale-quick" if args.quick else "scale",
                 {"sizes": sizes, "invocation": " ".join(["bench/scale_bench.py", *sys.argv[1:]]),
                  "stores": stores, "load": {str(n): load[n] for n in sizes},
                  "cpus": os.cpu_count(), "commands": COMMANDS,
                  "results": {str(n): table[n] for n in sizes}, "verdicts": judged, **extra})


if __name__ == "__main__":
    main()
