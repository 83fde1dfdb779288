"""Splits bulk writes into short transactions bounded by the clock, and lets Hermes's writers in between.

A transaction takes whole units (a lineage with its delegate children is never
split) in chunks of about ``chunk_s`` of work and commits once its lock time
reaches ``target_s``. Work per row is uneven (FTS5 flushes and merges its index
in the middle of a statement), so the clock ends a transaction rather than a
row count predicted from the last one. A unit is never split: one bigger
than a chunk starts a transaction (atomicity beats the target), and chunks
follow it while there is room; one bigger than a whole transaction goes after
whatever work can leave ahead of it has (``lighten``).

Between transactions :class:`Pacer` holds back long enough for every writer
asleep in SQLite's busy handler to wake and take the lock. A job gets it from
:func:`paced_writes` and runs its batches with :meth:`PacedWrites.run_batches`.
Checkpoints are SQLite's own (every 1,000 pages, in the commit that crosses
them): a checkpoint on a second connection after each of our commits made
SQLite's WAL-reset race likely for a Hermes whose SQLite predates 3.51.3, and
its stores ended corrupt (hostile try 9, L8).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, NamedTuple, TypeVar


from maint.store.holders import other_connections

if TYPE_CHECKING:
    from maint.store.connection import Store

U = TypeVar("U")

# Set by the job loop on SIGTERM/SIGINT: bulk work stops after the transaction in flight.
CANCEL = threading.Event()
_CANCEL_SIGNAL: list[int] = []  # the signal that set CANCEL (see cancel)


def cancel(signum: int) -> None:
    """Stop bulk work at the next batch boundary, because of signal *signum* (the job loop's SIGTERM/SIGINT)."""
    _CANCEL_SIGNAL[:] = [signum]
    CANCEL.set()


def cancel_signal() -> int | None:
    """The signal that cancelled bulk work, or None while nothing has."""
    return _CANCEL_SIGNAL[0] if CANCEL.is_set() and _CANCEL_SIGNAL else None


def reset_cancel() -> None:
    CANCEL.clear()
    _CANCEL_SIGNAL.clear()

DEFAULT_CHUNK_S = 0.045

# SQLite's default busy handler, which every Hermes connection uses (Python's sqlite3 with
# timeout=1.0), sleeps these milliseconds between tries and 100 ms from then on
# (sqliteDefaultBusyCallback). A writer that has waited w ms tries again within the step w is in.
BUSY_DELAYS_MS = (1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100)
# Scheduler slack on top of that step, and how often we look for a writer's commit.
MARGIN_S = 0.003
POLL_S = 0.0005
# However many writers keep committing, a pause ends after this long (they are served in turn;
# we must move on too).
MAX_PAUSE_S = 0.3
# How often the count of other connections is taken again (processes come and go).
RECOUNT_S = 5.0


def busy_retry_within(waited_s: float) -> float:
    """The longest a writer that has been refused for *waited_s* sleeps before it tries again."""
    elapsed_ms = 0.0
    for delay in BUSY_DELAYS_MS:
        if waited_s * 1000 < elapsed_ms + delay:
            return delay / 1000
        elapsed_ms += delay
    return BUSY_DELAYS_MS[-1] / 1000


class Pacer:
    """Between our transactions: wait until every writer has had a turn.

    A waiting writer holds no lock while it sleeps, so we cannot see it; we bound its wait instead.
    ``exposed_since`` is the end of the last pause that ran its whole step, and a pause lasts one
    busy-handler step for a wait that long, by which time each waiting writer has tried. Only when
    the store has exactly one other connection does a commit (PRAGMA data_version) end the pause
    sooner: that writer is served. With more, one commit cannot be told from another's (a quick
    writer goes in twice while a third still sleeps), and with none visible, or an incomplete count,
    a commit proves nothing (a writer in another container is invisible to the count): those pauses
    run their whole step. See docs/design/pacing.md.
    """

    def __init__(self, data_version: Callable[[], int], writers: Callable[[], int | None] = lambda: None,
                 *, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.data_version = data_version
        self.writers = writers
        self.clock, self.sleep = clock, sleep  # a test drives the pause with a fake clock
        self.exposed_since = clock()
        self._expected: int | None = None
        self._counted_at = float("-inf")

    def expected_writers(self) -> int | None:
        now = self.clock()
        if now - self._counted_at >= RECOUNT_S:
            self._expected, self._counted_at = self.writers(), now
        return self._expected

    def pause(self) -> None:
        one_writer = self.expected_writers() == 1
        start = self.clock()
        deadline = start + busy_retry_within(start - self.exposed_since) + MARGIN_S
        longest = start + MAX_PAUSE_S
        version = self.data_version()
        while self.clock() < deadline:
            self.sleep(POLL_S)
            now_version = self.data_version()
            if now_version == version:
                continue
            if one_writer:
                # Served. The exposure stands all the same, in case a second writer has appeared
                # since the count: the next window then stays long enough for it.
                return
            # Another writer committed: one that tried while it held the lock was refused and sleeps
            # its next step, so the window stays open one more step after this commit (within limits).
            version, now = now_version, self.clock()
            deadline = min(longest, max(deadline, now + busy_retry_within(now - self.exposed_since) + MARGIN_S))
        # The whole step went by: whoever was waiting has tried, so the count starts again.
        self.exposed_since = self.clock()


def pacer_for(store) -> Pacer:
    """A pacer that knows how many other connections the store has (see :mod:`maint.store.holders`)."""
    path = store.path
    return Pacer(store.data_version, writers=lambda: other_connections(path))


class PacedWrites:
    """One bulk job's writes beside Hermes, and the one way to run its batches: :meth:`run_batches`
    applies units in short transactions (:func:`run_batched`) with a :class:`Pacer` pause after each.
    Work of the job's own in transactions between its batches (FTS merges, see
    :mod:`maint.store.fts_index`) takes :meth:`pause`, so that it is paced the same way. Made by
    :func:`paced_writes`."""

    def __init__(self, pacer: Pacer):
        self.pacer = pacer

    def pause(self) -> None:
        self.pacer.pause()

    def others(self) -> int | None:
        """How many other connections the store has (None: nobody can say), as the pacer last counted them."""
        return self.pacer.expected_writers()

    def run_batches(self, units: Sequence[U], weight: Callable[[U], int], apply: Callable[[list[U]], int | Applied],
                    transaction: Callable[[], AbstractContextManager], *, batcher: Batcher | None = None,
                    on_progress: Callable[[int], None] | None = None,
                    after_commit: Callable[[], None] | None = None,
                    upkeep: Callable[[], bool] | None = None,
                    lighten: Callable[[U], Callable[[], bool] | None] | None = None) -> int:
        """:func:`run_batched` (see there for the arguments) with this job's pacer."""
        return run_batched(units, weight, apply, transaction, self.pacer, batcher=batcher, on_progress=on_progress,
                           after_commit=after_commit, upkeep=upkeep, lighten=lighten)


@contextlib.contextmanager
def paced_writes(store: Store) -> Iterator[PacedWrites]:
    """The pacer of one bulk job on *store*."""
    yield PacedWrites(pacer_for(store))


# However quick a chunk was, the rate it teaches is at most this many times the one it was sized by, so the
# next chunk is at most (0.7 + 0.3 * 4) = 1.9 times as big: a ramp from the first guess to the real rate still
# takes a handful of chunks.
MAX_RATE_STEP = 4.0


class Applied(NamedTuple):
    """What a job's *apply* did with a chunk, when it left some of the chunk's units alone (held back, changed
    since the plan): *count* is its result, *work* the weight of the units it did work on. Only that work
    teaches the batcher its rate; a plain int result means the whole chunk was worked on."""

    count: int
    work: int


def target_from_env() -> float:
    """HERMES_MAINT_BATCH_MS overrides the lock time each transaction aims at."""
    from maint import settings

    return settings.value("batch_ms") / 1000


@dataclass
class Batcher:
    """How much work goes in one chunk, learnt from the measured rate (work units per second)."""

    target_s: float = field(default_factory=target_from_env)
    chunk_s: float | None = None  # default: DEFAULT_CHUNK_S, never more than the target
    rate: float = 6000.0  # before the first measurement
    min_load: int = 1
    max_load: int = 200_000

    def __post_init__(self) -> None:
        if self.chunk_s is None:
            self.chunk_s = min(DEFAULT_CHUNK_S, self.target_s)

    @property
    def chunk_load(self) -> float:
        return min(self.max_load, max(self.min_load, self.rate * self.chunk_s))

    def take(self, units: Sequence[U], start: int, weight: Callable[[U], int]) -> tuple[int, int]:
        """End index and load of the next chunk from *start*: whole units, at least one, within budget."""
        end, load, budget = start, 0, self.chunk_load
        while end < len(units):
            w = max(1, weight(units[end]))
            if end > start and load + w > budget:
                break
            load += w
            end += 1
        return end, load

    def observe(self, work: int, seconds: float) -> None:
        """Smooth the rate; one slow chunk (an FTS merge) must not halve the next, and one quick one must not
        size the next at many times this one: a measurement counts at most :data:`MAX_RATE_STEP` times the rate
        (a chunk whose units were mostly left alone measured 10^8 a second at 420k sessions, and the next delete
        held the lock 3.8 s)."""
        if work > 0 and seconds > 0:
            self.rate = 0.7 * self.rate + 0.3 * min(work / seconds, MAX_RATE_STEP * self.rate)

    @property
    def target_load(self) -> float:
        """The work one transaction does in its target time: a unit heavier holds the lock past it."""
        return min(self.max_load, max(self.min_load, self.rate * self.target_s))

    def room_for_another(self, held_s: float) -> bool:
        return held_s + self.chunk_s <= self.target_s


def run_batched(units: Sequence[U], weight: Callable[[U], int], apply: Callable[[list[U]], int | Applied],
                transaction: Callable[[], AbstractContextManager], pacer: Pacer, *,
                batcher: Batcher | None = None,
                on_progress: Callable[[int], None] | None = None,
                after_commit: Callable[[], None] | None = None,
                upkeep: Callable[[], bool] | None = None,
                lighten: Callable[[U], Callable[[], bool] | None] | None = None) -> int:
    """Apply *apply* to chunks of *units*, several chunks per *transaction*; returns the summed results
    (an :class:`Applied` result counts its *count*, and only its *work* is the rate's).

    *after_commit* runs after each transaction (outside the write lock), before the pause, which
    follows every transaction, the last one too: no two of ours meet without writers let in between.
    *upkeep* is one bounded step of work our earlier chunks left behind (FTS5 merges, see
    :mod:`maint.store.fts_index`), False when none is left: each transaction runs it first, and
    takes new chunks only once it is done, so that work never piles up. A unit heavier than a chunk
    starts a transaction; chunks follow it while there is room (one that ended right after such a unit
    held the lock 40-75 ms and paid a commit and a pause for it).
    *lighten*, given a unit heavier than :attr:`Batcher.target_load`, returns one bounded step (False when
    done) that moves part of its work into transactions of their own ahead of it (see
    :mod:`maint.store.fts_index`), or None; the unit starts the transaction after its last step that did
    work (or the one in flight, when its step found none left). Its rate is not learnt.
    """
    batcher = batcher or Batcher()
    total = 0
    pos = 0
    lightening: tuple[int, Callable[[], bool] | None] | None = None  # (position, its step) once asked
    while pos < len(units) and not CANCEL.is_set():
        first = pos
        with transaction():
            opened = time.monotonic()
            worked = pending = False
            if upkeep is not None:
                pending = worked = upkeep()  # one step whatever the target, so the work always moves on
                while pending and batcher.room_for_another(time.monotonic() - opened):
                    pending = upkeep()
            if not pending and lighten is not None and (lightening is None or lightening[0] != pos) \
                    and max(1, weight(units[pos])) > batcher.target_load:
                lightening = (pos, lighten(units[pos]))
            if not pending and lightening is not None and lightening[0] == pos and lightening[1] is not None:
                step = lightening[1]
                # the unit waits for the next transaction after a step that did work; when none was left, the
                # transaction goes on to it rather than commit having done nothing
                did = pending = step()
                while pending and batcher.room_for_another(time.monotonic() - opened):
                    pending = step()
                if not pending:
                    lightening = (pos, None)
                worked = pending = worked or did
            while pos < len(units) and not pending:
                end, load = batcher.take(units, pos, weight)
                lightened = lightening is not None and pos <= lightening[0] < end
                if load > batcher.chunk_load and worked:
                    break  # the big unit starts the next transaction: its own time is the hardest to predict
                started = time.monotonic()
                out = apply(list(units[pos:end]))
                count, work = out if isinstance(out, Applied) else (out, load)
                total += count
                if not lightened:
                    batcher.observe(work, time.monotonic() - started)  # a lightened unit's rate is not the rule
                pos = end
                worked = True
                if not batcher.room_for_another(time.monotonic() - opened):
                    break
        if on_progress:
            on_progress(pos - first)
        if after_commit:
            after_commit()
        pacer.pause()  # after the last one too: the caller's next transaction (merges left, settings back) follows
    return total


def run_steps(step: Callable[[], bool], transaction: Callable[[], AbstractContextManager], pause: Callable[[], None],
              target_s: float, after_commit: Callable[[], None] | None = None) -> None:
    """Run *step* (one bounded piece of work, False once none is left) until it is done, in transactions of
    about *target_s*, each holding at least one step whatever the target; *after_commit* and *pause*
    follow every transaction, the last one too (the caller's next transaction follows it)."""
    pending = True
    while pending:
        with transaction():
            opened = time.monotonic()
            pending = step()
            while pending and time.monotonic() - opened < target_s:
                pending = step()
        if after_commit:
            after_commit()
        pause()
