"""The real CLI as a separate process: exit codes, one-line errors, the terminal prompt."""

import json
import os
import pty
import select
import subprocess
import sys
import time

from tests.conftest import REPO, file_hash, run_subprocess, session_ids
from tests.storegen import StoreBuilder


def _old_store(tmp_path):
    path = tmp_path / "state.db"
    with StoreBuilder(path) as b:
        b.session("old1", age=200, messages=3)
        b.session("old2", age=150, messages=3)
        b.session("new", age=1)
    return path


def test_module_entry_and_version():
    result = run_subprocess("--version")
    assert result.returncode == 0 and "SQLite 3." in result.stdout


def test_unknown_option_is_one_line_exit_2(tmp_path):
    result = run_subprocess("prune", "--oldr-than", "3")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "--oldr-than" in result.stderr


def test_bad_value_and_missing_store(tmp_path):
    result = run_subprocess("prune", "--db", tmp_path / "nope.db", "--older-than", "3x")
    assert result.returncode == 2 and "--older-than" in result.stderr and "Traceback" not in result.stderr
    result = run_subprocess("prune", "--db", tmp_path / "nope.db", "--yes")
    assert result.returncode == 1 and "no such store" in result.stderr
    assert not (tmp_path / "nope.db").exists()


def test_pipe_without_yes_refused(tmp_path):
    path = _old_store(tmp_path)
    before = file_hash(path)
    result = run_subprocess("prune", "--db", path, input="y\n")
    assert result.returncode == 2 and "not a terminal" in result.stderr
    assert file_hash(path) == before


def _run_on_pty(args, answer):
    """Run the CLI with a terminal on stdin/stdout, answer its prompt, return (code, screen)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "maint", *map(str, args)], stdin=slave, stdout=slave,
                            stderr=slave, cwd=REPO, close_fds=True)
    os.close(slave)
    screen = b""
    deadline = time.time() + 60
    answered = False
    while time.time() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            screen += chunk
        if not answered and b"[y/N]" in screen:
            os.write(master, answer)
            answered = True
        if proc.poll() is not None and not ready:
            break
    proc.wait(timeout=30)
    os.close(master)
    return proc.returncode, screen.decode(errors="replace")


def test_terminal_confirmation_shows_count_oldest_newest(tmp_path):
    path = _old_store(tmp_path)
    code, screen = _run_on_pty(["prune", "--db", path], b"n\n")
    assert code == 1 and "2 sessions, 6 messages" in screen
    assert "oldest: old1" in screen and "newest: old2" in screen \
        and "declined at the prompt; nothing was changed" in screen
    assert session_ids(path) == {"old1", "old2", "new"}
    code, screen = _run_on_pty(["prune", "--db", path], b"y\n")
    assert code == 0 and "Deleted 2 sessions" in screen
    assert session_ids(path) == {"new"}


def test_list_and_stats_parse_their_options_with_click_alone(tmp_path):
    """The CLI is click's, typed by our own parameter types: no typer, no pydantic adapter per option
    (0.1 s of imports), and the command sees the values."""
    path = tmp_path / "state.db"
    with StoreBuilder(path) as b:
        b.session("c1", source="cli", age=2, cwd="/srv/my-project")
        b.session("t1", source="telegram", age=1, cwd="/srv/my-project")
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "maint", "list", "--db", str(path),
                             "--source", "cli", "--workspace", "my-project", "--limit", "5", "--json"],
                            capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert [row["id"] for row in json.loads(result.stdout)["sessions"]] == ["c1"]
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert not {"pydantic", "typer"} & imported and "maint.ops.listing" in imported  # importtime's lines
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "maint", "stats", "--db", str(path), "--json"],
                            capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0 and json.loads(result.stdout)["sessions"] == 2
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert not {"pydantic", "typer"} & imported and "maint.ops.stats" in imported
    bad = run_subprocess("list", "--db", path, "--sort", "newest")
    assert bad.returncode == 2 and "--sort" in bad.stderr and "Traceback" not in bad.stderr
