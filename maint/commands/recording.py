"""What every job shares after its run: the report into the store's run history, fresh metrics.

Called from :func:`maint.commands.runner.for_each_store` (and by the commands that span
several stores at once), so no job records itself. A failure here is a warning on stderr:
the job itself is done and its exit code stands. One exception: a metrics lock held by a
process of another user (:class:`maint.ops.metrics.MetricsSuppressed`) would drop every run's
figures quietly, so it fails the command (exit 1, see :func:`late_failures`) once its work is done.
"""

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from maint import PROG
from maint.errors import MaintError, UsageError
from maint.store.targets import StoreTarget, hermes_home


def warn(message: str) -> None:
    click.echo(f"{PROG}: warning: {message}", err=True)


_LATE = threading.local()  # per thread: the job loop runs jobs in worker threads


@contextlib.contextmanager
def late_failures() -> Iterator[list[str]]:
    """Failures found after a command's work is done that must still fail it (exit 1 when nothing else did):
    :func:`maint.commands.runner.guard` collects them around every command."""
    outer = getattr(_LATE, "failures", None)
    _LATE.failures = mine = []
    try:
        yield mine
    finally:
        _LATE.failures = outer


def fail_late(message: str) -> None:
    """*message* fails the running command once its work is done (outside a command: a warning)."""
    failures = getattr(_LATE, "failures", None)
    if failures is None:
        warn(message)
    else:
        failures.append(message)


def metrics_target(option: str | Path | None) -> Path | None:
    """--metrics-file, else config.yaml's hermes_maint.metrics_file, checked before any work (bad = exit 2)."""
    from maint.config import load_config
    from maint.ops.metrics import check_path

    if option is None:
        cfg = load_config()
        configured = cfg.maint("metrics_file")
        if configured is None:
            return None
        if not isinstance(configured, str) or not configured.strip():
            raise UsageError(f"hermes_maint.metrics_file: bad value {configured!r} (expected a path to a *.prom file)")
        path = check_path(Path(configured))
        _only_where_its_owner_writes(path, cfg.owner, cfg.path)
        if cfg.owner is not None and cfg.owner not in (0, os.geteuid()):
            _NAMED_BY[str(path)] = cfg.owner  # judged again on the folder opened at the end of the run
        return path
    if not str(option).strip():
        raise UsageError("--metrics-file: empty path (expected a path to a *.prom file)")
    return check_path(Path(option))


# A metrics path named in another user's config.yaml -> that user's uid: the write at the end of the run checks
# the folder it actually opened, not only the name checked at the start (hostile try 4, G4: the folder swapped
# for a link to a root folder in between).
_NAMED_BY: dict[str, int] = {}


def _only_where_its_owner_writes(path: Path, owner: int | None, config: Path) -> None:
    """A path named in a config.yaml is that file owner's word: a run as another user (root) writes there only
    when the config's owner owns the folder (and the file, if it exists), so a user's config cannot make a
    root run replace another exporter's file or create files in root's folders."""
    if owner is None or owner in (0, os.geteuid()):
        return
    folder = os.stat(path.parent).st_uid
    existing = os.lstat(path).st_uid if os.path.lexists(path) else owner
    if owner != folder or owner != existing:
        raise UsageError(f"hermes_maint.metrics_file: {path} is not in a folder uid {owner} (the owner of {config}) "
                         "owns; a path named in a user's config is written only where that user could write it "
                         "(give --metrics-file to choose it as this user)")


def profile_label(target: StoreTarget) -> str:
    """The ``profile`` label of a store's metrics: its profile, ``default``, or empty for another --db file."""
    if target.profile:
        return target.profile
    try:
        return "default" if target.path.resolve() == (hermes_home() / "state.db").resolve() else ""
    except OSError:
        return ""


def write_metrics(metrics_file: Path | None, targets: list[StoreTarget],
                  doctor: dict[str, dict] | None = None) -> None:
    """Refresh these stores' figures in the metrics file (doctor's findings too when given)."""
    if metrics_file is None:
        return
    import apsw

    from maint.ops import metrics
    from maint.store.connection import open_store

    try:
        fresh = []
        for target in targets:
            with open_store(target.path, readonly=True) as store:
                fresh += metrics.collect(store, profile_label(target), doctor=(doctor or {}).get(str(target.path)))
        metrics.write(metrics_file, fresh, [str(t.path) for t in targets], keep_doctor=doctor is None,
                      owner=_NAMED_BY.get(str(metrics_file)))
    except metrics.MetricsSuppressed as exc:  # another user would silence every run's figures: a failure
        fail_late(f"metrics not written to {metrics_file}: {exc}")
    except (MaintError, OSError, apsw.Error) as exc:
        warn(f"metrics not written to {metrics_file}: {exc}")


def record_job(target: StoreTarget, kind: str, report: dict[str, Any], seconds: float) -> None:
    """The report of one finished run into its store's history (and the log, for the job loop)."""
    import apsw

    from maint.ops import history

    try:
        history.record(target.path, kind, report, seconds=round(seconds, 3))
    except (MaintError, apsw.Error) as exc:
        warn(f"run history not recorded for {target.path}: {exc}")
