"""The kernel's process events (the netlink process connector): fork, exec and exit of every
process on the machine, as they happen.

The daemon opens one `AF_NETLINK` socket of the `NETLINK_CONNECTOR` family, joins the
`CN_IDX_PROC` group and asks to listen (`PROC_CN_MCAST_LISTEN`). The kernel answers that
request with an acknowledgement; without one the connector is not there for us. The kernel
allows it only to a process that holds CAP_NET_ADMIN and lives in the initial user and pid
namespaces (it ignores a request from anywhere else, so a container never gets an answer).
Kernels from 6.6 filter the events for a listener: fork, exec and exit are asked for there
(exec only for a child of a holder's parent that joined no lease: events.py).

A fork event is sent before the child first runs, so the events of a child always follow the
event of its own fork. A full receive buffer drops events: the next read fails with ENOBUFS,
and whoever reads must then learn the state from /proc again (`Overrun`).
"""

from __future__ import annotations

import errno
import os
import secrets
import select
import socket
import struct
import time
from dataclasses import dataclass
from enum import IntEnum

from gpuallocd.host import own_namespaces

__all__ = [
    "Connector",
    "ConnectorUnavailable",
    "EventKind",
    "Overrun",
    "ProcEvent",
    "parse_event",
]

NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
NLMSG_DONE = 3
PROC_CN_MCAST_LISTEN = 1
SO_RCVBUFFORCE = 33
RECEIVE_BUFFER_BYTES = 16 * 2**20
ANSWER_SECONDS = 0.5

_NLMSGHDR = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_CN_MSG = struct.Struct("=IIIIHH")  # idx, val, seq, ack, payload length, flags
_EVENT_HEAD = struct.Struct("=IIQ")  # what, cpu, timestamp (CLOCK_MONOTONIC, ns)
_FOUR_INTS = struct.Struct("=iiii")
_HEAD = _NLMSGHDR.size + _CN_MSG.size  # 36
_DATA = _HEAD + _EVENT_HEAD.size  # 52
MESSAGE_BYTES = 1024


class EventKind(IntEnum):
    """`enum what` of `struct proc_event` (linux/cn_proc.h); only what the daemon reads."""

    NONE = 0x00000000  # the acknowledgement of a request
    FORK = 0x00000001
    EXEC = 0x00000002
    EXIT = 0x80000000


FILTER = EventKind.FORK | EventKind.EXEC | EventKind.EXIT  # asked for (kernels from 6.6)


class ConnectorUnavailable(Exception):
    """The process connector cannot be used here; the message says why."""


class Overrun(Exception):
    """Events were lost (the receive buffer was full): learn the state from /proc again."""


@dataclass(frozen=True, slots=True)
class ProcEvent:
    """One process event. For a fork, `pid`/`tgid` are the child's and `parent_tgid` the
    process that forked it; for exec and exit, the process's own. A thread has `pid != tgid`.
    `timestamp_ns` is the kernel's CLOCK_MONOTONIC at the event."""

    kind: EventKind
    pid: int
    tgid: int
    parent_tgid: int = 0
    timestamp_ns: int = 0
    error: int = 0  # of an acknowledgement

    @property
    def is_process(self) -> bool:
        """A whole process (its main thread), not another thread of one."""
        return self.pid == self.tgid


def parse_event(data: bytes | memoryview) -> ProcEvent | None:
    """The process event in one netlink message; None for anything else."""
    if len(data) < _DATA + _FOUR_INTS.size:
        return None
    idx, val, _seq, _ack, _length, _flags = _CN_MSG.unpack_from(data, _NLMSGHDR.size)
    if (idx, val) != (CN_IDX_PROC, CN_VAL_PROC):
        return None
    what, _cpu, stamp = _EVENT_HEAD.unpack_from(data, _HEAD)
    first, second, third, fourth = _FOUR_INTS.unpack_from(data, _DATA)
    if what == EventKind.FORK:
        return ProcEvent(EventKind.FORK, third, fourth, second, stamp)
    if what in (EventKind.EXEC, EventKind.EXIT):
        return ProcEvent(EventKind(what), first, second, 0, stamp)
    if what == EventKind.NONE:
        return ProcEvent(EventKind.NONE, 0, 0, 0, stamp, error=first)
    return None


