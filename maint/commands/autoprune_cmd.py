"""hermes-maint autoprune on|off|later|status: the answers to the low-disk question."""

from enum import StrEnum
from typing import Annotated

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, JsonOpt, ProfileOpt
from maint.commands.output import emit_json
from maint.commands.runner import for_each_store
from maint.errors import UsageError
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

    on/off edit $HERMES_HOME/config.yaml, which every store shares, so the store options do not
    apply to them; later and status act on each chosen store.
    """
    from maint.config import load_config
    from maint.ops.diskcheck import answer, disk_figures, prompt_state
    from maint.store.connection import open_store

    cfg = load_config()
    if choice in (Choice.on, Choice.off):
        if db is not None or profile is not None or all_profiles:
            raise UsageError(f"autoprune {choice.value}: --db/--profile/--all-profiles do not apply "
                             f"(it edits {cfg.path}, shared by every store)")
        message = answer(cfg, None, choice.value)
        emit_json({"choice": choice.value, "message": message}) if as_json else typer.echo(message)
        return

    def run(target) -> dict:
        if choice is Choice.later:
            with open_store(target.path) as store:
                return {"choice": "later", "message": answer(cfg, store, "later")}
        state = {}
        if target.path.exists() or db is not None:  # no default store yet: the config and disk alone
            with open_store(target.path, readonly=True) as store:
                state = prompt_state(store)
        figures = disk_figures(target.path.parent if target.path.exists() else cfg.path.parent)
        return {"auto_prune": cfg.session("auto_prune"), "configured": cfg.has_session_key("auto_prune"),
                "config": str(cfg.path), "disk_free": figures.free, "disk_total": figures.total,
                "low_disk": figures.low, "prompt": state}

    for_each_store(resolve_targets(db, profile, all_profiles), as_json, run, _render)


def _render(r: dict) -> None:
    if "message" in r:
        typer.echo(r["message"])
        return
    setting = "on" if r["auto_prune"] else "off"
    typer.echo(f"auto_prune: {setting}{'' if r['configured'] else ' (not set; default off)'}  ({r['config']})")
    typer.echo(f"disk: {r['disk_free'] / 1e9:.1f} GB free of {r['disk_total'] / 1e9:.1f} GB"
               f"{' — low' if r['low_disk'] else ''}")
