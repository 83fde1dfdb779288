"""The hermes-maint entry point: every command attached to the app, and the exit-code boundary."""

import sys

from maint.app import app
from maint.commands import (archive_cmd, autoprune_cmd, backup_cmd, delete_cmd, demo_cmd, doctor_cmd, export_cmd,
                            fts_cmd, history_cmd, import_cmd, jobs_cmd, journal_cmd, list_cmd, optimize_cmd, pin_cmd,
                            profiles_cmd, prompts_cmd, prune_cmd, recover_cmd, rename_cmd, restore_cmd, routing_cmd,
                            stats_cmd, sweep_cmd)
from maint.commands.runner import guard, run

COMMANDS = {
    "prune": prune_cmd.prune,
    "archive": archive_cmd.archive,
    "stats": stats_cmd.stats,
    "list": list_cmd.list_sessions,
    "delete": delete_cmd.delete,
    "rename": rename_cmd.rename,
    "pin": pin_cmd.pin,
    "unpin": pin_cmd.unpin,
    "pinned": pin_cmd.pinned,
    "export": export_cmd.export,
    "optimize": optimize_cmd.optimize,
    "sweep": sweep_cmd.sweep,
    "autoprune": autoprune_cmd.autoprune,
    "set-journal-mode": journal_cmd.set_journal_mode,
    "repair-prompts": prompts_cmd.repair_prompts,
    "repair-profiles": profiles_cmd.repair_profiles,
    "repair-routing": routing_cmd.repair_routing,
    "repair-fts": fts_cmd.repair_fts,
    "recover": recover_cmd.recover,
    "doctor": doctor_cmd.doctor,
    "history": history_cmd.history,
    "demo": demo_cmd.demo,
    "import": import_cmd.import_sessions,
    "restore": restore_cmd.restore,
    "backup": backup_cmd.backup,
}
for name, fn in COMMANDS.items():
    app.command(name)(guard(fn))
app.add_typer(jobs_cmd.jobs_app, name="jobs")


def main(argv: list[str] | None = None) -> None:
    import typer

    from maint.commands import textparams

    textparams.install()
    sys.exit(run(typer.main.get_command(app), argv))
