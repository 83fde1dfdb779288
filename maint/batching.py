"""Splits bulk writes into short transactions sized by measured throughput.

Each batch holds whole units (a lineage with its delegate children is never
split) and aims at ``target_s`` of write-lock time, so a Hermes writer waiting
on the lock is served within a fraction of a second rather than after the
whole job. A unit bigger than the budget still goes in one transaction:
atomicity beats the target.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

U = TypeVar("U")

# Set by the job loop on SIGTERM/SIGINT: bulk work stops after the batch in flight.
CANCEL = threading.Event()

DEFAULT_TARGET_S = 0.05
# After each commit we pause so a writer sleeping in SQLite's busy handler
# (it polls every 1-25 ms early on, every 50-100 ms later) finds the lock free.
# The pause ends as soon as another connection commits; when nobody has
# written for a while it shrinks to IDLE_YIELD_S, so an idle store runs at
# full speed.
MAX_YIELD_S = 0.03
IDLE_YIELD_S = 0.002
POLL_S = 0.004


class Yielder:
    """Lets waiting writers in between our transactions, guided by PRAGMA data_version."""

    def __init__(self, data_version: Callable[[], int] | None, max_s: float = MAX_YIELD_S):
        self.data_version = data_version
        self.max_s = max_s
        self.busy = True  # assume writers exist until shown otherwise
        self.quiet_rounds = 0

    def pause(self) -> None:
        if self.data_version is None:
            time.sleep(IDLE_YIELD_S)
            return
        start_version = self.data_version()
        limit = self.max_s if self.busy else IDLE_YIELD_S
        deadline = time.monotonic() + limit
        while True:
            time.sleep(POLL_S if self.busy else IDLE_YIELD_S)
            if self.data_version() != start_version:
                self.busy, self.quiet_rounds = True, 0
                return
            if time.monotonic() >= deadline:
                break
        self.quiet_rounds += 1
        if self.quiet_rounds >= 3:
            self.busy = False


def _target_from_env() -> float:
    """HERMES_MAINT_BATCH_MS overrides the lock time each batch aims at."""
    import os

    raw = os.environ.get("HERMES_MAINT_BATCH_MS", "")
    return int(raw) / 1000 if raw.isdigit() else DEFAULT_TARGET_S


@dataclass
class Batcher:
    target_s: float = field(default_factory=_target_from_env)
    budget: float = 0.0  # work units (messages) per transaction, adapted as we go
    min_budget: float = 20.0
    max_budget: float = 200_000.0

    ASSUMED_RATE = 6000.0  # messages/s before the first measurement

    def __post_init__(self) -> None:
        if not self.budget:
            self.budget = min(self.max_budget, max(self.min_budget, self.target_s * self.ASSUMED_RATE))

    def take(self, units: Sequence[U], start: int, weight: Callable[[U], int]) -> tuple[int, int]:
        """End index and load of the next batch from *start*: whole units, at least one, within budget."""
        end, load = start, 0
        while end < len(units):
            w = max(1, weight(units[end]))
            if end > start and load + w > self.budget:
                break
            load += w
            end += 1
        return end, load

    def observe(self, work: int, seconds: float) -> None:
        """Re-aim the budget at ``target_s`` from the last batch's rate (smoothed)."""
        if work <= 0 or seconds <= 0:
            return
        ideal = work / seconds * self.target_s
        self.budget = min(self.max_budget, max(self.min_budget, 0.5 * self.budget + 0.5 * ideal))


def run_batched(units: Sequence[U], weight: Callable[[U], int], apply: Callable[[list[U]], int],
                batcher: Batcher | None = None, yielder: Yielder | None = None,
                on_progress: Callable[[int], None] | None = None) -> int:
    """Apply *apply* to batches of *units*; returns the summed result of *apply*."""
    batcher = batcher or Batcher()
    yielder = yielder or Yielder(None)
    total = 0
    pos = 0
    while pos < len(units) and not CANCEL.is_set():
        end, load = batcher.take(units, pos, weight)
        batch = list(units[pos:end])
        pos = end
        started = time.monotonic()
        total += apply(batch)
        batcher.observe(load, time.monotonic() - started)
        if on_progress:
            on_progress(len(batch))
        if pos < len(units):
            yielder.pause()
    return total
