"""hermes-maint archive: options and output; the logic is :mod:`maint.ops.archive`."""

from typing import Annotated

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, DryRunOpt, JsonOpt, ProfileOpt, YesOpt, filter_options
from maint.commands.output import confirm_or_refuse, printable, progress
from maint.commands.runner import for_each_store
from maint.errors import UsageError
from maint.selection.filters import Filters
from maint.store.targets import resolve_targets


@filter_options
def archive(
    filters: Filters,
    include_open: Annotated[bool, typer.Option("--include-open", help="Also archive sessions still open.")] = False,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
) -> None:
    """Hide matching conversations (archived flag only: messages and search stay).

    At least one filter is required. A compression lineage is judged by its
    live tip and archived as a whole. Pinned lineages are left alone.
    """
    from maint.ops.archive import execute_archive, plan_archive
    from maint.store.connection import open_store

    if filters.is_empty:
        raise UsageError("archive needs at least one filter (refusing to archive the whole history); "
                         "e.g. --newer-than 5h or --title 'dry run'")

    def run(target) -> dict:
        with open_store(target.path, readonly=dry_run) as store:  # a preview works on a read-only store
            plan = plan_archive(store, filters, include_open=include_open)
            ids = plan.session_ids
            report = {"store": str(target.path), "dry_run": dry_run, "matched": len(ids), "session_ids": ids,
                      "lineages": len(plan.lineages), "skipped_open": plan.skipped_open,
                      "skipped_pinned": plan.skipped_pinned, "include_open": include_open}
            if dry_run or not ids:
                return report
            confirm_or_refuse(yes, f"Archive {len(ids)} sessions?", [
                f"{len(ids)} sessions in {len(plan.lineages)} conversations will be archived "
                f"({plan.skipped_open} skipped as open, {plan.skipped_pinned} as pinned)"])
            with progress(len(plan.lineages), "Archiving", as_json) as tick:
                done = execute_archive(store, plan, on_progress=tick)
            report.update(session_ids=done, matched=len(done))
            return report

    for_each_store(resolve_targets(db, profile, all_profiles), as_json, run, _render)


def _render(r: dict) -> None:
    verb = "Would archive" if r["dry_run"] else "Archived"
    typer.echo(f"{verb} {r['matched']} sessions in {r['lineages']} conversations")
    if r["dry_run"]:
        for sid in r["session_ids"][:20]:
            typer.echo(f"    {printable(sid)}")
    typer.echo(f"  skipped {r['skipped_open']} matching conversation(s) still open"
               + ("" if r["include_open"] else " (use --include-open to archive them)"))
    if r["skipped_pinned"]:
        typer.echo(f"  skipped {r['skipped_pinned']} pinned conversation(s)")
