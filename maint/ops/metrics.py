"""Prometheus text exposition for node_exporter's textfile collector.

One file holds every store's figures, each sample labelled with ``profile`` and
``store``. A run refreshes only the stores it touched: the other stores' lines
are read back from the file and kept, and a job keeps the last ``doctor``'s
findings (doctor never writes the store, so the file is where they live).

Written atomically through :mod:`maint.files`, under a (bounded) flock on our
lock file beside it, ``.NAME.lock`` (:func:`lock_name`), so two runs never
interleave their read-merge-write. The lock is taken as every lock another user
may take is (:func:`maint.store.locks.lock_file`, the auto-maintenance lock's
rule): created 0600, never through a link, owned as the metrics file is; a
holder that is not that owner, root or us is named (``/proc/locks``) and fails
the run (:class:`MetricsSuppressed`, exit 1), since the folder must stay
readable for node_exporter and a lock on it (as before) was anyone's to take.
The mode is 0644,
not our usual 0600: node_exporter runs as its own user and must read the file;
it holds only counts, sizes, timestamps and store paths. The temporary name
does not end in ``.prom``, so the collector never reads a half-written file.
"""

from __future__ import annotations

import math
import os
import re
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from maint import files
from maint.errors import MaintError, UsageError
from maint.ops import history
from maint.ops.stats import store_stats
from maint.store.connection import Store
from maint.store.holders import LockHolder
from maint.store.locks import LockHeld, lock_file

FILE_MODE = 0o644
LOCK_WAIT_S = 5.0

# name -> (type, help). Order here is the order in the file.
FAMILIES: dict[str, tuple[str, str]] = {
    "hermes_maint_store_bytes": ("gauge", "Size of state.db itself in bytes (without -wal)."),
    "hermes_maint_wal_bytes": ("gauge", "Size of state.db-wal in bytes."),
    "hermes_maint_free_page_ratio": ("gauge", "Share of state.db pages on the freelist (what a VACUUM returns)."),
    "hermes_maint_sessions": ("gauge", "Session rows in the store."),
    "hermes_maint_messages": ("gauge", "Message rows in the store."),
    "hermes_maint_last_sweep_timestamp_seconds": (
        "gauge", "When a sweep last ran on the store, by any Hermes process or hermes-maint (last_auto_prune)."),
    "hermes_maint_last_vacuum_timestamp_seconds": ("gauge", "When the last successful VACUUM finished (last_vacuum)."),
    "hermes_maint_last_backup_timestamp_seconds": ("gauge", "When hermes-maint last finished a backup of the store."),
    "hermes_maint_last_job_timestamp_seconds": ("gauge", "When the last run of each hermes-maint job finished."),
    "hermes_maint_last_job_duration_seconds": ("gauge", "How long the last run of each hermes-maint job took."),
    "hermes_maint_last_job_rows_affected": ("gauge", "Rows the last run of each job deleted, archived, reaped or "
                                                     "repaired."),
    "hermes_maint_last_job_stopped": ("gauge", "1 when the last run of each job was stopped early (the job "
                                               "loop's SIGTERM/SIGINT) and left work undone, else 0."),
    "hermes_maint_doctor_findings": ("gauge", "Findings of the last hermes-maint doctor run, by severity."),
    "hermes_maint_doctor_last_run_timestamp_seconds": ("gauge", "When hermes-maint doctor last checked the store."),
    "hermes_maint_metrics_updated_timestamp_seconds": ("gauge", "When these figures were last refreshed."),
}
DOCTOR_FAMILIES = frozenset({"hermes_maint_doctor_findings", "hermes_maint_doctor_last_run_timestamp_seconds"})
SEVERITIES = ("ok", "warning", "critical")

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    @property
    def store(self) -> str | None:
        return dict(self.labels).get("store")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _unescape(value: str) -> str:
    return re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m.group(0)], value)


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if float(value).is_integer() and abs(value) < 2**53 else repr(float(value))


def render(samples: Iterable[Sample]) -> str:
    by_family: dict[str, list[Sample]] = {}
    for s in samples:
        by_family.setdefault(s.name, []).append(s)
    lines = []
    for name, (kind, help_) in FAMILIES.items():
        rows = sorted(by_family.get(name, []), key=lambda s: s.labels)
        if not rows:
            continue
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {kind}")
        for s in rows:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels)
            lines.append(f"{name}{{{labels}}} {_number(s.value)}")
    return "\n".join(lines) + "\n" if lines else ""


