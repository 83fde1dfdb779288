"""Run history: every job's report, kept in the store it ran on.

Each run is one ``state_meta`` row keyed ``hermes_maint.history.<kind>.<seq>`` (a
zero-padded sequence, so key order is run order and a kind's rows are one index
range). Appending inserts that row and drops the kind's oldest beyond :data:`KEEP`
in the same short ``BEGIN IMMEDIATE`` transaction, so the history never grows
past 100 runs per kind and a write costs one row, not a rewrite of the whole list.
Long id lists are cut to :data:`LIST_CAP` items (the full count is kept under
``truncated``): a prune of 50,000 sessions must not put megabytes into state_meta.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from maint import json_text
from maint.store.connection import Store, open_store

if TYPE_CHECKING:
    from maint.store.targets import StoreTarget

log = logging.getLogger("hermes_maint.history")

PREFIX = "hermes_maint.history."
KEEP = 100
LIST_CAP = 50
SEQ_DIGITS = 12
MAX_ROW_BYTES = 1 << 20  # a run's report is a few kB (its lists cut to LIST_CAP); a row past this is not ours
KINDS = ("sweep", "prune", "archive", "optimize", "backup", "restore", "import", "repair-prompts",
         "repair-profiles", "repair-routing", "repair-fts", "recover")

# Which report field counts as "rows affected" for each kind (a list counts its length; dotted = nested).
ROWS_FIELD: dict[str, tuple[str, ...]] = {
    "sweep": ("reaped_ids", "pruned_ids"),
    "prune": ("deleted",),
    "archive": ("session_ids",),
    "repair-prompts": ("cleared",),
    "repair-routing": ("adopted",),
    "repair-fts": ("rebuilt",),
    "recover": ("recovered_messages",),
    "backup": ("snapshot.sessions",),
    "import": ("imported",),
}


@dataclass
class Entry:
    kind: str
    seq: int
    at: float
    seconds: float | None
    rows: int
    report: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "seq": self.seq, "at": self.at, "seconds": self.seconds, "rows": self.rows,
                "report": self.report}


def rows_affected(kind: str, report: dict[str, Any]) -> int:
    """The number a monitor graphs for one run: deleted, archived, reaped+pruned, cleared ..."""
    total = 0
    for key in ROWS_FIELD.get(kind, ()):
        value: Any = report
        for part in key.split("."):  # a dotted key reaches into a nested report ("snapshot.sessions")
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            total += value
        elif _is_list(value):
            total += (report.get("truncated") or {}).get(key, len(value))
    return total


def _is_list(value: Any) -> bool:
    """A list, or a sequence standing for one (an IdList of a big store's sessions)."""
    return isinstance(value, list) or isinstance(value, Sequence) and not isinstance(value, (str, bytes, tuple))


def compact(report: dict[str, Any], cap: int = LIST_CAP) -> dict[str, Any]:
    """A copy whose lists are cut to *cap* items, the cut ones counted under ``truncated``."""
    out: dict[str, Any] = {}
    cut: dict[str, int] = dict(report.get("truncated") or {})
    for key, value in report.items():
        if key == "truncated":
            continue
        if _is_list(value) and len(value) > cap:
            cut[key] = len(value)
            value = value[:cap]
        elif _is_list(value) and not isinstance(value, list):
            value = list(value)
        out[key] = value
    if cut:
        out["truncated"] = cut
    return out


def _key(kind: str, seq: int) -> str:
    return f"{PREFIX}{kind}.{seq:0{SEQ_DIGITS}d}"


def _range(kind: str) -> tuple[str, str]:
    """Half-open key range holding exactly one kind's rows ('/' sorts right after '.')."""
    return f"{PREFIX}{kind}.", f"{PREFIX}{kind}/"


def append(store: Store, kind: str, report: dict[str, Any], *, seconds: float | None = None,
           now: float | None = None) -> Entry:
    """Add one run to the store's history and drop the kind's runs beyond KEEP, in one transaction."""
    if kind not in KINDS:
        raise ValueError(f"unknown history kind {kind!r}")
    now = time.time() if now is None else now
    body = compact(report)
    rows = rows_affected(kind, report)
    low, high = _range(kind)
    with store.write() as conn:
        last = conn.execute("SELECT MAX(key) FROM state_meta WHERE key >= ? AND key < ?", (low, high)).fetchone()[0]
        try:
            seq = int(last.rsplit(".", 1)[1]) + 1 if last else 1
        except ValueError:
            seq = 1
        value = json.dumps({"at": now, "seconds": seconds, "rows": rows, "report": body}, default=str,
                           ensure_ascii=False)
        conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)", (_key(kind, seq), value))
        conn.execute("DELETE FROM state_meta WHERE key >= ? AND key < ?", (low, _key(kind, max(1, seq - KEEP + 1))))
    return Entry(kind, seq, now, seconds, rows, body)


