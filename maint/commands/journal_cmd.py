"""hermes-maint set-journal-mode wal|delete: options and output; the logic is :func:`maint.ops.journal.switch_store`."""

import click

from maint.commands.options import command, store_options


@command("set-journal-mode")
@click.argument("mode", type=click.Choice(["wal", "delete"], case_sensitive=False), metavar="MODE",
                help="wal or delete.")
@click.option("--force", is_flag=True,
              help="Proceed when the holder check could not complete (never when a holder was found).")
@store_options(db_help="Any Hermes SQLite store, e.g. a state.db or kanban.db.")
def set_journal_mode(mode, force, stores) -> None:
    """Switch a store between WAL and rollback journaling; refused while any process holds it.

    Holders are found on this machine only: processes in other containers or VMs sharing
    the volume are invisible, so stop Hermes there yourself first. Hermes releases without a
    database.journal_mode setting (0.19.x, schema 22) switch a store back to WAL on their next
    open; the output says so, and --json reports "sticks": false.
    """
    from maint.ops.journal import switch_store

    stores.run(lambda target: switch_store(target, mode, force=force), _render)


def _render(r: dict) -> None:
    until = ", until Hermes next opens it" if not r["sticks"] else ""
    click.echo(f"{r['store']}: journal mode {r['before']} -> {r['after']}{until} "
               f"(file header bytes 18-19 = {r['header'][0]},{r['header'][1]})")
    if r["reverts_on_open"]:
        click.echo(f"note: {r['reverts_on_open']}")
    for w in r["warnings"]:
        click.echo(f"warning: {w}", err=True)
    if r["config_advice"]:
        said, _, snippet = r["config_advice"].partition(" Set:\n")  # the YAML to set: our own lines, one by one
        click.echo(f"{said} Set:" if snippet else said)
        for line in snippet.splitlines():
            click.echo(line)
