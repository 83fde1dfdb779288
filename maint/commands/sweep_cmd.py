"""hermes-maint sweep: the nightly job, by hand; the logic is :mod:`maint.ops.sweep`."""

from typing import Annotated

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, JsonOpt, MetricsOpt, ProfileOpt
from maint.commands.output import Terminal
from maint.commands.runner import for_each_store
from maint.store.targets import resolve_targets


def sweep(
    force: Annotated[bool, typer.Option("--force", help="Ignore min_interval_hours (never the lock).")] = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
    metrics_file: MetricsOpt = None,
) -> None:
    """Reap orphaned open sessions, prune past sessions.retention_days, VACUUM when it pays.

    Runs only while sessions.auto_prune is true, at most once per
    sessions.min_interval_hours across every Hermes process sharing the store.
    With sessions.auto_archive: true it first archives conversations idle for
    sessions.auto_archive_days (pinned and busy ones exempt).

    Example: hermes-maint sweep --force --json
    """
    from maint.commands.recording import metrics_target
    from maint.ops.sweep import SweepRequest, sweep_store

    metrics = metrics_target(metrics_file)
    req = SweepRequest(force=force)
    op = Terminal(quiet=as_json)
    for_each_store(resolve_targets(db, profile, all_profiles), as_json, lambda target: sweep_store(target, req, op),
                   _render, job="sweep", ran=lambda r: r["swept"], metrics_file=metrics)


def _render(r: dict) -> None:
    if r["auto_archived_ids"]:
        typer.echo(f"Idle sweep: archived {len(r['auto_archived_ids'])} session(s) (they come back when resumed)")
    elif r["auto_archive_skipped_reason"] != "sessions.auto_archive is off":
        typer.echo(f"Idle sweep: {r['auto_archive_skipped_reason'] or 'nothing idle to archive'}")
    if not r["swept"]:
        typer.echo(f"Sweep skipped: {r['skipped_reason']}")
        return
    how = "Resumed an unfinished sweep" if r.get("resumed") else "Swept"
    typer.echo(f"{how}: reaped {len(r['reaped_ids'])} open orphan(s), pruned {len(r['pruned_ids'])} sessions "
               f"({r['pruned_messages']} messages) past {r['retention_days']} days")
    if r.get("cancelled"):
        typer.echo("  cancelled part-way: the next run inside the interval resumes it")
    typer.echo(f"  VACUUM: {'done' if r['vacuumed'] else 'not run'} ({r['vacuum_reason']}); "
               f"{r['bytes_freed']} bytes freed in {r['seconds']}s")