def _request(seq: int, ack: int, payload: bytes) -> bytes:
    body = _CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, seq, ack, len(payload), 0) + payload
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), NLMSG_DONE, 0, 0, 0) + body


def _answer_to(data: bytes, ack: int) -> int | None:
    """The error of our request's acknowledgement, if `data` is it (others' are multicast
    to every listener too; the kernel answers our `ack` plus one, with a sequence number of
    its own)."""
    if len(data) < _DATA + 4:
        return None
    got_ack = _CN_MSG.unpack_from(data, _NLMSGHDR.size)[3]
    what = _EVENT_HEAD.unpack_from(data, _HEAD)[0]
    if what != EventKind.NONE or got_ack != ack + 1:
        return None
    error: int = struct.unpack_from("=I", data, _DATA)[0]
    return error


class Connector:
    """A subscribed, non-blocking process-connector socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray(MESSAGE_BYTES)

    @classmethod
    def open(cls) -> Connector:
        """Subscribe, or raise ConnectorUnavailable saying why."""
        _in_initial_namespaces()
        try:
            sock = socket.socket(
                socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_CONNECTOR
            )
        except OSError as exc:
            raise ConnectorUnavailable(f"no netlink connector socket ({exc.strerror})") from exc
        try:
            _enlarge(sock)
            sock.bind((0, CN_IDX_PROC))
            _subscribe(sock)
        except OSError as exc:
            sock.close()
            raise ConnectorUnavailable(f"cannot join the process events ({exc.strerror})") from exc
        except ConnectorUnavailable:
            sock.close()
            raise
        sock.setblocking(False)
        return cls(sock)

    def fileno(self) -> int:
        return self._sock.fileno()

    def read(self, limit: int) -> list[ProcEvent]:
        """Up to `limit` events waiting now (none: nothing is waiting). Overrun where the
        kernel dropped some since the last read."""
        events: list[ProcEvent] = []
        view = memoryview(self._buffer)
        while len(events) < limit:
            try:
                size = self._sock.recv_into(self._buffer)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    raise Overrun from exc
                raise
            event = parse_event(view[:size])
            if event is not None and event.kind is not EventKind.NONE:
                events.append(event)
        return events

    def discard(self, limit: int = RECEIVE_BUFFER_BYTES // 256) -> int:
        """Drop the events waiting now, at most a full buffer of them (after an overrun,
        /proc tells what they would); how many."""
        dropped = 0
        while dropped < limit:
            try:
                self._sock.recv_into(self._buffer)
            except BlockingIOError:
                return dropped
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise
            dropped += 1
        return dropped

    def close(self) -> None:
        self._sock.close()


def _in_initial_namespaces() -> None:
    """Raise ConnectorUnavailable in another user or pid namespace (a container), where the
    kernel would not even answer."""
    if own := own_namespaces():
        raise ConnectorUnavailable(f"the daemon runs in a {own[0]} namespace of its own")


def _enlarge(sock: socket.socket) -> None:
    """A large receive buffer (beyond rmem_max where CAP_NET_ADMIN allows): fewer overruns."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER_BYTES)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER_BYTES)


def _subscribe(sock: socket.socket) -> None:
    """Listen to every event (the kernel must acknowledge it), then ask for fork and exit
    only: kernels from 6.6 filter, older ones ignore that second request. A filtered
    listener never sees an acknowledgement (its filter drops them), so it is not awaited."""
    listen = struct.pack("=I", PROC_CN_MCAST_LISTEN)
    if not _ask(sock, listen):
        raise ConnectorUnavailable(
            "the kernel did not answer (not in the initial user and pid namespaces?)"
        )
    sock.send(_request(0, 0, listen + struct.pack("=I", FILTER)))


def _ask(sock: socket.socket, payload: bytes) -> bool:
    """Send one listen request; whether the kernel acknowledged it (OSError if refused)."""
    ack = secrets.randbits(31)
    sock.send(_request(0, ack, payload))
    deadline = time.monotonic() + ANSWER_SECONDS
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([sock], [], [], left)
        if not ready:
            break
        error = _answer_to(sock.recv(MESSAGE_BYTES), ack)
        if error:
            raise OSError(error, os.strerror(error))
        if error == 0:
            return True
    return False
