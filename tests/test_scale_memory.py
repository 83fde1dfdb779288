"""Memory flat in the size of the store, by structure: every SQLite connection that doctor, backup and
list open caps its page cache and maps nothing; doctor holds no row per session of a store whose
gateway rows are all routed."""

import re
import time
from collections import namedtuple
from pathlib import Path

import apsw
import pytest

from maint.config import load_config
from maint.ops import routing
from maint.ops.backup import prepare_folder, take_snapshot
from maint.ops.doctor import run_doctor
from maint.ops.listing import ListRequest, list_store
from maint.store.connection import READ_CACHE_KB, TEMP_CACHE_KB, WRITE_CACHE_KB, open_store
from maint.store.holders import HolderReport
from maint.store.targets import StoreTarget
from tests.storegen import StoreBuilder

CACHE_CAP_KB = max(READ_CACHE_KB, WRITE_CACHE_KB)
Usage = namedtuple("Usage", "total used free")
PLENTY = lambda p: Usage(10**12, 10**11, 9 * 10**11)  # noqa: E731


class Connections:
    """Every apsw connection opened while active, with the statements each one ran."""

    def __init__(self):
        self.statements: list[list[str]] = []

    def hook(self, conn: apsw.Connection) -> None:
        ran: list[str] = []
        self.statements.append(ran)

        def trace(_cursor, sql, _bindings):
            ran.append(" ".join(sql.split()))
            return True

        conn.exec_trace = trace

    def __enter__(self):
        apsw.connection_hooks.append(self.hook)
        return self

    def __exit__(self, *exc):
        apsw.connection_hooks.remove(self.hook)

    def assert_flat(self) -> None:
        assert self.statements, "no connection was opened"
        for ran in self.statements:
            pragmas = [s for s in ran if s.upper().startswith("PRAGMA")]
            maps = [s for s in pragmas if re.match(r"PRAGMA (main\.)?mmap_size\s*=", s, re.I)]
            assert maps and all(re.search(r"=\s*0$", s) for s in maps), (maps, ran[:8])
            # mmap_size=0 comes before the first read of the file
            first_read = next((i for i, s in enumerate(ran) if not s.upper().startswith("PRAGMA")), len(ran))
            assert ran.index(maps[0]) < first_read, ran[:8]
            for s in pragmas:
                m = re.match(r"PRAGMA (?:main\.|temp\.)?cache_size\s*=\s*(-?\d+)", s, re.I)
                if m:
                    value = int(m.group(1))
                    assert value < 0 and -value <= CACHE_CAP_KB, s  # KiB, never a page count, never above the cap
            temp = [s for s in pragmas if s.lower().startswith("pragma temp.cache_size")]
            assert temp and all(int(s.split("=")[1]) >= -TEMP_CACHE_KB for s in temp), ran[:8]


def _store(path: Path, n: int = 12) -> Path:
    with StoreBuilder(path, layout="v30") as b:
        for i in range(n):
            b.session(f"s{i:03d}", age=1 + i, messages=3, pinned=int(i % 3 == 0))
    return path


def test_backup_connections_map_nothing_and_cap_their_cache(tmp_path, hermes_home):
    """The snapshot's verification once ran with a 1 GiB memory map and a 256 MiB cache (1.3 GB RSS at 9 GB)."""
    db = _store(hermes_home / "state.db")
    with Connections() as seen:
        snap = take_snapshot(db, prepare_folder(tmp_path / "snaps", store=db), label="default")
    assert snap.path.exists()
    seen.assert_flat()
    assert len(seen.statements) >= 3  # the store, the new file being written, its verification


def test_doctor_connections_map_nothing_and_cap_their_cache(hermes_home):
    db = _store(hermes_home / "state.db")
    for full in (False, True):
        with Connections() as seen:
            report = run_doctor(db, load_config(), full=full, disk_usage=PLENTY,
                                holders=lambda p: HolderReport([], []))
        assert report["worst"] != "critical", report
        seen.assert_flat()


def test_list_connection_maps_nothing_and_caps_its_cache(hermes_home):
    db = _store(hermes_home / "state.db")
    with Connections() as seen:
        list_store(StoreTarget(db, None), ListRequest(limit=5))
    seen.assert_flat()


def test_doctor_loads_no_session_records_when_no_gateway_row_lost_its_routing(hermes_home, monkeypatch):
    """repair-routing's search compares sessions pairwise and holds one record per session (1.2 GB at 420k
    sessions); doctor runs it daily. A store without a single unrouted gateway row with messages, the usual
    case, is answered by one SQL query and loads none."""
    db = hermes_home / "state.db"
    with StoreBuilder(db, layout="v30") as b:
        for i in range(20):
            b.session(f"tg{i}", source="telegram", age=1 + i, messages=2, session_key=f"agent:main:telegram:dm:{i}")
        for i in range(5):
            b.session(f"cli{i}", source="cli", age=1 + i, messages=2)  # a source no routed row uses
        b.session("tg_empty", source="telegram", age=3, messages=0)  # unrouted but without messages: nothing to adopt
    loaded = []

    def counting(store, now=None):
        loaded.append(1)
        return {}

    monkeypatch.setattr(routing, "load_sessions", counting)
    with open_store(db, readonly=True) as store:
        assert routing.find_orphans(store, now=time.time()) == []
    assert loaded == []


