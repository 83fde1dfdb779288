"""The console script's entry (and ``python -m maint``'s): the CLI's modules are imported inside the same guard as
the run, so Ctrl-C while they load (a third of a second, longer on a loaded machine or a cold cache: the operator's
"wrong store" reflex) ends with 130 and no traceback, as it does a moment later (hostile try 13, Q5)."""

import sys


def main() -> None:
    try:
        from maint.cli import main as run_cli
    except KeyboardInterrupt:
        sys.exit(130)  # maint.errors.EXIT_INTERRUPTED (not imported: this module must import nothing of ours)
    run_cli()
