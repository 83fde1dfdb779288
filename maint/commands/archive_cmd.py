"""hermes-maint archive: options and output; the logic is :mod:`maint.ops.archive`."""

from typing import Annotated

import typer

from maint.commands.options import (AllProfilesOpt, DbOpt, DryRunOpt, JsonOpt, MetricsOpt, ProfileOpt, YesOpt,
                                   filter_options)
from maint.commands import prechecks
from maint.commands.output import confirm_or_refuse, printable, progress
from maint.commands.runner import for_each_store
from maint.errors import UsageError
from maint.selection.filters import Filters
from maint.store.targets import resolve_targets


@filter_options
def archive(
    filters: Filters,
    include_open: Annotated[bool, typer.Option("--include-open", help="Also archive sessions still open.")] = False,
    idle: Annotated[bool, typer.Option(
        "--idle", help="Run the idle sweep now: every conversation idle for sessions.auto_archive_days "
                       "(default 3), open ones included, pinned and busy ones exempt; it comes back when "
                       "resumed. Needs a store with the auto_archived column.")] = False,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
    metrics_file: MetricsOpt = None,
) -> None:
    """Hide matching conversations (archived flag only: messages and search stay).

    At least one filter is required (or --idle). A compression lineage is judged
    by its live tip and archived as a whole. Pinned lineages are left alone.

    Example: hermes-maint archive --newer-than 5h --dry-run; hermes-maint archive --idle --yes
    """
    from maint.commands.recording import metrics_target
    from maint.ops.archive import execute_archive, plan_archive
    from maint.store.connection import open_store

    prechecks.archive(filters, idle, include_open)
    metrics = metrics_target(metrics_file)

    def run(target) -> dict:
        with open_store(target.path, readonly=dry_run) as store:  # a preview works on a read-only store
            if idle:
                return _run_idle(store, target, _idle_days(target, db is not None), dry_run=dry_run, yes=yes,
                                 as_json=as_json)
            plan = plan_archive(store, filters, include_open=include_open)
            ids = plan.session_ids
            report = {"store": str(target.path), "dry_run": dry_run, "matched": len(ids), "session_ids": ids,
                      "lineages": len(plan.lineages), "skipped_open": plan.skipped_open,
                      "skipped_pinned": plan.skipped_pinned, "skipped_busy": 0, "include_open": include_open,
                      "idle": False, "idle_days": None, "skipped_changed": []}
            if dry_run or not ids:
                return report
            confirm_or_refuse(yes, f"Archive {len(ids)} sessions?", [
                f"{len(ids)} sessions in {len(plan.lineages)} conversations will be archived "
                f"({plan.skipped_open} skipped as open, {plan.skipped_pinned} as pinned)"])
            with progress(len(plan.lineages), "Archiving", as_json) as tick:
                result = execute_archive(store, plan, on_progress=tick)
            report.update(session_ids=result.archived_ids, matched=len(result.archived_ids),
                          skipped_changed=result.skipped_changed)
            return report

    for_each_store(resolve_targets(db, profile, all_profiles), as_json, run, _render, job="archive",
                   ran=lambda r: not r["dry_run"], metrics_file=metrics)


def _idle_days(target, explicit_db: bool) -> float:
    """sessions.auto_archive_days from the store's own config.yaml (default 3), the idle sweep's threshold."""
    import math

    from maint.config import config_path_for, load_config

    days = load_config(config_path_for(target.path if explicit_db else None, target.profile)).session(
        "auto_archive_days")
    if isinstance(days, bool) or not isinstance(days, (int, float)) or not math.isfinite(days) or days < 0:
        raise UsageError(f"sessions.auto_archive_days: bad value {days!r} in config.yaml "
                         "(expected a number of days >= 0, e.g. 3)")
    return float(days)


def _run_idle(store, target, days: float, *, dry_run: bool, yes: bool, as_json: bool) -> dict:
    from maint.errors import MaintError
    from maint.ops.auto_archive import execute_idle_archive, missing_column, plan_idle_archive

    reason = missing_column(store)
    if reason:
        raise MaintError(f"{target.path}: {reason}")
    plan = plan_idle_archive(store, days)
    ids = plan.session_ids
    report = {"store": str(target.path), "dry_run": dry_run, "matched": len(ids), "session_ids": ids,
              "lineages": len(plan.units), "skipped_open": 0, "skipped_pinned": plan.skipped_pinned,
              "skipped_busy": plan.skipped_busy, "include_open": True, "idle": True, "idle_days": days,
              "skipped_changed": []}
    if dry_run or not ids:
        return report
    confirm_or_refuse(yes, f"Archive {len(ids)} idle sessions?", [
        f"{len(ids)} sessions in {len(plan.units)} conversations idle for {days:g} days or more will be "
        f"archived until resumed ({plan.skipped_pinned} pinned and {plan.skipped_busy} busy left alone)"])
    with progress(len(plan.units), "Archiving", as_json) as tick:
        done = execute_idle_archive(store, plan, on_progress=tick)
    flipped = set(done)
    report.update(session_ids=done, matched=len(done), skipped_changed=[sid for sid in ids if sid not in flipped])
    return report


def _render(r: dict) -> None:
    verb = "Would archive" if r["dry_run"] else "Archived"
    what = f" idle for {r['idle_days']:g} days or more (they come back when resumed)" if r["idle"] else ""
    typer.echo(f"{verb} {r['matched']} sessions in {r['lineages']} conversations{what}")
    if r["dry_run"]:
        for sid in r["session_ids"][:20]:
            typer.echo(f"    {printable(sid)}")
    if r["idle"]:
        if r["skipped_pinned"] or r["skipped_busy"]:
            typer.echo(f"  left alone: {r['skipped_pinned']} pinned, {r['skipped_busy']} with a turn or "
                       "compression in progress")
        return
    typer.echo(f"  skipped {r['skipped_open']} matching conversation(s) still open"
               + ("" if r["include_open"] else " (use --include-open to archive them)"))
    if r["skipped_pinned"]:
        typer.echo(f"  skipped {r['skipped_pinned']} pinned conversation(s)")
    if r["skipped_changed"]:
        typer.echo(f"  skipped {len(r['skipped_changed'])} session(s) pinned, reopened or written to while archiving")
