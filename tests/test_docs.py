"""docs/cli.md is generated from the commands' --help (docs/gen_cli.py): stale or incomplete fails here."""

import importlib.util
import os
import subprocess
import sys

import click
import pytest

from maint.cli import COMMANDS, app
from tests.conftest import REPO

CLI_MD = REPO / "docs" / "cli.md"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("gen_cli", REPO / "docs" / "gen_cli.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def section(text, title):
    """The help block under ``## title``."""
    body = text.split(f"\n## {title}\n\n```text\n", 1)[1]
    return body.split("\n```\n", 1)[0]


def test_cli_reference_is_what_the_commands_say(gen):
    assert CLI_MD.read_text(encoding="utf-8") == gen.render(), "docs/cli.md is stale: run python docs/gen_cli.py"


def test_every_command_has_its_section():
    text = CLI_MD.read_text(encoding="utf-8")
    ctx = click.Context(app, info_name="hermes-maint")
    names = []
    for name in COMMANDS:
        names.append(name)
        cmd = app.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            names += [f"{name} {sub}" for sub in cmd.list_commands(ctx)]
    missing = [name for name in names if f"\n## hermes-maint {name}\n" not in text]
    assert missing == [] and len(names) == len(COMMANDS) + 3


def test_the_reference_matches_help_printed_in_a_pipe():
    text = CLI_MD.read_text(encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    for words in (["prune"], ["doctor"], ["jobs", "run"]):
        printed = subprocess.run([sys.executable, "-m", "maint", *words, "--help"], capture_output=True, text=True,
                                 cwd=REPO, env=env, timeout=60).stdout
        assert section(text, " ".join(["hermes-maint", *words])) == printed.rstrip("\n")


def test_check_mode_reports_a_stale_reference(gen, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gen, "OUT", tmp_path / "cli.md")
    (tmp_path / "cli.md").write_text("# CLI reference\n\nold\n", encoding="utf-8")
    assert gen.main(["--check"]) == 1 and "stale" in capsys.readouterr().err
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0
