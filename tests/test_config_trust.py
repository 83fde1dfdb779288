"""Config trust and bounds: what steers us (config.yaml, job files, our rows in state_meta) is obeyed only
when we may trust it, and never parsed past a depth or size that could crash or exhaust a run."""

import json
import os
import sqlite3
import stat

import pytest

from maint import files
from maint.errors import UsageError
from tests.conftest import run_subprocess, session_ids
from tests.storegen import StoreBuilder


def _store(path, n=6):
    with StoreBuilder(path) as b:
        for i in range(n):
            b.session(f"old{i}", age=200 + i, messages=2)
        b.session("young", age=1, messages=2)
    return path


def _store_in_a_sticky_folder(tmp_path):
    """A shared folder anyone may create names in (mode 1777, as /tmp) and a store in it."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    return shared, _store(shared / "state.db")


def _alice_and_a_root_secret(tmp_path, token):
    """alice's home with her store, and beside it a root-only (0600, ours) config naming *token*."""
    home = tmp_path / "alice"
    home.mkdir()
    db = _store(home / "state.db")
    secret = tmp_path / "secret.yaml"
    secret.write_text(f'sessions:\n  retention_days: "{token}"\n')
    os.chmod(secret, 0o600)  # ours (root's, run as root): uid 4321 cannot read it
    return home, db, secret


def _st(uid, mode=0o100600):
    return os.stat_result((mode, 0, 0, 1, uid, uid, 0, 0, 0, 0))


def test_only_our_roots_or_the_folder_owners_unwritable_files_are_trusted():
    me = os.geteuid()
    other = me + 1000
    assert files.untrusted_by(_st(me)) is None
    assert files.untrusted_by(_st(0)) is None
    assert files.untrusted_by(_st(other), also_trusted=other) is None
    assert "another user" in files.untrusted_by(_st(other), also_trusted=me + 1)
    assert "its group" in files.untrusted_by(_st(me, 0o100664))
    assert "every user" in files.untrusted_by(_st(me, 0o100606))


def test_a_config_planted_beside_a_store_in_a_shared_folder_is_refused(tmp_path):
    """Finding 4: another user's config.yaml beside a --db store in a sticky shared folder was obeyed:
    `sessions: {auto_prune: true, retention_days: 0}` made the owner's sweep delete 160 of 162 sessions."""
    shared, db = _store_in_a_sticky_folder(tmp_path)
    planted = shared / "config.yaml"
    planted.write_text("sessions: {auto_prune: true, retention_days: 0}\n")
    if os.geteuid() == 0:
        os.chown(planted, 4321, 4321)  # another (non-root) user's file
        expected = "owned by another user"
    else:
        os.chmod(planted, 0o666)  # a file any user could have written
        expected = "writable by every user"
    before = session_ids(db)
    result = run_subprocess("sweep", "--db", db, "--json")
    assert result.returncode == 2 and expected in result.stderr and "config" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and session_ids(db) == before


def test_a_job_file_writable_by_others_is_refused(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: j\ncommand: [sweep]\ntrigger: {cron: '30 3 * * *'}\nenabled: true\n")
    os.chmod(job, 0o666)
    result = run_subprocess("jobs", "list", "--jobs-dir", tmp_path)
    assert result.returncode == 2 and "writable by every user" in result.stderr, result.stderr
    os.chmod(job, 0o644)
    assert run_subprocess("jobs", "list", "--jobs-dir", tmp_path).returncode == 0


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)) + "sessions: {}\n"


def test_a_yaml_alias_bomb_is_refused_before_it_expands(hermes_home):
    """Finding 11: a billion-laughs config.yaml made `autoprune on|off` take 1.4 GB and run on."""
    db = _store(hermes_home / "state.db")
    (hermes_home / "config.yaml").write_text(BOMB)
    os.chmod(hermes_home / "config.yaml", 0o600)
    for args in (["autoprune", "on"], ["autoprune", "off"], ["sweep", "--db", db]):
        result = run_subprocess(*args, env={"HERMES_HOME": str(hermes_home)}, timeout=120)
        assert result.returncode == 2 and "expands" in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert (hermes_home / "config.yaml").read_text() == BOMB


