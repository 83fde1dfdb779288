"""hermes-maint import: options and output; the logic is :mod:`maint.ops.importer`."""

from pathlib import Path
from typing import Annotated

import typer

from maint.commands.options import DbOpt, DryRunOpt, JsonOpt, MetricsOpt, ProfileOpt, YesOpt
from maint.commands.output import Terminal
from maint.commands.runner import for_each_store
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
    from maint.commands.recording import metrics_target
    from maint.ops.importer import ImportRequest, import_store

    if all_profiles:
        raise UsageError("import goes into one store (the file's sessions belong to one); "
                         "use --db or --profile NAME")
    metrics = metrics_target(metrics_file)
    targets = resolve_targets(db, profile, False)
    req = ImportRequest.of(file, replace=replace, drop_missing=drop_missing, dry_run=dry_run)
    op = Terminal(yes=yes, quiet=as_json)
    # A second import writes nothing at all, not even history.
    for_each_store(targets, as_json, lambda target: import_store(target, req, op), _render, job="import",
                   ran=lambda r: not r["dry_run"] and bool(r["imported"] or r["replaced"]), metrics_file=metrics)


def _render(r: dict) -> None:
    verb = "Would import" if r["dry_run"] else "Imported"
    typer.echo(f"{verb} {len(r['imported'])} sessions ({r['messages']} messages) from {r['file']} into {r['store']}"
               if not r["dry_run"] else f"{verb} {len(r['imported'])} of {r['sessions_in_file']} sessions from "
                                        f"{r['file']} into {r['store']}")
    if r["replaced"]:
        typer.echo(f"  replaced {len(r['replaced'])} existing session(s)")
    if r["skipped_existing"]:
        typer.echo(f"  skipped {len(r['skipped_existing'])} session(s) already in the store (--replace overwrites)")
    if r["dropped_columns"]:
        typer.echo(f"  left out columns the store lacks: {', '.join(r['dropped_columns'])}")
    for key, text in (("detached", "parent not found: unlinked"), ("renumbered", "message ids taken: renumbered"),
                      ("prompts_dropped", "system prompt not in the export: left empty")):
        if r[key]:
            typer.echo(f"  {text}: {', '.join(r[key][:10])}{' …' if len(r[key]) > 10 else ''}")
