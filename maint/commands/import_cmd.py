"""hermes-maint import FILE: options and output; the logic is :func:`maint.ops.importer.import_store`."""

import click

from maint.commands.options import command, dry_run_option, store_options, yes_option
from maint.commands.output import Terminal, printable
from maint.commands.params import FilePath


@command("import")
@click.argument("file", type=FilePath("a jsonl file written by `hermes-maint export` or `hermes sessions export`"),
                help="A jsonl file written by `hermes-maint export` or Hermes's `hermes sessions export`.")
@click.option("--replace", is_flag=True,
              help="Overwrite sessions whose id exists (row and messages), a lineage per transaction.")
@click.option("--drop-missing-columns", "drop_missing", is_flag=True,
              help="Import even though the store lacks some exported columns; their values are left out (and "
                   "listed).")
@dry_run_option
@yes_option
@store_options(all_profiles=False, metrics=True)
def import_sessions(file, replace, drop_missing, dry_run, yes, stores) -> None:
    """Restore sessions from a jsonl export, ours or Hermes's: rows, messages with their flags, marks.

    Sessions whose id exists are skipped (--replace overwrites them); a
    lineage with its subagent runs goes in whole or not at all; search is
    indexed by Hermes's own triggers. Running it twice adds nothing. One store
    at a time (the file's sessions belong to one): use --db or --profile NAME.
    """
    from maint.ops.importer import ImportRequest, import_store

    req = ImportRequest.of(file, replace=replace, drop_missing=drop_missing, dry_run=dry_run,
                           store=stores.targets()[0].path)
    op = Terminal(yes=yes, quiet=stores.as_json)
    # A second import writes nothing at all, not even history.
    stores.run(lambda target: import_store(target, req, op), _render, job="import",
               ran=lambda r: not r["dry_run"] and bool(r["imported"] or r["replaced"]))


def _render(r: dict) -> None:
    verb = "Would import" if r["dry_run"] else "Imported"
    click.echo(f"{verb} {len(r['imported'])} sessions ({r['messages']} messages) from {r['file']} into {r['store']}"
               if not r["dry_run"] else f"{verb} {len(r['imported'])} of {r['sessions_in_file']} sessions from "
                                        f"{r['file']} into {r['store']}")
    if r["replaced"]:
        click.echo(f"  replaced {len(r['replaced'])} existing session(s)")
    if r["skipped_existing"]:
        click.echo(f"  skipped {len(r['skipped_existing'])} session(s) already in the store (--replace overwrites)")
    for sid, reason in r["skipped_busy"].items():
        click.echo(f"  not replaced: {printable(sid)}: {reason}")
    if r["dropped_columns"]:
        click.echo(f"  left out columns the store lacks: {', '.join(r['dropped_columns'])}")
    for key, text in (("detached", "parent not found: unlinked"), ("relinked", "children linked again"),
                      ("renumbered", "message ids taken: renumbered"),
                      ("prompts_dropped", "system prompt not in the export: left empty"),
                      ("usage_kept_out", "a model_usage row the store's key merges with another: kept out")):
        if r[key]:
            click.echo(f"  {text}: {', '.join(r[key][:10])}{' …' if len(r[key]) > 10 else ''}")
    if r["other_profile"]:
        from maint.ops.importer import OTHER_PROFILE

        ids = r["other_profile"]
        click.echo(f"  {OTHER_PROFILE.format(owner=r['store_owner'])}: {', '.join(printable(s) for s in ids[:10])}"
                   f"{' …' if len(ids) > 10 else ''}")
