"""Who is on the other end of a Unix socket, as the kernel says (SO_PEERCRED).

The kernel gives the pid, uid and gid of the process that connected. The user's name and
groups come from the user database, never from that process: its gid may be any group the
user may switch to (`sg`, `newgrp`), so the groups are those of `getgrouplist` with the
primary group of the user's passwd entry. What the database says is cached in one place,
`host/users.py`, and read afresh after a reload or a change of the database; a connection
keeps only what the kernel said, and the names and groups of each of its requests are
those of the moment (`connection_caller`).
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from gpuallocd.errors import InvalidRequest, PermissionDenied
from gpuallocd.host import users
from gpuallocd.host.users import user_name
from gpuallocd.model import Caller

__all__ = [
    "caller_named",
    "connection_caller",
    "identify",
    "identity_generation",
    "peer_caller",
    "user_name",
]

_UCRED = struct.Struct("3i")  # pid, uid, gid


def identity_generation() -> int:
    """A number that changes whenever cached names and groups may be stale (host/users.py)."""
    return users.generation()


def caller_named(ref: str) -> Caller:
    """A user named by name or uid, as a caller (for `limits --user`); InvalidRequest if none."""
    try:
        entry = users.account(int(ref)) if ref.isdigit() else users.account_named(ref)
    except ValueError:  # a digit that int() does not read ("²")
        entry = None
    if entry is None:
        raise InvalidRequest(f"no user {ref!r} on this machine", field="user")
    groups = users.groups_of(entry.name, entry.gid)
    return Caller(entry.uid, entry.gid, 0, entry.name, groups)


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
    entry = users.account(uid)
    if entry is None:
        return Caller(uid=uid, gid=gid, pid=pid, user=str(uid), groups=frozenset())
    groups = users.groups_of(entry.name, entry.gid)
    return Caller(uid=uid, gid=gid, pid=pid, user=entry.name, groups=groups)


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
