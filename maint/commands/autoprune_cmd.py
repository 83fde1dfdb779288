"""hermes-maint autoprune on|off|later|status: the answers to the low-disk question."""

from typing import Annotated

import typer

from maint.commands.common import JsonOpt, command, emit_json, resolve
from maint.config import load_config
from maint.ops.diskcheck import answer, disk_figures, prompt_state
from maint.errors import UsageError
from maint.store.connection import open_store

CHOICES = ("on", "off", "later", "status")


@command
def autoprune(
    targets: dict,
    choice: Annotated[str, typer.Argument(help="on | off | later | status")] = "status",
    as_json: JsonOpt = False,
) -> None:
    """Turn sessions.auto_prune on or off in config.yaml (comments kept), postpone the question, or show it."""
    if choice not in CHOICES:
        raise UsageError(f"autoprune: bad choice {choice!r} (expected one of: {', '.join(CHOICES)})")
    cfg = load_config()
    target = resolve(targets)[0]
    if choice != "status":
        if choice == "later":
            with open_store(target.path) as store:
                message = answer(cfg, store, choice)
        else:
            message = answer(cfg, None, choice)
        emit_json({"choice": choice, "message": message}) if as_json else typer.echo(message)
        return
    figures = disk_figures(target.path.parent if target.path.exists() else cfg.path.parent)
    state = {}
    if target.path.exists():
        with open_store(target.path, readonly=True) as store:
            state = prompt_state(store)
    out = {"auto_prune": cfg.session("auto_prune"), "configured": cfg.has_session_key("auto_prune"),
           "config": str(cfg.path), "disk_free": figures.free, "disk_total": figures.total,
           "low_disk": figures.low, "prompt": state}
    if as_json:
        emit_json(out)
        return
    setting = "on" if out["auto_prune"] else "off"
    typer.echo(f"auto_prune: {setting}{'' if out['configured'] else ' (not set; default off)'}  ({cfg.path})")
    typer.echo(f"disk: {figures.free / 1e9:.1f} GB free of {figures.total / 1e9:.1f} GB"
               f"{' — low' if figures.low else ''}")
