"""hermes-maint demo [PATH]: build the demo store; the builder is :func:`maint.demo.build_demo`."""

from pathlib import Path

import click

from maint.commands.options import command, json_option
from maint.commands.output import emit_json
from maint.commands.params import FilePath


@command("demo")
@click.argument("path", type=FilePath("where to create the demo store"), default=Path("demo/state.db"),
                help="Where to create it (must not exist).  [default: demo/state.db]")
@json_option
def demo(path, as_json) -> None:
    """Create a demo Hermes store (current upstream layout) to try every command on.

    \b
    Example:
      hermes-maint demo /tmp/demo.db && hermes-maint prune --db /tmp/demo.db --dry-run
    """
    from maint.demo import build_demo

    counts = build_demo(path)
    if as_json:
        emit_json({"store": str(path), **counts})
    else:
        click.echo(f"demo store written to {path} ({counts['sessions']} sessions, {counts['messages']} messages)")
