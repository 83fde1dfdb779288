"""stats and list on a real store."""

import os

from maint.store.connection import sqlite_version
from tests.conftest import run_subprocess
from tests.storegen import StoreBuilder


def test_stats_figures(make_store, cli, layout):
    b = make_store(layout)
    b.session("a", source="cli", messages=3)
    b.session("b", source="cli", messages=2)
    b.session("c", source="telegram", messages=4, ended=False)
    b.close()
    r = cli.json("stats", "--db", b.path)
    assert r["sessions"] == 3 and r["messages"] == 9 and r["open_sessions"] == 1
    assert r["sessions_by_source"] == {"cli": 2, "telegram": 1}
    wal = str(b.path) + "-wal"
    expected = os.path.getsize(b.path) + (os.path.getsize(wal) if os.path.exists(wal) else 0)
    assert r["file_bytes"] == expected
    assert 0.0 <= r["free_page_share"] < 1.0 and r["sqlite_version"] == sqlite_version()
    text = cli("stats", "--db", b.path).stdout
    assert "Total sessions: 3" in text and "cli: 2 sessions" in text and sqlite_version() in text


def test_list_limit_and_more_line(make_store, cli):
    b = make_store()
    for n in range(25):
        b.session(f"s{n:02d}", age=n + 1, title=f"title {n}")
    b.close()
    out = cli("list", "--db", b.path).stdout
    assert out.count("\n") == 23 and out.endswith("\n… more not shown (use --limit N to see more)\n")
    assert out.index("s00") < out.index("s01")  # newest activity first
    out = cli("list", "--db", b.path, "--limit", "50").stdout
    assert "more not shown" not in out and "s24" in out


def test_list_source_and_json(make_store, cli):
    b = make_store()
    b.session("t1", source="telegram", age=1)
    b.session("c1", source="cli", age=2)
    b.session("c1_sub", source="subagent", age=2, parent="c1", model_config={"_delegate_from": "c1"})
    b.session("k1", age=5, end_reason="compression", title="proj")
    b.session("k2", age=4, parent="k1", title="proj #2")
    b.session("hidden_arch", age=1, archived=1)
    b.close()
    r = cli.json("list", "--db", b.path)
    ids = [row["id"] for row in r["sessions"]]
    assert ids == ["t1", "c1", "k2"]  # subagent hidden, lineage shown at its tip, archived hidden
    assert {"id", "title", "preview", "last_active", "source"} <= set(r["sessions"][0])
    r = cli.json("list", "--db", b.path, "--source", "telegram")
    assert [row["id"] for row in r["sessions"]] == ["t1"]


def test_list_bad_limit(make_store, cli):
    b = make_store()
    b.session("x")
    b.close()
    result = cli("list", "--db", b.path, "--limit", "-1")
    assert result.exit_code == 2 and "--limit" in result.stderr


def test_stats_flag_counts_and_an_empty_store(make_store, cli):
    """Per-source counts (from Hermes's index on the source when the store has one) and the flag counts
    (one pass over the table) agree; an empty store counts zeros, not nulls."""
    b = make_store("v30")
    b.session("a", source="cli", archived=1)
    b.session("b", source="cli", pinned=1, ended=False)
    b.session("c", source="cron", pinned=1, archived=1)
    b.close()
    r = cli.json("stats", "--db", b.path)
    assert (r["sessions"], r["open_sessions"], r["archived_sessions"], r["pinned_sessions"]) == (3, 1, 2, 2)
    assert r["sessions_by_source"] == {"cli": 2, "cron": 1}
    empty = make_store("v30", name="empty.db")
    empty.close()
    r = cli.json("stats", "--db", empty.path)
    assert (r["sessions"], r["messages"], r["open_sessions"], r["archived_sessions"], r["pinned_sessions"]) == \
        (0, 0, 0, 0, 0)
    assert r["sessions_by_source"] == {}


def test_a_run_imports_only_the_command_it_names(make_store):
    """Most of a short command's time is imports: `list` loads its own module, not the other commands'."""
    import subprocess
    import sys

    b = make_store()
    b.session("s1")
    b.close()
    code = ("import sys; from maint.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print(' '.join(m for m in sys.modules if m.startswith('maint.commands.')), file=sys.stderr)")
    run = subprocess.run([sys.executable, "-c", code, "list", "--db", str(b.path)],
                         capture_output=True, text=True, timeout=60)
    loaded = set(run.stderr.split())
    assert "maint.commands.list_cmd" in loaded and "s1" in run.stdout
    assert not {"maint.commands.export_cmd", "maint.commands.prune_cmd", "maint.commands.jobs_cmd"} & loaded
    overview = subprocess.run([sys.executable, "-m", "maint", "--help"], capture_output=True, text=True, timeout=60)
    assert overview.returncode == 0 and "export" in overview.stdout and "jobs" in overview.stdout
    typo = subprocess.run([sys.executable, "-m", "maint", "lsit"], capture_output=True, text=True, timeout=60)
    assert typo.returncode == 2 and "list" in typo.stderr


def test_list_never_sends_stored_escape_sequences_to_the_terminal(tmp_path):
    store = tmp_path / "state.db"
    with StoreBuilder(store) as b:
        b.session("evil", age=1, title="\x1b[2J\x1b]0;pwned\x07\nsecond line")
    result = run_subprocess("list", "--db", store)
    assert result.returncode == 0 and "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\\x1b[2J" in result.stdout and len(result.stdout.strip().splitlines()) == 3


def test_list_and_stats_work_when_stored_bytes_are_not_utf8(tmp_path, cli):
    """Finding 12 of issue 24: a session id that is not UTF-8 stopped list with exit 2, naming nothing.
    Now the id is named (escaped) and left out, bad bytes in a title or preview are shown escaped."""
    import json

    from tests.test_export_stored_text import bad_store

    store = bad_store(tmp_path / "state.db")
    for sort in ("started", "last-active"):
        result = cli("list", "--db", store, "--sort", sort, "--limit", "0" if sort == "last-active" else "20")
        assert result.exit_code == 0, result.output
        assert "session x\\xff: its id is not UTF-8 text; not listed" in result.stderr
        assert "\\xffA" in result.stdout and "A\\xc3" in result.stdout
    report = cli.json("list", "--db", store)
    assert report["unlisted_ids_not_utf8"] == ["x\\xff"]
    assert sorted(s["id"] for s in report["sessions"]) == ["badmsg", "badtitle", "g0", "g1", "g2"]
    assert {s["id"]: s["title"] for s in report["sessions"]}["badtitle"] == "A\\xc3"
    stats = cli("stats", "--db", store, "--json")
    assert stats.exit_code == 0, stats.output
    assert json.loads(stats.stdout)["sessions"] == 6
