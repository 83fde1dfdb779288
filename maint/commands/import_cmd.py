"""hermes-maint import: options and output; the logic is :mod:`maint.ops.importer`."""

import time
from pathlib import Path
from typing import Annotated

import typer

from maint.commands.options import DbOpt, DryRunOpt, JsonOpt, MetricsOpt, ProfileOpt, YesOpt
from maint.commands.output import confirm_or_refuse, emit_json, printable, progress
from maint.commands.runner import naming_store
from maint.errors import UsageError
from maint.store.targets import resolve_targets


def import_sessions(
    file: Annotated[Path, typer.Argument(help="A jsonl file written by `hermes-maint export`.")],
    replace: Annotated[bool, typer.Option("--replace", help="Overwrite sessions whose id exists (row and "
                                                            "messages), a lineage per transaction.")] = False,
    drop_missing: Annotated[bool, typer.Option("--drop-missing-columns",
                                               help="Import even though the store lacks some exported columns; "
                                                    "their values are left out (and listed).")] = False,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: Annotated[bool, typer.Option("--all-profiles", hidden=True)] = False,
    metrics_file: MetricsOpt = None,
) -> None:
    """Restore sessions from our jsonl export: rows, every message with its flags, pins and archive marks.

    Sessions whose id exists are skipped (--replace overwrites them); a
    lineage with its subagent runs goes in whole or not at all; search is
    indexed by Hermes's own triggers. Running it twice adds nothing.
    """
    if all_profiles:
        raise UsageError("import goes into one store (the file's sessions belong to one); "
                         "use --db or --profile NAME")
    from maint.commands.recording import metrics_target, record_job, write_metrics
    from maint.ops.importer import execute_import, plan_import, read_export, refuse_missing
    from maint.store.connection import open_store

    metrics = metrics_target(metrics_file)
    target = resolve_targets(db, profile, False)[0]
    checked = read_export(file)  # a bad file is refused before the store is opened
    with naming_store(target.path), open_store(target.path) as store:
        plan = plan_import(store, file, checked, replace=replace)
        existing = [sid for sid in plan.records if sid in plan.existing]
        new = [sid for sid in plan.records if sid not in plan.existing]
        report = {"store": str(target.path), "profile": target.profile, "file": str(plan.path), "dry_run": dry_run,
                  "sessions_in_file": len(plan.records), "messages_in_file": plan.messages, "units": len(plan.units),
                  "missing_columns": plan.missing, "dropped_columns": sorted(plan.missing) if drop_missing else [],
                  "imported": new if dry_run else [], "skipped_existing": [] if replace else existing,
                  "replaced": [s for s in existing if s not in plan.busy] if replace and dry_run else [],
                  "skipped_busy": plan.busy if dry_run else {}, "detached": [], "relinked": [], "renumbered": [],
                  "prompts_dropped": [], "messages": 0, "transactions": 0, "longest_lock_ms": 0.0}
        refuse_missing(plan, drop_missing)
        if dry_run:
            return _out(report, as_json)
        if new or (replace and existing):
            what = f"{len(new)} new session(s)" + (f", replace {len(existing)}" if replace and existing else "")
            confirm_or_refuse(yes, f"Import {what} into {target.path}?", [
                f"{plan.path}: {len(plan.records)} sessions, {plan.messages} messages",
                f"  new: {len(new)}; already in the store: {len(existing)} "
                f"({'replaced' if replace else 'skipped'})",
                *([f"  columns left out: {', '.join(sorted(plan.missing))}"] if plan.missing else []),
            ])
        started = time.monotonic()
        with progress(len(plan.units), "Importing", as_json) as tick:
            result = execute_import(store, plan, replace=replace, drop_missing=drop_missing, on_progress=tick)
        report.update(imported=result.imported, skipped_existing=result.skipped_existing, replaced=result.replaced,
                      skipped_busy=result.skipped_busy, detached=result.detached, relinked=result.relinked,
                      renumbered=result.renumbered, prompts_dropped=result.prompts_dropped,
                      messages=result.messages, transactions=result.transactions,
                      longest_lock_ms=round(result.longest_lock_s * 1000, 1))
    if report["imported"] or report["replaced"]:  # a second import writes nothing at all, not even history
        record_job(target, "import", report, time.monotonic() - started)
        write_metrics(metrics, [target])
    _out(report, as_json)


def _out(r: dict, as_json: bool) -> None:
    if as_json:
        emit_json(r)
        return
    verb = "Would import" if r["dry_run"] else "Imported"
    typer.echo(f"{verb} {len(r['imported'])} sessions ({r['messages']} messages) from {r['file']} into {r['store']}"
               if not r["dry_run"] else f"{verb} {len(r['imported'])} of {r['sessions_in_file']} sessions from "
                                        f"{r['file']} into {r['store']}")
    if r["replaced"]:
        typer.echo(f"  replaced {len(r['replaced'])} existing session(s)")
    if r["skipped_existing"]:
        typer.echo(f"  skipped {len(r['skipped_existing'])} session(s) already in the store (--replace overwrites)")
    for sid, reason in r["skipped_busy"].items():
        typer.echo(f"  not replaced: {printable(sid)}: {reason}")
    if r["dropped_columns"]:
        typer.echo(f"  left out columns the store lacks: {', '.join(r['dropped_columns'])}")
    for key, text in (("detached", "parent not found: unlinked"), ("relinked", "children linked again"),
                      ("renumbered", "message ids taken: renumbered"),
                      ("prompts_dropped", "system prompt not in the export: left empty")):
        if r[key]:
            typer.echo(f"  {text}: {', '.join(r[key][:10])}{' …' if len(r[key]) > 10 else ''}")
