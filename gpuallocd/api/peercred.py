"""Who is on the other end of a Unix socket, as the kernel says (SO_PEERCRED)."""

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
    "peer_caller",
    "user_groups",
    "user_name",
]

_UCRED = struct.Struct("3i")  # pid, uid, gid


@lru_cache(maxsize=256)
def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


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
    user_name.cache_clear()
    user_groups.cache_clear()


def caller_named(ref: str) -> Caller:
    """A user named by name or uid, as a caller (for `limits --user`); InvalidRequest if none."""
    try:
        entry = pwd.getpwuid(int(ref)) if ref.isdigit() else pwd.getpwnam(ref)
    except (KeyError, OverflowError):
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
    name = user_name(uid)
    return Caller(uid=uid, gid=gid, pid=pid, user=name, groups=user_groups(name, gid))


def connection_caller(protocol: Any, transport: Any) -> Caller:
    """The caller of a connection, read from the kernel once and kept on its protocol.

    SO_PEERCRED reports who connected, fixed for the connection's life, so one read per
    connection answers every request on it. `protocol` keeps it where it has a `peer` slot.
    """
    known: Caller | None = getattr(protocol, "peer", None)
    if known is not None:
        return known
    caller = peer_caller(transport.get_extra_info("socket") if transport else None)
    if hasattr(type(protocol), "peer"):
        protocol.peer = caller
    return caller
