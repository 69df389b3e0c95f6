"""The scope mode's pure parts: where a lease's scope lives in the cgroup tree, what
/proc/PID/cgroup and a cgroup's files say, inotify on a real file, and which mode a host
gets. The mode itself, under a real systemd, is checked by the system suite
(tests/system/test_service.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import pytest

from gpuallocd.cli.administering.doctor_checks import OK, process_tracking
from gpuallocd.errors import MissingPrivilege
from gpuallocd.processes import systemd_bus
from gpuallocd.processes.cgroups import (
    in_slice,
    parse_proc_cgroup,
    populated,
    procs,
    scope_dir,
    scope_name,
    slice_path,
)
from gpuallocd.processes.connector import Connector, ConnectorUnavailable
from gpuallocd.processes.inotify import Inotify
from gpuallocd.processes.tracking import choose_tracking


def test_a_dash_in_a_slices_name_makes_it_a_child_slice() -> None:
    """systemd's naming: `a-b-c.slice` lives in `a.slice/a-b.slice/a-b-c.slice`."""
    assert slice_path("gpuallocd-leases.slice") == "gpuallocd.slice/gpuallocd-leases.slice"
    assert slice_path("a-b-c.slice") == "a.slice/a-b.slice/a-b-c.slice"
    assert slice_path("system.slice") == "system.slice"
    assert slice_path("-.slice") == ""
    for bad in ("a--b.slice", "-a.slice", "a-.slice", "a.scope", ".slice"):
        with pytest.raises(ValueError):
            slice_path(bad)


def test_a_leases_scope_is_named_by_its_id_in_the_daemons_slice() -> None:
    """The scope of lease 0a1b2c lies where systemd puts it; an id that is no unit name
    is refused rather than escaped."""
    assert scope_name("0a1b2c") == "gpuallocd-lease-0a1b2c.scope"
    assert scope_dir("0a1b2c", Path("/sys/fs/cgroup")) == Path(
        "/sys/fs/cgroup/gpuallocd.slice/gpuallocd-leases.slice/gpuallocd-lease-0a1b2c.scope"
    )
    for bad in ("", "../x", "a b", "a/b"):
        with pytest.raises(ValueError):
            scope_name(bad)


def test_the_unified_hierarchys_line_of_proc_pid_cgroup() -> None:
    """The `0::` line is the cgroup v2 path; a v1-only host has none."""
    hybrid = "12:pids:/user.slice\n1:name=systemd:/user.slice\n0::/user.slice/x.scope\n"
    assert parse_proc_cgroup(hybrid) == "/user.slice/x.scope"
    assert parse_proc_cgroup("0::/\n") == "/"
    assert parse_proc_cgroup("4:memory:/a\n") is None


def test_a_process_in_a_leases_scope_is_told_by_its_cgroup_path() -> None:
    """A lease taken under another lease keeps its process where it is: the process is
    known to be in a scope by its cgroup path lying in the leases' slice."""
    assert in_slice("/gpuallocd.slice/gpuallocd-leases.slice/gpuallocd-lease-0a.scope")
    assert not in_slice("/gpuallocd.slice/gpuallocd-leases.slice")
    assert not in_slice("/gpuallocd.slice/gpuallocd-leases.slicex/a.scope")
    assert not in_slice("/user.slice/user-1000.slice/session-1.scope")


