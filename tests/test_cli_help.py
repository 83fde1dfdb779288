"""The CLI as an operator reads it: typed parameters in --help and in errors, examples kept as written,
and no flag a command would always refuse."""

import re

import click
import pytest

from maint.cli import COMMANDS, app
from tests.conftest import REPO, file_hash, run_subprocess
from tests.storegen import StoreBuilder


def all_commands():
    """(path of names, click command) for every command and jobs subcommand."""
    ctx = click.Context(app, info_name="hermes-maint")
    for name in COMMANDS:
        cmd = app.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            for sub in cmd.list_commands(ctx):
                yield [name, sub], cmd.get_command(ctx, sub)
        else:
            yield [name], cmd


NAMES = [" ".join(words) for words, _ in all_commands()]


@pytest.fixture(scope="module")
def helps():
    return {" ".join(words): run_help(words) for words, _ in all_commands()}


def run_help(words):
    from click.testing import CliRunner

    result = CliRunner().invoke(app, [*words, "--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "state.db"
    with StoreBuilder(path) as b:
        b.session("old", age=200, messages=3)
        b.session("young", age=1, messages=3)
    return path


# -- typed parameters in --help -------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_help_names_each_kind_of_value(helps, name):
    text = helps[name]
    assert "<str>" not in text and "<int>" not in text and "<list" not in text and "<path>" not in text


def test_numbers_times_and_paths_show_their_kind(helps):
    assert re.search(r"--limit INTEGER\s", helps["list"]) and re.search(r"--limit INTEGER\s", helps["history"])
    assert re.search(r"--older-than TIME\s", helps["prune"]) and re.search(r"--min-cost USD\s", helps["prune"])
    assert re.search(r"--max-messages INTEGER\s", helps["archive"]) and "--cwd DIR" in helps["export"]
    assert "--keep INTEGER" in helps["backup"] and "--max-gap-seconds SECONDS" in helps["repair-routing"]
    assert "--db PATH" in helps["stats"] and "--metrics-file PATH" in helps["prune"] and "--into PATH" in \
        helps["optimize"]
    assert "--format [jsonl|md|qmd|html|trace]" in helps["export"] and "--fail-on [warning|critical]" in \
        helps["doctor"]
    assert "--profile NAME" in helps["stats"] and "--jobs-dir PATH" in helps["jobs run"]


def test_arguments_are_documented(helps):
    assert re.search(r"Positional arguments:\n  ID\s+Session id or a unique prefix of one\.", helps["delete"])
    assert "Usage: hermes-maint set-journal-mode [OPTIONS] MODE" in helps["set-journal-mode"]
    assert "SNAPSHOT" in helps["restore"] and "FILE" in helps["import"] and "NAME" in helps["jobs run-once"]


def test_the_filter_flags_are_one_declaration_shown_alike(helps):
    sections = {name: helps[name].split("\nFilters:\n", 1)[1] for name in ("prune", "archive", "export")}
    assert sections["prune"] == sections["archive"] == sections["export"]
    assert len(re.findall(r"^  --", sections["prune"], re.M)) == 22


def test_choices_offered_are_the_librarys():
    from maint.commands import export_cmd, history_cmd, list_cmd
    from maint.export.pipeline import FORMATS
    from maint.ops.history import KINDS
    from maint.ops.journal import MODES
    from maint.ops.listing import SORTS

    assert export_cmd.FORMATS == FORMATS and history_cmd.KINDS == KINDS and list_cmd.SORTS == SORTS
    journal = app.get_command(click.Context(app), "set-journal-mode")
    assert tuple(journal.params[0].type.choices) == MODES


# -- examples kept as written -----------------------------------------------------------------------

@pytest.mark.parametrize("name,lines", [
    ("recover", ["hermes-maint recover              # report only",
                 "hermes-maint recover --apply      # asks, then creates the placeholders"]),
    ("repair-fts", ["hermes-maint repair-fts            # report only", "hermes-maint repair-fts --apply"]),
    ("doctor", ["hermes-maint doctor", "hermes-maint doctor --all-profiles --summary --fail-on critical",
                "hermes-maint doctor --json --metrics-file /var/lib/node_exporter/textfile/hermes.prom"]),
    ("history", ["hermes-maint history", "hermes-maint history --kind sweep --json"]),
    ("archive", ["hermes-maint archive --newer-than 5h --dry-run", "hermes-maint archive --idle --yes"]),
    ("list", ["hermes-maint list --workspace my-project --limit 50 --sort last-active"]),
])
def test_example_lines_stay_as_written(helps, name, lines):
    shown = [line.strip() for line in helps[name].splitlines()]
    for line in lines:
        assert line in shown, (line, helps[name])


# -- no flag a command always refuses -------------------------------------------------------------------

ONE_STORE = ["export", "delete", "rename", "pin", "unpin", "restore", "import"]


@pytest.mark.parametrize("name", ONE_STORE)
def test_commands_that_name_one_store_do_not_offer_all_profiles(helps, name):
    options = helps[name].split("\nOptions:\n", 1)[1]
    assert not re.search(r"^  --all-profiles\s", options, re.M)
    assert "--profile NAME" in options and "--db PATH" in options


@pytest.mark.parametrize("args", [["export", "-"], ["delete", "old"], ["rename", "old", "x"], ["pin", "old"],
                                  ["unpin", "old"], ["restore", "snap.db", "--yes"], ["import", "all.jsonl", "--yes"]])
def test_passing_all_profiles_there_is_no_such_option(args, hermes_home, store):
    before = file_hash(store)
    result = run_subprocess(*args, "--all-profiles", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 2 and result.stderr == "hermes-maint: error: No such option '--all-profiles'. " \
                                                       "Did you mean '--profile'?\n"
    assert file_hash(store) == before


def test_repair_profiles_offers_no_store_flags(helps):
    options = helps["repair-profiles"].split("\nOptions:\n", 1)[1]
    assert not re.search(r"^  --(db|profile|all-profiles)\s", options, re.M)


def test_commands_that_take_all_profiles_still_offer_it(helps):
    for name in ("prune", "archive", "stats", "list", "pinned", "optimize", "sweep", "autoprune", "set-journal-mode",
                 "repair-prompts", "repair-routing", "repair-fts", "recover", "doctor", "history", "backup",
                 "jobs run", "jobs run-once"):
        assert re.search(r"^\s+--all-profiles\s", helps[name], re.M), name


# -- typed parameters refuse bad input in one line --------------------------------------------------

MAX = 2**62


@pytest.mark.parametrize("args,line", [
    (["list", "--limit", "many"], f"--limit: bad value 'many' (expected a whole number from 0 to {MAX})"),
    (["list", "--limit", "-5"], f"--limit: bad value '-5' (expected a whole number from 0 to {MAX})"),
    (["history", "--limit", "101"], "--limit: bad value '101' (expected a whole number from 1 to 100)"),
    (["backup", "--keep", "0"], "--keep: bad value '0' (expected a whole number >= 1; the new snapshot always stays)"),
    (["prune", "--older-than", "fortnight"], "--older-than: bad value 'fortnight' (expected a duration (30m, 5h, "
                                             "2d, 1w), a number of days (30) or an ISO date/time (2026-07-05, "
                                             "2026-07-05 14:30))"),
    (["archive", "--min-tool-calls", "1.5"], f"--min-tool-calls: bad value '1.5' (expected a whole number from 0 "
                                             f"to {MAX})"),
    (["export", "-", "--max-cost", "free"], "--max-cost: bad value 'free' (expected a number of US dollars >= 0, "
                                            "e.g. 0.05)"),
    (["prune", "--source", " "], "--source: empty value (expected a non-empty string)"),
    (["repair-routing", "--max-gap-seconds", "15m"], "--max-gap-seconds: bad value '15m' (expected a number of "
                                                     "seconds >= 0, e.g. 900)"),
    (["stats", "--db", ""], "--db: empty path (expected the path of a state.db file)"),
    (["prune", "--metrics-file", ""], "--metrics-file: empty path (expected a path to a *.prom file)"),
    (["doctor", "--fail-on", "error"], "--fail-on: 'error' is not one of 'warning', 'critical'."),
    (["set-journal-mode", "truncate"], "MODE: 'truncate' is not one of 'wal', 'delete'."),
    (["set-journal-mode"], "Missing argument 'MODE'. Choose from: wal, delete"),
    (["history", "--kind", "vacuum"], "--kind: 'vacuum' is not one of 'sweep', 'prune', 'archive', 'optimize', "
                                      "'backup', 'restore', 'import', 'repair-prompts', 'repair-profiles', "
                                      "'repair-routing', 'repair-fts', 'recover'."),
    (["recover", "--apply", "--dry-run"], "--apply and --dry-run contradict each other (use one)"),
    (["prune", "--older-than", "3h", "--newer-than", "1h"], "--newer-than/--older-than: empty window (the lower "
                                                            "bound is after the upper bound)"),
])
def test_bad_values_are_one_line_naming_the_value_and_the_form(args, line, hermes_home, store):
    before = file_hash(store)
    db = [] if "--db" in args or args[0] == "set-journal-mode" and len(args) == 1 else ["--db", store]
    result = run_subprocess(*args, *db, env={"HERMES_HOME": str(hermes_home)})
    assert (result.returncode, result.stderr, result.stdout) == (2, f"hermes-maint: error: {line}\n", "")
    assert file_hash(store) == before


def test_every_time_of_a_command_line_counts_back_from_one_instant(cli, store):
    """--newer-than 1h --older-than 1h is a window of one moment: never refused as empty by a microsecond."""
    for _ in range(20):
        result = cli("prune", "--db", store, "--newer-than", "1h", "--older-than", "1h", "--dry-run", "--json")
        assert result.exit_code == 0, result.stderr


def test_no_private_api_of_a_dependency():
    offenders = [p.relative_to(REPO).as_posix() for p in (REPO / "maint").rglob("*.py")
                 if re.search(r"^\s*(import|from) typer|_click\b|click\.\w*\._|from click\.\w*\._",
                              p.read_text(), re.M)]
    assert offenders == []
