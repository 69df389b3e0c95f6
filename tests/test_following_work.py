"""An agent's lease follows the agent's work: driven by the MCP SDK's own stdio client as a
real user, an agent allocates, starts its job in the background with the lease's environment
(as agents do: `nohup env CUDA_VISIBLE_DEVICES=... GPUALLOCD_LEASE_ID=... CMD &`, or with
export_env's `run_prefix`) and its session ends; the lease stays exactly as long as the job.
Only the owner's own processes, started after the grant, that name the lease keep it."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from gpulease import Client, InvalidRequest

from tests.harness import DaemonPaths, ThreadDaemon, wait_for
from tests.mcp_long_job import long_job
from tests.mcp_session import data, mcp_session
from tests.system_users import SystemUsers, open_to_everyone

SLEEP = "/bin/sleep"
# A job that starts a daemon of its own (setsid, double fork) and exits: the daemon runs on.
FORKS_A_DAEMON = (
    "import os, sys, time\n"
    "sys.stdin.read()\n"  # until told (its stdin closed)
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        print(os.getpid(), flush=True)\n"
    "        time.sleep(600)\n"
    "    os._exit(0)\n"
    "os.wait()\n"
)
# A bound lease without follow_work: its id printed, held until stdin closes.
HOLDER = (
    "import sys\n"
    "from gpulease import Client\n"
    "lease = Client(sys.argv[1]).allocate(1, bind_to_process=True)\n"
    "print(lease.id, flush=True)\n"
    "sys.stdin.read()\n"
)


def bound_holder(paths: DaemonPaths) -> tuple[subprocess.Popen[str], str]:
    """A child of this process holding a bound lease (HOLDER): it, and the lease's id."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(paths.socket)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    return holder, holder.stdout.readline().strip()


@pytest.fixture
def node(
    paths: DaemonPaths, start_daemon: Callable[..., ThreadDaemon], request: pytest.FixtureRequest
) -> ThreadDaemon:
    """A daemon on the 4-GPU example, its socket open to the test users (its process
    tracking the parameter, where given)."""
    open_to_everyone(paths.root)
    tracking = getattr(request, "param", "auto")
    if tracking == "connector" and os.geteuid() != 0:
        pytest.skip("the kernel's process events need root")
    daemon = start_daemon(default_policy="simple", process_tracking=tracking)
    with daemon.client() as client:
        assert tracking in ("auto", client.health()["process_tracking"])
    return daemon


