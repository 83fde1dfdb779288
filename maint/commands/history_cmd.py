"""hermes-maint history: options and output; the history is :func:`maint.ops.history.history_report`."""

import json

import click

from maint.commands.options import command, store_options
from maint.commands.params import WholeNumber
from maint.fmt import fmt_time

KINDS = ("sweep", "prune", "archive", "optimize", "backup", "restore", "import", "repair-prompts",  # ops.history.KINDS
         "repair-profiles", "repair-routing", "repair-fts", "recover")


@command("history")
@click.option("--kind", type=click.Choice(KINDS), metavar="JOB",
              help="Only this job (sweep, prune, archive, optimize, backup, restore, import, repair-…, recover).")
@click.option("--limit", type=WholeNumber(1, 100), default=20, show_default=True,
              help="At most this many runs, newest first (1-100).")
@store_options()
def history(kind, limit, stores) -> None:
    """Past runs of every job on this store (the last 100 of each kind), newest first.

    \b
    Examples:
      hermes-maint history
      hermes-maint history --kind sweep --json
    """
    from maint.ops.history import history_report

    stores.run(lambda target: history_report(target, kind, limit), _render)


def _render(r: dict) -> None:
    if not r["runs"]:
        click.echo("No recorded runs" + (f" of {r['kind']}" if r["kind"] else "") + ".")
        return
    for e in r["runs"]:
        took = f"{e['seconds']:.1f}s" if e["seconds"] is not None else "-"
        click.echo(f"{fmt_time(e['at'])}  {e['kind']:<15} {took:>8}  rows {e['rows']:<7} {_gist(e['report'])}")


def _gist(report: dict) -> str:
    """The report's scalar fields on one line (lists, mappings and the store path left out)."""
    parts = [f"{k}={json.dumps(v, default=str)}" for k, v in report.items()
             if k not in ("store", "profile") and not isinstance(v, (list, dict)) and v is not None]
    text = " ".join(parts)
    return text if len(text) <= 110 else text[:109] + "…"