def parse(text: str) -> list[Sample]:
    """Our own samples back from a file we wrote; anything else in it is dropped."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or m.group(1) not in FAMILIES:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = tuple((k, _unescape(v)) for k, v in _LABEL.findall(m.group(2)))
        out.append(Sample(m.group(1), labels, value))
    return out


def collect(store: Store, profile: str, *, doctor: dict[str, Any] | None = None,
            now: float | None = None) -> list[Sample]:
    """Every figure for one store, read through a read-only connection."""
    now = time.time() if now is None else now
    base = (("profile", profile), ("store", str(store.path)))

    def sample(name: str, value: float, **extra: str) -> Sample:
        return Sample(name, tuple(sorted(base + tuple(extra.items()))), float(value))

    st = store_stats(store)
    out = [sample("hermes_maint_store_bytes", st["db_bytes"]), sample("hermes_maint_wal_bytes", st["wal_bytes"]),
           sample("hermes_maint_free_page_ratio", st["free_page_share"]),
           sample("hermes_maint_sessions", st["sessions"]), sample("hermes_maint_messages", st["messages"]),
           sample("hermes_maint_metrics_updated_timestamp_seconds", now)]
    for name, key in (("hermes_maint_last_sweep_timestamp_seconds", "last_auto_prune"),
                      ("hermes_maint_last_vacuum_timestamp_seconds", "last_vacuum")):
        when = store.meta_time(key)
        if when is not None:
            out.append(sample(name, when))
    backup = history.latest(store, "backup")
    if backup is not None:
        out.append(sample("hermes_maint_last_backup_timestamp_seconds", backup.at))
    for kind, entry in history.latest_by_kind(store).items():
        out.append(sample("hermes_maint_last_job_timestamp_seconds", entry.at, kind=kind))
        if entry.seconds is not None:
            out.append(sample("hermes_maint_last_job_duration_seconds", entry.seconds, kind=kind))
        out.append(sample("hermes_maint_last_job_rows_affected", entry.rows, kind=kind))
        stopped = entry.report.get("status") == "stopped" or entry.report.get("cancelled") is True
        out.append(sample("hermes_maint_last_job_stopped", int(stopped), kind=kind))
    if doctor is not None:
        for severity in SEVERITIES:
            out.append(sample("hermes_maint_doctor_findings", doctor["counts"].get(severity, 0), severity=severity))
        out.append(sample("hermes_maint_doctor_last_run_timestamp_seconds", doctor.get("checked_at") or now))
    return out


def check_path(path: Path) -> Path:
    """--metrics-file (or hermes_maint.metrics_file): a *.prom file in an existing folder, never a special file."""
    path = Path(path).expanduser()
    if path.suffix != ".prom":
        raise UsageError(f"--metrics-file: {path} must end in .prom (node_exporter's textfile collector reads only "
                         "*.prom files)")
    if not path.parent.is_dir():
        raise UsageError(f"--metrics-file: folder {path.parent} does not exist (expected the textfile collector's "
                         "directory)")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"--metrics-file: {path} exists and is not a regular file (a symlink, folder, device or "
                         "FIFO is never written through)")
    return path


class MetricsSuppressed(MaintError):
    """The metrics lock is held past the wait by a process of another user than the file's owner, root or us."""


def lock_name(name: str) -> str:
    """Our lock beside metrics file *name*: hidden, and not ``*.prom`` (the collector never reads it), and not
    a temporary name (:data:`files.PARTIAL`: the leftover clearing never removes it)."""
    return f".{name[:160]}.lock"


def _held(path: Path, holders: list[LockHolder] | None, foreign: list[LockHolder]) -> str:
    if foreign:
        return (f"{path}: held by {'; '.join(h.describe() for h in foreign)}, not the metrics file's owner, root "
                f"or us, for {LOCK_WAIT_S:g} s: every run's figures are dropped while it holds the lock (stop that "
                "process)")
    who = f" ({'; '.join(h.describe() for h in holders)})" if holders else ""
    return f"{path}: another process{who} has held the metrics lock for {LOCK_WAIT_S:g} s; figures not written this run"


def write(path: Path, fresh: list[Sample], refreshed: Iterable[str], *, keep_doctor: bool,
          owner: int | None = None) -> None:
    """Replace the refreshed stores' samples in the file (keeping their doctor findings when asked), atomically.

    The lock (:func:`lock_name`) keeps two of our runs from interleaving their read-merge-write. It is
    waited for :data:`LOCK_WAIT_S` at most, then this run's figures are not written: a :class:`MaintError`
    (a warning: the job's own result stands), or :class:`MetricsSuppressed` when the holder is of another
    user than the file's owner, root or us (the run fails). *owner*: the path was named in that user's
    config, so the folder opened (and the file there) must be theirs.
    """
    path = check_path(path)
    refreshed = set(refreshed)
    with files.Folder.open(path.parent, follow_links=True, what="metrics folder") as folder:
        if owner is not None:
            there = folder.lstat(path.name)
            if os.fstat(folder.fd).st_uid != owner or there is not None and there.st_uid != owner:
                raise MaintError(f"{path}: the folder (or file) opened now is not uid {owner}'s, whose config named "
                                 "it; figures not written this run")
        there = folder.check_target(path.name)
        owned_as = (there.st_uid, there.st_gid) if there is not None else folder.owner  # as the file will be
        try:
            with lock_file(folder, lock_name(path.name), what="metrics lock", owner=owned_as, wait_s=LOCK_WAIT_S,
                           message=_held):
                data = folder.read(path.name, what="metrics file") if folder.check_target(path.name) else None
                kept = [s for s in parse((data or b"").decode("utf-8", "replace"))
                        if s.store not in refreshed or (keep_doctor and s.name in DOCTOR_FAMILIES)]
                with folder.atomic(path.name, mode=FILE_MODE) as fh:
                    fh.write(render(kept + fresh).encode())
        except LockHeld as exc:
            raise (MetricsSuppressed if exc.foreign else MaintError)(str(exc)) from None
