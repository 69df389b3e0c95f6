"""The user database (passwd and group, through NSS) as the daemon reads it: one cache for
every reader, read afresh when the database may have changed.

A uid's name, a user's primary group and the groups they are in decide what a caller may do
(admin groups, limits, reservations, leniency) and how use is charged (fair share by group),
so every reader in the daemon asks here, and all of them see one version of the database.

What is cached is dropped, all at once, when
- a file NSS reads it from changed: /etc/passwd, /etc/group (the `files` and `compat`
  sources; /var/lib/extrausers/ for `extrausers`) or /etc/nsswitch.conf itself; each file's
  stamp is its inode, size, mtime and ctime, looked at most once every `CHECK_SECONDS`,
  so a lookup of a known uid is a dictionary's (a stat costs a syscall a lookup may not pay);
- `UNSTAMPED_TRUST_SECONDS` passed, where nsswitch.conf names a source that has no file to
  stamp (`sss`, `ldap`, `winbind`, `nis`, `systemd`'s dynamic and userdb users, and `compat`,
  whose `+` lines reach NIS): an entry of such a source is trusted that long;
- the daemon is reloaded (SIGHUP, `forget`).

A user unknown to the database is remembered as unknown for as long; each table holds at
most `MAX_ENTRIES` (names come from callers too: `limits --user NAME`), beyond which it
starts again. Safe from any thread: a table is replaced whole, never cleared under a reader.
"""

from __future__ import annotations

import grp
import os
import pwd
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "CHECK_SECONDS",
    "MAX_ENTRIES",
    "UNSTAMPED_TRUST_SECONDS",
    "Account",
    "UserDatabase",
    "account",
    "account_named",
    "forget",
    "generation",
    "group_id",
    "group_name",
    "groups_of",
    "nss_sources",
    "primary_group_name",
    "user_name",
]

CHECK_SECONDS = 1.0
UNSTAMPED_TRUST_SECONDS = 60.0
MAX_ENTRIES = 4096
NSSWITCH = "/etc/nsswitch.conf"
# The NSS sources whose entries are files that can be stamped, and those files.
FILES_OF_SOURCE = {
    "files": ("/etc/passwd", "/etc/group"),
    "compat": ("/etc/passwd", "/etc/group"),
    "extrausers": ("/var/lib/extrausers/passwd", "/var/lib/extrausers/group"),
}
_WHOLLY_FILES = frozenset({"files", "extrausers"})  # sources that are nothing but their files
_DATABASES = ("passwd", "group", "initgroups")
_DEFAULT_SOURCES = frozenset({"files"})  # glibc's, where nsswitch.conf names none

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
Stamp = tuple[tuple[int, ...] | None, ...]


@dataclass(frozen=True, slots=True)
class Account:
    """A user's passwd entry: name, uid, primary group and home."""

    name: str
    uid: int
    gid: int
    home: str


def nss_sources(text: str) -> frozenset[str]:
    """The sources nsswitch.conf's `text` names for users and groups (actions such as
    `[NOTFOUND=return]` left out)."""
    found: set[str] = set()
    for line in text.splitlines():
        database, sep, rest = line.partition("#")[0].partition(":")
        if sep and database.strip() in _DATABASES:
            found.update(w for w in rest.split() if not w.startswith("["))
    return frozenset(found) or _DEFAULT_SOURCES


def _file_stamp(path: str) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True, slots=True)
class _Sources:
    """What nsswitch.conf (as of its stamp) makes the database depend on."""

    stamp: tuple[int, ...] | None
    files: tuple[str, ...]  # the files to stamp
    unstamped: bool  # whether a source has no file to stamp

    @classmethod
    def read(cls, path: str, files_of: Mapping[str, tuple[str, ...]]) -> _Sources:
        stamp = _file_stamp(path)
        try:
            with open(path, encoding="utf-8", errors="replace") as conf:
                sources = nss_sources(conf.read())
        except OSError:
            sources = _DEFAULT_SOURCES
        files = sorted({f for s in sources for f in files_of.get(s, ())})
        return cls(stamp, tuple(files), not sources <= _WHOLLY_FILES)


class _Tables:
    """What the database said since `stamp` was taken."""

    def __init__(self, stamp: Stamp, unstamped: bool, now: float, generation: int) -> None:
        self.stamp, self.unstamped, self.generation = stamp, unstamped, generation
        self.born = self.checked_at = now
        self.accounts: dict[int, Account | None] = {}
        self.named: dict[str, Account | None] = {}
        self.group_names: dict[int, str | None] = {}
        self.group_ids: dict[str, int | None] = {}
        self.memberships: dict[tuple[str, int], frozenset[str]] = {}

    def fresh(self, stamp: Stamp, now: float) -> bool:
        if stamp != self.stamp:
            return False
        return not self.unstamped or now - self.born < UNSTAMPED_TRUST_SECONDS


def _remembered(table: dict[K, V], key: K, look: Callable[[K], V]) -> V:
    value = look(key)
    if len(table) >= MAX_ENTRIES:
        table.clear()
    table[key] = value
    return value


