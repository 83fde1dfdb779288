"""hermes-maint sweep: the nightly job, by hand."""

import sys
import time
from typing import Annotated

import typer

from maint.commands.common import JsonOpt, command, for_each_target, resolve
from maint.config import load_config
from maint.ops.diskcheck import disk_figures, estimate, notice, record_asked, should_ask
from maint.store.connection import open_store
from maint.ops.sweep import run_sweep, validate_retention


def low_disk_notice(db, cfg, interactive: bool) -> list[str]:
    """The low-disk question, once; shown on a terminal, logged otherwise."""
    import logging

    now = time.time()
    with open_store(db) as store:
        figures = disk_figures(db.parent)
        if not should_ask(cfg, store, figures, now):
            return []
        retention = validate_retention(cfg.session("retention_days")) or 90
        lines = notice(figures, estimate(store, retention, now), retention)
        record_asked(store, now)
    if interactive:
        for line in lines:
            typer.echo(line, err=True)
    else:
        logging.getLogger("hermes_maint.disk").warning(" ".join(lines))
    return lines


@command
def sweep(
    targets: dict,
    force: Annotated[bool, typer.Option("--force", help="Ignore min_interval_hours (never the lock).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Reap orphaned open sessions, prune past sessions.retention_days, VACUUM when it pays.

    Runs only while sessions.auto_prune is true, at most once per
    sessions.min_interval_hours across every Hermes process sharing the store.
    """
    cfg = load_config()
    stores = resolve(targets)

    def run(target) -> dict:
        report = run_sweep(target.path, cfg, force=force)
        report["low_disk_notice"] = low_disk_notice(target.path, cfg, sys.stdin.isatty() and not as_json)
        return report

    def render(r: dict) -> None:
        if not r["swept"]:
            typer.echo(f"Sweep skipped: {r['skipped_reason']}")
            return
        typer.echo(f"Swept: reaped {len(r['reaped_ids'])} open orphan(s), pruned {len(r['pruned_ids'])} sessions "
                   f"({r['pruned_messages']} messages) past {r['retention_days']} days")
        typer.echo(f"  VACUUM: {'done' if r['vacuumed'] else 'not run'} ({r['vacuum_reason']}); "
                   f"{r['bytes_freed']} bytes freed in {r['seconds']}s")

    for_each_target(stores, as_json, run, render)