@pytest.fixture
def jobs() -> Iterator[list[int]]:
    """Pids of the jobs a test started; each is killed at the end."""
    started: list[int] = []
    yield started
    for pid in started:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def in_background(
    users: SystemUsers, short: str, line: str, jobs: list[int], env: dict[str, str] | None = None
) -> int:
    """`nohup LINE > /dev/null 2>&1 &` in a shell of the user's, as an agent's shell tool
    runs it: the shell exits at once and the job runs on, a child of nobody the daemon
    knows. The job's pid."""
    entry = pwd.getpwnam(users.name(short))
    done = subprocess.run(
        ["sh", "-c", f"nohup {line} > /dev/null 2>&1 < /dev/null & echo $!"],
        user=entry.pw_uid,
        group=entry.pw_gid,
        extra_groups=[],
        env={"PATH": "/usr/bin:/bin", "HOME": "/", **users.env, **(env or {})},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    pid = int(done.stdout.split()[-1])
    jobs.append(pid)
    return pid


def lease_of(node: ThreadDaemon, lease_id: str) -> dict[str, Any]:
    with node.client() as client:
        found: dict[str, Any] = client.request("GET", f"/v1/leases/{lease_id}")
        return found


def kept_by(node: ThreadDaemon, lease_id: str, pid: int) -> bool:
    """Once the lease has ended or counts `pid` among its processes: whether it is active
    with `pid` (the agent's session has ended by then)."""
    wait_for(
        lambda: (
            lease_of(node, lease_id)["state"] != "active"
            or pid in lease_of(node, lease_id)["processes"]
        ),
        30,
        what=f"lease {lease_id} ended or took in {pid}",
    )
    lease = lease_of(node, lease_id)
    return lease["state"] == "active" and pid in lease["processes"]


def ends(node: ThreadDaemon, lease_id: str) -> dict[str, Any]:
    wait_for(lambda: lease_of(node, lease_id)["state"] != "active", 30, what=f"{lease_id} ends")
    return lease_of(node, lease_id)


def stop(pid: int) -> None:
    os.kill(pid, signal.SIGTERM)


@pytest.mark.parametrize("node", ["connector", "proc-scan"], indirect=True)
def test_an_agents_background_job_keeps_its_lease_after_the_session_until_it_exits(
    system_users: SystemUsers, node: ThreadDaemon, jobs: list[int]
) -> None:
    """alice's agent allocates, starts `nohup env ... sleep &` with export_env's prefix,
    and its session ends: the lease stays, its GPU held, while the job runs, and ends when
    the job exits (before: it ended with the session while the job ran on)."""

    async def main() -> tuple[dict[str, Any], int]:
        async with mcp_session(system_users, "alice", node.paths.socket) as session:
            lease = data(await session.call_tool("allocate", {"count": 1, "label": "train"}))
            env = data(await session.call_tool("export_env", {"lease_id": lease["id"]}))
            job = in_background(system_users, "alice", f"{env['prefix']} {SLEEP} 600", jobs)
            return lease, job

    lease, job = anyio.run(main)
    assert kept_by(node, lease["id"], job)
    assert lease["follows_work"] is True
    with node.client() as client:
        held = {g.raw["lease_id"] for g in client.status()}
        assert lease["id"] in held
    stop(job)
    ended = ends(node, lease["id"])
    assert ended["state"] == "freed"
    with node.client() as client:
        assert client.leases() == []


def test_export_envs_run_prefix_joins_renews_and_ends_with_the_command(
    system_users: SystemUsers, node: ThreadDaemon, jobs: list[int]
) -> None:
    """The agent starts its job with export_env's run_prefix (`gpuallocctl run --lease`) and
    ends its session: the job runs with the lease's GPUs, `run` is one of the lease's
    processes (it joined), renews the lease while the job runs, and the lease ends when the
    job exits."""
    shared = node.paths.root / "shared"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    log = shared / "job.log"

    async def main() -> tuple[dict[str, Any], int]:
        async with mcp_session(system_users, "alice", node.paths.socket) as session:
            lease = data(await session.call_tool("allocate", {"count": 1, "ttl_seconds": 30}))
            env = data(await session.call_tool("export_env", {"lease_id": lease["id"]}))
            command = f"sh -c 'echo $CUDA_VISIBLE_DEVICES > {log}; exec {SLEEP} 600'"
            run = in_background(system_users, "alice", f"{env['run_prefix']} {command}", jobs)
            wait_for(lambda: log.exists() and log.read_text().strip() != "", 60, what="the job")
            return lease, run

    lease, run = anyio.run(main)
    assert log.read_text().strip() == lease["gpus"][0]["uuid"]
    assert kept_by(node, lease["id"], run)
    with node.client() as client:
        wait_for(
            lambda: any(e["event"] == "renewed" for e in client.history(lease["id"])),
            60,
            what="a renewal by the joined run",
        )
        assert client.lease(lease["id"]).state == "active"
    for pid in [p for p in lease_of(node, lease["id"])["processes"] if p != run]:
        stop(pid)  # the command: `run` exits with it
    assert ends(node, lease["id"])["state"] == "freed"


def test_the_long_job_session_of_the_agents_docs_keeps_the_gpus_until_the_job_ends(
    node: ThreadDaemon,
) -> None:
    """docs/agents.md's long job, run as written: after the session has ended the lease is
    active with the job among its processes, and it ends no sooner than the job does."""
    seen = long_job(node.paths.socket)
    assert seen.held_after_session
    assert seen.ended["state"] == "freed" and seen.ended["ended_at"] >= seen.done_at


def test_another_users_process_naming_the_lease_neither_keeps_nor_joins_it(
    system_users: SystemUsers, node: ThreadDaemon, jobs: list[int]
) -> None:
    """alice's job and bob's process both carry alice's lease id when her session ends: the
    lease stays for her job alone, and ends when it exits while bob's still runs; bob's
    `run --lease` of it is refused."""

    async def main() -> tuple[dict[str, Any], int, int]:
        async with mcp_session(system_users, "alice", node.paths.socket) as session:
            lease = data(await session.call_tool("allocate", {"count": 1}))
            env = data(await session.call_tool("export_env", {"lease_id": lease["id"]}))
            hers = in_background(system_users, "alice", f"{env['prefix']} {SLEEP} 600", jobs)
            his = in_background(system_users, "bob", f"{env['prefix']} {SLEEP} 600", jobs)
            refused = system_users.ctl(
                "bob", node.paths.socket, "run", "--lease", lease["id"], "--", "true"
            )
            assert refused.returncode != 0 and "permission_denied" in refused.stderr
            return lease, hers, his

    lease, hers, his = anyio.run(main)
    assert kept_by(node, lease["id"], hers)
    assert his not in lease_of(node, lease["id"])["processes"]
    stop(hers)
    assert ends(node, lease["id"])["state"] == "freed"
    os.kill(his, 0)  # bob's still runs: it kept nothing


def test_her_set_user_id_program_naming_the_lease_does_not_keep_it(
    system_users: SystemUsers, node: ThreadDaemon, jobs: list[int]
) -> None:
    """alice runs a set-user-ID-root program with her lease's environment beside her job:
    it is nobody's own process (its effective uid is root's), so when her job exits the
    lease ends while the program runs on."""
    if os.geteuid() != 0:
        pytest.skip("a set-user-ID-root program needs root to make")
    program = node.paths.root / "setuid-sleep"
    program.write_bytes(Path(SLEEP).read_bytes())
    program.chmod(0o4755)

    async def main() -> tuple[str, int, int]:
        async with mcp_session(system_users, "alice", node.paths.socket) as session:
            lease = data(await session.call_tool("allocate", {"count": 1}))
            env = data(await session.call_tool("export_env", {"lease_id": lease["id"]}))
            hers = in_background(system_users, "alice", f"{env['prefix']} {SLEEP} 600", jobs)
            setuid = in_background(system_users, "alice", f"{env['prefix']} {program} 600", jobs)
            return lease["id"], hers, setuid

    lease_id, hers, setuid = anyio.run(main)
    assert kept_by(node, lease_id, hers)
    assert setuid not in lease_of(node, lease_id)["processes"]
    stop(hers)
    assert ends(node, lease_id)["state"] == "freed"
    os.kill(setuid, 0)  # still runs: it kept nothing


def test_a_flood_of_her_jobs_keeps_the_lease_until_the_last_exits(
    system_users: SystemUsers, node: ThreadDaemon, jobs: list[int]
) -> None:
    """alice's agent starts 40 jobs with the lease's environment: every one is taken in when
    the session ends, and the lease ends only when the last has exited."""

    async def main() -> tuple[str, list[int]]:
        async with mcp_session(system_users, "alice", node.paths.socket) as session:
            lease = data(await session.call_tool("allocate", {"count": 1}))
            env = data(await session.call_tool("export_env", {"lease_id": lease["id"]}))
            line = f"sh -c 'for i in $(seq 40); do {env['prefix']} {SLEEP} 600 & done; wait'"
            in_background(system_users, "alice", line, jobs)
            mine = str(system_users.uid("alice"))
            wait_for(lambda: len(sleeps(mine)) == 40, 60, what="40 jobs")
            jobs.extend(sleeps(mine))
            return lease["id"], sleeps(mine)

    lease_id, flood = anyio.run(main)
    assert kept_by(node, lease_id, flood[-1])
    assert set(flood) <= set(lease_of(node, lease_id)["processes"])
    for pid in flood[:-1]:
        stop(pid)
    assert kept_by(node, lease_id, flood[-1])
    stop(flood[-1])
    assert ends(node, lease_id)["state"] == "freed"


def sleeps(uid: str) -> list[int]:
    done = subprocess.run(["pgrep", "-U", uid, "-x", "sleep"], capture_output=True, text=True)
    return sorted(int(pid) for pid in done.stdout.split())


def test_a_job_naming_another_of_the_owners_leases_keeps_that_one_only(
    system_users: SystemUsers, node: ThreadDaemon, jobs: list[int]
) -> None:
    """alice's agent holds two leases; her job's environment names the second (rewritten
    from the first's prefix): when the session ends the first ends at once and the second
    stays while the job runs."""

    async def main() -> tuple[str, str, int]:
        async with mcp_session(system_users, "alice", node.paths.socket) as session:
            first = data(await session.call_tool("allocate", {"count": 1}))
            second = data(await session.call_tool("allocate", {"count": 1}))
            env = data(await session.call_tool("export_env", {"lease_id": first["id"]}))
            prefix = env["prefix"].replace(first["id"], second["id"])
            job = in_background(system_users, "alice", f"{prefix} {SLEEP} 600", jobs)
            return first["id"], second["id"], job

    first, second, job = anyio.run(main)
    assert kept_by(node, second, job)
    assert ends(node, first)["state"] == "freed"
    stop(job)
    assert ends(node, second)["state"] == "freed"


def test_a_daemon_the_job_forks_after_the_session_keeps_the_lease_after_the_job_exits(
    system_users: SystemUsers, node: ThreadDaemon, jobs: list[int]
) -> None:
    """The job, once the session has ended, forks a daemon of its own (setsid, double fork)
    and exits: the lease stays with the daemon, and ends when it exits."""
    entry = pwd.getpwnam(system_users.name("alice"))

    async def main() -> tuple[str, subprocess.Popen[str]]:
        async with mcp_session(system_users, "alice", node.paths.socket) as session:
            lease = data(await session.call_tool("allocate", {"count": 1}))
            env = data(await session.call_tool("export_env", {"lease_id": lease["id"]}))
            job = subprocess.Popen(
                [*env["prefix"].split(), system_users.python, "-c", FORKS_A_DAEMON],
                user=entry.pw_uid,
                group=entry.pw_gid,
                extra_groups=[],
                env={"PATH": "/usr/bin:/bin"},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            jobs.append(job.pid)
            return lease["id"], job

    lease_id, job = anyio.run(main)
    assert job.stdout is not None and job.stdin is not None
    assert kept_by(node, lease_id, job.pid)
    job.stdin.close()
    daemon = int(job.stdout.readline())
    jobs.append(daemon)
    assert job.wait(30) == 0
    job.stdout.close()
    assert kept_by(node, lease_id, daemon)
    stop(daemon)
    assert ends(node, lease_id)["state"] == "freed"


def test_a_restarted_daemon_keeps_the_lease_for_the_work_that_held_it(
    system_users: SystemUsers,
    node: ThreadDaemon,
    start_daemon: Callable[..., ThreadDaemon],
    jobs: list[int],
) -> None:
    """The session ended and its job kept the lease; the daemon restarts: the lease is still
    active, the job among its processes (the ledger kept `follow_work`), and it ends when
    the job exits."""

    async def main() -> tuple[str, int]:
        async with mcp_session(system_users, "alice", node.paths.socket) as session:
            lease = data(await session.call_tool("allocate", {"count": 1}))
            env = data(await session.call_tool("export_env", {"lease_id": lease["id"]}))
            job = in_background(system_users, "alice", f"{env['prefix']} {SLEEP} 600", jobs)
            return lease["id"], job

    lease_id, job = anyio.run(main)
    assert kept_by(node, lease_id, job)
    node.stop()
    again = start_daemon(default_policy="simple", initialise=False)
    assert kept_by(again, lease_id, job)
    assert lease_of(again, lease_id)["follow_work"] is True
    stop(job)
    assert ends(again, lease_id)["state"] == "freed"


def test_follow_work_needs_a_bound_lease_and_a_join_a_bound_lease_of_ones_own(
    node: ThreadDaemon,
) -> None:
    """follow_work without bind_to_process is refused; a process may not join a kept lease
    (nothing to join); both change nothing."""
    with Client(node.paths.socket) as client:
        with pytest.raises(InvalidRequest, match="bind_to_process"):
            client.allocate(1, follow_work=True)
        kept = client.allocate(1)
        with pytest.raises(InvalidRequest, match="nothing to join"):
            client.join(kept.id)
        assert [lease.id for lease in client.leases()] == [kept.id]
        assert client.lease(kept.id).raw["processes"] == []


def test_a_lease_that_does_not_follow_its_work_ends_with_its_holder(
    paths: DaemonPaths, node: ThreadDaemon, jobs: list[int]
) -> None:
    """A bound lease taken without follow_work ends when its holder exits, though a process
    of its owner carrying its id, started beside the holder, runs on (`gpu_lease` and the
    API keep their behaviour)."""
    holder, lease_id = bound_holder(paths)
    assert holder.stdout is not None and holder.stdin is not None
    # The id is set for the job alone, by a shell of its own: a child of the holder's parent
    # that carries the id from its exec may be a `clone(CLONE_PARENT)` child of the holder's,
    # and is taken in where its environment is read after that exec.
    line = f"GPUALLOCD_LEASE_ID={lease_id} {SLEEP} 600 < /dev/null > /dev/null 2>&1 & echo $!"
    started = subprocess.run(
        ["sh", "-c", line], capture_output=True, text=True, check=True, timeout=60
    )
    job = int(started.stdout.split()[-1])
    jobs.append(job)
    holder.stdin.close()
    holder.wait(30)
    holder.stdout.close()
    assert ends(node, lease_id)["state"] == "freed"
    assert Path(f"/proc/{job}").exists()


# Started by the holder's parent (this process), it is given the lease's id only when it
# runs a new program, a second after its fork: the fork is most often read before that.
EXECS_WITH_THE_ID = (
    "import os, sys, time\n"
    "time.sleep(1)\n"
    "os.execve(sys.argv[1], [sys.argv[1], '600'],"
    " {**os.environ, 'GPUALLOCD_LEASE_ID': sys.argv[2]})\n"
)


@pytest.mark.parametrize("node", ["connector"], indirect=True)
def test_a_child_of_the_holders_parent_given_the_id_at_its_exec_joins_however_it_is_read(
    paths: DaemonPaths, node: ThreadDaemon, jobs: list[int]
) -> None:
    """A process the holder's parent forks (where a `clone(CLONE_PARENT)` child of the
    holder lands) that runs a program with the lease's id in its environment joins the
    lease, whether the daemon read its environment before that exec or after: a child
    that joined nothing is read again at each of its execs (it joined or not by the timing
    before). The lease then outlives its holder until the job exits."""
    holder, lease_id = bound_holder(paths)
    assert holder.stdout is not None and holder.stdin is not None
    env = {k: v for k, v in os.environ.items() if k != "GPUALLOCD_LEASE_ID"}
    job = subprocess.Popen(
        [sys.executable, "-c", EXECS_WITH_THE_ID, SLEEP, lease_id],
        env=env,
        stdin=subprocess.DEVNULL,
    )
    jobs.append(job.pid)
    wait_for(lambda: job.pid in lease_of(node, lease_id)["processes"], 60, what="the job taken in")
    holder.stdin.close()
    holder.wait(30)
    holder.stdout.close()
    assert kept_by(node, lease_id, job.pid)
    stop(job.pid)
    job.wait(30)
    assert ends(node, lease_id)["state"] == "freed"


@pytest.mark.parametrize("node", ["connector"], indirect=True)
def test_another_users_child_of_the_holders_parent_given_the_id_at_its_exec_joins_nothing(
    system_users: SystemUsers, paths: DaemonPaths, node: ThreadDaemon, jobs: list[int]
) -> None:
    """The same shape as a user of another uid: bob's process, forked by the holder's parent,
    runs a program given root's lease id at an exec after its fork was read. Read again at
    that exec, it joins nothing (the id chooses only among its own owner's leases): the lease
    ends with its holder while bob's program runs on."""
    holder, lease_id = bound_holder(paths)
    assert holder.stdin is not None and holder.stdout is not None
    log = paths.root / "bob.log"
    job = system_users.start("bob", ["-c", EXECS_WITH_THE_ID, SLEEP, lease_id], log)
    jobs.append(job.pid)
    program = os.path.realpath(SLEEP)
    wait_for(lambda: os.readlink(f"/proc/{job.pid}/exe") == program, 30, what="bob's exec")
    holder.stdin.close()
    holder.wait(30)
    holder.stdout.close()
    assert ends(node, lease_id)["state"] == "freed"
    assert job.poll() is None
    stop(job.pid)
    job.wait(30)
