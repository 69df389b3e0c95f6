"""Round four: enforcement and adoption attacked by real local users (alice, bob, carol and
dave, created by `useradd`) on a recorded 8-GPU machine whose live file lists their real pids
as GPU users, against a real daemon; where identity and capabilities matter the daemon runs
as root with exactly the unit's capability set (docs/security.md, cases 22 on)."""

from __future__ import annotations

import os
import platform
import shutil
import signal
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gpulease import Client

from gpuallocd.enforcement.acl import read_acl
from gpuallocd.errors import MissingPrivilege
from tests.harness import DaemonPaths, ProcessDaemon, ThreadDaemon, wait_for
from tests.rules_harness import SteppedClock, daemon_with_config
from tests.system_users import SystemUsers
from tests.test_unit_capabilities import start_run
from tests.test_unit_enforcement import NVIDIA_MAJOR, probe
from tests.unleased_helpers import STUBBORN, Node, alive, exec_code, node, ran, root_xorg

__all__ = ["node", "root_xorg"]

UUID2 = "GPU-bb6adf39-2180-59fa-a20c-689582edf774"
UUID3 = "GPU-f06d330d-af21-5a36-84a7-d3d20d41fb7f"
SYS_EXIT = {"x86_64": 60, "aarch64": 93}.get(platform.machine(), 60)
# The main thread ends (exit(2) of one thread, not exit_group) while another thread works:
# the leader is a zombie, the process lives on.
LEADERLESS = f"""
import ctypes, threading, time
threading.Thread(target=time.sleep, args=(600,)).start()
print('ready', flush=True)
ctypes.CDLL(None).syscall({SYS_EXIT}, 0)
"""


def start(
    paths: DaemonPaths, node: Node, config: str = "", **settings: Any
) -> tuple[ThreadDaemon, SteppedClock]:
    clock = SteppedClock()
    settings.setdefault("sample_interval_seconds", 0.1)
    daemon = daemon_with_config(paths, config, clock=clock, inventory=node.inventory, **settings)
    return daemon.start(), clock


def actions(daemon: ThreadDaemon | ProcessDaemon, pid: int) -> list[str]:
    with daemon.client() as client:
        return [e["action"] for e in client.unleased()["events"] if e["pid"] == pid]


def group_lives(pid: int) -> bool:
    """Whether a thread of `pid` still runs (its leader may be a zombie)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    return any(alive(int(tid)) for tid in tids if tid != str(pid)) or alive(pid)


def leader_exited(pid: int) -> None:
    wait_for(lambda: not alive(pid) and group_lives(pid), timeout=30, what="a zombie leader")


# Case 22 (issue case 1): exemptions a user cannot forge ------------------------------------


@pytest.fixture
def bobs_bin(paths: DaemonPaths, system_users: SystemUsers) -> Path:
    """A directory of bob's with his copy of `sleep` named Xorg and his link
    `nvidia-persistenced` to `sleep`."""
    directory = paths.root / "bobs"
    directory.mkdir()
    sleep = shutil.which("sleep") or "/bin/sleep"
    shutil.copy(sleep, directory / "Xorg")
    (directory / "nvidia-persistenced").symlink_to(sleep)
    uid = system_users.uid("bob")
    for path in (directory, directory / "Xorg"):
        os.chown(path, uid, uid)
    os.lchown(directory / "nvidia-persistenced", uid, uid)
    return directory


def test_a_name_a_user_chose_exempts_nothing(
    unit_daemon: Callable[..., ProcessDaemon],
    node: Node,
    bobs_bin: Path,
    root_xorg: str,
) -> None:
    """bob's job renamed Xorg (prctl), run as `exec -a Xorg sleep`, a copy of sleep named
    Xorg, a link named nvidia-persistenced, and a hard link of root's sleep named Xorg in a
    sticky directory (what a user may make where fs.protected_hardlinks is 0) are each stopped
    under `terminate`; dave's Xorg that root installed is left alone and not reported."""
    shared = node.paths.root / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    os.link(os.path.realpath(shutil.which("sleep") or "/bin/sleep"), shared / "Xorg")
    daemon = unit_daemon(
        inventory=node.inventory,
        unleased_use="terminate",
        unleased_grace_seconds=0.0,
        sample_interval_seconds=0.1,
    )
    disguised = [
        node.start(
            "bob",
            "import ctypes, time; ctypes.CDLL(None).prctl(15, b'Xorg', 0, 0, 0); "
            "print('ready', flush=True); time.sleep(600)",
        ),
        node.start(
            "bob", "import os; print('ready', flush=True); os.execv('/bin/sleep', ['Xorg', '600'])"
        ),
        node.start("bob", exec_code(str(bobs_bin / "Xorg"), "600")),
        node.start("bob", exec_code(str(bobs_bin / "nvidia-persistenced"), "600")),
        node.start("bob", exec_code(str(shared / "Xorg"), "600")),
    ]
    display = node.start("dave", exec_code(root_xorg, "600"))
    for pid in (*disguised, display):
        ran(pid)
        node.put(UUID3, pid)
    for pid in disguised:
        wait_for(lambda pid=pid: not alive(pid), timeout=30, what=f"bob's pid {pid} to stop")
    with daemon.client() as client:
        node.sampled(client)
    assert [actions(daemon, pid) for pid in disguised] == [["reported", "terminated"]] * 5
    assert alive(display) and actions(daemon, display) == []


