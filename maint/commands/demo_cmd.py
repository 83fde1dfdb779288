"""hermes-maint demo [PATH]: build the demo store; the builder is :mod:`maint.demo`."""

from pathlib import Path
from typing import Annotated

import typer

from maint.commands.options import JsonOpt
from maint.commands.output import emit_json


def demo(
    path: Annotated[Path, typer.Argument(help="Where to create it (must not exist).")] = Path("demo/state.db"),
    as_json: JsonOpt = False,
) -> None:
    """Create a demo Hermes store (current upstream layout) to try every command on.

    Example: hermes-maint demo /tmp/demo.db && hermes-maint prune --db /tmp/demo.db --dry-run
    """
    from maint.demo import build_demo

    counts = build_demo(path)
    if as_json:
        emit_json({"store": str(path), **counts})
    else:
        typer.echo(f"demo store written to {path} ({counts['sessions']} sessions, {counts['messages']} messages)")
