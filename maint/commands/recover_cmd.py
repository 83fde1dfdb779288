"""hermes-maint recover: options and output; the logic is :func:`maint.ops.recover.recover_store`."""

import click

from maint.commands.options import apply_options, command, store_options, yes_option
from maint.commands.output import Terminal
from maint.fmt import fmt_time


@command("recover")
@apply_options("Create the placeholder sessions (asks first).")
@yes_option
@store_options(metrics=True)
def recover(apply, yes, stores) -> None:
    """Find messages whose session row is missing; --apply gives each session id a placeholder row.

    The placeholder (source 'recovered') is left open: the sweep's orphan
    reaping closes it like other automation sessions once it is idle for
    retention_days. One transaction per session id; no message changes.
    Without --apply (or with --dry-run) nothing is written.

    \b
    Examples:
      hermes-maint recover              # report only
      hermes-maint recover --apply      # asks, then creates the placeholders
    """
    from maint.ops.recover import recover_store

    op = Terminal(yes=yes, quiet=stores.as_json)
    stores.run(lambda target: recover_store(target, op, apply=apply), _render, job="recover",
               ran=lambda r: bool(r["recovered"]))


def _render(r: dict) -> None:
    strays = r["stray_sessions"]
    if not strays:
        click.echo("No stray messages: every message has its session row.")
        return
    if not r["apply"]:
        for s in strays[:20]:
            click.echo(f"  {s['session_id']}  {s['messages']} message(s), "
                       f"{fmt_time(s['first'])} .. {fmt_time(s['last'])}")
        click.echo(f"{r['stray_messages']} stray message(s) under {len(strays)} session id(s). "
                   "Re-run with --apply to give each a 'recovered' placeholder session.")
        return
    click.echo(f"Recovered {len(r['recovered'])} session(s) holding {r['recovered_messages']} message(s) "
               "(source 'recovered', left open: the sweep closes them once idle).")
    for s in r["skipped"]:
        click.echo(f"  skipped {s['session_id']}: {s['reason']}")
