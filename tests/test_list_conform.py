"""list as the Sessions docs describe it: pinned always listed, --workspace, the two layouts."""

import json


def ids(cli, path, *args):
    result = cli("list", "--db", path, "--json", *args)
    assert result.exit_code == 0, result.output
    return [row["id"] for row in json.loads(result.stdout)["sessions"]]


def test_pinned_sessions_always_listed(make_store, cli):
    b = make_store("v30")
    b.session("pinned_arch", age=40, pinned=1, archived=1, title="keep me")
    b.session("arch", age=1, archived=1)
    b.session("pinned_hidden", age=41, pinned=1, hidden=1)
    b.session("bot", age=2, pinned=1, hidden=1, title="Bot Chat")  # Bot Mode's own: stays hidden
    b.session("orch", age=3)
    b.session("pinned_sub", source="subagent", age=3, parent="orch", pinned=1,
              model_config={"_delegate_from": "orch"})
    for n in range(6):
        b.session(f"new{n}", age=0.1 + n / 100)
    b.close()
    listed = ids(cli, b.path, "--limit", "0")
    assert "pinned_arch" in listed and "pinned_hidden" in listed and "pinned_sub" in listed
    assert "arch" not in listed and "bot" not in listed
    r = cli.json("list", "--db", b.path, "--limit", "3")
    shown = [row["id"] for row in r["sessions"]]
    # The three newest, then every pinned one the limit cut off.
    assert shown == ["new0", "new1", "new2", "pinned_sub", "pinned_arch", "pinned_hidden"]
    assert r["total"] == 10 and r["shown"] == 6 and r["more"] is True
    row = next(x for x in r["sessions"] if x["id"] == "pinned_arch")
    assert row["pinned"] is True and row["archived"] is True
    assert cli("list", "--db", b.path, "--limit", "3").stdout.endswith(
        "\n… more not shown (use --limit N to see more)\n")


