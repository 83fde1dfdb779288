"""hermes-maint autoprune on|off|later|status: the answers to the low-disk question."""

from enum import StrEnum
from typing import Annotated

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, JsonOpt, ProfileOpt
from maint.commands.runner import for_each_store
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
    from maint.config import config_path_for, load_config
    from maint.ops.diskcheck import answer, disk_figures, prompt_state
    from maint.store.connection import open_store

    def run(target) -> dict:
        cfg = load_config(config_path_for(target.path if db is not None else None, target.profile))
        if choice in (Choice.on, Choice.off):  # each Hermes home has its own config.yaml
            return {"choice": choice.value, "config": str(cfg.path), "message": answer(cfg, None, choice.value)}
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
