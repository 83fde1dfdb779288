"""Thin commands: each command's plan -> confirm -> apply lives in its library function, which takes the
store target, the typed request and an operator; the CLI only parses, calls it and prints."""

import ast
import re

import pytest

from maint.errors import Declined
from maint.flow import Operator
from maint.fmt import fmt_bytes
from maint.store.targets import StoreTarget
from tests.conftest import REPO, file_hash, session_ids
from tests.storegen import StoreBuilder

COMMANDS = sorted((REPO / "maint" / "commands").glob("*_cmd.py"))


@pytest.fixture
def old_store(tmp_path):
    path = tmp_path / "state.db"
    with StoreBuilder(path) as b:
        b.session("old1", age=200, messages=3)
        b.session("old2", age=150, messages=3)
        b.session("new", age=1, messages=3)
    return path


class Refuses(Operator):
    asks = True

    def __init__(self):
        self.asked = []

    def confirm(self, question, summary=(), warnings=()):
        self.asked.append((question, list(summary)))
        raise Declined("declined at the prompt; nothing was changed")


def test_the_library_runs_a_command_without_the_cli(old_store):
    """The unattended operator approves (the --yes case): the library alone does what `prune --yes` does."""
    from maint.ops.prune import PruneRequest, prune_store

    report = prune_store(StoreTarget(old_store, None), PruneRequest(), Operator())
    assert report["deleted"] == 2 and sorted(report["session_ids"]) == ["old1", "old2"]
    assert session_ids(old_store) == {"new"}


def test_a_refusing_operator_is_asked_with_the_summary_and_nothing_changes(old_store):
    from maint.ops.prune import PruneRequest, prune_store

    before = file_hash(old_store)
    op = Refuses()
    with pytest.raises(Declined):
        prune_store(StoreTarget(old_store, None), PruneRequest(), op)
    (question, summary), = op.asked
    assert question == "Delete 2 sessions (6 messages)?"
    assert summary[0].startswith("2 sessions, 6 messages, ") and summary[0].endswith(" B of stored text")
    assert file_hash(old_store) == before


def test_a_preview_never_asks(old_store):
    from maint.ops.prune import PruneRequest, prune_store

    report = prune_store(StoreTarget(old_store, None), PruneRequest(dry_run=True), Refuses())
    assert report["matched"] == 2 and session_ids(old_store) == {"old1", "old2", "new"}


def test_command_modules_never_open_a_store_or_ask_themselves():
    """Opening the store, planning, asking and applying are the library's; a command module parses and prints."""
    offenders = []
    for path in COMMANDS:
        text = path.read_text()
        for needle in ("open_store", "maint.store.connection", ".confirm(", "execute_", "plan_"):
            if needle in text:
                offenders.append(f"{path.name}: {needle}")
    assert offenders == []


def test_command_modules_define_no_per_store_closure():
    """The plan -> confirm -> apply steps used to sit in ``run(target)`` closures inside the commands."""
    nested = []
    for path in COMMANDS:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                nested += [f"{path.name}: {node.name}.{inner.name}" for inner in node.body
                           if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert nested == []


# -- one byte formatter ---------------------------------------------------------------------------

def test_one_byte_formatter_in_binary_units():
    assert [fmt_bytes(n) for n in (0, 1023, 1536, 5 * 2**20, 3 * 2**30, 2**42)] == \
        ["0 B", "1023 B", "1.5 KiB", "5.0 MiB", "3.0 GiB", "4096.0 GiB"]


def test_stats_doctor_and_the_disk_notice_share_the_byte_units(old_store, cli):
    from maint.ops.diskcheck import GB, DiskFigures, notice

    stats = cli("stats", "--db", old_store)
    assert stats.exit_code == 0 and re.search(r"Database size: [\d.]+ KiB \(WAL [\d.]+ (Ki)?B\)", stats.stdout)
    doctor = cli.json("doctor", "--db", old_store)
    sizes = [f["what"] for f in doctor["findings"] if f["kind"] in ("db_size", "wal_size")]
    assert sizes and all(re.search(r"\d (B|KiB|MiB|GiB)\b", what) for what in sizes)
    lines = notice(DiskFigures(total=100 * GB, free=GB), {"sessions": 3, "stored_bytes": 3 * 2**20,
                                                          "store_bytes": 4 * 2**20}, 90)
    assert "953.7 MiB free of 93.1 GiB" in lines[0] and "about 3.0 MiB of stored history" in lines[1]
    for path in (REPO / "maint").rglob("*.py"):
        assert not re.search(r"\bdef _?(size|fmt_bytes|human_bytes)\(", path.read_text()) or path.name == "fmt.py", path


def test_prog_is_defined_once():
    assert [p.relative_to(REPO).as_posix() for p in (REPO / "maint").rglob("*.py")
            if re.search(r"^PROG\s*=", p.read_text(), re.M)] == ["maint/__init__.py"]
