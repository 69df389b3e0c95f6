"""Process tracking beyond the five ways out: the kernel's events themselves, the fallback
where they are refused, a fork bomb, a holder that execs itself, a pid reused by another
user, and signals that never reach a later owner of a pid."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gpulease import Client

from gpuallocd.host.proc import process_start_time, read_process_table
from gpuallocd.model import Lease
from gpuallocd.processes import ProcessFamilies, send_signal
from gpuallocd.processes.connector import Connector, ConnectorUnavailable, EventKind, ProcEvent
from gpuallocd.processes.events import (
    EXEC_CHECKS,
    FamilyEvents,
    boottime_offset_ns,
    start_matches,
)
from tests.harness import DaemonPaths, ProcessDaemon, wait_for
from tests.lease_work import (
    PRELUDE,
    alive,
    covered,
    kill_and_time_the_end,
    kill_marked,
    marked,
    prepare_work_dir,
    start_and_leave,
)
from tests.system_users import SystemUsers, open_to_everyone

SLEEP_AND_MARK = (
    "import os, sys, time; open(os.path.join(sys.argv[1], str(os.getpid())), 'w').close(); "
    "time.sleep(600)"
)


@pytest.fixture
def connector() -> Iterator[Connector]:
    try:
        opened = Connector.open()
    except ConnectorUnavailable as exc:
        pytest.skip(f"the kernel's process events are refused here: {exc}")
    yield opened
    opened.close()


def events_until(
    connector: Connector, found: Callable[[ProcEvent], bool], timeout: float = 10
) -> ProcEvent:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in connector.read(1024):
            if found(event):
                return event
        time.sleep(0.01)
    raise AssertionError("the event never came")


def test_the_kernel_tells_of_a_fork_and_an_exit(connector: Connector) -> None:
    """A child's fork names this process as its parent and carries a time that matches the
    child's start time; its exit follows."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    fork = events_until(connector, lambda e: e.kind is EventKind.FORK and e.pid == child.pid)
    assert fork.parent_tgid == os.getpid() and fork.is_process
    start = process_start_time(child.pid)
    assert start is not None
    assert start_matches(start, fork.timestamp_ns, boottime_offset_ns())
    assert not start_matches(start + 5, fork.timestamp_ns, boottime_offset_ns())
    child.kill()
    child.wait()
    events_until(connector, lambda e: e.kind is EventKind.EXIT and e.pid == child.pid)


def test_lost_events_make_the_families_learn_everything_from_proc(
    connector: Connector,
) -> None:
    """The receive buffer overflows (shrunk here to its least) while this process forks: the
    read that finds events lost rescans /proc, and the child still running, whose fork
    event was among those lost, is a member."""
    me = os.getpid()
    start = process_start_time(me)
    assert start is not None
    lease = Lease(
        "L1", (), 0, "root", me, None, "simple", 0.0, 0.0, bound=True, pid_start_time=start
    )
    families = ProcessFamilies()
    families.track(lease)
    rescans: list[list[str]] = []

    def rescan() -> list[str]:
        rescans.append(families.scan(read_process_table()))
        return rescans[-1]

    events = FamilyEvents(connector, families, lambda gone: None, rescan)
    shrunk = socket.socket(fileno=os.dup(connector.fileno()))
    shrunk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
    shrunk.detach()
    quick = [subprocess.Popen([sys.executable, "-c", "pass"]) for _ in range(40)]
    for process in quick:
        process.wait()
    lasting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        wait_for(lambda: process_start_time(lasting.pid) is not None, timeout=10)
        events.readable()
        assert events.stats.overruns == 1 and rescans == [[]]
        assert lasting.pid in [pid for pid, _ in families.members("L1")]
    finally:
        lasting.kill()
        lasting.wait()


def test_outside_the_initial_namespaces_auto_scans_and_connector_refuses() -> None:
    """In a user namespace the kernel sends no events: `auto` falls back to the /proc scan,
    `connector` refuses to start (exit 77's error), both saying why."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    probe = (
        "import sys\n"
        "from gpuallocd.errors import MissingPrivilege\n"
        "from gpuallocd.processes import choose_tracking\n"
        "print(choose_tracking('auto').mode)\n"
        "print(choose_tracking('auto').reason)\n"
        "try:\n"
        "    choose_tracking('connector')\n"
        "except MissingPrivilege as exc:\n"
        "    print('refused', exc.exit_code)\n"
    )
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0 and "unshare" in done.stderr:
        pytest.skip(f"no user namespace for this test: {done.stderr.strip()}")
    mode, reason, refused = done.stdout.split("\n")[:3]
    assert (mode, refused) == ("proc-scan", "refused 77"), done.stderr
    assert "user namespace of its own" in reason


@pytest.fixture
def work_dir(paths: DaemonPaths) -> Iterator[Path]:
    directory = prepare_work_dir(paths.root)
    yield directory
    kill_marked(directory)


@pytest.fixture
def node(
    system_users: SystemUsers, paths: DaemonPaths, unit_daemon: Callable[..., ProcessDaemon]
) -> ProcessDaemon:
    """A daemon with the unit's capabilities, its socket open to the test users."""
    open_to_everyone(paths.root)
    return unit_daemon()


