"""Who is on the other end of a Unix socket, as the kernel says (SO_PEERCRED).

The kernel gives the pid, uid and gid of the process that connected. The user's name and
groups come from the user database, never from that process: its gid may be any group the
user may switch to (`sg`, `newgrp`), so the groups are those of `getgrouplist` with the
primary group of the user's passwd entry. What the database says is cached, and read afresh
after a reload (`forget_identities`) or an edit of /etc/passwd or /etc/group; a connection
keeps only what the kernel said, and the names and groups of each of its requests are
those of the moment (`connection_caller`).
"""

from __future__ import annotations

import grp
import os
import pwd
import socket
import struct
from functools import lru_cache
from typing import Any

from gpuallocd.errors import InvalidRequest, PermissionDenied
from gpuallocd.model import Caller

__all__ = [
    "caller_named",
    "connection_caller",
    "forget_identities",
    "identify",
    "identity_generation",
    "peer_caller",
    "user_groups",
    "user_name",
]

_UCRED = struct.Struct("3i")  # pid, uid, gid


USER_DATABASE_FILES = ("/etc/passwd", "/etc/group")


class _Identities:
    """The generation of what the caches hold, and the user database files' stamp."""

    generation = 0
    stamp: tuple[int | None, ...] | None = None


def _stamp() -> tuple[int | None, ...]:
    found: list[int | None] = []
    for path in USER_DATABASE_FILES:
        try:
            found.append(os.stat(path).st_mtime_ns)
        except OSError:
            found.append(None)
    return tuple(found)


def identity_generation() -> int:
    """A number that changes whenever cached names and groups may be stale: at each
    `forget_identities`, and when /etc/passwd or /etc/group changed since the last look."""
    stamp = _stamp()
    if stamp != _Identities.stamp:
        _Identities.stamp = stamp
        forget_identities()
    return _Identities.generation


@lru_cache(maxsize=256)
def _passwd_entry(uid: int) -> tuple[str, int | None]:
    """The user's name and primary gid from the user database; (uid, None) if none."""
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return str(uid), None
    return entry.pw_name, entry.pw_gid


def user_name(uid: int) -> str:
    return _passwd_entry(uid)[0]


@lru_cache(maxsize=1024)
def user_groups(user: str, gid: int) -> frozenset[str]:
    """The names of the groups `user` is in (primary `gid` included), by the user database."""
    try:
        gids = os.getgrouplist(user, gid)
    except OSError:
        gids = [gid]
    names = set()
    for number in gids:
        try:
            names.add(grp.getgrgid(number).gr_name)
        except KeyError:
            continue
    return frozenset(names)


def forget_identities() -> None:
    """Read user names and group memberships afresh (SIGHUP: after an admin changed them)."""
    _Identities.generation += 1
    _passwd_entry.cache_clear()
    user_groups.cache_clear()


def caller_named(ref: str) -> Caller:
    """A user named by name or uid, as a caller (for `limits --user`); InvalidRequest if none."""
    try:
        entry = pwd.getpwuid(int(ref)) if ref.isdigit() else pwd.getpwnam(ref)
    except (KeyError, OverflowError, ValueError):  # ValueError: a NUL byte in the name
        raise InvalidRequest(f"no user {ref!r} on this machine", field="user") from None
    name = entry.pw_name
    return Caller(entry.pw_uid, entry.pw_gid, 0, name, user_groups(name, entry.pw_gid))


def peer_caller(sock: Any) -> Caller:
    """The caller behind a connected Unix socket; refuse when the kernel cannot say.

    `sock` is a socket, or the socket-like object asyncio hands out for a transport.
    """
    if sock is None or sock.family != socket.AF_UNIX:
        raise PermissionDenied("the caller's identity is unknown: connect over the Unix socket")
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return identify(pid, uid, gid)


def identify(pid: int, uid: int, gid: int) -> Caller:
    """The caller the kernel named, with the name and groups the user database gives the
    uid now. `gid` (the process's) is kept as the kernel said but grants no group: a user
    not in the database is in none."""
    name, primary = _passwd_entry(uid)
    groups = user_groups(name, primary) if primary is not None else frozenset()
    return Caller(uid=uid, gid=gid, pid=pid, user=name, groups=groups)


def connection_caller(protocol: Any, transport: Any) -> Caller:
    """The caller of a connection's request: the kernel's word, read once per connection
    and kept on its protocol (where it has a `peer` slot), with the names and groups of now.

    SO_PEERCRED reports who connected, fixed for the connection's life; the user database
    is not, so a caller kept from an earlier generation is identified again.
    """
    generation = identity_generation()
    known: Caller | None = getattr(protocol, "peer", None)
    if known is not None and getattr(protocol, "peer_generation", None) == generation:
        return known
    if known is not None:
        caller = identify(known.pid, known.uid, known.gid)
    else:
        caller = peer_caller(transport.get_extra_info("socket") if transport else None)
    if hasattr(type(protocol), "peer"):
        protocol.peer = caller
        protocol.peer_generation = generation
    return caller
