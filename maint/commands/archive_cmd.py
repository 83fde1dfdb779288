"""hermes-maint archive: options and output; plan, confirm and archive are :func:`maint.ops.archive.archive_store`."""

from typing import Annotated

import typer

from maint.commands.options import (AllProfilesOpt, DbOpt, DryRunOpt, JsonOpt, MetricsOpt, ProfileOpt, YesOpt,
                                   filter_options)
from maint.commands.output import Terminal, printable
from maint.commands.runner import for_each_store
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
    from maint.ops.archive import ArchiveRequest, archive_store

    req = ArchiveRequest(filters, include_open=include_open, idle=idle, dry_run=dry_run)
    metrics = metrics_target(metrics_file)
    op = Terminal(yes=yes, quiet=as_json)
    for_each_store(resolve_targets(db, profile, all_profiles), as_json, lambda target: archive_store(target, req, op),
                   _render, job="archive", ran=lambda r: not r["dry_run"], metrics_file=metrics)


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
