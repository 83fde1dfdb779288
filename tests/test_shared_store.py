"""Two profile names for one store file (a linked folder, a linked or hard-linked state.db) are one store."""

import json
import os
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import file_hash, query, run_subprocess, session_ids
from tests.storegen import StoreBuilder, small_store


def _alias(home, how):
    """Profile a with its own sessions (one tagged profile_name='a'); profile b names a's file *how*."""
    a = home / "profiles" / "a" / "state.db"
    with StoreBuilder(a) as b:
        b.session("own_a", age=1, profile_name="a", messages=3)
        b.session("own_b", age=1, profile_name="b", messages=2)
        b.session("old", age=200)
    with StoreBuilder(home / "state.db") as b:
        b.session("d1", age=1)
    bdir = home / "profiles" / "b"
    if how == "folder":
        os.symlink("a", bdir)
    else:
        bdir.mkdir()
        if how == "file":
            os.symlink("../a/state.db", bdir / "state.db")
        else:
            os.link(a, bdir / "state.db")
    return a


@pytest.mark.parametrize("how", ["folder", "file", "hardlink"])
def test_repair_profiles_apply_keeps_rows_of_an_aliased_store(how, hermes_home):
    a = _alias(hermes_home, how)
    before = query(a, "SELECT id, (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) FROM sessions s "
                      "ORDER BY id")
    result = run_subprocess("repair-profiles", "--apply", "--yes", "--json", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert query(a, "SELECT id, (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) FROM sessions s "
                    "ORDER BY id") == before
    assert [f for f in report["findings"] if f["action"] != "report"] == []
    shared = [f for f in report["findings"] if f["kind"] == "shared_store"]
    assert len(shared) == 1 and shared[0]["store"] == "a" and "a" in shared[0]["reason"] \
        and "b" in shared[0]["reason"]


def test_rows_for_an_alias_in_another_store_move_to_the_shared_file(hermes_home):
    a = _alias(hermes_home, "folder")
    with StoreBuilder(hermes_home / "profiles" / "c" / "state.db") as b:
        b.session("for_b", age=1, profile_name="b", messages=2)
    result = run_subprocess("repair-profiles", "--apply", "--yes", "--json", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    assert "for_b" in session_ids(a) and "for_b" not in session_ids(hermes_home / "profiles" / "c" / "state.db")
    assert query(a, "SELECT COUNT(*) FROM messages WHERE session_id = 'for_b'") == [(2,)]


@pytest.mark.parametrize("how", ["folder", "file"])
def test_all_profiles_runs_a_shared_store_once_and_names_both(how, hermes_home):
    a = _alias(hermes_home, how)
    result = run_subprocess("prune", "--all-profiles", "--older-than", "100", "--yes", "--json",
                            env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["profile"] for r in reports] == [None, "a", "b"]
    ran = [r for r in reports if "matched" in r]
    assert [r["profile"] for r in ran] == [None, "a"] and ran[1]["session_ids"] == ["old"]
    alias = reports[2]
    assert alias["alias_of"] == "a" and str(a) in alias["skipped"] and "b" in alias["skipped"]
    assert session_ids(a) == {"own_a", "own_b"}


def test_all_profiles_text_mode_names_the_alias(hermes_home):
    _alias(hermes_home, "folder")
    result = run_subprocess("stats", "--all-profiles", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    assert "same store file as profile a" in result.stdout


def test_a_hard_linked_store_is_never_written(hermes_home):
    """SQLite keeps a WAL beside each name: a WAL a crash left beside profile b's name was replayed over what we
    wrote through profile a's, corrupting the store (hostile try). A file with several hard links is not changed."""
    a = _alias(hermes_home, "hardlink")
    before = query(a, "SELECT id FROM sessions ORDER BY id")
    for args in (["prune", "--db", a, "--older-than", "100", "--yes"], ["prune", "--profile", "b", "--older-than",
                                                                         "100", "--yes"]):
        result = run_subprocess(*args, env={"HERMES_HOME": str(hermes_home)})
        assert result.returncode == 1 and "2 hard links; refusing to change it" in result.stderr, result.stderr
    result = run_subprocess("prune", "--all-profiles", "--older-than", "100", "--yes", "--json",
                            env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 1 and "hard links" in result.stdout, (result.stdout, result.stderr)
    assert query(a, "SELECT id FROM sessions ORDER BY id") == before
    preview = run_subprocess("prune", "--db", a, "--older-than", "100", "--dry-run", "--json")
    assert preview.returncode == 0 and json.loads(preview.stdout)["session_ids"] == ["old"]
    # The same preflight reaches every command that writes a store (restore has its own test).
    backup = hermes_home / "all.jsonl"
    assert run_subprocess("export", backup, "--db", a).returncode == 0
    for args in (["set-journal-mode", "delete", "--db", a], ["import", backup, "--db", a, "--yes", "--replace"],
                 ["delete", "old", "--db", a, "--yes"], ["optimize", "--db", a]):
        result = run_subprocess(*args, env={"HERMES_HOME": str(hermes_home)})
        assert result.returncode in (1, 2) and "hard links" in result.stderr, (args, result.stderr)
    assert query(a, "SELECT id FROM sessions ORDER BY id") == before


def _users_store(tmp_path, uid=4321):
    """A store of user *uid* in her own folder, as root sees another user's store. What the tests plant there as a
    third user stands for what such a user could have left while the folder was open to her (a store in a folder
    others may create files in is refused outright: test_a_store_whose_folder_lets_others_plant_its_journal_...)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    path = shared / "state.db"
    with StoreBuilder(path) as b:
        b.session("old", age=200)
        b.session("new", age=1)
    os.chown(path, uid, uid)
    os.chown(shared, uid, uid)
    return path


@pytest.mark.skipif(os.geteuid() != 0, reason="the root run is the one a foreign link or journal could steer")
def test_a_root_run_refuses_a_store_reached_through_another_users_link(tmp_path):
    """A user's link to another user's store must not steer root's run at it (hostile try: a profile folder
    pointed root's nightly prune, with that user's config, at someone else's store)."""
    store = _users_store(tmp_path)
    before = query(store, "SELECT id FROM sessions ORDER BY id")
    planted = tmp_path / "shared" / "mine.db"
    os.symlink(store.name, planted)
    os.lchown(planted, 5555, 5555)
    for args in (["stats", "--db", planted], ["prune", "--db", planted, "--older-than", "100", "--yes"],
                 ["export", tmp_path / "out.jsonl", "--db", planted]):
        result = run_subprocess(*args)
        assert result.returncode == 1, (args, result.stderr)
        assert "a symbolic link owned by uid 5555" in result.stderr and "Traceback" not in result.stderr
    assert query(store, "SELECT id FROM sessions ORDER BY id") == before
    os.lchown(planted, 4321, 4321)  # the store owner's own link is followed, as before
    assert run_subprocess("stats", "--db", planted).returncode == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can plant a file owned by another user here")
@pytest.mark.parametrize("planted", ["foreign-wal", "foreign-empty-journal", "linked-wal", "fifo-shm"])
def test_a_journal_another_user_planted_beside_the_store_is_refused(planted, tmp_path):
    """SQLite replays a -wal into the store on open: one planted by another user (or a link, or a FIFO in its
    place) would rewrite the store or hang the run. Every command that opens the store refuses it."""
    store = _users_store(tmp_path)
    before = query(store, "SELECT id FROM sessions ORDER BY id")
    if planted == "foreign-wal":
        side = tmp_path / "shared" / "state.db-wal"
        side.write_bytes(b"")
        os.chown(side, 5555, 5555)
    elif planted == "foreign-empty-journal":  # K3: not hot as it is, but its owner may fill it at any moment
        side = tmp_path / "shared" / "state.db-journal"
        side.write_bytes(b"")
        os.chown(side, 5555, 5555)
    elif planted == "linked-wal":
        side = tmp_path / "shared" / "state.db-wal"
        os.symlink(tmp_path / "elsewhere", side)
    else:
        side = tmp_path / "shared" / "state.db-shm"
        os.mkfifo(side)
    for args in (["stats", "--db", store], ["list", "--db", store],
                 ["prune", "--db", store, "--older-than", "100", "--yes"]):
        result = run_subprocess(*args, timeout=60)
        assert result.returncode == 1, (args, result.stderr)
        assert f"{side}:" in result.stderr and "refusing to open the store" in result.stderr.replace("\n", " ")
        if planted.startswith("foreign"):
            assert "its owner may write into it at any time" in result.stderr.replace("\n", " "), result.stderr
    os.unlink(side)
    assert query(store, "SELECT id FROM sessions ORDER BY id") == before


def test_a_wal_with_a_second_name_is_never_replayed_into_the_store(tmp_path):
    """Hostile try 3, F3 (second consequence): another store's -wal hard-linked in as <store>-wal passed the
    owner check (the same owner) and root's next prune replayed it into the store: malformed."""
    store = small_store(tmp_path / "state.db")
    (tmp_path / "other").mkdir()
    other = small_store(tmp_path / "other" / "state.db")
    keep = sqlite3.connect(other)
    keep.execute("PRAGMA wal_autocheckpoint=0")
    keep.execute("UPDATE sessions SET title = 'other store' WHERE id = 'old0'")
    keep.commit()
    os.link(f"{other}-wal", f"{store}-wal")
    before = file_hash(store)
    for args in (["stats"], ["prune", "--older-than", "100", "--yes"]):
        result = run_subprocess(*args, "--db", store)
        assert result.returncode == 1 and f"{store}-wal: has 2 names" in result.stderr, result.stderr
    keep.close()
    assert file_hash(store) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give the folder to another user here")
@pytest.mark.parametrize("mode, owner, journal, refused", [
    (0o777, 0, "wal", "lets every user create files in it (mode 777)"),  # K2: our held name replaced
    (0o1777, 0, "delete", "lets every user create files in it (mode 1777)"),  # K1: a -journal added
    (0o1777, 0, "wal", "lets every user create files in it (mode 1777)"),  # L1: a -wal added at the open
    (0o755, 5555, "wal", "lets its owner (uid 5555, not the store's) create files in it"),
    (0o700, 0, "delete", None),
    (0o755, 4321, "wal", None),  # the store's owner's own folder
])
def test_a_store_whose_folder_lets_others_plant_its_journal_is_refused(tmp_path, cli, mode, owner, journal, refused):
    """Hostile tries 8 and 9, K1, K2 and L1: another user who may make names beside a store plants a hot -journal
    or a -wal after our checks (over the empty -journal we held, in a folder without the sticky bit; beside a
    rollback-journal store, whose -journal name is free between transactions; a -wal beside a WAL store at rest,
    the moment our held -journal showed our open beginning), and root's stats, prune, sweep or pin replayed it:
    the store became hers. SQLite replays what it finds, so such a store is not opened at all."""
    folder = tmp_path / "shared"
    folder.mkdir()
    path = folder / "state.db"
    with StoreBuilder(path) as b:
        b.session("old", age=200)
        b.session("new", age=1)
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.close()
    if owner == 4321:
        os.chown(path, owner, owner)
    os.chown(folder, owner, owner)
    os.chmod(folder, mode)
    before = query(path, "SELECT id FROM sessions ORDER BY id")
    for args in (["stats"], ["prune", "--older-than", "100", "--yes"]):
        result = cli(*args, "--db", path)
        if refused:
            assert result.exit_code == 1 and refused in result.stderr, (args, result.output)
            assert len(result.stderr.strip().splitlines()) == 1
        else:
            assert result.exit_code == 0, (args, result.output)
    if refused:
        assert query(path, "SELECT id FROM sessions ORDER BY id") == before


def _grant_by_access_list(folder, uid):
    """A POSIX access ACL on *folder* giving user *uid* rwx (what `setfacl -m u:UID:rwx` writes): its mode's group
    bits become the mask, here the owner's private group's look."""
    import struct

    entries = [(0x01, 7, 0xFFFFFFFF), (0x02, 7, uid), (0x04, 5, 0xFFFFFFFF), (0x10, 7, 0xFFFFFFFF),
               (0x20, 5, 0xFFFFFFFF)]
    os.setxattr(folder, "system.posix_acl_access",
                struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries))


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give the folder to another user here")
def test_a_store_whose_folder_an_access_list_opens_to_another_user_is_refused(tmp_path, cli):
    """Mode bits alone miss a user an ACL lets write the folder: its group bits show the mask, which looked like a
    private group's. Such a user can add a -wal or -journal as well as one the mode names."""
    folder = tmp_path / "shared"
    folder.mkdir()
    path = folder / "state.db"
    with StoreBuilder(path) as b:
        b.session("old", age=200)
    _grant_by_access_list(folder, 5555)
    assert os.stat(folder).st_mode & 0o070 == 0o070
    for args in (["stats"], ["prune", "--older-than", "100", "--yes"]):
        result = cli(*args, "--db", path)
        assert result.exit_code == 1 and "the users and groups of its access list" in result.stderr, result.output
    os.removexattr(folder, "system.posix_acl_access")
    os.chmod(folder, 0o755)
    assert cli("stats", "--db", path).exit_code == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give the folders to another user here")
@pytest.mark.parametrize("mode, owner, refused", [
    (0o777, 0, "is writable by every user without the sticky bit"),  # M5: a team drop folder
    (0o755, 5555, "is owned by another user (uid 5555)"),
    (0o1777, 0, None),  # sticky, as /tmp: no one renames what is not theirs
    (0o755, 0, None),
])
def test_a_store_whose_folder_lies_in_one_others_may_rename_in_is_refused(tmp_path, cli, mode, owner, refused):
    """Hostile try 10, M5: only the store's own folder was judged. In a parent others may rename in, another user
    swapped the store's (private) folder with one of hers in a loop (renameat2 RENAME_EXCHANGE), and SQLite opened
    and removed -journal/-wal names in her folder during the owner's runs. Every folder above is judged as config
    folders are (OpenSSH's StrictModes)."""
    parent = tmp_path / "drop"
    folder = parent / "alice"
    folder.mkdir(parents=True)
    path = folder / "state.db"
    with StoreBuilder(path) as b:
        b.session("old", age=200)
    os.chown(parent, owner, owner)
    os.chmod(parent, mode)
    result = cli("stats", "--db", path)
    if refused:
        assert result.exit_code == 1 and refused in result.stderr and f"{parent}" in result.stderr, result.output
        assert "could swap the store's folder" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    else:
        assert result.exit_code == 0, result.output


def test_a_process_mapping_a_file_whose_name_is_not_utf8_stops_no_run(tmp_path):
    """Found by the suite beside hostile try 12: the holder check read every process's /proc/PID/maps as UTF-8
    text, so any process (any user's) that mapped a file with a non-UTF-8 name made every writing command fail
    "the store holds text that is not valid UTF-8"."""
    import subprocess
    import sys

    from maint.store.holders import find_holders

    db = small_store(tmp_path / "state.db")
    odd = os.fsencode(str(tmp_path)) + b"/odd-\xff\xfe.bin"
    code = ("import mmap, os, sys; fd = os.open(os.fsencode(sys.argv[1]), os.O_CREAT | os.O_RDWR);"
            "os.ftruncate(fd, 4096); m = mmap.mmap(fd, 4096); print('ready', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, os.fsdecode(odd)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        with open(f"/proc/{proc.pid}/maps", "rb") as fh:
            assert b"\xff\xfe" in fh.read()  # the odd name is there to be read
        assert find_holders(db).holders == []
        result = run_subprocess("prune", "--db", db, "--older-than", "1d", "--yes", "--json")
        assert result.returncode == 0, result.stderr
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_a_users_holder_check_summarises_roots_processes_and_skips_those_that_cannot_open_the_store(tmp_path):
    """Hostile try 12, P15: as a user, restore and set-journal-mode always refused "holder check incomplete: pid 1:
    access denied; pid 2: …" (root's processes are unreadable to a user), so every user learned --force. Another
    user's process that cannot open the store (0600 files) is not unknown; root's are named once.

    The check runs in this (root) process with alice's effective ids (/proc answers by them), and bob's process is
    /bin/cat: no interpreter another user must be able to execute (root's home may be 0700)."""
    import shutil
    import subprocess
    import tempfile

    from maint.store.holders import HeldStore, find_holders, refuse_if_held

    alice, bob = 1001, 1003
    top = tempfile.mkdtemp(prefix="hm-holders-", dir="/tmp")
    os.chown(top, alice, alice)
    sleeper = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, user=bob, group=bob,
                               extra_groups=[])
    try:
        db = small_store(tmp_path / "state.db")
        folder = os.path.join(top, "store")
        os.mkdir(folder, 0o700)
        os.chown(folder, alice, alice)
        mine = os.path.join(folder, "state.db")
        shutil.copy(db, mine)
        os.chown(mine, alice, alice)

        def as_alice(check):
            os.setegid(alice)
            os.seteuid(alice)
            try:
                return check()
            finally:
                os.seteuid(0)
                os.setegid(0)

        os.chmod(mine, 0o600)
        shut = as_alice(lambda: find_holders(mine))
        assert shut.holders == [] and shut.unknown[0].startswith("root's processes (")
        assert shut.unknown[0].endswith(") cannot be checked by a user: run as root, or pass --force")
        assert not any("access denied" in u for u in shut.unknown), shut.unknown  # bob's process included
        os.chmod(mine, 0o644)  # bob could open it now: his process is unknown again
        opened = as_alice(lambda: find_holders(mine))
        assert f"pid {sleeper.pid}: access denied" in opened.unknown
        assert opened.unknown[0].startswith("root's processes (")  # still once, first (their count varies)
        os.chmod(mine, 0o600)

        def refused():
            try:
                refuse_if_held(Path(mine), force=False, doing="switch its journal mode", advice="")
            except HeldStore as exc:
                return str(exc)
            return None

        line = as_alice(refused)
        assert line is not None and "root's processes (" in line and "pid 1: access denied" not in line, line
    finally:
        sleeper.stdin.close()
        sleeper.wait(timeout=30)
        shutil.rmtree(top, ignore_errors=True)
