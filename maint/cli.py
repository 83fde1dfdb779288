"""The hermes-maint entry point: the commands attached to the app, and the exit-code boundary.

A run attaches only the command it names (importing one command module, not all of them: most
of a short command's time is imports); ``jobs`` (whose loop runs the others through this app),
``--help``, no command or a name that is none of these attaches every one, so the overview and
click's suggestions see them all. ``maint.cli.app`` is the app with every command attached (for
tests and tools that drive it in-process).
"""

import importlib
import sys

from maint.app import app as _app

# name -> (module under maint.commands, attribute): a command function, or (jobs) a sub-app.
COMMANDS = {
    "prune": ("prune_cmd", "prune"),
    "archive": ("archive_cmd", "archive"),
    "stats": ("stats_cmd", "stats"),
    "list": ("list_cmd", "list_sessions"),
    "delete": ("delete_cmd", "delete"),
    "rename": ("rename_cmd", "rename"),
    "pin": ("pin_cmd", "pin"),
    "unpin": ("pin_cmd", "unpin"),
    "pinned": ("pin_cmd", "pinned"),
    "export": ("export_cmd", "export"),
    "optimize": ("optimize_cmd", "optimize"),
    "sweep": ("sweep_cmd", "sweep"),
    "autoprune": ("autoprune_cmd", "autoprune"),
    "set-journal-mode": ("journal_cmd", "set_journal_mode"),
    "repair-prompts": ("prompts_cmd", "repair_prompts"),
    "repair-profiles": ("profiles_cmd", "repair_profiles"),
    "repair-routing": ("routing_cmd", "repair_routing"),
    "repair-fts": ("fts_cmd", "repair_fts"),
    "recover": ("recover_cmd", "recover"),
    "doctor": ("doctor_cmd", "doctor"),
    "history": ("history_cmd", "history"),
    "demo": ("demo_cmd", "demo"),
    "import": ("import_cmd", "import_sessions"),
    "restore": ("restore_cmd", "restore"),
    "backup": ("backup_cmd", "backup"),
    "jobs": ("jobs_cmd", "jobs_app"),
}

_attached: set[str] = set()


def attach(names=None):
    """The app with *names* (every command when None) attached, each once, in the order of :data:`COMMANDS`."""
    from maint.commands.runner import guard

    for name, (module, attr) in COMMANDS.items():
        if (names is not None and name not in names) or name in _attached:
            continue
        target = getattr(importlib.import_module(f"maint.commands.{module}"), attr)
        if name == "jobs":
            _app.add_typer(target, name=name)
        else:
            _app.command(name)(guard(target))
        _attached.add(name)
    return _app


def __getattr__(name: str):
    if name == "app":
        return attach()
    raise AttributeError(name)


def main(argv: list[str] | None = None) -> None:
    import typer

    from maint.commands import textparams
    from maint.commands.runner import run

    args = sys.argv[1:] if argv is None else argv
    # The job loop runs the other commands through this app: it needs them all.
    named = args[0] if args and args[0] in COMMANDS and args[0] != "jobs" else None
    textparams.install()
    from maint.files import raise_on_termination

    raise_on_termination()
    sys.exit(run(typer.main.get_command(attach(None if named is None else {named})), argv))