def test_a_cgroups_processes_and_whether_it_is_populated(tmp_path: Path) -> None:
    """`cgroup.procs` lists pids; `cgroup.events` says `populated 0|1`; a cgroup that is
    gone is empty."""
    (tmp_path / "cgroup.procs").write_text("12\n345\n")
    (tmp_path / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    assert procs(tmp_path) == [12, 345] and populated(tmp_path)
    (tmp_path / "cgroup.events").write_text("populated 0\nfrozen 0\n")
    assert not populated(tmp_path)
    assert procs(tmp_path / "gone") == [] and not populated(tmp_path / "gone")


def test_inotify_reports_the_watch_of_a_modified_file(tmp_path: Path) -> None:
    """A write to a watched file wakes the descriptor with that watch's number; nothing
    else is reported; a file that does not exist cannot be watched."""
    watched, other = tmp_path / "events", tmp_path / "other"
    watched.write_text("populated 1\n")
    other.write_text("")
    inotify = Inotify()
    try:
        wd = inotify.add(str(watched))
        assert inotify.read() == set()
        other.write_text("x")
        watched.write_text("populated 0\n")
        assert inotify.read() == {wd}
        with pytest.raises(FileNotFoundError):
            inotify.add(str(tmp_path / "missing"))
    finally:
        inotify.close()


def test_inotify_wakes_the_event_loop(tmp_path: Path) -> None:
    """The descriptor is readable on the loop when a watched file changes."""
    watched = tmp_path / "events"
    watched.write_text("populated 1\n")

    async def woken() -> set[int]:
        inotify = Inotify()
        wd = inotify.add(str(watched))
        loop = asyncio.get_running_loop()
        fired: asyncio.Future[set[int]] = loop.create_future()
        loop.add_reader(inotify.fileno(), lambda: fired.done() or fired.set_result({wd}))
        watched.write_text("populated 0\n")
        try:
            return await asyncio.wait_for(fired, 10)
        finally:
            loop.remove_reader(inotify.fileno())
            assert inotify.read() == {wd}
            inotify.close()

    assert len(asyncio.run(woken())) == 1


def _no_connector() -> Connector:
    raise ConnectorUnavailable("the daemon runs in a pid namespace of its own")


def test_auto_prefers_the_connector_then_a_scope_then_the_scan_where_systemd_is_not_init() -> None:
    """Without a scope `auto` takes the kernel's events, naming why there is no scope;
    without either, the scan, saying why; `scope` asked for where there is none refuses to
    start."""
    opened = _Opened()
    with_events = choose_tracking("auto", opened, lambda: "systemd is not PID 1")
    assert with_events.mode == "connector" and with_events.connector is opened.connector
    assert "no scope: systemd is not PID 1" in with_events.reason
    without = choose_tracking("auto", _no_connector, lambda: "systemd is not PID 1")
    assert without.mode == "proc-scan" and "systemd is not PID 1" in without.reason
    assert "pid namespace" in without.reason
    assert choose_tracking("scope", _no_connector, lambda: None).mode == "scope"
    assert choose_tracking("proc-scan", _no_connector, lambda: None).mode == "proc-scan"
    with pytest.raises(MissingPrivilege) as refused:
        choose_tracking("scope", _no_connector, lambda: "cgroups are v1")
    assert refused.value.exit_code == 77 and "cgroups are v1" in refused.value.message


def test_auto_takes_a_scope_wherever_systemd_offers_one_even_beside_the_kernels_events() -> None:
    """Where systemd is PID 1 on cgroup v2 and its bus answers (the shipped unit's host),
    `auto` makes each bound lease a scope, the kernel's own membership, and opens no
    connector, though the kernel would grant it (before: the connector, whose lost events
    let a fork storm's orphans out of their lease)."""
    opened = _Opened()
    chosen = choose_tracking("auto", opened, lambda: None)
    assert (chosen.mode, chosen.connector, opened.calls) == ("scope", None, 0)
    assert chosen.reason == "a systemd scope (cgroup) per bound lease"
    assert choose_tracking("connector", opened, lambda: None).mode == "connector"


class _Opened:
    """Stands for the kernel granting the events: counts the opens, hands out one object."""

    def __init__(self) -> None:
        self.calls = 0
        self.connector = cast(Connector, object())

    def __call__(self) -> Connector:
        self.calls += 1
        return self.connector


def test_doctor_says_the_scope_mode_is_in_force_without_a_warning() -> None:
    """The process tracking line of doctor in a container that has systemd and cgroup v2."""
    check = process_tracking(
        {"process_tracking": "scope", "process_tracking_detail": {"slice": "x-y.slice"}}
    )
    assert check.status == OK and check.message.startswith("scope: each bound lease")
    assert "x-y.slice" in check.message


def _job_removed_from(sender: str, job: str, result: str) -> object:
    from jeepney import DBusAddress, HeaderFields, new_signal

    manager = DBusAddress(systemd_bus.PATH, interface=systemd_bus.MANAGER)
    signal = new_signal(manager, "JobRemoved", "uoss", (7, job, "x.scope", result))
    signal.header.fields[HeaderFields.sender] = sender
    return signal


def test_a_job_removed_signal_from_anyone_but_systemd_is_not_believed() -> None:
    """Any local user may send the daemon a JobRemoved signal naming its scope's job; only
    systemd's (by its unique name on the bus) says how the start job ended."""

    async def scenario() -> str:
        queue: asyncio.Queue[object] = asyncio.Queue()
        job = "/org/freedesktop/systemd1/job/42"
        await queue.put(_job_removed_from(":1.99", job, "failed"))  # a user's forgery
        await queue.put(_job_removed_from(":1.1", "/org/freedesktop/systemd1/job/41", "done"))
        await queue.put(_job_removed_from(":1.1", job, "done"))  # systemd's own
        return await systemd_bus._job_result(queue, job, ":1.1")  # type: ignore[arg-type]

    assert asyncio.run(scenario()) == "done"
