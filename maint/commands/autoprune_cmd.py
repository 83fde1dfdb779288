"""hermes-maint autoprune on|off|later|status: the answers to the low-disk question."""

from enum import StrEnum
from typing import Annotated

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, JsonOpt, ProfileOpt
from maint.commands.runner import for_each_store
from maint.fmt import fmt_bytes
from maint.store.targets import resolve_targets


class Choice(StrEnum):
    on = "on"
    off = "off"
    later = "later"
    status = "status"


def autoprune(
    choice: Annotated[Choice, typer.Argument(help="on | off (config.yaml), later (per store) or status.")]
    = Choice.status,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
) -> None:
    """Turn sessions.auto_prune on or off in config.yaml (comments kept), postpone the question, or show it.

    Each Hermes home has its own config.yaml: on/off edit the one of each chosen store ($HERMES_HOME's,
    or profiles/NAME/'s with --profile; --all-profiles edits each); later and status act on each store.
    """
    from maint.ops.diskcheck import autoprune_store

    for_each_store(resolve_targets(db, profile, all_profiles), as_json,
                   lambda target: autoprune_store(target, choice.value), _render)


def _render(r: dict) -> None:
    if "message" in r:
        typer.echo(r["message"])
        return
    setting = "on" if r["auto_prune"] else "off"
    typer.echo(f"auto_prune: {setting}{'' if r['configured'] else ' (not set; default off)'}  ({r['config']})")
    typer.echo(f"disk: {fmt_bytes(r['disk_free'])} free of {fmt_bytes(r['disk_total'])}"
               f"{' — low' if r['low_disk'] else ''}")