def test_deeply_nested_yaml_is_one_line_everywhere_it_is_read(hermes_home, tmp_path):
    """Finding 17: YAML nested ~1,000 deep crashed every command (config.yaml) and `jobs list` (a job file)."""
    _store(hermes_home / "state.db")
    deep = "hermes_maint: " + "[" * 1000 + "]" * 1000 + "\n"
    (hermes_home / "config.yaml").write_text(deep)
    os.chmod(hermes_home / "config.yaml", 0o600)
    result = run_subprocess("sweep", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 2 and "nested deeper" in result.stderr and "Traceback" not in result.stderr
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "deep.yaml").write_text("name: " + "[" * 1000 + "]" * 1000 + "\n")
    listed = run_subprocess("jobs", "list", "--jobs-dir", jobs)
    assert listed.returncode == 2 and "nested deeper" in listed.stderr and "Traceback" not in listed.stderr


@pytest.mark.parametrize("value", ["2024-02-30", "2020-13-45", '!!bool "maybe"', '!!int ""', '!!float "1e"',
                                   '!!int "_"'])
def test_a_date_like_value_that_is_no_date_is_one_line_everywhere_it_is_read(hermes_home, tmp_path, value):
    """Hostile try 9, L3: YAML 1.1 reads an unquoted YYYY-MM-DD as a date, and one that is no date raised a
    ValueError out of the loader: a traceback from every command (settings are read at each open), the
    nightly sweep and `jobs list` included."""
    db = _store(hermes_home / "state.db")
    (hermes_home / "config.yaml").write_text(f"sessions:\n  note: {value}\n")
    os.chmod(hermes_home / "config.yaml", 0o600)
    before = session_ids(db)
    for args in (["stats", "--db", db], ["sweep", "--db", db, "--force"]):
        result = run_subprocess(*args, env={"HERMES_HOME": str(hermes_home)})
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert f"{hermes_home / 'config.yaml'}: malformed YAML" in result.stderr and "quote it" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert session_ids(db) == before
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "dated.yaml").write_text(f"name: nightly\nsince: {value}\n")
    listed = run_subprocess("jobs", "list", "--jobs-dir", jobs)
    assert listed.returncode == 2 and "Traceback" not in listed.stderr and "quote it" in listed.stderr, listed.stderr


def _meta(db, key, value):
    conn = sqlite3.connect(db)
    conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)", (key, value))
    conn.commit()
    conn.close()


def test_our_rows_in_state_meta_nested_deep_are_skipped_not_fatal(hermes_home):
    """Finding 17: a history row or hermes_maint.sweep_run nested ~1,000 deep crashed `history` and every
    nightly sweep with RecursionError."""
    db = _store(hermes_home / "state.db")
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    os.chmod(hermes_home / "config.yaml", 0o600)
    deep = "[" * 100_000 + "]" * 100_000
    _meta(db, "hermes_maint.history.sweep.000001", deep)
    _meta(db, "hermes_maint.sweep_run", deep)
    history = run_subprocess("history", "--db", db, "--json")
    assert history.returncode == 0, history.stderr
    swept = run_subprocess("sweep", "--db", db, "--json")
    assert swept.returncode == 0, swept.stderr
    assert len(json.loads(swept.stdout)["pruned_ids"]) >= 6 and "Traceback" not in swept.stderr
    assert stat.S_IMODE(os.stat(db).st_mode)  # the store is still there and readable


@pytest.mark.parametrize("kind", ["fifo", "too big"])
def test_a_config_that_is_not_a_small_regular_file_is_refused_at_once(hermes_home, kind):
    path = hermes_home / "config.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(b"# " + b"x" * (64 << 20) + b"\n")
    result = run_subprocess("sweep", env={"HERMES_HOME": str(hermes_home)}, timeout=120)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr


# -- the way to a config: links and folders (hostile try 3, F10, F27) ---------------------------------

def _link_owned_by(monkeypatch, link, uid):
    """os.lstat reporting *uid* as the owner of the symbolic link *link* (a link of another user, without root)."""
    real = os.lstat

    def fake(path, *args, **kwargs):
        st = real(path, *args, **kwargs)
        if str(path) == str(link) and not kwargs.get("dir_fd"):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, uid, uid, *st[6:]))
        return st

    monkeypatch.setattr(os, "lstat", fake)


