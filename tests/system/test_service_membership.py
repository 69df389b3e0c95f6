"""Case 8 under the service as shipped: what `auto` picks under systemd (a scope per bound
lease) keeps every process started under a lease in it, however it was started and whatever
happened to the daemon. The holders take their leases through the API (`Client.allocate`),
so nothing in their work's environment names the lease: only the kernel's cgroup does.
"""

from __future__ import annotations

import time

from tests.system.container import Box
from tests.system.test_service import (
    PYTHON,
    ctl,
    lease_processes,
    leases,
    scope_of,
    start_user_unit,
    unit_state,
    until,
    wait_for_lease,
)

# Work started below a holder lets go of the pipes `systemd-run --pipe` waits on.
QUIET = """
def quiet():
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
"""

# An API holder (no lease in any environment) whose work leaves it in a storm: CHILDREN
# children each fork GRANDCHILDREN `sleep`s and exit at once, all together; then the holder
# exits too. Prints the lease id first.
FORK_STORM = (
    """
import os, sys
from gpulease import Client
"""
    + QUIET
    + """
client = Client()
lease = client.allocate(1, bind_to_process=True, label=sys.argv[1])
print(lease.id, flush=True)
children, grandchildren = int(sys.argv[2]), int(sys.argv[3])
for _ in range(children):
    if os.fork() == 0:
        for _ in range(grandchildren):
            if os.fork() == 0:
                quiet()
                os.execv("/bin/sleep", ["sleep", "600"])
        os._exit(0)
os._exit(0)
"""
)
CHILDREN, GRANDCHILDREN = 40, 6

# An API holder that starts its work with clone(CLONE_PARENT): the work's parent is the
# holder's parent (systemd), never a process of the lease. Then the holder exits.
CLONE_PARENT_HOLDER = (
    """
import ctypes, os, sys
from gpulease import Client
"""
    + QUIET
    + """
SYS_CLONE = {"x86_64": 56, "aarch64": 220}[os.uname().machine]
CLONE_PARENT, SIGCHLD = 0x00008000, 17
lease = Client().allocate(1, bind_to_process=True, label=sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
child = libc.syscall(SYS_CLONE, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0)
if child == 0:
    quiet()
    os.execv("/bin/sleep", ["sleep", "600"])
assert child > 0, ctypes.get_errno()
print(lease.id, child, flush=True)
os._exit(0)
"""
)

# One process takes a bound lease, frees it, takes another: the second lease's scope holds
# it (its first lease's scope outlives that lease while the process runs). Then its work
# leaves it by setsid and a double fork, and it exits.
SECOND_LEASE = (
    """
import os
from gpulease import Client
"""
    + QUIET
    + """
client = Client()
client.free(client.allocate(1, bind_to_process=True, label="first").id)
lease = client.allocate(1, bind_to_process=True, label="second")
cgroup = open("/proc/self/cgroup").read().strip().split("::")[-1]
print(lease.id, cgroup, flush=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        quiet()
        os.execv("/bin/sleep", ["sleep", "600"])
    os._exit(0)
os._exit(0)
"""
)


def alive(box: Box, pids: list[int]) -> list[int]:
    return [p for p in pids if box.run(["kill", "-0", str(p)]).returncode == 0]


def kill_and_see_the_lease_end(box: Box, lease_id: str, pids: list[int]) -> None:
    box.run(["kill", "-KILL", *map(str, pids)])
    until(lambda: all(x["id"] != lease_id for x in leases(box)), 10, "the lease to end")


def test_a_fork_storm_of_an_api_holder_stays_in_its_lease(box: Box) -> None:
    """alice's API holder (no lease id in any environment) forks 40 children that fork 240
    `sleep`s between them and exit at once; the holder exits. Every one of the 240 is in
    the lease (before, with the kernel's events the unit's `auto` took: 89 of 227 escaped an
    overrun), the lease stays active while they run, and ends when they are killed."""
    argv = [PYTHON, "-c", FORK_STORM, "alice-storm", str(CHILDREN), str(GRANDCHILDREN)]
    done = box.as_user("alice", argv)
    assert done.returncode == 0, done.stderr
    lease_id = done.stdout.split()[0]
    storm = CHILDREN * GRANDCHILDREN
    until(lambda: len(lease_processes(box, lease_id)) == storm, 30, "the holder's exit")
    sleeps = {int(p) for p in box.run(["pgrep", "-u", "alice", "-x", "sleep"]).stdout.split()}
    covered = set(lease_processes(box, lease_id))
    assert len(sleeps) == storm and sleeps == covered
    time.sleep(2)  # two of the old /proc scans: still every one of them
    assert set(lease_processes(box, lease_id)) == sleeps
    kill_and_see_the_lease_end(box, lease_id, sorted(sleeps))


