"""What the benchmarks share: the cached generated store, fresh copies, result files."""

import argparse
import json
import os
import platform
import shutil
import sys
import time
from datetime import datetime, UTC
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.storegen import bulk_store  # noqa: E402 - needs the sys.path entry above

CACHE = ROOT / "bench" / ".cache"
RESULTS = ROOT / "bench" / "results"


def base_store(sessions: int, per: int, nbytes: int) -> Path:
    path = CACHE / f"store_v2_{sessions}x{per}x{nbytes}" / "state.db"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        started = time.time()
        bulk_store(path, sessions=sessions, messages_per_session=per, content_bytes=nbytes, old_share=0.6,
                   now=time.time())
        print(f"generated {path} in {time.time() - started:.0f}s", file=sys.stderr)
    return path


def copy_store(src: Path, dst_dir: Path) -> Path:
    if dst_dir.exists():
        shutil.rmtree(dst_dir)
    dst_dir.mkdir(parents=True)
    for suffix in ("", "-wal"):
        s = Path(str(src) + suffix)
        if s.exists():
            shutil.copy2(s, dst_dir / (s.name))
    os.sync()  # the copy's write-back must not run during the measured job
    return dst_dir / src.name



def messages_in(db: Path) -> int:
    """How many messages the store holds (read-only: the cached stores stay as built)."""
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    finally:
        conn.close()


def store_mb(path: Path) -> float:
    return sum(Path(str(path) + s).stat().st_size for s in ("", "-wal") if Path(str(path) + s).exists()) / 2**20


def write_result(name: str, payload: dict) -> Path:
    """bench/results/NAME-latest.json only: earlier figures live in git history, not in more files."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ")
    payload = {"benchmark": name, "when": stamp,
               "machine": f"{platform.node()} {platform.machine()} Python {platform.python_version()}", **payload}
    latest = RESULTS / f"{name}-latest.json"
    latest.write_text(json.dumps(payload, indent=2))
    return latest


def store_args() -> argparse.ArgumentParser:
    """The options every benchmark takes: the size of the generated store."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--messages-per-session", type=int, default=20)
    return ap
