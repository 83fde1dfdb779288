"""hermes-maint discard ID|TITLE: options and output; the logic is :func:`maint.ops.discard.discard_store`."""

import click

from maint.commands.options import command, dry_run_option, store_options, yes_option
from maint.commands.output import Terminal, printable


@command("discard")
@click.argument("session", metavar="ID|TITLE", help="Session id (or a unique prefix), or its exact title.")
@click.option("--admission", "admissions", multiple=True, metavar="ID",
              help="Only this lost turn (repeatable); default: every lost turn of the session.")
@dry_run_option
@yes_option
@store_options(all_profiles=False)
def discard(session, admissions, dry_run, yes, stores) -> None:
    """Acknowledge turns lost in a gateway crash, so the session can be continued.

    A turn the gateway was running when it stopped has an unknown outcome and is
    never run again; until it is acknowledged it blocks the session (a scripted
    hermes chat --resume ID -q exits 3). This marks each lost turn settled
    (interrupted), as hermes sessions discard does; inputs queued behind it run
    next. The lost input stays on record: part of it may already have run, so
    check its effects before sending it again. Asks first; without a terminal it
    needs --yes (exit 2), and --yes takes a whole id or the exact title. Stores
    without Hermes's gateway admission ledger are refused.

    \b
    Examples:
      hermes-maint discard 20250305_091523_a1b2c3d4 --yes
      hermes-maint discard "debugging auth flow" --admission a9b59ad3ee914d75967def2a33435c88 --yes
    """
    from maint.ops.discard import discard_store

    op = Terminal(yes=yes, quiet=stores.as_json)
    stores.run(lambda target: discard_store(target, session, list(admissions), op, dry_run=dry_run), _render)


def _render(r: dict) -> None:
    sid = printable(r["session_id"])
    if not r["lost"]:
        click.echo(f"Session {sid} has no lost turns: nothing to discard.")
        return
    verb = "Would discard" if r["dry_run"] else "Discarded"
    count = len(r["lost"]) if r["dry_run"] else len(r["discarded"])
    click.echo(f"{verb} {count} lost turn(s) of session {sid}:")
    for a in r["lost"]:
        click.echo(f"  {a['admission_id']}  {printable(a['text']) or '(no text)'}")
    if r["waiting"]:
        click.echo(f"{len(r['waiting'])} queued input(s) run next.")
