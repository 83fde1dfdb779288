"""hermes-maint pin / unpin ID... and pinned: options and output; the logic is :mod:`maint.ops.sessions`."""

import click

from maint.commands.options import command, store_options, yes_option
from maint.commands.output import Terminal

ids_argument = click.argument("session_ids", metavar="ID", nargs=-1, required=True,
                              help="Session ids or unique prefixes.")


@command("pin")
@ids_argument
@store_options(all_profiles=False)
def pin(session_ids, stores) -> None:
    """Pin sessions: a durable keep flag (never pruned, never auto-archived, always listed).

    Covers the whole compression lineage of each. Needs a store with a pinned column.

    \b
    Example:
      hermes-maint pin 20250305 20250306
    """
    from maint.ops.sessions import pin_sessions

    stores.run(lambda target: pin_sessions(target, list(session_ids), True), _render_set)


@command("unpin")
@ids_argument
@yes_option
@store_options(all_profiles=False)
def unpin(session_ids, yes, stores) -> None:
    """Remove the pin from sessions (their whole compression lineage).

    Whole ids are unpinned at once. A prefix is unpinned only after a confirmation at a
    terminal shows the whole id; without a terminal, or with --yes, whole ids only (the
    next sweep may prune a session that lost its pin).

    \b
    Example:
      hermes-maint unpin 20250305_091523_a1b2c3d4
    """
    from maint.ops.sessions import pin_sessions

    op = Terminal(yes=yes, quiet=stores.as_json)
    stores.run(lambda target: pin_sessions(target, list(session_ids), False, op), _render_set)


@command("pinned")
@store_options()
def pinned(stores) -> None:
    """List pinned conversations; --json is a stable list (sorted by id) to back up the pin set.

    \b
    Example:
      hermes-maint pinned --json > pinned-sessions.json
    """
    from maint.ops.sessions import pinned_report

    stores.run(pinned_report, _render_pinned)


def _render_set(r: dict) -> None:
    verb = "Pinned" if r["pinned"] else "Unpinned"
    for s in r["sessions"]:
        more = f" (+{len(s['lineage']) - 1} segment(s) of its lineage)" if len(s["lineage"]) > 1 else ""
        title = f"  ({s['title']})" if s["title"] else ""
        click.echo(f"{verb} session {s['id']}{more}{title}")


def _render_pinned(r: dict) -> None:
    from maint.ops.listing import relative_time, source_label

    if not r["pinned"]:
        click.echo("No pinned sessions. Pin one with: hermes-maint pin ID")
        return
    click.echo(f"{'Title':<32} {'Last Active':<13} {'Src':<6} ID")
    click.echo("─" * 90)
    for s in r["pinned"]:
        archived = " (archived)" if s["archived"] else ""
        click.echo(f"{(s['title'] or '—')[:30]:<32} {relative_time(s['last_active']):<13} "
                   f"{source_label(s['source']):<6} {s['id']}{archived}")
