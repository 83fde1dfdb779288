"""hermes-maint autoprune on|off|later|status: the answers to the low-disk question."""

import click

from maint.commands.options import command, store_options
from maint.fmt import fmt_bytes


@command("autoprune")
@click.argument("choice", type=click.Choice(["on", "off", "later", "status"]), default="status", metavar="[CHOICE]",
                help="on | off (config.yaml), later (per store) or status.")
@store_options()
def autoprune(choice, stores) -> None:
    """Turn sessions.auto_prune on or off in config.yaml (comments kept), postpone the question, or show it.

    Each Hermes home has its own config.yaml: on/off edit the one of each chosen store ($HERMES_HOME's,
    or profiles/NAME/'s with --profile; --all-profiles edits each); later and status act on each store.
    """
    from maint.ops.diskcheck import autoprune_store

    stores.run(lambda target: autoprune_store(target, choice), _render)


def _render(r: dict) -> None:
    if "message" in r:
        click.echo(r["message"])
        return
    setting = "on" if r["auto_prune"] else "off"
    click.echo(f"auto_prune: {setting}{'' if r['configured'] else ' (not set; default off)'}  ({r['config']})")
    click.echo(f"disk: {fmt_bytes(r['disk_free'])} free of {fmt_bytes(r['disk_total'])}"
               f"{' — low' if r['low_disk'] else ''}")
