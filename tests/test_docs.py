"""Generated docs: docs/cli.md from the commands' --help and the settings table of docs/configuration.md from
maint/settings.py (docs/gen_cli.py), docs/benchmarks.md from bench/results/ (bench/report.py): stale or
incomplete fails here."""

import importlib.util
import json
import os
import subprocess
import sys

import click
import pytest

from maint.cli import COMMANDS, app
from tests.conftest import REPO

CLI_MD = REPO / "docs" / "cli.md"
CONFIG_MD = REPO / "docs" / "configuration.md"


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
    monkeypatch.setattr(gen, "CONFIG", tmp_path / "configuration.md")
    (tmp_path / "cli.md").write_text("# CLI reference\n\nold\n", encoding="utf-8")
    (tmp_path / "configuration.md").write_text(CONFIG_MD.read_text(encoding="utf-8"), encoding="utf-8")
    assert gen.main(["--check"]) == 1 and "cli.md is stale" in capsys.readouterr().err
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0


def test_settings_table_is_what_maint_settings_says(gen):
    from maint.settings import SETTINGS, table

    text = CONFIG_MD.read_text(encoding="utf-8")
    assert text == gen.render_config(text), "docs/configuration.md is stale: run python docs/gen_cli.py"
    assert table() in text and all(f"`{s.env}`" in text for s in SETTINGS.values())


def test_a_changed_setting_makes_the_table_stale(gen, tmp_path, monkeypatch, capsys):
    import dataclasses

    from maint import settings

    changed = dict(settings.SETTINGS)
    changed["batch_ms"] = dataclasses.replace(changed["batch_ms"], default=151)
    monkeypatch.setattr(settings, "SETTINGS", changed)
    monkeypatch.setattr(gen, "OUT", tmp_path / "cli.md")
    monkeypatch.setattr(gen, "CONFIG", tmp_path / "configuration.md")
    (tmp_path / "cli.md").write_text(gen.render(), encoding="utf-8")
    (tmp_path / "configuration.md").write_text(CONFIG_MD.read_text(encoding="utf-8"), encoding="utf-8")
    assert gen.main(["--check"]) == 1 and "configuration.md is stale" in capsys.readouterr().err
    assert gen.main([]) == 0
    assert "| `batch_ms` | `HERMES_MAINT_BATCH_MS` | 151 |" in (tmp_path / "configuration.md").read_text()


@pytest.fixture(scope="module")
def report():
    bench = str(REPO / "bench")
    sys.path.insert(0, bench)  # bench/report.py imports bench/common.py as its neighbour
    try:
        spec = importlib.util.spec_from_file_location("bench_report", REPO / "bench" / "report.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(bench)
    return module


def test_benchmarks_page_is_what_the_results_say(report):
    page = REPO / "docs" / "benchmarks.md"
    assert page.read_text(encoding="utf-8") == report.render(), "stale: run python bench/report.py --no-run"


def test_benchmarks_page_follows_a_new_result(report, tmp_path):
    """A result file rewritten by a benchmark changes the page; a page left behind would fail the test above."""
    for src in (REPO / "bench" / "results").glob("*-latest.json"):
        (tmp_path / src.name).write_text(src.read_text())
    prune = json.loads((tmp_path / "prune-latest.json").read_text())
    prune["when"] = "2027-01-01T000000Z"
    (tmp_path / "prune-latest.json").write_text(json.dumps(prune))
    assert "_Run 2027-01-01 00:00 UTC" in report.render(tmp_path)
    assert report.render(tmp_path) != (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