def test_workspace_filter(make_store, cli, layout, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    b = make_store(layout)
    b.session("repo_sub", age=1, cwd="/srv/code/my-project/sub", git_repo_root="/srv/code/my-project")
    b.session("repo_old", age=2, cwd="/tmp/my-project-old")
    b.session("other", age=3, cwd="/srv/Other")
    b.session("nowhere", age=4)
    b.session("home_x", age=5, cwd=str(tmp_path / "home" / "x" / "y"))
    b.close()
    assert ids(cli, b.path, "--workspace", "my-project") == ["repo_sub", "repo_old"]  # substring
    assert ids(cli, b.path, "--workspace", "code/my-project/") == ["repo_sub"]  # the repo root, not the cwd
    assert ids(cli, b.path, "--workspace", "other") == ["other"]  # case-insensitive
    assert ids(cli, b.path, "--workspace", "~/x") == ["home_x"]
    assert ids(cli, b.path, "--workspace", "sub") == []  # repo_sub: the key is the repo root, not its cwd
    r = cli.json("list", "--db", b.path, "--workspace", "my-project")
    assert r["sessions"][0]["workspace"] == "/srv/code/my-project"
    bad = cli("list", "--db", b.path, "--workspace", "  ")
    assert bad.exit_code == 2 and "--workspace" in bad.stderr and "Traceback" not in bad.output


def test_layouts_relative_times_and_source_names(make_store, cli, layout):
    b = make_store(layout)
    b.session("tg", source="telegram", age=2 / 24)
    b.session("dc", source="discord", age=1.2)
    b.session("cl", source="cli", age=3.5)
    b.close()
    lines = cli("list", "--db", b.path).stdout.splitlines()
    assert lines[0].split() == ["Preview", "Last", "Active", "Src", "ID"]
    assert lines[0].index("Last Active") == 51 and lines[0].index("Src") == 65
    assert set(lines[1]) == {"─"}
    by_id = {line.split()[-1]: line for line in lines[2:]}
    assert by_id["tg"][51:].split() == ["2h", "ago", "tele", "tg"]
    assert by_id["dc"][51:].split() == ["yesterday", "disc", "dc"]
    assert by_id["cl"][51:].split() == ["3d", "ago", "cli", "cl"]

    b2 = make_store(layout, name="titled.db")
    b2.session("t1", age=2 / 24, title="refactoring auth")
    b2.session("t2", age=3.5)
    b2.close()
    lines = cli("list", "--db", b2.path).stdout.splitlines()
    assert lines[0].split() == ["Title", "Preview", "Last", "Active", "ID"] and lines[0].index("Preview") == 23
    assert lines[2].startswith("refactoring auth ") and lines[2].split()[-3:] == ["2h", "ago", "t1"]
    assert lines[3].startswith("— ") and lines[3].split()[-3:] == ["3d", "ago", "t2"]


def test_default_order_is_hermes_own_by_start_and_last_active_is_asked_for(make_store, cli, layout):
    """Hermes lists conversations newest start first, a compression chain by its first session's start
    but shown at its live tip; --sort last-active orders by activity. Without an index on the start
    (the v30 layout here), the same rows."""
    b = make_store(layout)
    b.session("old_busy", age=0.1, started_age=30)  # started a month ago, active just now
    b.session("k1", age=20, started_age=21, end_reason="compression")
    b.session("k2", age=0.5, started_age=19.9, parent="k1")  # the chain's tip, active recently
    b.session("fresh", age=1, started_age=1.5)
    b.session("mid", age=5, started_age=6)
    b.session("sub", source="subagent", age=0.2, started_age=0.3, parent="mid", model_config={"_delegate_from": "mid"})
    b.session("gone", age=0.2, started_age=0.4, archived=1)
    b.close()
    assert ids(cli, b.path) == ["fresh", "mid", "k2", "old_busy"]
    assert ids(cli, b.path, "--sort", "started") == ["fresh", "mid", "k2", "old_busy"]
    assert ids(cli, b.path, "--sort", "last-active") == ["old_busy", "k2", "fresh", "mid"]
    r = cli.json("list", "--db", b.path, "--limit", "3")
    assert [row["id"] for row in r["sessions"]] == ["fresh", "mid", "k2"] and (r["total"], r["shown"]) == (4, 3)
    assert r["sessions"][2]["root_id"] == "k1" and r["sessions"][2]["segments"] == 2
    assert cli("list", "--db", b.path, "--limit", "3").stdout.endswith(
        "\n… more not shown (use --limit N to see more)\n")
    if layout == "v22":  # the order of Hermes's own `hermes sessions list`
        from hermes_state import SessionDB

        db = SessionDB(b.path)
        try:
            assert [s["id"] for s in db.list_sessions_rich(limit=20)] == ids(cli, b.path)
        finally:
            db.close()


def test_wide_characters_keep_the_columns(make_store, cli):
    """A CJK title or preview takes two columns a character: the Last Active column must still line up."""
    from unicodedata import east_asian_width

    b = make_store("v30")
    b.session("ja", age=2 / 24, title="日本語のタイトルがとても長いセッションです")
    b.session("en", age=3.5, title="plain title")
    b.close()
    import sqlite3
    c = sqlite3.connect(b.path)
    c.execute("UPDATE messages SET content = ? WHERE session_id = 'ja'",
              ("認証モジュールのリファクタリングを手伝って" * 3,))
    c.commit()
    c.close()
    lines = cli("list", "--db", b.path).stdout.splitlines()

    def col(line: str, text: str) -> int:  # terminal column where *text* starts
        head = line[:line.index(text)]
        return sum(2 if east_asian_width(c) in ("W", "F") else 1 for c in head)

    assert col(lines[0], "Last Active") == 64
    rows = {line.split()[-1]: line for line in lines[2:]}
    assert col(rows["ja"], "2h ago") == 64 and col(rows["en"], "3d ago") == 64


def text_ids(cli, path, *args):
    """The ids of the text listing (last column) and whether it ends with the docs' "more" line."""
    out = cli("list", "--db", path, *args).stdout.splitlines()
    more = out[-1] == "… more not shown (use --limit N to see more)"
    return [line.split()[-1] for line in out[2:len(out) - more]], more


def test_text_list_walks_past_sessions_nobody_sees(make_store, cli, layout):
    """The text listing does not count: it walks sessions by start until it has the page and one more
    conversation; dozens of newer subagent runs and archived sessions only make it walk further."""
    b = make_store(layout)
    b.session("orch", age=50, started_age=50)
    for n in range(40):
        b.session(f"sub{n:02d}", source="subagent", age=0.01, started_age=0.5 + n / 1000, parent="orch",
                  model_config={"_delegate_from": "orch"})
        b.session(f"arch{n:02d}", age=0.01, started_age=0.6 + n / 1000, archived=1)
    b.session("seen1", age=2, started_age=3)
    b.session("seen2", age=4, started_age=5)
    b.close()
    assert text_ids(cli, b.path, "--limit", "1") == (["seen1"], True)
    assert text_ids(cli, b.path, "--limit", "2") == (["seen1", "seen2"], True)  # orch is the third
    assert text_ids(cli, b.path, "--limit", "3") == (["seen1", "seen2", "orch"], False)
    r = cli.json("list", "--db", b.path, "--limit", "2")
    assert (r["total"], r["shown"], r["more"]) == (3, 2, True)


def test_text_list_places_a_chain_by_its_first_start_past_the_walk(make_store, cli, layout):
    """A compression chain whose live tip started just now is listed where its first session started,
    even when that start is far past the newest sessions the walk read first."""
    b = make_store(layout)
    b.session("k1", age=40, started_age=60, end_reason="compression")
    b.session("k2", age=0.01, started_age=0.02, parent="k1")
    for n in range(12):
        b.session(f"new{n:02d}", age=1 + n, started_age=1 + n)
    b.close()
    news = [f"new{n:02d}" for n in range(12)]
    assert text_ids(cli, b.path, "--limit", "12") == (news, True)
    assert text_ids(cli, b.path, "--limit", "13") == (news + ["k2"], False)
    assert ids(cli, b.path, "--limit", "13")[-1] == "k2"


def test_no_more_line_when_only_pinned_ones_are_past_the_limit(make_store, cli):
    b = make_store("v30")
    for n in range(3):
        b.session(f"new{n}", age=1 + n)
    b.session("old_pin", age=30, pinned=1)
    b.session("old_chain1", age=20, started_age=25, end_reason="compression")
    b.session("old_chain2", age=19, started_age=19.5, parent="old_chain1", pinned=1)
    b.close()
    assert text_ids(cli, b.path, "--limit", "3") == (["new0", "new1", "new2", "old_chain2", "old_pin"], False)
    r = cli.json("list", "--db", b.path, "--limit", "3")
    assert (r["total"], r["shown"], r["more"]) == (5, 5, False)
    b2 = make_store("v30", name="b2.db")
    for n in range(4):
        b2.session(f"new{n}", age=1 + n)
    b2.session("old_pin", age=30, pinned=1)
    b2.close()
    assert text_ids(cli, b2.path, "--limit", "3") == (["new0", "new1", "new2", "old_pin"], True)


def test_text_list_takes_the_largest_limit(make_store, cli):
    b = make_store("v30")
    for n in range(3):
        b.session(f"s{n}", age=1 + n)
    b.close()
    top = "4611686018427387904"  # the largest --limit accepted
    for limit in (top, "2305843009213693951"):
        result = cli("list", "--db", b.path, "--limit", limit)
        assert result.exit_code == 0, result.output
        assert text_ids(cli, b.path, "--limit", limit) == (["s0", "s1", "s2"], False)


def test_a_walk_past_its_bound_counts_instead(make_store, monkeypatch):
    """Thousands of subagent runs newer than anything listed: past MAX_WALK sessions read by start, the
    text listing judges every session once (as --json does) instead of walking on."""
    from maint.ops import listing_by_start
    from maint.ops.listing import list_conversations
    from maint.store.connection import open_store

    b = make_store("v30")
    b.session("orch", age=50, started_age=50)
    for n in range(60):
        b.session(f"sub{n:02d}", source="subagent", age=0.01, started_age=0.5 + n / 1000, parent="orch",
                  model_config={"_delegate_from": "orch"})
    b.session("seen1", age=2, started_age=3)
    b.session("seen2", age=4, started_age=5)
    b.close()
    monkeypatch.setattr(listing_by_start, "MAX_WALK", 40)
    picks = []
    real_pick = listing_by_start.pick
    monkeypatch.setattr(listing_by_start, "pick", lambda *a, **k: picks.append(1) or real_pick(*a, **k))
    with open_store(b.path) as store:
        rows, total, more, _cut = list_conversations(store, limit=1, count=False)
        assert ([r["id"] for r in rows], total, more) == (["seen1"], None, True) and picks == [1]
        rows, total, more, _cut = list_conversations(store, limit=3, count=False)
        assert ([r["id"] for r in rows], total, more) == (["seen1", "seen2", "orch"], None, False)