def processes_of(uid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid and alive(int(entry.name)):
                found.add(int(entry.name))
        except FileNotFoundError:
            continue
    return found


FORK_BOMB = """
import resource
resource.setrlimit(resource.RLIMIT_NPROC, ({limit}, {limit}))
if os.fork() == 0:
    quiet()
    while True:
        try:
            os.fork()
        except OSError:
            break  # ulimit -u
    mark()
    time.sleep(600)
    os._exit(0)
"""


def test_a_fork_bomb_bounded_by_ulimit_is_covered_whole(
    node: ProcessDaemon, system_users: SystemUsers, work_dir: Path
) -> None:
    """alice's holder starts a fork bomb under `ulimit -u 24` and exits: every process the
    bomb made is covered, nothing else of alice's; killed, the lease ends within 2 s."""
    lease_id = start_and_leave(system_users, node, work_dir, FORK_BOMB.format(limit=24))
    uid = system_users.uid("alice")
    with Client(node.paths.socket) as client:

        def settled() -> bool:
            everything = processes_of(uid)
            return len(everything) >= 16 and everything == marked(work_dir) == covered(
                client, lease_id
            )

        wait_for(settled, timeout=60, what="the bomb's processes to be marked and covered")
        assert client.health()["process_tracking"] == "connector"
        took = kill_and_time_the_end(client, lease_id, covered(client, lease_id))
    assert took < 2.0


def start_holder(
    users: SystemUsers, daemon: ProcessDaemon, work_dir: Path, body: str, **env: str
) -> tuple[subprocess.Popen[str], str]:
    """alice's holder that stays (it runs `body`, which does not return): it and its lease."""
    log = work_dir.parent / f"holder-{time.monotonic_ns()}.log"
    users.env.update(env)
    try:
        argv = ["-c", PRELUDE + body, str(work_dir), str(daemon.paths.socket)]
        holder = users.start("alice", argv, log)
    finally:
        for name in env:
            users.env.pop(name, None)
    wait_for(lambda: log.read_text().strip() != "", timeout=30, what="the holder's lease")
    return holder, log.read_text().split()[0]


def test_a_holder_that_execs_itself_keeps_its_lease(
    node: ProcessDaemon, system_users: SystemUsers, work_dir: Path
) -> None:
    """The holder execs a new program in its own process: same pid, same start time, the
    lease stays; killed, it ends within 2 s."""
    body = f"os.execv(sys.executable, [sys.executable, '-c', {SLEEP_AND_MARK!r}, WORK])\n"
    holder, lease_id = start_holder(system_users, node, work_dir, body)
    wait_for(lambda: marked(work_dir) == {holder.pid}, timeout=30, what="the exec")
    with Client(node.paths.socket) as client:
        assert client.lease(lease_id).state == "active"
        assert covered(client, lease_id) == {holder.pid}
        took = kill_and_time_the_end(client, lease_id, {holder.pid})
    holder.wait(10)
    assert took < 2.0


REAPING_HOLDER = """
import signal
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped at once
if os.fork() == 0:
    work()
time.sleep(600)
"""

BOBS_PROCESS = (
    "import os, sys, time\n"
    "if os.fork() == 0:\n"
    "    open(os.path.join(sys.argv[1], str(os.getpid())), 'w').close()\n"
    "open(os.path.join(sys.argv[1], str(os.getpid())), 'w').close()\n"
    "time.sleep(600)\n"
)


def start_with_pid(
    users: SystemUsers, pid: int, argv: list[str], log: Path
) -> subprocess.Popen[str] | None:
    """bob's process started with `pid` (the kernel's next pid set by hand, as checkpoint
    and restore tools do); None where other forks kept taking it."""
    last_pid = Path("/proc/sys/kernel/ns_last_pid")
    for _ in range(200):
        last_pid.write_text(str(pid - 1))
        started = users.start("bob", argv, log)
        if started.pid == pid:
            return started
        started.kill()
        started.wait()
    return None


def test_a_pid_reused_by_another_users_process_is_not_adopted(
    node: ProcessDaemon, system_users: SystemUsers, work_dir: Path, paths: DaemonPaths
) -> None:
    """alice's worker exits and bob's next process gets its pid: bob's process and the child
    it forks are not taken into alice's lease, which goes on covering alice's holder only."""
    holder, lease_id = start_holder(system_users, node, work_dir, REAPING_HOLDER)
    with Client(node.paths.socket) as client:
        wait_for(lambda: len(marked(work_dir)) == 1, timeout=30, what="alice's worker")
        (worker,) = marked(work_dir)
        wait_for(lambda: covered(client, lease_id) == {holder.pid, worker}, timeout=20)
        os.kill(worker, signal.SIGKILL)
        wait_for(lambda: not Path(f"/proc/{worker}").exists(), timeout=20, what="the reaping")
        wait_for(lambda: covered(client, lease_id) == {holder.pid}, timeout=20)
        bobs = prepare_bobs_dir(paths.root)
        argv = ["-c", BOBS_PROCESS, str(bobs)]
        reused = start_with_pid(system_users, worker, argv, paths.root / "bob.log")
        if reused is None:
            pytest.skip(f"pid {worker} kept being taken by other processes of this machine")
        try:
            wait_for(lambda: len(marked(bobs)) == 2, timeout=30, what="bob's two processes")
            assert worker in marked(bobs)
            assert covered(client, lease_id) == {holder.pid}
            assert client.lease(lease_id).state == "active"
        finally:
            kill_marked(bobs)
            reused.wait(10)
        took = kill_and_time_the_end(client, lease_id, {holder.pid})
    holder.wait(10)
    assert took < 2.0


def prepare_bobs_dir(root: Path) -> Path:
    directory = root / "bobs"
    directory.mkdir()
    directory.chmod(0o1777)
    return directory


def test_a_signal_never_reaches_a_later_owner_of_the_pid(system_users: SystemUsers) -> None:
    """A member recorded with another start time (its pid now bob's): no signal is sent;
    with bob's real start time, it is."""
    bobs = system_users.start("bob", ["-c", "import time; time.sleep(600)"], Path(os.devnull))
    try:
        wait_for(lambda: process_start_time(bobs.pid) is not None, timeout=10)
        start = process_start_time(bobs.pid)
        assert start is not None
        assert not send_signal(bobs.pid, start - 1, signal.SIGKILL)
        assert alive(bobs.pid)
        assert send_signal(bobs.pid, start, signal.SIGKILL)
        assert bobs.wait(10) == -signal.SIGKILL
    finally:
        if bobs.poll() is None:
            bobs.kill()
            bobs.wait()


ESCAPE_ON_SIGTERM = """
import signal

def escape(*_):
    if os.fork() == 0:
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        work()
    os._exit(0)

signal.signal(signal.SIGTERM, escape)
time.sleep(600)
"""


def test_a_process_forked_on_sigterm_is_killed_after_the_grace(
    system_users: SystemUsers,
    paths: DaemonPaths,
    unit_daemon: Callable[..., ProcessDaemon],
    work_dir: Path,
) -> None:
    """A revoked lease that asked to be terminated: its holder answers SIGTERM by forking a
    child that ignores SIGTERM, in a session of its own, and exiting. The child is covered
    when it is forked, so the SIGKILL after the grace reaches it."""
    open_to_everyone(paths.root)
    daemon = unit_daemon(revoke_grace_seconds=0.5)
    holder, lease_id = start_holder(
        system_users, daemon, work_dir, ESCAPE_ON_SIGTERM, ON_REVOKE="terminate"
    )
    with Client(daemon.paths.socket) as client:
        wait_for(lambda: covered(client, lease_id) == {holder.pid}, timeout=20)
        client.revoke(lease_id, reason="maintenance")
    holder.wait(30)
    wait_for(lambda: len(marked(work_dir)) >= 1, timeout=30, what="the escape on SIGTERM")
    wait_for(
        lambda: not any(alive(pid) for pid in marked(work_dir)),
        timeout=30,
        what="the SIGKILL after the grace",
    )
    assert "not allowed" not in daemon.stderr()


def test_a_stray_child_is_read_again_at_its_first_execs_only() -> None:
    """A child of a holder's parent that joined nothing is asked about again at each of its
    first EXEC_CHECKS execs, and no more (a process that execs in a loop costs the daemon no
    more than a few forks); one that joins is not asked again; an exit forgets it."""
    asked: list[tuple[int, float]] = []
    joins_at: list[int] = []

    def stray(child: tuple[int, float]) -> bool:
        asked.append(child)
        return len(asked) in joins_at

    events = FamilyEvents(
        object(),  # type: ignore[arg-type]  # apply() reads no connector
        ProcessFamilies(),
        lambda gone: None,
        lambda: [],
        stray=stray,
        stray_parents={1},
    )
    pid = 2**22 - 3  # no such process: its start time unknown
    fork = ProcEvent(EventKind.FORK, pid, pid, 1, 0)
    execed = ProcEvent(EventKind.EXEC, pid, pid)
    events.apply([fork, *[execed] * 10])
    assert len(asked) == 1 + EXEC_CHECKS
    events.apply([fork, ProcEvent(EventKind.EXIT, pid, pid), execed])
    assert len(asked) == 2 + EXEC_CHECKS
    asked.clear()
    joins_at.append(2)  # joins at its first exec
    events.apply([fork, execed, execed, execed])
    assert len(asked) == 2
