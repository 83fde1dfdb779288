import contextlib
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from maint.cli import app
from tests.storegen import StoreBuilder

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _a_home_of_its_own(tmp_path_factory, monkeypatch):
    """No test reads or writes the runner's own ~/.hermes: a test that names its store with --db and no
    HERMES_HOME would read that home's config.yaml (a `auto_prune: true` someone left there changed what a
    sweep did) and leave restore's safety snapshots in its state-snapshots/. Each test starts with an empty
    home of its own; the ``hermes_home`` fixture gives one the test can see."""
    home = tmp_path_factory.mktemp("default-home")
    home.chmod(0o700)
    monkeypatch.setenv("HERMES_HOME", str(home))


@pytest.fixture(autouse=True)
def _root_logging_as_found():
    """`jobs run` points the root logger at the stderr of the CliRunner it ran under; a later test's log line
    would then go to that closed stream, and logging prints "--- Logging error ---" with a traceback into the
    later test's output. Each test leaves the root logger's handlers as it found them."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def hermes_home(tmp_path, monkeypatch):
    home = tmp_path / "hermes"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home


@pytest.fixture(params=["v22", "v30"])
def layout(request):
    return request.param


@pytest.fixture
def make_store(tmp_path):
    """make_store(layout="v22") -> StoreBuilder on a fresh state.db (closed at teardown)."""
    made = []

    def factory(layout="v22", name="state.db", path=None):
        b = StoreBuilder(path or tmp_path / name, layout=layout)
        made.append(b)
        return b

    yield factory
    for b in made:
        with contextlib.suppress(Exception):
            b.close()


def file_hash(path: Path) -> str:
    h = hashlib.sha256()
    for suffix in ("", "-wal"):
        p = Path(str(path) + suffix)
        if p.exists():
            h.update(p.read_bytes())
    return h.hexdigest()


def session_ids(path: Path) -> set[str]:
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return {r[0] for r in conn.execute("SELECT id FROM sessions")}
    finally:
        conn.close()


class Cli:
    """The real CLI through click's runner; ``json`` parses its one-object output."""

    def __init__(self):
        self.runner = CliRunner()

    def __call__(self, *args, input=None):
        return self.runner.invoke(app, [str(a) for a in args], input=input)

    def json(self, *args):
        result = self(*args, "--json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)


@pytest.fixture
def cli():
    return Cli()


def run_subprocess(*args, input=None, env=None, timeout=120):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "maint", *map(str, args)], input=input, capture_output=True,
                          text=True, env=full_env, cwd=REPO, timeout=timeout)


class FlockAs:
    """A real process of user *uid* holding a ``flock`` on *path* (a file or a folder, opened read-only by root,
    then handed to that user: what any user who can read it may do, e.g. with a 0644 lock)."""

    CODE = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX);"
            "uid = int(sys.argv[2]); os.setgroups([]); os.setgid(uid); os.setuid(uid);"
            "print('held', flush=True); sys.stdin.read()")

    def __init__(self, path, uid):
        self.child = subprocess.Popen([sys.executable, "-c", self.CODE, str(path), str(uid)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
        assert self.child.stdout.readline().strip() == "held"

    def __enter__(self):
        return self.child.pid

    def __exit__(self, *exc):
        self.child.stdin.close()
        self.child.wait(timeout=30)


class LockHolder:
    """Another process holding the store's write lock (locks are per process, so it must be one)."""

    CODE = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None);"
            "c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); sys.stdin.read(); c.execute('ROLLBACK')")

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", self.CODE, str(self.path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "locked"
        return self

    def __exit__(self, *exc):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def query(path, sql, *params):
    """Rows of one query on a store, through a short-lived standard-library connection."""
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def run_json(cli, command, path, *args):
    """A destructive command with --yes --json through the CLI runner; its parsed report."""
    result = cli(command, "--db", path, "--yes", "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# The CLI in a process whose file size limit (ulimit -f) is *limit* bytes; "past-checks" also turns our own up-front
# room checks off, so the limit is met for real in the middle of a copy.
_LIMITED = """
import resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
if sys.argv[2] == "past-checks":
    import maint.ops.backup as backup, maint.ops.salvage as salvage, maint.ops.vacuum as vacuum
    salvage.room_problem = vacuum.room_problem = lambda *a, **k: None
    backup.check_room = lambda *a, **k: None
from maint.cli import main
sys.argv = ["hermes-maint", *sys.argv[3:]]
main()
"""


def run_size_limited(limit, *args, past_checks=False, env=None):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", _LIMITED, str(limit), "past-checks" if past_checks else "-",
                           *map(str, args)], capture_output=True, text=True, env=full_env, cwd=REPO, timeout=300)
