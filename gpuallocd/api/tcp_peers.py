"""Whom a TCP connection to the metrics or dashboard port is counted against.

A peer address says little on a shared node: every user may source connections from any
loopback address (127.0.0.2, 127.0.0.3, ...) or any address of the host. So the kernel is
asked who owns the other end (NETLINK_SOCK_DIAG, an exact lookup of the connection's
four-tuple; the socket's owner uid, as `ss -e` shows it), and a connection from this host is
counted against that uid, like a connection to the API socket. A loopback peer whose end the
kernel says is closed already (or orphaned) is `GONE`: nobody is left to answer, and the
daemon closes the connection at once, so closing early never makes a connection nobody's.
Where the kernel cannot say at all (no sock_diag) a loopback peer is counted under one shared
key, and a remote peer under its address.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from typing import Any

from gpuallocd.model.addresses import is_loopback, plain_address

__all__ = ["GONE", "LOOPBACK", "local_owner", "tcp_peer_key"]

LOOPBACK = "tcp loopback"  # loopback peers whose owner the kernel could not name
GONE = "tcp gone"  # a loopback peer whose end is closed: closed at once, counted nowhere

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLMSG_ERROR = 2
TCP_TIME_WAIT = 6  # a socket without an owner: its uid says nothing
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_REQUEST = struct.Struct("=BBBBI")  # inet_diag_req_v2: family, protocol, ext, pad, states
_PORTS = struct.Struct("!HH")  # inet_diag_sockid: source and destination port, big-endian
_TAIL = struct.Struct("=III")  # interface, cookie (INET_DIAG_NOCOOKIE: match any)
_ANSWER = struct.Struct("=BBBB48sIIIII")  # inet_diag_msg: state ... uid, inode
_NO_COOKIE = 0xFFFFFFFF


def _address(family: int, host: str) -> bytes:
    return socket.inet_pton(family, host).ljust(16, b"\0")


def _query(family: int, peer: tuple[str, int], local: tuple[str, int]) -> bytes:
    """The exact lookup of the peer's own socket: its source is our peer, its destination
    our listening address."""
    sockid = (
        _PORTS.pack(peer[1], local[1])
        + _address(family, peer[0])
        + _address(family, local[0])
        + _TAIL.pack(0, _NO_COOKIE, _NO_COOKIE)
    )
    body = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + sockid
    return _HEADER.pack(_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0) + body


class _Closed(Exception):
    """The kernel knows no open, owned socket at that end."""


def _owner_in(answer: bytes) -> int:
    """The owner's uid in the kernel's answer; _Closed where there is none."""
    if len(answer) < _HEADER.size + _ANSWER.size:
        raise _Closed  # NLMSG_ERROR: no such socket here
    if _HEADER.unpack_from(answer)[1] != SOCK_DIAG_BY_FAMILY:
        raise _Closed
    state, _, _, _, _, _, _, _, uid, inode = _ANSWER.unpack_from(answer, _HEADER.size)
    if state == TCP_TIME_WAIT or inode == 0:
        raise _Closed  # closed or orphaned: nobody's socket any more
    return int(uid)


def _lookup(family: int, source: tuple[str, int], destination: tuple[str, int]) -> int:
    """The owner of this host's socket SOURCE -> DESTINATION; _Closed, or OSError where the
    kernel cannot be asked."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as diag:
        diag.settimeout(1.0)
        diag.send(_query(family, source, destination))
        return _owner_in(diag.recv(8192))


def _unmapped(host: str) -> tuple[int, str]:
    """The family and address the peer's socket has (an IPv4 peer of an IPv6 listener shows
    as ::ffff:a.b.c.d, but its own socket is IPv4)."""
    address = plain_address(host)
    if isinstance(address, ipaddress.IPv6Address):
        return socket.AF_INET6, str(address)
    return socket.AF_INET, str(address)


def local_owner(peer: tuple[str, int], local: tuple[str, int]) -> int | str | None:
    """The uid that owns the other end of the connection PEER -> LOCAL, where that end is a
    socket of this host; GONE where no open socket of this host is at that end (a closed
    one, or a remote peer's) while the kernel answers for our own; None where it cannot
    say."""
    try:
        family, peer_host = _unmapped(peer[0])
        local_family, local_host = _unmapped(local[0])
        if family != local_family:
            return None
        peer, local = (peer_host, peer[1]), (local_host, local[1])
        try:
            return _lookup(family, peer, local)
        except _Closed:
            pass
        try:
            _lookup(family, local, peer)  # our own end: the kernel answers, or cannot
        except _Closed:
            return None
        return GONE
    except (OSError, ValueError):
        return None


def tcp_peer_key(transport: Any) -> int | str:
    """What a TCP connection is counted under: the owner's uid where the kernel names one,
    GONE for a loopback peer whose end is closed, else LOOPBACK for a loopback peer, else
    "tcp ADDRESS"."""
    peer = transport.get_extra_info("peername")
    local = transport.get_extra_info("sockname")
    if not peer or not local:
        return "tcp unknown"
    owner = local_owner((str(peer[0]), int(peer[1])), (str(local[0]), int(local[1])))
    loopback = is_loopback(str(peer[0]))
    if isinstance(owner, int) or (owner == GONE and loopback):
        return owner
    return LOOPBACK if loopback else f"tcp {peer[0]}"
