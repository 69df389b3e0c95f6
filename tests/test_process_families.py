"""The families of bound leases as a data structure: forks, exits and scans, in any order
the kernel may report them, and the process events' wire layout."""

from __future__ import annotations

import struct

from gpuallocd.model import Lease
from gpuallocd.processes import ProcessFamilies
from gpuallocd.processes.connector import EventKind, parse_event
from gpuallocd.processes.families import UNKNOWN_START


def bound(lease_id: str, pid: int, start: int) -> Lease:
    return Lease(
        lease_id, (), 1000, "ana", pid, None, "simple", 0.0, 0.0, bound=True, pid_start_time=start
    )


def test_a_child_forked_by_a_member_is_a_member_whatever_its_parent_does_next() -> None:
    """Fork, then the parent exits: the child is still covered, and its own child too."""
    families = ProcessFamilies()
    families.track(bound("L", 100, 5))
    assert families.forked(100, (200, 6)) == ["L"]
    assert families.exited(100) == []
    assert families.forked(200, (300, 7)) == ["L"]
    assert families.exited(200) == []
    assert families.members("L") == [(300, 7)]
    assert families.exited(300) == ["L"]


def test_a_fork_by_a_stranger_and_an_exit_of_one_change_nothing() -> None:
    families = ProcessFamilies()
    families.track(bound("L", 100, 5))
    assert families.forked(999, (200, 6)) == []
    assert families.exited(999) == []
    assert families.members("L") == [(100, 5)]


def test_a_process_of_two_leases_is_in_both_and_leaves_both() -> None:
    families = ProcessFamilies()
    families.track(bound("A", 100, 5))
    families.track(bound("B", 100, 5))
    assert families.forked(100, (200, 6)) == ["A", "B"]
    assert families.exited(100) == []
    assert families.exited(200) == ["A", "B"]


def test_a_scan_drops_a_reused_pid_and_adds_what_runs_under_members() -> None:
    """The table knows pid 200 with another start time (reused): it is no member any more,
    nor is its child; the living grandchild of the holder is found."""
    families = ProcessFamilies()
    families.track(bound("L", 100, 5))
    families.forked(100, (200, 6))
    families.forked(100, (250, UNKNOWN_START))
    table = {100: (1, 5), 200: (1, 60), 201: (200, 61), 300: (100, 7), 301: (300, 8)}
    assert families.scan(table) == []
    assert families.members("L") == [(100, 5), (300, 7), (301, 8)]
    assert not families.covers(200) and not families.covers(250)
    assert families.scan({}) == ["L"]


def test_retain_forgets_ended_leases_and_their_pids() -> None:
    families = ProcessFamilies()
    families.track(bound("L", 100, 5))
    families.forked(100, (200, 6))
    families.retain([])
    assert not families and not families.covers(100) and not families.covers(200)


def _message(what: int, *data: int, ack: int = 0) -> bytes:
    """A process event as the kernel lays it out: nlmsghdr, cn_msg, proc_event."""
    event = struct.pack("=IIQ", what, 0, 123_456_789) + struct.pack(f"={len(data)}i", *data)
    cn = struct.pack("=IIIIHH", 1, 1, 0, ack, len(event), 0) + event
    return struct.pack("=IHHII", 16 + len(cn), 3, 0, 0, 0) + cn


def test_fork_exec_and_exit_events_are_read_from_the_kernels_layout() -> None:
    fork = parse_event(_message(EventKind.FORK, 10, 10, 20, 20))
    assert fork is not None and (fork.kind, fork.pid, fork.parent_tgid) == (EventKind.FORK, 20, 10)
    assert fork.timestamp_ns == 123_456_789 and fork.is_process
    thread = parse_event(_message(EventKind.FORK, 10, 10, 21, 20))
    assert thread is not None and not thread.is_process
    exit_ = parse_event(_message(EventKind.EXIT, 20, 20, 0, 9, 10, 10))
    assert exit_ is not None and (exit_.kind, exit_.pid) == (EventKind.EXIT, 20)
    execed = parse_event(_message(EventKind.EXEC, 20, 20, 0, 0))
    assert execed is not None and execed.kind is EventKind.EXEC
    assert parse_event(_message(0x4, 20, 20, 1000, 1000)) is None  # uid change: not read
    assert parse_event(b"short") is None
