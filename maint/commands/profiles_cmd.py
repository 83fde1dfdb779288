"""hermes-maint repair-profiles [--apply] [--legacy-main rekey|move]."""

from typing import Annotated, Optional

import typer

from maint.commands.common import JsonOpt, confirm_or_refuse, emit_json, handle_errors
from maint.errors import UsageError
from maint.store.holders import STOP_HERMES, refuse_if_held
from maint.ops.profiles import apply as apply_findings
from maint.ops.profiles import scan, snapshot

ADVICE = {
    "missing_profile": "bound to a profile that does not exist: create it (hermes profile create NAME) "
                       "or migrate the identity",
    "legacy_main": "agent:main rows inside a named profile's store: --legacy-main rekey moves them into this "
                   "profile's namespace, --legacy-main move sends them to the default store",
    "stray_bindings": "Telegram topic bindings keyed for another profile whose session lives here",
}


@handle_errors
def repair_profiles(
    apply: Annotated[bool, typer.Option("--apply", help="Move each stray row to its profile's store.")] = False,
    legacy_main: Annotated[Optional[str], typer.Option("--legacy-main",
                                                       help="rekey | move: what to do with agent:main rows "
                                                            "inside a named profile's store.")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Skip the confirmation.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Proceed when the holder check could not complete.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Find state written into the wrong profile's store; --apply moves it home (snapshot first).

    Scans $HERMES_HOME/state.db and every profiles/*/state.db. Refuses to apply while any
    process holds any of the stores: stop the gateway first.
    """
    if legacy_main not in (None, "rekey", "move"):
        raise UsageError(f"--legacy-main: bad value {legacy_main!r} (expected rekey or move)")
    stores, findings = scan(legacy_main=legacy_main)
    actionable = [f for f in findings if f.action in ("move", "rekey")]
    report = {"stores": {k: str(v) for k, v in stores.items()}, "findings": [f.as_dict() for f in findings],
              "apply": apply, "snapshot": None, "applied": []}
    if apply and actionable:
        for path in stores.values():
            refuse_if_held(path, force=force, doing="repair", advice=STOP_HERMES)
        confirm_or_refuse(yes, f"Apply {len(actionable)} repair(s) across {len(stores)} store(s)?",
                          [_line(f.as_dict()) for f in actionable])
        folder = snapshot(stores)
        report["snapshot"] = str(folder)
        report["applied"] = apply_findings(stores, findings)
    if as_json:
        emit_json(report)
        return
    if not findings:
        typer.echo(f"No profile mix-ups found in {len(stores)} store(s).")
        return
    for f in report["findings"]:
        typer.echo(_line(f))
        if f["kind"] in ADVICE and f["action"] == "report":
            typer.echo(f"    {ADVICE[f['kind']]}")
    if report["snapshot"]:
        typer.echo(f"Snapshot of every store: {report['snapshot']}")
        typer.echo(f"Applied {len(report['applied'])} repair(s). Restart the gateway.")
    elif actionable:
        typer.echo(f"{len(actionable)} repair(s) possible; re-run with --apply (stop the gateway first).")


def _line(f: dict) -> str:
    what = f"{len(f['session_ids'])} session(s)" + (f", {len(f['routing_keys'])} routing row(s)"
                                                     if f["routing_keys"] else "")
    return f"  [{f['kind']}] in {f['store']}'s store, belonging to {f['owner']}: {what} -> {f['action']}"