def test_find_orphans_still_finds_one_after_the_prefilter(hermes_home):
    db = hermes_home / "state.db"
    now = time.time()
    with StoreBuilder(db, layout="v30") as b:
        b.session("tg_donor", source="telegram", age=1.01, messages=2, session_key="agent:main:telegram:dm:7")
        b.session("tg_orphan", source="telegram", age=1.0, messages=2)
    with open_store(db, readonly=True) as store:
        found = routing.find_orphans(store, now=now, max_gap_s=10 * 86400)
    assert [r["orphan_id"] for r in found] == ["tg_orphan"]


@pytest.mark.parametrize("full", [False, True])
def test_doctor_report_rows_are_bounded_by_the_caps(hermes_home, full):
    """Lists in doctor's report are capped (50 ids) whatever the store holds."""
    db = hermes_home / "state.db"
    with StoreBuilder(db, layout="v30") as b:
        for i in range(120):
            b.session(f"cron{i:03d}", source="cron", age=200 + i, ended=False, messages=1)
    report = run_doctor(db, load_config(), full=full, disk_usage=PLENTY, holders=lambda p: HolderReport([], []))
    orphans = [f for f in report["findings"] if f["kind"] == "orphans"][0]
    assert orphans["severity"] == "warning" and len(orphans["data"]["ids"]) == 50


def test_an_id_list_holds_a_bounded_buffer_and_spills_the_rest(monkeypatch):
    """A report that names every session of a 10 GB store (400,000 ids) keeps SPILL_BYTES of them in memory
    and four bytes of offset per id; the rest is read back from its temp file, in order and by index."""
    from maint.store import sqlutil
    from maint.store.sqlutil import IdList

    monkeypatch.setattr(sqlutil, "SPILL_BYTES", 4096)
    monkeypatch.setattr(sqlutil, "READ_BYTES", 1000)
    ids = [f"20260{n:07d}_{'日本' if n % 11 == 0 else 'ab'}{n * 7919 % 100003:x}" for n in range(20_000)]
    packed = IdList(ids)
    assert len(packed._buf) < 4096 + 64  # before: every id in the buffer (about 390 KB here)
    assert packed._spilled > 380_000 and len(packed._ends) == len(ids)
    assert list(packed) == ids and packed == ids
    assert [packed[i] for i in (0, 1, 4095, 12_345, -1)] == [ids[i] for i in (0, 1, 4095, 12_345, -1)]
    assert packed[100:103] == ids[100:103]


def test_the_kept_sweep_report_cuts_its_id_lists(hermes_home, monkeypatch):
    """SQLite holds a value whole while it writes it: the report kept in state_meta names at most KEPT_IDS ids
    per list (the printed one names them all), the full count under ``truncated``."""
    import json
    import sqlite3

    from maint.ops import sweep

    monkeypatch.setattr(sweep, "KEPT_IDS", 100)
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    with StoreBuilder(hermes_home / "state.db") as b:
        for n in range(300):
            b.session(f"old_{n:04d}", age=200, messages=1)
    report = sweep.run_sweep(hermes_home / "state.db", load_config(), force=True, holders=lambda p: HolderReport(),
                             disk_usage=PLENTY)
    assert len(report["pruned_ids"]) == 300
    conn = sqlite3.connect(hermes_home / "state.db")
    try:
        kept = json.loads(conn.execute("SELECT value FROM state_meta "
                                       "WHERE key = 'hermes_maint.last_sweep_report'").fetchone()[0])
    finally:
        conn.close()
    assert kept["pruned_ids"] == list(report["pruned_ids"])[:100]
    assert kept["truncated"] == {"pruned_ids": 300}
    assert kept["pruned_messages"] == report["pruned_messages"] == 300


def test_session_files_of_many_ids_holds_the_files_found_not_the_ids(tmp_path):
    """prune --dry-run names the files Hermes keeps for every planned session: with a sessions folder beside
    the store (every Hermes home has one), eight candidate names per id went into a set first (24 MB per
    55,000 ids; 200 MB for a 10 GB store's 400,000). Now each id's names are looked up one by one."""
    import tracemalloc

    from maint.store.delete import session_files

    (tmp_path / "sessions").mkdir()
    for name in ("s000007.json", "s000007.jsonl", "session_s049999.json",
                 "request_dump_s012345_20260101_101010_123456.json", "request_dump_other_20260101_101010_1.json",
                 "unrelated.txt"):
        (tmp_path / "sessions" / name).write_text("{}")
    (tmp_path / "sessions" / "s000008.json").mkdir()  # a folder is never a session's file
    ids = (f"s{n:06d}" for n in range(50_000))
    tracemalloc.start()
    try:
        found = session_files(tmp_path / "state.db", ids)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found == ["request_dump_s012345_20260101_101010_123456.json", "s000007.json", "s000007.jsonl",
                     "session_s049999.json"]
    assert peak < 1_000_000  # before: about 20 MB


def test_session_files_skips_ids_no_file_can_be_named_after(tmp_path):
    from maint.store.delete import session_files

    (tmp_path / "sessions").mkdir()
    (tmp_path / "sessions" / "ok.json").write_text("{}")
    assert session_files(tmp_path / "state.db", ["nul\x00id", "x" * 300, "surrogate\udcff", "a/b", "..", "ok"]) \
        == ["ok.json"]
