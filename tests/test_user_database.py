"""The user database as the daemon reads it: one cache, read afresh when its files change,
so a renamed user or a user moved to another group is seen as they are now, without a
restart or a reload."""

from __future__ import annotations

import json
import pwd
import shlex
import subprocess
from pathlib import Path

from gpuallocd.host.users import (
    CHECK_SECONDS,
    FILES_OF_SOURCE,
    UNSTAMPED_TRUST_SECONDS,
    UserDatabase,
    nss_sources,
)
from tests.harness import DaemonPaths, HandClock, ProcessDaemon, ThreadDaemon, ctl_argv, wait_for
from tests.system_users import SystemUsers, open_to_everyone

HOUR = 3600.0


def _lease_of(users: SystemUsers, who: str, socket: Path) -> str:
    done = users.ctl(who, socket, "--json", "allocate", "-n", "1", "--ttl", "100h")
    assert done.returncode == 0, done.stderr
    lease_id = str(json.loads(done.stdout)["id"])
    return lease_id


def test_a_renamed_user_is_named_anew_in_history_and_the_log_without_a_restart(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """dave (an admin) revokes a lease of alice's; `usermod -l` renames him; he revokes
    another: history names him by the new name for both, and the log's `by=` of the second
    revoke is the new name, with no restart and no SIGHUP."""
    users = system_users
    open_to_everyone(short_dir)
    daemon = ProcessDaemon(paths, default_policy="simple")
    with open(daemon.config_file, "a") as config:
        config.write(f'admin_groups = ["{users.name("gpuadmin")}"]\n')
    daemon.start()
    try:
        dave, as_dave = users.uid("dave"), users._as("dave")  # his uid outlives his name
        first, second = (_lease_of(users, "alice", paths.socket) for _ in range(2))
        assert users.ctl("dave", paths.socket, "revoke", first).returncode == 0

        def names() -> set[str]:
            with daemon.client() as root:
                return {e["actor"]["user"] for e in root.history() if e["actor_uid"] == dave}

        assert names() == {users.name("dave")}
        with users.renamed("dave", f"garen{users.suffix}") as new:
            wait_for(lambda: names() == {new}, 30, what="the new name in history")
            done = subprocess.run(
                [users.python, *ctl_argv(paths.socket, "revoke", second)[1:]],
                capture_output=True,
                text=True,
                timeout=60,
                **as_dave,  # type: ignore[call-overload]
            )
            assert done.returncode == 0, done.stderr
            wait_for(lambda: len(_revokes(daemon)) == 2, 30, what="the second revoke's line")
            assert _revokes(daemon) == [users.name("dave"), new]
    finally:
        daemon.kill()


def _revokes(daemon: ProcessDaemon) -> list[str]:
    """Who the log says revoked each lease, in order."""
    return [
        fields["by"]
        for line in daemon.stderr().splitlines()
        if "INFO event=revoked" in line
        for fields in [dict(f.split("=", 1) for f in shlex.split(line.partition("INFO ")[2]))]
    ]


def test_a_user_moved_to_another_primary_group_is_charged_to_it(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """`fair_share_by = "group"`: alice used a GPU-hour in her own primary group; `usermod -g`
    moves her to students: her use is charged to students now, with no restart."""
    users = system_users
    open_to_everyone(short_dir)
    clock = HandClock()
    daemon = ThreadDaemon(
        paths,
        clock=clock,
        default_policy="simple",
        queue_order="fair-share",
        fair_share_by="group",
    ).start()
    try:
        own = users.name("alice")  # useradd made her a group of her own name
        assert pwd.getpwnam(own).pw_gid != pwd.getpwnam(users.name("bob")).pw_gid
        lease_id = _lease_of(users, "alice", paths.socket)
        clock.step(HOUR)
        assert users.ctl("alice", paths.socket, "free", lease_id).returncode == 0

        def charged() -> set[str]:
            with daemon.client() as root:
                return {account for account, hours in root.usage()["fair_share"].items() if hours}

        assert charged() == {own}
        with users.primary_group("alice", users.name("students")) as students:
            wait_for(lambda: charged() == {students}, 30, what="the use charged to students")
    finally:
        daemon.stop()


def _database(tmp_path: Path, sources: str, real: bool = False) -> tuple[UserDatabase, HandClock]:
    """A database whose nsswitch.conf names `sources` for users and groups, on a hand clock;
    its `files` are this machine's where `real`, else files of the test's own (the machine's
    change whenever any test adds a user)."""
    conf = tmp_path / "nsswitch.conf"
    conf.write_text(f"passwd: {sources}\ngroup: {sources}\nhosts: files dns\n")
    files = {}
    if not real:
        for name in ("passwd", "group"):
            (tmp_path / name).write_text("")
        files = {"files": (str(tmp_path / "passwd"), str(tmp_path / "group"))}
    clock = HandClock()
    return UserDatabase(str(conf), clock=clock, files_of=files or FILES_OF_SOURCE), clock


def test_a_renamed_user_is_read_anew_once_the_files_stamp_is_looked_at(
    system_users: SystemUsers, tmp_path: Path
) -> None:
    """After `usermod -l`, a known uid keeps its name until the stamp is next looked at (at
    most CHECK_SECONDS later), then has the new one; the old name names nobody."""
    users = system_users
    database, clock = _database(tmp_path, "files", real=True)
    uid, old = users.uid("carol"), users.name("carol")
    assert database.user_name(uid) == old and database.account_named(old) is not None
    with users.renamed("carol", f"garen{users.suffix}") as new:
        assert database.user_name(uid) == old  # a dictionary's answer, no stat
        clock.step(CHECK_SECONDS)
        assert database.user_name(uid) == new
        assert database.account_named(old) is None
        renamed = database.account_named(new)
        assert renamed is not None and renamed.uid == uid


def test_a_user_renamed_to_another_users_old_name_is_not_taken_for_them(
    system_users: SystemUsers, tmp_path: Path
) -> None:
    """alice is renamed, then bob takes alice's old name: the name leads to bob's uid, and
    alice's uid to her new name; the groups read for each follow the uid's entry."""
    users = system_users
    database, clock = _database(tmp_path, "files", real=True)
    alice, bob = users.uid("alice"), users.uid("bob")
    taken = users.name("alice")
    before = database.account_named(taken)
    assert before is not None and before.uid == alice
    assert users.name("staff") not in database.groups_of(taken, before.gid)
    with users.renamed("alice", f"garen{users.suffix}") as new, users.renamed("bob", taken):
        clock.step(CHECK_SECONDS)
        after = database.account_named(taken)
        assert after is not None and after.uid == bob
        assert database.user_name(alice) == new and database.user_name(bob) == taken
        entry = database.account(bob)
        assert entry is not None and users.name("staff") in database.groups_of(taken, entry.gid)


def test_the_stamp_is_looked_at_most_once_a_check_interval(tmp_path: Path) -> None:
    """With only files as sources, nothing is read afresh while the files stay as they are,
    however long; an edit of one (even to the same size) is seen at the next look, not
    before, and so is a change of nsswitch.conf."""
    database, clock = _database(tmp_path, "files")
    first = database.generation()
    clock.step(10 * UNSTAMPED_TRUST_SECONDS)
    assert database.generation() == first
    (tmp_path / "group").write_text("x")
    clock.step(CHECK_SECONDS / 2)
    assert database.generation() == first
    clock.step(CHECK_SECONDS / 2)
    assert database.generation() == first + 1
    (tmp_path / "group").write_text("y")  # the same size, within the same second
    (tmp_path / "nsswitch.conf").write_text("passwd: files\ngroup: files\n")
    clock.step(CHECK_SECONDS)
    assert database.generation() == first + 2


def test_entries_of_a_source_without_files_are_trusted_for_a_while(tmp_path: Path) -> None:
    """With `sss` (or ldap, systemd) among the sources, there is no stamp to see a change
    by: what was read is trusted for UNSTAMPED_TRUST_SECONDS, then read afresh."""
    database, clock = _database(tmp_path, "files [NOTFOUND=return] sss")
    first = database.generation()
    clock.step(UNSTAMPED_TRUST_SECONDS - CHECK_SECONDS)
    assert database.generation() == first
    clock.step(CHECK_SECONDS)
    assert database.generation() == first + 1


def test_sources_are_read_from_the_users_and_groups_lines() -> None:
    """Only passwd, group and initgroups count; actions and comments are not sources."""
    text = "passwd: files systemd # local\ngroup: files [SUCCESS=merge] ldap\nhosts: dns\n"
    assert nss_sources(text) == {"files", "systemd", "ldap"}
    assert nss_sources("# nothing\n") == {"files"}


def test_a_renamed_group_is_read_by_its_new_name(system_users: SystemUsers, tmp_path: Path) -> None:
    """`groupmod -n` renames staff: bob's groups name the new one, and the old name is no
    group (a rule written for it applies to nobody)."""
    users = system_users
    database, clock = _database(tmp_path, "files", real=True)
    bob = database.account(users.uid("bob"))
    assert bob is not None and users.name("staff") in database.groups_of(bob.name, bob.gid)
    with users.renamed_group("staff", f"garenstaff{users.suffix}") as new:
        clock.step(CHECK_SECONDS)
        groups = database.groups_of(bob.name, bob.gid)
        assert new in groups and users.name("staff") not in groups
        assert database.group_id(users.name("staff")) is None
