"""Socket activation: the listening socket systemd opened for us (`gpuallocd.socket`).

systemd passes listening sockets as file descriptors 3, 4, ... and says so in the
environment: `LISTEN_FDS` (how many) and `LISTEN_PID` (for which process: a child that
inherited the environment must not take them). `LISTEN_FDNAMES` may name them. We take the
first listening Unix stream socket as the API socket, and remove the variables so that
nothing started later sees them.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping, MutableMapping

from gpuallocd.errors import StateUnusable

__all__ = ["LISTEN_FDS_START", "inherited_api_socket", "listen_fd_count"]

log = logging.getLogger(__name__)

LISTEN_FDS_START = 3  # SD_LISTEN_FDS_START
_VARIABLES = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


def listen_fd_count(environ: Mapping[str, str], pid: int) -> int:
    """How many sockets systemd passed to process `pid`; 0 when none, or not for it."""
    try:
        listen_pid = int(environ.get("LISTEN_PID", ""))
        count = int(environ.get("LISTEN_FDS", ""))
    except ValueError:
        return 0
    if listen_pid != pid or count < 0:
        return 0
    return count


def _is_unix_listener(sock: socket.socket) -> bool:
    return (
        sock.family == socket.AF_UNIX
        and sock.type == socket.SOCK_STREAM
        and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
    )


def _adopt(fd: int) -> socket.socket | None:
    os.set_inheritable(fd, False)
    try:
        return socket.socket(fileno=fd)
    except OSError as exc:
        log.warning("systemd passed fd %d, which is not a socket (%s); ignored", fd, exc)
        return None


def inherited_api_socket(environ: MutableMapping[str, str] | None = None) -> socket.socket | None:
    """The listening Unix socket systemd passed, non-blocking; None without socket activation.

    StateUnusable when systemd passed sockets but none is a listening Unix stream socket
    (the socket unit is wrong: `ListenStream=` must name a path).
    """
    env = os.environ if environ is None else environ
    count = listen_fd_count(env, os.getpid())
    for name in _VARIABLES:
        env.pop(name, None)
    if count == 0:
        return None
    found: socket.socket | None = None
    for fd in range(LISTEN_FDS_START, LISTEN_FDS_START + count):
        sock = _adopt(fd)
        if sock is not None and found is None and _is_unix_listener(sock):
            found = sock
        elif sock is not None:
            log.warning("systemd passed fd %d (%s); only one Unix socket is used", fd, sock)
            sock.close()
    if found is None:
        raise StateUnusable(
            f"systemd passed {count} socket(s) but none is a listening Unix stream socket; "
            "gpuallocd.socket needs ListenStream=/run/gpuallocd/gpuallocd.sock"
        )
    found.setblocking(False)
    return found