def _store_owned_by(monkeypatch, db, uid):
    real = os.stat

    def fake(path, *args, **kwargs):
        st = real(path, *args, **kwargs)
        if str(path) == str(db) and not kwargs.get("dir_fd"):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, uid, uid, *st[6:]))
        return st

    monkeypatch.setattr(os, "stat", fake)


def test_a_root_run_never_writes_the_config_through_a_link_into_a_file_the_stores_owner_cannot_write(
        tmp_path, monkeypatch, cli):
    """Hostile try 3, F10: alice linked her config.yaml to a root-owned YAML file elsewhere; root's `autoprune on
    --db <alice's store>` rewrote that file (new inode, root's). As root, the config is now written only where the
    store's owner could write it, and never through another user's link."""
    from maint import files

    home = tmp_path / "alice"
    home.mkdir()
    db = _store(home / "state.db")
    victim = tmp_path / "etc" / "root.yaml"
    victim.parent.mkdir()
    victim.write_text("# root's file\n")
    os.chmod(victim, 0o644)
    link = home / "config.yaml"
    link.symlink_to(victim)
    monkeypatch.setattr(files, "_as_root", lambda: True)
    monkeypatch.setattr(files, "user_may", lambda uid, path, want: want == os.R_OK)  # she may read it, not write
    _store_owned_by(monkeypatch, db, 4321)  # alice's store ...
    _link_owned_by(monkeypatch, link, 4321)  # ... and alice's link
    for choice in ("on", "off"):
        result = cli("autoprune", choice, "--db", db)
        assert result.exit_code == 1 and "the store's owner (uid 4321) may not change" in result.stderr, result.output
        assert len(result.stderr.strip().splitlines()) == 1
    _link_owned_by(monkeypatch, link, 4322)  # a third user's link: not even read (hostile try 7, J3)
    result = cli("autoprune", "on", "--db", db)
    assert result.exit_code == 2 and "a symbolic link owned by another user (uid 4322)" in result.stderr, result.output
    assert victim.read_text() == "# root's file\n" and link.is_symlink()


def test_a_root_run_reads_a_config_through_a_users_link_only_if_that_user_could(tmp_path, monkeypatch, cli):
    """Hostile try 3, F10 (read side): alice's config.yaml linked to a root-only file made root's doctor read it
    and echo its values ("retention_days is 'SECRET-TOKEN-abc123'")."""
    home, db, secret = _alice_and_a_root_secret(tmp_path, "SECRET-TOKEN-abc123")
    link = home / "config.yaml"
    link.symlink_to(secret)
    _store_owned_by(monkeypatch, db, 4321)  # alice's store ...
    _link_owned_by(monkeypatch, link, 4321)  # ... and her link
    for command in (["doctor"], ["sweep"], ["autoprune", "status"]):
        result = cli(*command, "--db", db)
        assert result.exit_code == (0 if command == ["doctor"] else 2), result.output  # doctor: a finding
        assert "to a file that user cannot read" in result.output and "SECRET" not in result.output


def test_a_third_users_link_in_a_shared_folder_never_chooses_the_config(tmp_path, monkeypatch, cli):
    """Hostile try 7, J3: mallory's symbolic link config.yaml beside alice's store in a sticky shared folder, to a
    YAML file alice owns and anyone may read (`retention_days: 0`), made alice's sweep delete 160 of 162 sessions:
    the link was followed because its owner could read the target. Only the store's owner (or we, or root) may
    choose the config through a link."""
    shared, db = _store_in_a_sticky_folder(tmp_path)
    hers = tmp_path / "hers.yaml"
    hers.write_text("sessions:\n  auto_prune: true\n  retention_days: 0\n")
    os.chmod(hers, 0o644)
    link = shared / "config.yaml"
    link.symlink_to(hers)
    _store_owned_by(monkeypatch, db, 4321)  # alice's store (hers.yaml: root's here, trusted as hers would be)
    _link_owned_by(monkeypatch, link, 4322)  # mallory's link, to a file she may read
    monkeypatch.setattr(files, "user_may", lambda uid, path, want: want == os.R_OK)
    before = session_ids(db)
    for command in (["sweep", "--force"], ["autoprune", "status"]):
        result = cli(*command, "--db", db)
        assert result.exit_code == 2, result.output
        assert "a symbolic link owned by another user (uid 4322)" in result.stderr, result.output
    assert session_ids(db) == before
    _link_owned_by(monkeypatch, link, 4321)  # the same link, alice's: hers to choose
    os.chmod(shared, 0o755)  # in a folder no one else may add names to (a shared one refuses the store itself)
    result = cli("autoprune", "status", "--db", db)
    assert result.exit_code == 0 and "auto_prune: on" in result.output, result.output