def test_a_clone_parent_child_of_an_api_holder_stays_in_its_lease(box: Box) -> None:
    """alice's API holder starts its work with clone(CLONE_PARENT), so the work's parent is
    systemd, and exits: the work is in the lease (before, with the kernel's events: its
    parent was no member and nothing in its environment named the lease; it escaped)."""
    done = box.as_user("alice", [PYTHON, "-c", CLONE_PARENT_HOLDER, "alice-clone"])
    assert done.returncode == 0, done.stderr
    lease_id, clone = done.stdout.split()[0], int(done.stdout.split()[1])
    status = box.run(["cat", f"/proc/{clone}/status"]).stdout
    assert "\nPPid:\t1\n" in status  # a child of systemd, not of the holder
    until(lambda: lease_processes(box, lease_id) == [clone], 10, "the holder's exit")
    assert leases(box)[0]["state"] == "active"
    kill_and_see_the_lease_end(box, lease_id, [clone])


def test_a_processs_second_bound_lease_is_a_scope_of_its_own(box: Box) -> None:
    """alice's process takes a bound lease, frees it and takes another: it moves into the
    second lease's scope (before: it stayed in the first, ended lease's scope and the second
    was followed by /proc scans); its work leaves it by setsid and a double fork, it exits,
    and the work holds the second lease."""
    done = box.as_user("alice", [PYTHON, "-c", SECOND_LEASE])
    assert done.returncode == 0, done.stderr
    lease_id, cgroup = done.stdout.split()
    assert cgroup == f"/gpuallocd.slice/gpuallocd-leases.slice/gpuallocd-lease-{lease_id}.scope"
    until(lambda: len(lease_processes(box, lease_id)) == 1, 10, "the holder's exit")
    (work,) = lease_processes(box, lease_id)
    assert box.run(["cat", f"/proc/{work}/comm"]).stdout.strip() == "sleep"
    kill_and_see_the_lease_end(box, lease_id, [work])


def test_no_process_of_a_lease_moves_itself_out_of_its_scope(box: Box) -> None:
    """alice's work in a lease's scope tries to leave it for a cgroup delegated to her (as
    systemd delegates a user's manager its subtree), for her session's slice and for the
    daemon's slice: every move is refused (a move needs write access to the cgroup both
    lie under, root's), and the work is still in the lease."""
    delegated = "/sys/fs/cgroup/alice-delegated"
    box.sh(f"mkdir -p {delegated} && chown -R alice {delegated}")
    done = box.as_user("alice", [PYTHON, "-c", CLONE_PARENT_HOLDER, "alice-stays"])
    assert done.returncode == 0, done.stderr
    lease_id, work = done.stdout.split()[0], int(done.stdout.split()[1])
    until(lambda: lease_processes(box, lease_id) == [work], 10, "the holder's exit")
    targets = [
        f"{delegated}/cgroup.procs",
        "/sys/fs/cgroup/user.slice/cgroup.procs",
        "/sys/fs/cgroup/gpuallocd.slice/gpuallocd-leases.slice/cgroup.procs",
    ]
    try:
        for target in targets:
            moved = box.as_user("alice", ["sh", "-c", f"echo {work} > {target}"])
            assert moved.returncode != 0, target
        scope = scope_of(box, lease_id)["ControlGroup"]
        assert f"0::{scope}" in box.run(["cat", f"/proc/{work}/cgroup"]).stdout.splitlines()
        assert lease_processes(box, lease_id) == [work]
        kill_and_see_the_lease_end(box, lease_id, [work])
    finally:
        box.run(["rmdir", delegated])


def test_after_a_restart_a_revoke_stops_the_command_of_a_killed_run(box: Box) -> None:
    """alice's `gpuallocctl run -- sleep 600`; the service restarts, then `run` is killed
    (kill -9): the lease stays active with its command, and root's revoke stops the command,
    as the ledger's `on_revoke` says (before: after a restart the daemon no longer knew the
    lease asked for it, and the command ran on)."""
    start_user_unit(
        box,
        "alice",
        "alice-restart",
        ["gpuallocctl", "run", "-n", "1", "--label", "alice-restart", "--", "sleep", "600"],
    )
    lease = wait_for_lease(box, "alice-restart")
    until(lambda: len(lease_processes(box, lease["id"])) == 2, 30, "the lease to cover sleep")
    command = next(p for p in lease_processes(box, lease["id"]) if p != lease["pid"])
    assert box.run(["systemctl", "restart", "gpuallocd.service"]).returncode == 0
    box.run(["kill", "-KILL", str(lease["pid"])])
    until(lambda: unit_state(box, "alice-restart") != "active", 30, "run to die")
    until(lambda: lease_processes(box, lease["id"]) == [command], 10, "run's exit")
    ctl(box, "revoke", lease["id"], "--reason", "maintenance")
    until(lambda: alive(box, [command]) == [], 30, "the command to be stopped")
    until(lambda: scope_of(box, lease["id"])["ActiveState"] != "active", 30, "the scope to go")