def _account_of(entry: pwd.struct_passwd) -> Account:
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


def _look_uid(uid: int) -> Account | None:
    try:
        return _account_of(pwd.getpwuid(uid))
    except (KeyError, OverflowError):
        return None


def _look_name(name: str) -> Account | None:
    try:
        return _account_of(pwd.getpwnam(name))
    except (KeyError, ValueError):  # ValueError: a NUL byte in the name
        return None


def _look_gid(gid: int) -> str | None:
    try:
        return grp.getgrgid(gid).gr_name
    except (KeyError, OverflowError):
        return None


def _look_group(name: str) -> int | None:
    try:
        return grp.getgrnam(name).gr_gid
    except (KeyError, ValueError):
        return None


class UserDatabase:
    """The cache, checked against the stamps of the files the database is read from."""

    def __init__(
        self,
        nsswitch: str = NSSWITCH,
        clock: Callable[[], float] = time.monotonic,
        files_of: Mapping[str, tuple[str, ...]] = FILES_OF_SOURCE,
    ) -> None:
        """`files_of`: the files each source reads (FILES_OF_SOURCE)."""
        self._nsswitch, self._clock, self._files_of = nsswitch, clock, files_of
        self._lock = threading.Lock()
        self._sources = _Sources.read(nsswitch, files_of)
        self._tables = _Tables(self._stamp(), self._sources.unstamped, clock(), 0)

    def account(self, uid: int) -> Account | None:
        """The passwd entry of `uid`; None where the database has none."""
        table = self._current().accounts
        try:
            return table[uid]
        except KeyError:  # not asked yet
            return _remembered(table, uid, _look_uid)

    def account_named(self, name: str) -> Account | None:
        """The passwd entry named `name`; None where the database has none."""
        table = self._current().named
        try:
            return table[name]
        except KeyError:  # not asked yet
            return _remembered(table, name, _look_name)

    def user_name(self, uid: int) -> str:
        """The user's name on this node; the uid as text where it has none."""
        found = self.account(uid)
        return str(uid) if found is None else found.name

    def group_name(self, gid: int) -> str:
        """The group's name; the gid as text where it has none."""
        found = self._group(gid)
        return str(gid) if found is None else found

    def group_id(self, name: str) -> int | None:
        """The gid of the group `name`; None where there is none."""
        table = self._current().group_ids
        try:
            return table[name]
        except KeyError:  # not asked yet
            return _remembered(table, name, _look_group)

    def groups_of(self, user: str, gid: int) -> frozenset[str]:
        """The names of the groups `user` is in, with their primary group `gid`
        (`getgrouplist`: supplementary groups included)."""
        table, key = self._current().memberships, (user, gid)
        try:
            return table[key]
        except KeyError:  # not asked yet
            return _remembered(table, key, self._memberships)

    def primary_group_name(self, uid: int) -> str:
        """The name of the primary group of `uid`'s passwd entry (what fair share's `group`
        accounts are named by); the uid as text where it has no entry."""
        found = self.account(uid)
        return str(uid) if found is None else self.group_name(found.gid)

    def generation(self) -> int:
        """A number that changes whenever what was read before may be stale."""
        return self._current().generation

    def forget(self) -> None:
        """Read everything afresh (SIGHUP: after an admin changed a source of no file)."""
        with self._lock:
            self._sources = _Sources.read(self._nsswitch, self._files_of)
            self._renew(self._clock())

    def _memberships(self, key: tuple[str, int]) -> frozenset[str]:
        user, gid = key
        try:
            gids = os.getgrouplist(user, gid)
        except (OSError, ValueError):
            gids = [gid]
        return frozenset(n for n in map(self._group, gids) if n is not None)

    def _group(self, gid: int) -> str | None:
        table = self._current().group_names
        try:
            return table[gid]
        except KeyError:  # not asked yet
            return _remembered(table, gid, _look_gid)

    def _current(self) -> _Tables:
        tables = self._tables
        now = self._clock()
        if now - tables.checked_at < CHECK_SECONDS:
            return tables
        with self._lock:
            if self._tables is not tables:
                return self._tables  # another thread looked meanwhile
            if _file_stamp(self._nsswitch) != self._sources.stamp:
                self._sources = _Sources.read(self._nsswitch, self._files_of)
            if tables.fresh(self._stamp(), now):
                tables.checked_at = now
                return tables
            return self._renew(now)

    def _renew(self, now: float) -> _Tables:
        stamp = self._stamp()
        self._tables = _Tables(stamp, self._sources.unstamped, now, self._tables.generation + 1)
        return self._tables

    def _stamp(self) -> Stamp:
        return (self._sources.stamp, *(_file_stamp(f) for f in self._sources.files))


_DATABASE = UserDatabase()
account = _DATABASE.account
account_named = _DATABASE.account_named
user_name = _DATABASE.user_name
group_name = _DATABASE.group_name
group_id = _DATABASE.group_id
groups_of = _DATABASE.groups_of
primary_group_name = _DATABASE.primary_group_name
generation = _DATABASE.generation
forget = _DATABASE.forget