# Case 28 (issue case 7): a process whose main thread has exited ---------------------------


def test_a_zombie_leader_stops_no_sample_and_is_judged_by_its_threads(
    paths: DaemonPaths, node: Node, system_users: SystemUsers, caplog: pytest.LogCaptureFixture
) -> None:
    """`adopt`: bob's process whose main thread exited (its other thread works on GPU 2)
    is adopted like any running process, and carol's process on GPU 3 after it is adopted
    too (before: an assertion failed on every sample and no later action ran)."""
    daemon, _ = start(paths, node, unleased_use="adopt")
    bobs = node.start("bob", LEADERLESS)
    leader_exited(bobs)
    carols = node.start("carol")
    node.put(UUID2, bobs)
    node.put(UUID3, carols)
    with daemon.client() as client:
        wait_for(lambda: len(client.leases()) == 2, timeout=30, what="both adoptions")
        assert sorted(lease.pid for lease in client.leases()) == sorted([bobs, carols])
    assert "AssertionError" not in caplog.text


HOLDER_WHOSE_MAIN_THREAD_EXITS = f"""
import ctypes, os, sys, threading, time, warnings
from gpulease import gpu_lease

# 3.12 and later warn of a fork in a threaded process, quoting the line: not the log's words
warnings.simplefilter("ignore", DeprecationWarning)

def state():
    return open('/proc/self/stat').read().rsplit(')', 1)[1].split()[0]

def work():
    while state() != 'Z':
        time.sleep(0.01)
    child = os.fork()  # seen by the daemon after the main thread's exit
    if child == 0:
        time.sleep(600)
        os._exit(0)
    print('child', child, flush=True)
    time.sleep(600)

lease = gpu_lease(1, socket=sys.argv[1]).__enter__()
print('lease', lease.id, flush=True)
threading.Thread(target=work).start()
ctypes.CDLL(None).syscall({SYS_EXIT}, 0)
"""


