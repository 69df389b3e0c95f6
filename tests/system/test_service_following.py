"""A lease that follows its work (an agent's), under the service as shipped: what `auto` picks
under systemd (a scope per bound lease) gives the work, which its holder did not start, a
scope of its own when the holder exits (`gpuallocd-lease-ID-work.scope`), and a process that
joins the lease (`gpuallocctl run --lease`) moves into that scope too.
"""

from __future__ import annotations

from tests.system.container import Box
from tests.system.test_service import (
    PYTHON,
    ctl,
    journal,
    lease_processes,
    leases,
    scope_of,
    show,
    start_user_unit,
    until,
    wait_for_lease,
)

# An agent's server, as far as the daemon sees it: a bound lease that follows its work,
# held until the unit is stopped.
FOLLOWING_HOLDER = """
import sys, time
from gpulease import Client
Client().allocate(1, bind_to_process=True, follow_work=True, label=sys.argv[1])
time.sleep(600)
"""


def cgroup_of(box: Box, pid: int) -> str:
    lines = box.run(["cat", f"/proc/{pid}/cgroup"]).stdout.splitlines()
    return next(line[3:] for line in lines if line.startswith("0::"))


def main_pid(box: Box, unit: str) -> int:
    return int(show(box, unit, "MainPID")["MainPID"])


def test_an_agents_work_keeps_its_lease_in_a_work_scope_after_the_holder(box: Box) -> None:
    """alice's holder takes a lease that follows its work; beside it (units of their own)
    she starts a job with the lease's id in its environment and a `run --lease` job. The
    holder is stopped: both jobs move into the lease's work scope and keep the lease; bob's
    process naming the lease is not taken; killed, the jobs end the lease and the scope."""
    start_user_unit(box, "alice", "alice-agent", [PYTHON, "-c", FOLLOWING_HOLDER, "agent"])
    lease = wait_for_lease(box, "agent")
    lease_id = lease["id"]
    assert lease["follow_work"] is True
    named = ["env", f"GPUALLOCD_LEASE_ID={lease_id}", "sleep", "600"]
    start_user_unit(box, "alice", "alice-job", named)
    start_user_unit(box, "bob", "bob-job", named)
    run = ["gpuallocctl", "run", "--lease", lease_id, "--", "sleep", "600"]
    start_user_unit(box, "alice", "alice-joined", run)
    joined = main_pid(box, "alice-joined")
    until(lambda: joined in lease_processes(box, lease_id), 30, "run --lease to join")
    work = f"/gpuallocd.slice/gpuallocd-leases.slice/gpuallocd-lease-{lease_id}-work.scope"
    assert cgroup_of(box, joined) == work
    job, bobs = main_pid(box, "alice-job"), main_pid(box, "bob-job")

    box.run(["systemctl", "stop", "alice-agent"])
    until(lambda: job in lease_processes(box, lease_id), 30, "the job to be taken in")
    assert cgroup_of(box, job) == work, journal(box)[-2000:]
    assert cgroup_of(box, bobs) != work
    assert bobs not in lease_processes(box, lease_id)
    assert [x["state"] for x in leases(box) if x["id"] == lease_id] == ["active"]
    assert scope_of(box, lease_id)["ActiveState"] != "active"  # the holder's scope went

    work_pids = lease_processes(box, lease_id)
    assert set(work_pids) >= {job, joined}
    box.run(["kill", "-KILL", *map(str, work_pids)])  # out of their units: killed by pid
    until(lambda: all(x["id"] != lease_id for x in leases(box)), 10, "the lease to end")
    ended = ctl(box, "history", "--lease", lease_id)["events"][-1]
    assert ended["event"] == "freed" and "exited" in ended["detail"]
    work_unit = f"gpuallocd-lease-{lease_id}-work.scope"
    until(lambda: show(box, work_unit, "ActiveState")["ActiveState"] != "active", 10, "scope")
    box.run(["systemctl", "stop", "bob-job"])