def test_a_foreign_links_owner_must_be_able_to_read_the_target(monkeypatch):
    """files.user_may judges by the permission bits along the real path, as the kernel would for that user."""
    from maint import files

    d, f = 0o040000, 0o100000
    table = {"/": (d | 0o755, 0), "/a": (d | 0o755, 0), "/a/mine": (d | 0o700, 4321),
             "/a/mine/c.yaml": (f | 0o600, 4321), "/a/root": (d | 0o700, 0), "/a/root/c.yaml": (f | 0o644, 0),
             "/a/open": (d | 0o755, 0), "/a/open/c.yaml": (f | 0o644, 0), "/a/tmp": (d | 0o1777, 0),
             "/a/tmp/c.yaml": (f | 0o666, 5)}

    def fake_stat(path, *args, **kwargs):
        mode, uid = table[str(path)]
        return os.stat_result((mode, 1, 1, 1, uid, uid, 0, 0, 0, 0))

    monkeypatch.setattr(os, "stat", fake_stat)
    monkeypatch.setattr(os.path, "realpath", lambda p, **kw: str(p))
    monkeypatch.setattr(files, "_groups_of", lambda uid: set())
    assert files.user_may(4321, "/a/mine/c.yaml", os.R_OK) and files.user_may(4321, "/a/mine/c.yaml", os.W_OK)
    assert not files.user_may(4321, "/a/root/c.yaml", os.R_OK)  # a folder it cannot search
    assert files.user_may(4321, "/a/open/c.yaml", os.R_OK) and not files.user_may(4321, "/a/open/c.yaml", os.W_OK)
    assert not files.user_may(4321, "/a/tmp/c.yaml", os.W_OK)  # writable, but another's in a sticky folder
    assert files.user_may(0, "/a/root/c.yaml", os.W_OK)


def test_a_config_in_a_folder_others_may_write_to_without_the_sticky_bit_is_refused(tmp_path, monkeypatch):
    """Hostile try 3, F27: the folder of config.yaml is trusted as OpenSSH trusts the folders of its keys: one any
    user may write to without the sticky bit lets them swap the config for their own (sticky: each file is
    judged by its owner, as before). Group-writable is harmless when the group is the owner's private one."""
    from maint import files
    from maint.config import load_config

    home = tmp_path / "home"
    home.mkdir()
    config = home / "config.yaml"
    config.write_text("sessions:\n  retention_days: 30\n")
    os.chmod(config, 0o600)
    for mode, ok in ((0o777, False), (0o1777, True), (0o755, True)):
        os.chmod(home, mode)
        if ok:
            assert load_config(config).session("retention_days") == 30
        else:
            with pytest.raises(UsageError, match="writable by every user without the sticky bit"):
                load_config(config)
    os.chmod(home, 0o775)
    monkeypatch.setattr(files, "_private_group", lambda st: True)
    assert load_config(config).session("retention_days") == 30
    monkeypatch.setattr(files, "_private_group", lambda st: False)
    with pytest.raises(UsageError, match="writable by its group without the sticky bit"):
        load_config(config)


def _read_as_owned_by(monkeypatch, path, uid):
    """files.read_regular reporting *uid* as the owner of the file at *path* (root's file, without root)."""
    real = files.read_regular

    def fake(p, *args, **kwargs):
        data, st = real(p, *args, **kwargs)
        if str(p) == str(path):
            st = os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, uid, uid, *st[6:]))
        return data, st

    monkeypatch.setattr(files, "read_regular", fake)