def test_a_holder_whose_main_thread_exits_keeps_its_lease(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """With the kernel's process events: bob's holder whose main thread exits while another
    thread works keeps its lease (and the child that thread forks is covered); when the
    process is killed the lease ends."""
    daemon, _ = start(paths, node, process_tracking="connector")
    log = paths.root / "holder.log"
    holder = system_users.start(
        "bob", ["-c", HOLDER_WHOSE_MAIN_THREAD_EXITS, str(paths.socket)], log
    )
    try:
        wait_for(lambda: "child" in log.read_text(), timeout=30, what="the holder's child")
        words = log.read_text().split()
        lease_id, child = words[words.index("lease") + 1], int(words[words.index("child") + 1])
        with daemon.client() as client:
            wait_for(
                lambda: (
                    child in client.lease(lease_id).raw["processes"]
                    or client.lease(lease_id).state != "active"
                ),
                timeout=30,
                what="the child's fork to be applied",
            )
            assert client.lease(lease_id).state == "active"
            holder.kill()
            os.kill(child, signal.SIGKILL)
            wait_for(lambda: client.lease(lease_id).state == "freed", timeout=30, what="the end")
    finally:
        holder.kill()
        holder.wait(10)


# Case 29 (issue case 12): group leniency follows /etc/group -------------------------------


@pytest.fixture
def out_of_students(system_users: SystemUsers) -> Iterator[Callable[[], None]]:
    """Takes alice out of the students group (gpasswd -d); puts her back afterwards."""
    alice, students = system_users.name("alice"), system_users.name("students")
    removed: list[bool] = []

    def remove() -> None:
        subprocess.run(["gpasswd", "-d", alice, students], check=True, capture_output=True)
        removed.append(True)

    if shutil.which("gpasswd") is None:
        pytest.skip("gpasswd is not installed")
    yield remove
    if removed:
        subprocess.run(["gpasswd", "-a", alice, students], check=True, capture_output=True)


def test_a_user_taken_out_of_a_lenient_group_loses_its_leniency(
    paths: DaemonPaths,
    node: Node,
    system_users: SystemUsers,
    out_of_students: Callable[[], None],
) -> None:
    """`[limits.group.students] unleased_use = "off"`: alice's job is left alone while she is
    a student; once /etc/group no longer lists her there, it is reported (no SIGHUP)."""
    config = f'[limits.group.{system_users.name("students")}]\nunleased_use = "off"\n'
    daemon, _ = start(paths, node, config)
    alices = node.start("alice")
    node.put(UUID3, alices)
    with daemon.client() as client:
        node.sampled(client)
    assert actions(daemon, alices) == []
    out_of_students()
    wait_for(lambda: actions(daemon, alices) == ["reported"], timeout=30, what="the report")


# Case 23 (issue case 2): adoption obeys advance reservations ------------------------------

HOUR = 3600.0


def test_adopting_by_hand_obeys_advance_reservations(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """GPU 2 is reserved for bob now, GPU 3 from 300 s on: alice's `adopt` of her process on
    GPU 2 is refused with `reservation_conflict`; on GPU 3 her lease ends before bob's
    reservation starts (before: 201 with a week's TTL on both)."""
    daemon, clock = start(paths, node)
    bob = system_users.name("bob")
    with daemon.client() as client:
        client.reserve(gpus=[2], start_in=0, duration=HOUR, user=bob, reason="bob's run")
        client.reserve(gpus=[3], start_in=300, duration=HOUR, user=bob, reason="bob's next")
    on2, on3 = node.start("alice"), node.start("alice")
    node.put(UUID2, on2)
    node.put(UUID3, on3)
    with daemon.client() as client:
        node.sampled(client)
    refused = system_users.ctl("alice", paths.socket, "--json", "adopt", str(on2))
    assert refused.returncode != 0 and "reservation_conflict" in refused.stderr, refused.stderr
    adopted = system_users.ctl("alice", paths.socket, "--json", "adopt", str(on3))
    assert adopted.returncode == 0, adopted.stderr
    with daemon.client() as client:
        (lease,) = client.leases()
        assert lease.pid == on3 and lease.raw["expires_at"] <= clock() + 300


def test_the_daemon_adopts_nothing_on_a_reserved_gpu(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """`unleased_use = "adopt"`: carol's process on GPU 2, reserved for bob now, is reported
    with the reservation, not adopted."""
    daemon, _ = start(paths, node, unleased_use="adopt")
    with daemon.client() as client:
        client.reserve(
            gpus=[2], start_in=0, duration=HOUR, user=system_users.name("bob"), reason="run"
        )
    carols = node.start("carol")
    node.put(UUID2, carols)
    wait_for(lambda: actions(daemon, carols) == ["reported"], timeout=30, what="the report")
    with daemon.client() as client:
        assert client.leases() == []
        (record,) = [e for e in client.unleased()["events"] if e["pid"] == carols]
    assert "not adopted" in record["detail"] and "reservation" in record["detail"]


# Case 24 (issue case 3): a revoked adoption is stopped, and not made again ----------------


def test_a_revoked_adoption_stops_its_process_and_is_not_adopted_again(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """`adopt`: bob's process (it ignores SIGTERM) on GPU 2 becomes his lease; root revokes
    it: no new lease is made for it at the next samples, and it is killed after the grace
    (before: it ran on and the next sample adopted it again, with a week's TTL)."""
    daemon, _ = start(paths, node, unleased_use="adopt", revoke_grace_seconds=3)
    bobs = node.start("bob", STUBBORN)
    node.put(UUID2, bobs)
    with daemon.client() as client:
        wait_for(lambda: len(client.leases()) == 1, timeout=30, what="the adoption")
        (lease,) = client.leases()
        client.revoke(lease.id, reason="not on my machine")
        node.sampled(client)
        assert [(x.id, x.state) for x in client.leases()] == [], lease.id
    wait_for(lambda: not alive(bobs), timeout=30, what="bob's process to be killed")
    with daemon.client() as client:
        node.sampled(client)
        assert client.leases() == []
    assert actions(daemon, bobs)[0] == "adopted" and "adopted" not in actions(daemon, bobs)[1:]


# Case 25 (issue case 4): an adoption through a recycled pid -------------------------------

NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")


def take_pid(users: SystemUsers, short: str, pid: int, log: Path) -> subprocess.Popen[str] | None:
    """A process of `short` that the kernel gave `pid` (steered with ns_last_pid, standing
    in for winning the race); None when other forks on the machine kept taking it."""
    for _ in range(200):
        NS_LAST_PID.write_text(str(pid - 1))
        process = users.start(short, ["-c", "import time; time.sleep(600)"], log)
        if process.pid == pid:
            return process
        process.kill()
        process.wait(10)
    return None


def test_adopting_a_recycled_pid_binds_no_one_elses_process(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """The last sample saw alice's process on GPU 2; it exits and bob's process gets its pid
    before the next sample: alice's `adopt` of that pid is refused and no lease is made
    (before: she got a lease bound to bob's process)."""
    if not NS_LAST_PID.exists():
        pytest.skip("this kernel has no ns_last_pid to steer pid reuse with")
    first = system_users.start("alice", ["-c", "import time; time.sleep(600)"], paths.root / "a")
    try:
        node.put(UUID2, first.pid)
        daemon, _ = start(paths, node, sample_interval_seconds=3600)  # the first sample only
        alice = system_users.uid("alice")

        def seen() -> bool:  # once the first sample is applied (it may follow the serving)
            with daemon.client() as client:
                (gpu2,) = [g for g in client.status() if g.raw["uuid"] == UUID2]
                return {"pid": first.pid, "uid": alice} in gpu2.raw["foreign_processes"]

        wait_for(seen, timeout=30, what="the first sample to show alice's process on GPU 2")
    finally:
        first.kill()
        first.wait(10)
    bobs = take_pid(system_users, "bob", first.pid, paths.root / "b")
    if bobs is None:
        pytest.skip("other processes on this machine kept taking the pid")
    try:
        adopted = system_users.ctl("alice", paths.socket, "adopt", f"pid:{first.pid}")
        assert adopted.returncode != 0 and "not yours" in adopted.stderr, adopted.stdout
        with daemon.client() as client:
            assert client.leases() == []
    finally:
        bobs.kill()
        bobs.wait(10)


# Case 26 (issue case 5): device ACLs only on a device reached without a link ---------------


def device_dir(paths: DaemonPaths, mode: int, missing: int | None = None) -> Path:
    """`nvidia0`..`nvidia7` (root's, 0600) in a directory of root's with `mode`."""
    directory = paths.root / "dev"
    directory.mkdir()
    directory.chmod(mode)
    for minor in range(8):
        if minor != missing:
            node_mode = 0o600 | stat.S_IFCHR
            os.mknod(directory / f"nvidia{minor}", node_mode, os.makedev(NVIDIA_MAJOR, minor))
    return directory


def test_a_device_directory_users_may_write_is_refused_at_start(
    unit_daemon: Callable[..., ProcessDaemon], node: Node
) -> None:
    """`device_access = "acl"` with a device directory anyone may write (where a user could
    rename a node aside and keep her entry on it): the daemon does not start, and says why
    (before: it started without a word)."""
    devices = device_dir(node.paths, 0o777)
    devices.chmod(0o777)  # past the umask
    daemon = unit_daemon(
        wait=False, inventory=node.inventory, device_access="acl", device_dir=str(devices)
    )
    assert daemon.process is not None
    assert daemon.process.wait(60) == MissingPrivilege.exit_code, daemon.stderr()
    assert str(devices) in daemon.stderr() and "only root may change" in daemon.stderr()


def test_no_acl_is_put_through_a_link(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """In a sticky device directory (alice may add names, not move root's), alice puts a
    link at the missing `nvidia3` to a root-only file and leases GPU 3 from a daemon with
    every capability: the file gets no entry of hers (before: she could read it)."""
    devices = device_dir(node.paths, 0o1777, missing=3)
    devices.chmod(0o1777)
    secret = node.paths.root / "secret"
    secret.write_text("root's own\n")
    secret.chmod(0o600)
    made = system_users.run(
        "alice", ["-c", f"import os; os.symlink({str(secret)!r}, {str(devices / 'nvidia3')!r})"]
    )
    assert made.returncode == 0, made.stderr
    start(paths, node, device_access="acl", device_dir=str(devices))
    granted = system_users.ctl("alice", node.paths.socket, "allocate", "--gpu", "3")
    assert granted.returncode == 0, granted.stderr
    assert read_acl(str(secret)).users() == {}
    assert probe(system_users, "alice", secret) == "EACCES"
    assert probe(system_users, "alice", devices / "nvidia2") == "EACCES"


# Case 30 (issue case 15): a revoke after a restart stops a dead holder's work -------------


@pytest.fixture
def commands() -> Iterator[list[int]]:
    """Pids of user commands a test may leave behind; killed at the end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if group_lives(pid):
            os.kill(pid, signal.SIGKILL)


def test_after_a_restart_a_revoke_stops_the_work_of_a_dead_run(
    unit_daemon: Callable[..., ProcessDaemon],
    node: Node,
    system_users: SystemUsers,
    commands: list[int],
) -> None:
    """alice's `gpuallocctl run`; the daemon is killed, then `run` too (kill -9), and the
    daemon starts again: the lease stays active while the command runs, and root's revoke
    stops the command (before: the lease ended at the start, the command ran on)."""
    daemon = unit_daemon(revoke_grace_seconds=2.0)
    wrapper, lease_id, command = start_run(system_users, daemon, "-n", "1")
    commands.append(command)
    daemon.kill()
    wrapper.kill()
    wrapper.wait(10)
    unit_daemon(revoke_grace_seconds=2.0)
    with Client(node.paths.socket) as client:
        assert client.lease(lease_id).state == "active"
        assert command in client.lease(lease_id).raw["processes"]
        client.revoke(lease_id, reason="maintenance")
    wait_for(lambda: not alive(command), timeout=30, what="the daemon to stop the command")


# Case 31 (issue case 16): a clone(CLONE_PARENT) child of an orphaned member ----------------

CLONE_PARENT_WORK = """
import ctypes, os, sys, time
from gpulease import gpu_lease
SYS_CLONE = {"x86_64": 56, "aarch64": 220}[os.uname().machine]
CLONE_PARENT, SIGCHLD = 0x00008000, 17
WORKER = '''
import ctypes, os, sys, time
if os.fork():
    os._exit(0)  # the worker leaves; its child is an orphan, handed to init
while os.getppid() != 1:
    time.sleep(0.01)
libc = ctypes.CDLL(None, use_errno=True)
child = libc.syscall(%d, %d, 0, 0, 0, 0)  # a sibling, not a child: its parent is init
if child == 0:
    time.sleep(600)
    os._exit(0)
print('clone', child, 'worker', os.getpid(), flush=True)
time.sleep(600)
''' % (SYS_CLONE, CLONE_PARENT | SIGCHLD)

with gpu_lease(1, socket=sys.argv[1]) as lease:
    print('lease', lease.id, flush=True)
    import subprocess
    subprocess.run([sys.executable, '-c', WORKER])  # started with the lease in its environment
    time.sleep(600)
"""


def test_a_clone_parent_child_of_an_orphan_stays_under_the_lease(
    paths: DaemonPaths, node: Node, system_users: SystemUsers, commands: list[int]
) -> None:
    """With the kernel's process events: bob's worker, orphaned and handed to init, starts a
    process with clone(CLONE_PARENT), whose parent is init, no member: it is covered by the
    lease named in its environment (before: it escaped)."""
    if Path("/proc/1/status").read_text().find("PPid:\t0") < 0:
        pytest.skip("init here is not the reaper of orphans")
    start(paths, node, process_tracking="connector")
    log = paths.root / "clone.log"
    holder = system_users.start("bob", ["-c", CLONE_PARENT_WORK, str(paths.socket)], log)
    try:
        wait_for(lambda: "clone" in log.read_text(), timeout=30, what="the clone")
        words = log.read_text().split()
        lease_id, clone = words[words.index("lease") + 1], int(words[words.index("clone") + 1])
        commands += [clone, int(words[words.index("worker") + 1])]  # the orphan too
        with Client(paths.socket) as client:
            wait_for(
                lambda: clone in client.lease(lease_id).raw["processes"],
                timeout=10,
                what="the clone to be covered",
            )
    finally:
        holder.kill()
        holder.wait(10)


# Case 27 (issue case 6): families repaired after lost process events ----------------------

ORPHANING_WORK = """
import os, subprocess, sys, time
from gpulease import gpu_lease
WORKER = '''
import os, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
child = os.fork()
if child == 0:
    time.sleep(600)
    os._exit(0)
print('grandchild', child, flush=True)
'''  # the worker exits at once: its child is an orphan, its ancestry gone
with gpu_lease(1, socket=sys.argv[1]) as lease:
    print('lease', lease.id, flush=True)
    worker = subprocess.Popen([sys.executable, '-c', WORKER, sys.argv[2]])
    print('worker', worker.pid, flush=True)
    worker.wait()
    time.sleep(600)
"""


def lose_events_while(daemon: ThreadDaemon, work: Callable[[], None]) -> None:
    """Hold the daemon's event loop while `work` runs, drop the process events the kernel
    queued meanwhile (as it drops them when the buffer overruns) and let the daemon handle
    the overrun as it does on ENOBUFS."""
    import threading

    events = daemon._daemon._facade_in_service._processes._events  # type: ignore[union-attr]
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        done.wait(60)
        events._connector.discard()
        events.stats.overruns += 1
        events._tell(events._rescan())

    assert daemon._loop is not None
    daemon._loop.call_soon_threadsafe(hold)
    held.wait(30)
    try:
        work()
    finally:
        done.set()


def test_after_lost_events_an_orphaned_grandchild_stays_under_the_lease(
    paths: DaemonPaths, node: Node, system_users: SystemUsers, commands: list[int]
) -> None:
    """bob's worker forks a grandchild and exits while the daemon's events are lost: the
    rescan after the overrun finds the grandchild by the lease in its environment (before:
    it escaped, its parent gone with the events); alice's process that names bob's lease in
    its environment is not taken into it."""
    daemon, _ = start(paths, node, process_tracking="connector")
    log, go = paths.root / "orphan.log", paths.root / "go"
    holder = system_users.start("bob", ["-c", ORPHANING_WORK, str(paths.socket), str(go)], log)
    try:
        wait_for(lambda: "worker" in log.read_text(), timeout=30, what="the worker")
        lease_id = log.read_text().split()[1]

        def orphan() -> None:
            go.touch()
            wait_for(lambda: "grandchild" in log.read_text(), timeout=30, what="the fork")

        worker = int(log.read_text().split()[3])
        impostor = node.start(
            "alice",
            "import os, sys; os.execve(sys.executable, [sys.executable, '-c', "
            "'import time; print(\"ready\", flush=True); time.sleep(600)'], "
            f"{{**os.environ, 'GPUALLOCD_LEASE_ID': {lease_id!r}, "
            "'GPUALLOCD_ON_REVOKE': 'terminate'})",
        )
        with Client(paths.socket) as client:
            wait_for(lambda: worker in client.lease(lease_id).raw["processes"], timeout=10)
        lose_events_while(daemon, orphan)
        words = log.read_text().split()
        grandchild = int(words[words.index("grandchild") + 1])
        commands.append(grandchild)
        with Client(paths.socket) as client:
            assert client.health()["process_tracking"] == "connector"
            assert grandchild in client.lease(lease_id).raw["processes"]  # the rescan ran
            assert impostor not in client.lease(lease_id).raw["processes"]
    finally:
        holder.kill()
        holder.wait(10)
