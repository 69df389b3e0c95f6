"""Whom the client talks to: the server's uid as the kernel reports it (SO_PEERCRED).

Any user can listen on a socket path the real daemon does not hold (a daemon that is down, a
socket in a world-writable directory, a mistyped $GPUALLOCD_SOCKET). So before the first byte
of a request goes out on a new connection, and with it a label or a lease id, the client asks
the kernel who listens on the other end, and goes on only if that is root, the caller, or a
uid the user allowed with `server_uid=` (else $GPUALLOCD_SERVER_UID).
"""

from __future__ import annotations

import os
import pwd
import socket
import struct
from collections.abc import Iterable

from gpulease.errors import DaemonUnavailable

__all__ = ["SERVER_UID_ENV", "ServerUid", "UntrustedServer", "allowed_server_uids", "check_server"]

SERVER_UID_ENV = "GPUALLOCD_SERVER_UID"
_UCRED = struct.Struct("3i")  # pid, uid, gid

# A uid or user name, several as a comma-separated string or an iterable.
ServerUid = int | str | Iterable[int | str]


class UntrustedServer(DaemonUnavailable):
    """The socket is served by a user the client does not trust; nothing was sent to it.

    A DaemonUnavailable: from the caller's side, the daemon it trusts is not on that socket.
    """

    code = "untrusted_server"


def allowed_server_uids(server_uid: ServerUid | None = None) -> frozenset[int]:
    """Root, the caller's own uids, and `server_uid` (else $GPUALLOCD_SERVER_UID).

    Raises ValueError for a user name that does not exist.
    """
    if server_uid is None:
        entries: Iterable[int | str] = os.environ.get(SERVER_UID_ENV, "").split(",")
        source = f"${SERVER_UID_ENV}"
    elif isinstance(server_uid, (int, str)):
        entries, source = str(server_uid).split(","), "server_uid"
    else:
        entries, source = server_uid, "server_uid"
    configured = {_uid_of(entry, source) for entry in entries if str(entry).strip()}
    return frozenset({0, os.getuid(), os.geteuid(), *configured})


def check_server(sock: socket.socket, socket_path: str, allowed: frozenset[int]) -> None:
    """Return if the process that listens on the other end of `sock` runs as an allowed uid."""
    uid = _server_uid(sock, socket_path)
    if uid in allowed:
        return
    user = _user_name(uid)
    raise UntrustedServer(
        f"refusing the server on {socket_path}: it runs as user {user} (uid {uid}), and "
        f"gpulease trusts only root, you ({_user_name(os.getuid())}) and the users named in "
        f"server_uid= or ${SERVER_UID_ENV}. Nothing was sent to it. If this is the gpuallocd "
        f"you mean to use, allow it: export {SERVER_UID_ENV}={user} (or "
        f"Client(server_uid={user!r})); if not, check that $GPUALLOCD_SOCKET names your "
        "daemon's socket.",
        details={"socket": socket_path, "server_uid": uid, "server_user": user},
    )


def _server_uid(sock: socket.socket, socket_path: str) -> int:
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        raise UntrustedServer(
            f"cannot tell who serves {socket_path}: this system does not report the peer of "
            "a Unix socket (SO_PEERCRED); gpuallocd runs on Linux",
            details={"socket": socket_path},
        )
    raw = sock.getsockopt(socket.SOL_SOCKET, option, _UCRED.size)
    uid: int = _UCRED.unpack(raw)[1]
    return uid


def _uid_of(entry: int | str, source: str) -> int:
    if isinstance(entry, int) and not isinstance(entry, bool) and entry >= 0:
        return entry
    text = str(entry).strip()
    if text.isascii() and text.isdigit():
        return int(text)
    try:
        return pwd.getpwnam(text).pw_uid
    except KeyError:
        raise ValueError(f"{source}: no user is named {text!r}") from None


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