def test_a_hard_linked_config_not_the_stores_owners_is_refused_and_never_echoed(tmp_path, monkeypatch, cli):
    """Hostile try 4, G5: alice hard-linked her config.yaml to a root-only file (fs.protected_hardlinks off);
    a hard link has no owner of its own, the file is root's, so root's doctor obeyed it and echoed its values
    ("sessions.retention_days is 'SECRET-TOKEN-hardlink'"). A file with a second name is read only when the
    store's owner owns it."""
    home, db, secret = _alice_and_a_root_secret(tmp_path, "SECRET-TOKEN-hardlink")
    config = home / "config.yaml"
    os.link(secret, config)  # as root: a real second name of root's file
    _store_owned_by(monkeypatch, db, 4321)  # alice's store
    if os.geteuid() != 0:
        _read_as_owned_by(monkeypatch, config, 0)  # the file root's, as in the finding
    for command in (["doctor"], ["sweep"], ["autoprune", "status"]):
        result = cli(*command, "--db", db)
        assert result.exit_code == (0 if command == ["doctor"] else 2), result.output  # doctor: a finding
        assert "has 2 names (a hard link to a file elsewhere)" in result.output and str(config) in result.output
        assert "SECRET" not in result.output
    _read_as_owned_by(monkeypatch, config, 4321)  # alice's own file with a second name: hers to give
    result = cli("autoprune", "status", "--db", db)
    assert result.exit_code == 0 and "has 2 names" not in result.output, result.output


def test_a_second_name_is_trusted_only_from_the_one_who_vouches():
    me, alice = os.geteuid(), 4321

    def st(uid, links):
        return os.stat_result((0o100600, 0, 0, links, uid, uid, 0, 0, 0, 0))

    assert files.foreign_second_name(st(0, 1), alice) is None  # one name: the owner rule alone decides
    assert files.foreign_second_name(st(alice, 2), alice) is None
    assert "belongs to uid 4322, not to uid 4321" in files.foreign_second_name(st(alice + 1, 2), alice)
    assert "has 3 names" in files.foreign_second_name(st(alice + 1, 3), None)
    if me == 0:  # root's own file, linked into another user's folder: exactly what G5 planted
        assert "belongs to uid 0" in files.foreign_second_name(st(0, 2), alice)
    else:  # our own file: we could read it anyway
        assert files.foreign_second_name(st(me, 2), alice) is None


@pytest.mark.parametrize("flip_back", [False, True])
def test_a_config_flipped_for_a_link_between_the_check_and_the_read_is_refused(tmp_path, monkeypatch, cli,
                                                                                 flip_back):
    """Hostile try 5, H5: the link check and the read were two lookups of the name; alice flipped her config.yaml
    with a link to a root-only file between them, and root's doctor echoed that file's values. The way is judged
    again after the read, and the name must still lead to the file read."""
    from maint import config

    home, db, secret = _alice_and_a_root_secret(tmp_path, "SECRET-TOKEN-race")
    cfg = home / "config.yaml"
    cfg.write_text("sessions:\n  retention_days: 30\n")
    os.chmod(cfg, 0o600)
    _store_owned_by(monkeypatch, db, 4321)
    _link_owned_by(monkeypatch, cfg, 4321)
    real = files.read_regular
    flips = []

    def flip_then_read(path, **kwargs):
        if str(path) == str(cfg) and not flips:
            flips.append(path)
            os.rename(cfg, home / "kept.yaml")
            cfg.symlink_to(secret)
            try:
                return real(path, **kwargs)
            finally:
                if flip_back:
                    cfg.unlink()
                    os.rename(home / "kept.yaml", cfg)
        return real(path, **kwargs)

    monkeypatch.setattr(config.files, "read_regular", flip_then_read)
    result = cli("doctor", "--db", db)
    assert flips, "the flip never ran"
    assert "SECRET" not in result.output, result.output
    assert ("changed while it was being read" in result.output if flip_back
            else "to a file that user cannot read" in result.output), result.output