def _finite(value: Any) -> float:
    """A stored number as a finite float; ValueError for anything else (text, a bool, 1e400 read as inf, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"not a number: {value!r}")
    number = float(value)  # OverflowError for an int past a float's range
    if not math.isfinite(number):
        raise ValueError(f"not a finite number: {value!r}")
    return number


def _parse(key: str, value: str | None) -> Entry | None:
    """One stored run, or None for a damaged row (not JSON, a field of the wrong type, a time or count that
    is not a finite number): a damaged row is skipped, never fatal."""
    rest = key[len(PREFIX):]
    kind, _, seq = rest.rpartition(".")
    try:
        data = json_text.loads(value or "")
        seconds, rows, report = data.get("seconds"), data.get("rows") or 0, data.get("report") or {}
        if not isinstance(report, dict) or isinstance(rows, float) and not rows.is_integer():
            return None
        return Entry(kind, int(seq), _finite(data["at"]), None if seconds is None else _finite(seconds),
                     int(_finite(rows)), report)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
        return None


def _newest_first(store: Store, kind: str, skipped: list[dict[str, Any]] | None = None) -> Iterator[Entry]:
    """One kind's runs, newest first, read a row at a time (its key carries the sequence, so the key index
    gives the order): a caller that stops after n reads about n rows, not the whole history (hostile try 12,
    P16: 300,000 rows were parsed to show one). A row over :data:`MAX_ROW_BYTES` is named and skipped
    unread; a damaged row is skipped."""
    low, high = _range(kind)
    cursor = store.conn.cursor()
    try:
        for key, size, value in cursor.execute(
                "SELECT key, octet_length(value), CASE WHEN octet_length(value) <= ? THEN value END "
                "FROM state_meta WHERE key >= ? AND key < ? ORDER BY key DESC", (MAX_ROW_BYTES, low, high)):
            if size is not None and size > MAX_ROW_BYTES:
                log.warning("history row %r: %d bytes, more than a run's report holds (%d): skipped, not read",
                            key, size, MAX_ROW_BYTES)
                if skipped is not None:
                    skipped.append({"key": key, "bytes": size})
                continue
            entry = _parse(key, value)
            if entry is not None:
                yield entry
    finally:
        cursor.close()


def entries(store: Store, kind: str | None = None, limit: int | None = None,
            skipped: list[dict[str, Any]] | None = None) -> list[Entry]:
    """Runs newest first, of one kind or all of them (the kinds we record), reading about *limit* rows a kind.
    Rows skipped for their size are added to *skipped*."""
    found: list[Entry] = []
    for one in (KINDS if kind is None else (kind,)):
        found.extend(itertools.islice(_newest_first(store, one, skipped), limit))
    found.sort(key=lambda e: (e.at, e.seq), reverse=True)
    return found[:limit] if limit is not None else found


def latest(store: Store, kind: str, accept: Callable[[Entry], bool] = lambda e: True) -> Entry | None:
    return next((entry for entry in _newest_first(store, kind) if accept(entry)), None)


def latest_by_kind(store: Store, kinds: Iterable[str] = KINDS) -> dict[str, Entry]:
    out = {}
    for kind in kinds:
        entry = latest(store, kind)
        if entry is not None:
            out[kind] = entry
    return out


def record(path: Any, kind: str, report: dict[str, Any], *, seconds: float | None = None) -> Entry:
    """Append a finished run to its store's history and log it (the job loop's log carries every report)."""
    with open_store(path) as store:
        entry = append(store, kind, report, seconds=seconds)
    log.info("job report %s %s: %s", kind, path, json.dumps(entry.as_dict(), default=str, ensure_ascii=False))
    return entry


def history_report(target: StoreTarget, kind: str | None = None, limit: int = 20) -> dict[str, Any]:
    """``hermes-maint history`` on one store, read-only: its last *limit* runs (of *kind*), newest first."""
    with open_store(target.path, readonly=True) as store:
        skipped: list[dict[str, Any]] = []
        runs = entries(store, kind, limit, skipped)
    return {"store": str(target.path), "kind": kind, "runs": [e.as_dict() for e in runs], "skipped": skipped}
