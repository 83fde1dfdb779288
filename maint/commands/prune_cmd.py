"""hermes-maint prune: options and output; the logic is :mod:`maint.ops.prune`."""

from typing import Annotated

import typer

from maint.commands.options import (AllProfilesOpt, DbOpt, DryRunOpt, JsonOpt, MetricsOpt, ProfileOpt, YesOpt,
                                   filter_options)
from maint.commands.output import confirm_or_refuse, fmt_bytes, fmt_time, printable, progress
from maint.commands.runner import for_each_store
from maint.selection.filters import Filters
from maint.store.targets import resolve_targets


@filter_options
def prune(
    filters: Filters,
    include_archived: Annotated[
        bool, typer.Option("--include-archived", help="Also delete archived sessions.")] = False,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
    metrics_file: MetricsOpt = None,
) -> None:
    """Delete ended sessions: bare = inactive for 90 days; any filter turns the 90 days off.

    Open sessions, sessions with a turn or compression in progress, and pinned
    ones are never deleted. A compression lineage goes only as a whole;
    delegate (subagent) children go with their parent.
    """
    from maint.commands.recording import metrics_target
    from maint.ops.prune import execute_prune, plan_prune, plan_stored_bytes, recover_interrupted
    from maint.store.connection import open_store

    metrics = metrics_target(metrics_file)
    from maint.ops.prune import check_settings

    check_settings()

    def run(target) -> dict:
        with open_store(target.path, readonly=dry_run) as store:  # a preview works on a read-only store
            plan = plan_prune(store, filters, include_archived=include_archived)
            count = plan.sessions
            report = {
                "store": str(target.path), "dry_run": dry_run, "matched": count, "session_ids": [],
                "messages": plan.messages, "implicit_days": plan.implicit_days, "held_back": plan.held_back,
                "oldest": plan.extreme(newest=False), "newest": plan.extreme(newest=True),
                "session_files": [], "removed_files": [],
            }
            # Text size is read only when someone will look at it (preview or prompt).
            report["bytes"] = plan_stored_bytes(store) if (dry_run or not yes) else None
            if dry_run or not count:
                if not dry_run and yes:
                    # Nothing to delete, but what a killed run left goes back (the delete itself does this first).
                    recover_interrupted(store)
                report.update(deleted=0, transactions=0, longest_lock_ms=0.0, skipped_changed=[], skipped_too_big=[],
                              removed_files=[])
                if dry_run:
                    from maint.store.delete import session_files

                    report["session_ids"] = plan.session_ids
                    report["session_files"] = session_files(target.path, plan.session_ids)
                return report
            o, n = report["oldest"], report["newest"]
            confirm_or_refuse(yes, f"Delete {count} sessions ({plan.messages} messages)?", [
                f"{count} sessions, {plan.messages} messages, {fmt_bytes(report['bytes'] or 0)} of stored text",
                f"  oldest: {o['id']} (last active {fmt_time(o['last_active'])})",
                f"  newest: {n['id']} (last active {fmt_time(n['last_active'])})",
            ])
            with progress(len(plan.units), "Pruning", as_json) as tick:
                result = execute_prune(store, plan, on_progress=tick)
            report.update(
                session_ids=result.deleted_ids, matched=len(result.deleted_ids), messages=result.messages,
                deleted=len(result.deleted_ids), transactions=result.transactions,
                longest_lock_ms=round(result.longest_lock_s * 1000, 1), skipped_changed=result.skipped_changed,
                skipped_too_big=result.skipped_too_big, removed_files=result.removed_files,
            )
            return report

    for_each_store(resolve_targets(db, profile, all_profiles), as_json, run, _render, job="prune",
                   ran=lambda r: not r["dry_run"], metrics_file=metrics)


def _render(r: dict) -> None:
    verb = "Would delete" if r["dry_run"] else "Deleted"
    rule = f" (implicit rule: inactive >= {r['implicit_days']:g} days)" if r["implicit_days"] else ""
    typer.echo(f"{verb} {r['matched']} sessions, {r['messages']} messages{rule}")
    if r.get("bytes") is not None and r["dry_run"]:
        typer.echo(f"  stored text: {fmt_bytes(r['bytes'])}")
    if r["oldest"]:
        typer.echo(f"  oldest: {printable(r['oldest']['id'])} (last active {fmt_time(r['oldest']['last_active'])})")
        typer.echo(f"  newest: {printable(r['newest']['id'])} (last active {fmt_time(r['newest']['last_active'])})")
    if r["dry_run"]:
        for sid in r["session_ids"][:20]:
            typer.echo(f"    {printable(sid)}")
        if len(r["session_ids"]) > 20:
            typer.echo(f"    … {len(r['session_ids']) - 20} more")
    for reason, n in sorted(r["held_back"].items()):
        typer.echo(f"  kept {n} matching lineage(s): {reason.replace('_', ' ')}")
    if r.get("skipped_changed"):
        typer.echo(f"  skipped {len(r['skipped_changed'])} sessions that changed while pruning")
    if r.get("skipped_too_big"):
        typer.echo(f"  kept {len(r['skipped_too_big'])} sessions in conversations too big to delete while other "
                   "processes have the store open (their delete would hold the lock past HERMES_MAINT_MAX_UNIT_S); "
                   "stop Hermes and prune again")
