"""hermes-maint clean-markers: options and output; the logic is :func:`maint.ops.clean_markers.clean_markers_store`."""

import click

from maint.commands.options import command, dry_run_option, store_options, yes_option
from maint.commands.output import Terminal, printable


@command("clean-markers")
@click.option("--no-backup", is_flag=True, help="Skip the snapshot taken before the rows are changed.")
@dry_run_option
@yes_option
@store_options()
def clean_markers(no_backup, dry_run, yes, stores) -> None:
    """Clear stale tool-call marker rows ("[memory]" as an assistant reply), as Hermes's clean-markers.

    Older Hermes releases saved a bare marker such as [memory] as the text of an
    assistant turn that made tool calls (#78148). Hermes hides them on every
    load; this clears that text for good (only the text: tool calls and every
    other column stay). Asks first, after a snapshot of the store unless
    --no-backup; without a terminal it needs --yes (exit 2). --dry-run lists
    the rows and writes nothing.

    \b
    Examples:
      hermes-maint clean-markers --dry-run
      hermes-maint clean-markers --yes
    """
    from maint.ops.clean_markers import clean_markers_store

    op = Terminal(yes=yes, quiet=stores.as_json)
    stores.run(lambda target: clean_markers_store(target, op, dry_run=dry_run, backup=not no_backup), _render)


def _render(r: dict) -> None:
    if not r["rows_found"]:
        click.echo("No stale tool-call marker rows: nothing to clean.")
        return
    if r["dry_run"]:
        for row in r["rows"][:20]:
            click.echo(f"  message {row['id']}  session {printable(row['session_id'])}  "
                       f"{printable(row['content'].strip())}")
        click.echo(f"Would clear {r['rows_found']} row(s) in {r['sessions']} session(s).")
        return
    if r["backup"]:
        click.echo(f"  snapshot: {r['backup']}")
    click.echo(f"Cleared {len(r['cleared'])} row(s).")
