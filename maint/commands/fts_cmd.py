"""hermes-maint repair-fts: options and output; the logic is :func:`maint.ops.fts_repair.repair_store`."""

import click

from maint.commands.options import apply_options, command, force_option, store_options, yes_option
from maint.commands.output import Terminal


@command("repair-fts")
@apply_options("Rebuild each damaged index (asks first).")
@yes_option
@force_option
@store_options(metrics=True)
def repair_fts(apply, yes, force, stores) -> None:
    """Check both search indexes; --apply rebuilds a damaged or incomplete one (no message changes).

    A rebuild holds the write lock for its whole run, so --apply refuses while
    any process holds the store: stop the gateway first. Without --apply (or
    with --dry-run) nothing is written.

    \b
    Examples:
      hermes-maint repair-fts            # report only
      hermes-maint repair-fts --apply
    """
    from maint.ops.fts_repair import repair_store

    op = Terminal(yes=yes, quiet=stores.as_json)
    stores.run(lambda target: repair_store(target, op, apply=apply, force=force), _render, job="repair-fts",
               ran=lambda r: bool(r["rebuilt"]))


def _render(r: dict) -> None:
    for what in r["interrupted"]:
        click.echo(f"  left by a prune stopped midway: {what}"
                   + ("; put back" if r["recovered"] else "; the next prune or sweep puts it back (or --apply)"))
    if r.get("content_check", "ran") != "ran":
        click.echo(f"  note: {r['content_check']}")
    if not r["damaged"]:
        click.echo(f"Search indexes ok ({', '.join(r['checked']) or 'none present'}).")
        return
    for table, lines in r["damaged"].items():
        click.echo(f"  {table}: {lines[0]}")
    if r["apply"]:
        click.echo(f"Rebuilt {', '.join(r['rebuilt'])}; the integrity check now passes.")
    else:
        click.echo(f"{len(r['damaged'])} damaged search index(es). Re-run with --apply (stop the gateway first).")
