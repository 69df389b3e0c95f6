"""Who is on the other end of a Unix socket, as the kernel says (SO_PEERCRED)."""

from __future__ import annotations

import pwd
import socket
import struct
from functools import lru_cache
from typing import Any

from gpuallocd.errors import PermissionDenied
from gpuallocd.model import Caller

__all__ = ["connection_caller", "peer_caller", "user_name"]

_UCRED = struct.Struct("3i")  # pid, uid, gid


@lru_cache(maxsize=256)
def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def peer_caller(sock: Any) -> Caller:
    """The caller behind a connected Unix socket; refuse when the kernel cannot say.

    `sock` is a socket, or the socket-like object asyncio hands out for a transport.
    """
    if sock is None or sock.family != socket.AF_UNIX:
        raise PermissionDenied("the caller's identity is unknown: connect over the Unix socket")
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return Caller(uid=uid, gid=gid, pid=pid, user=user_name(uid))


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
