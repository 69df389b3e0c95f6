"""The service as shipped, under systemd 252 as PID 1: each check is one thing an admin or a
user does on a real box. The checks run in order on one booted container; the healthy
watchdog window spans the checks between the first client and the two-minute mark.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.system.conftest import FINDINGS, LIVE, Installed
from tests.system.container import Box

SERVICE = "gpuallocd.service"
GIB = 2**30
HEALTHY_WINDOW_SECONDS = 120
WATCHDOG = {"since": 0.0, "main_pid": 0}
GPU_LEASE_SCRIPT = """
import os, sys, time
from gpulease import gpu_lease
with gpu_lease(1, wait=True, timeout=600, label=sys.argv[1]) as lease:
    print(lease.id, os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
    time.sleep(float(sys.argv[2]))
"""
PYTHON = "/opt/gpuallocd/bin/python"
# A holder whose work leaves it: a child in a session of its own forks the work (it ignores
# SIGTERM) and exits; the holder exits at once (`exit`) or stays (`stay`).
ESCAPING_HOLDER = """
import os, signal, sys, time, warnings
warnings.simplefilter("ignore")  # fork() beside the renewer thread
from gpulease import gpu_lease
lease = gpu_lease(1, label=sys.argv[1], on_revoke=sys.argv[2]).__enter__()
print(lease.id, flush=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        time.sleep(600)
    os._exit(0)
if sys.argv[3] == "stay":
    time.sleep(600)
os._exit(0)
"""


def until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Return once `condition()` holds; fail after `timeout` seconds (an upper bound)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout:g} s")
        time.sleep(0.2)


def show(box: Box, unit: str, *properties: str) -> dict[str, str]:
    done = box.run(["systemctl", "show", unit, *(f"--property={p}" for p in properties)])
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def ctl(box: Box, *args: str, user: str | None = None) -> Any:
    """`gpuallocctl --json ARGS` as root (or `user`); its JSON answer."""
    argv = ["gpuallocctl", "--json", *args]
    done = box.as_user(user, argv) if user else box.run(argv)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None


def leases(box: Box, user: str | None = None) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = ctl(box, "leases", user=user)["leases"]
    return found


def gpus(box: Box, user: str | None = None) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = ctl(box, "status", user=user)["gpus"]
    return found


def history(box: Box, lease_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = ctl(box, "history", "--lease", lease_id)["events"]
    return found


def waiters(box: Box) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = ctl(box, "queue")["waiters"]
    return found


def journal(box: Box, since: str | None = None) -> str:
    argv = ["journalctl", "--no-pager", "-o", "cat", "-u", SERVICE]
    return box.run([*argv, *(["--since", since] if since else [])]).stdout


def unit_state(box: Box, unit: str) -> str:
    return show(box, unit, "ActiveState")["ActiveState"]


def start_user_unit(box: Box, user: str, unit: str, argv: list[str]) -> None:
    done = box.as_user(user, argv, unit=unit)
    assert done.returncode == 0, done.stderr


def wait_for_lease(box: Box, label: str) -> dict[str, Any]:
    until(lambda: any(x["label"] == label for x in leases(box)), 60, f"the lease {label}")
    return next(x for x in leases(box) if x["label"] == label)


def test_the_readme_installs_the_service_and_it_serves(installed: Installed) -> None:
    """Every command of the README's service section succeeds, as written, in order;
    the last, `gpuallocctl status`, lists the box's GPUs."""
    failed = [(c, code, out[-800:]) for c, code, out in installed.install_output if code]
    assert failed == []
    commands = [c for c, _, _ in installed.install_output]
    assert commands[-1] == "gpuallocctl status"
    assert "GPU-" in installed.install_output[-1][2] or "A100" in installed.install_output[-1][2]
    assert len(gpus(installed.box)) >= 8


def test_the_service_is_type_notify_and_reaches_active(box: Box) -> None:
    """READY=1 makes it active; its watchdog is armed (30 s) and it has no failure."""
    state = show(box, SERVICE, "Type", "ActiveState", "SubState", "WatchdogUSec", "Result")
    assert state == {
        "Type": "notify",
        "ActiveState": "active",
        "SubState": "running",
        "WatchdogUSec": "30s",
        "Result": "success",
    }
    assert re.search(r"serving \d+ GPU\(s\)", journal(box))


def test_the_first_client_starts_the_service(box: Box) -> None:
    """With the service stopped and the socket listening, a user's first call starts it
    (socket activation) and is answered."""
    assert box.run(["systemctl", "stop", SERVICE]).returncode == 0
    assert unit_state(box, SERVICE) == "inactive"
    assert unit_state(box, "gpuallocd.socket") == "active"
    assert len(gpus(box, user="alice")) >= 8
    assert unit_state(box, SERVICE) == "active"
    WATCHDOG["since"] = time.monotonic()
    WATCHDOG["main_pid"] = int(show(box, SERVICE, "MainPID")["MainPID"])


def test_a_user_runs_status_run_and_gpu_lease(box: Box) -> None:
    """alice, not root: `status`, `run` (her command sees one leased GPU) and a script with
    `gpu_lease`; nothing is left leased after."""
    run = box.as_user(
        "alice", ["gpuallocctl", "run", "-n", "1", "--", "sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES"']
    )
    assert run.returncode == 0, run.stderr
    assert re.fullmatch(r"GPU-[0-9a-f-]+", run.stdout.strip()), run.stdout
    script = box.as_user("alice", [PYTHON, "-c", GPU_LEASE_SCRIPT, "alice-script", "0"])
    assert script.returncode == 0, script.stderr
    lease_id, visible = script.stdout.split()
    assert visible.startswith("GPU-")
    assert leases(box) == []
    assert [e["event"] for e in history(box, lease_id)][-1] == "freed"


def test_roots_revoke_stops_a_users_run(box: Box) -> None:
    """Root revokes alice's `gpuallocctl run -- sleep 300`: the sleep stops, run exits 7."""
    start_user_unit(
        box,
        "alice",
        "alice-run",
        ["gpuallocctl", "run", "-n", "1", "--label", "alice-run", "--", "sleep", "300"],
    )
    lease = wait_for_lease(box, "alice-run")
    until(lambda: len(lease_processes(box, lease["id"])) == 2, 30, "the lease to cover sleep")
    revoked = time.monotonic()
    ctl(box, "revoke", lease["id"], "--reason", "maintenance")
    until(lambda: unit_state(box, "alice-run") != "active", 30, "run to end")
    FINDINGS["revoke to run's exit (s)"] = f"{time.monotonic() - revoked:.2f}"
    assert show(box, "alice-run", "ExecMainStatus")["ExecMainStatus"] == "7"
    assert box.run(["pgrep", "-u", "alice", "-x", "sleep"]).returncode == 1


def lease_processes(box: Box, lease_id: str) -> list[int]:
    found = [x for x in leases(box) if x["id"] == lease_id]
    return list(found[0]["processes"]) if found else []


def test_a_holder_killed_with_sigkill_frees_its_lease(box: Box) -> None:
    """alice's `gpu_lease` script is killed with SIGKILL: its lease ends at once."""
    start_user_unit(
        box, "alice", "alice-holder", [PYTHON, "-c", GPU_LEASE_SCRIPT, "alice-holder", "300"]
    )
    lease = wait_for_lease(box, "alice-holder")
    killed = time.monotonic()
    box.run(["systemctl", "kill", "--signal=SIGKILL", "alice-holder"])
    until(lambda: all(x["id"] != lease["id"] for x in leases(box)), 10, "the lease to end")
    FINDINGS["SIGKILL of a holder to its lease's end (s)"] = f"{time.monotonic() - killed:.2f}"
    events = history(box, lease["id"])
    assert events[-1]["event"] == "freed" and "exited" in events[-1]["detail"]


def test_share_enforcement_warns_then_kills(box: Box) -> None:
    """A 10 GiB share whose job (alice's) uses 12 GiB: warned, then the job is killed."""
    start_user_unit(
        box,
        "alice",
        "alice-share",
        ["gpuallocctl", "run", "--memory", "10G", "--label", "alice-share", "--", "sleep", "300"],
    )
    lease = wait_for_lease(box, "alice-share")
    until(lambda: len(lease_processes(box, lease["id"])) == 2, 30, "the lease to cover sleep")
    job = int(box.run(["pgrep", "-u", "alice", "-x", "sleep"]).stdout.split()[0])
    uuid = lease["gpus"][0]["uuid"]
    usage = {uuid: {"processes": [{"pid": job, "used_memory_bytes": 12 * GIB}]}}
    box.run(["sh", "-c", f"cat > {LIVE}.new && mv {LIVE}.new {LIVE}"], input=json.dumps(usage))
    until(lambda: box.run(["kill", "-0", str(job)]).returncode != 0, 30, "the job to be killed")
    box.run(["sh", "-c", f"echo '{{}}' > {LIVE}"])
    events = [e["event"] for e in history(box, lease["id"])]
    assert "warned" in events and "enforced" in events
    until(lambda: unit_state(box, "alice-share") != "active", 30, "run to end")


def scope_of(box: Box, lease_id: str) -> dict[str, str]:
    return show(box, f"gpuallocd-lease-{lease_id}.scope", "ActiveState", "ControlGroup")


def test_work_that_leaves_its_holder_stays_in_the_leases_scope(box: Box) -> None:
    """alice's `gpu_lease(1)` holder forks; the child calls setsid, forks the work and exits;
    the holder exits. The work stays in the lease's scope and the lease stays active while
    it runs; killed, the lease ends within 2 s."""
    done = box.as_user("alice", [PYTHON, "-c", ESCAPING_HOLDER, "alice-escape", "warn", "exit"])
    assert done.returncode == 0, done.stderr
    lease_id = done.stdout.strip()
    scope = scope_of(box, lease_id)
    assert scope["ActiveState"] == "active"
    assert scope["ControlGroup"].startswith("/gpuallocd.slice/gpuallocd-leases.slice/")
    until(lambda: len(lease_processes(box, lease_id)) == 1, 10, "the holder's exit")
    (work,) = lease_processes(box, lease_id)
    time.sleep(3)  # several of the old /proc scans: the work is still covered
    assert lease_processes(box, lease_id) == [work]
    assert box.run(["ps", "-o", "user=,sid=", "-p", str(work)]).stdout.split()[0] == "alice"
    move = f"echo {work} > /sys/fs/cgroup/cgroup.procs"
    assert box.as_user("alice", ["sh", "-c", move]).returncode != 0  # the cgroup is root's
    assert lease_processes(box, lease_id) == [work]
    killed_at = float(box.run(["date", "+%s.%N"]).stdout)
    box.run(["kill", "-KILL", str(work)])
    until(lambda: lease_processes(box, lease_id) == [], 10, "the lease to end")
    ended = history(box, lease_id)[-1]
    assert ended["event"] == "freed" and "exited" in ended["detail"]
    FINDINGS["scope: work killed to its lease's end (s)"] = f"{ended['at'] - killed_at:.3f}"
    assert ended["at"] - killed_at < 2.0
    until(lambda: scope_of(box, lease_id)["ActiveState"] != "active", 10, "the scope to go")


def test_a_revoke_kills_the_whole_scope(box: Box) -> None:
    """alice's holder (`on_revoke="terminate"`) stays; its work left it through setsid and
    a double fork, and ignores SIGTERM. Root revokes: after the grace every process of the
    scope is killed, and the scope is gone."""
    start_user_unit(
        box,
        "alice",
        "alice-scoped",
        [PYTHON, "-c", ESCAPING_HOLDER, "alice-scoped", "terminate", "stay"],
    )
    lease = wait_for_lease(box, "alice-scoped")
    until(lambda: len(lease_processes(box, lease["id"])) == 2, 30, "the work to start")
    pids = lease_processes(box, lease["id"])
    revoked = time.monotonic()
    ctl(box, "revoke", lease["id"], "--reason", "maintenance")
    until(lambda: unit_state(box, "alice-scoped") != "active", 30, "the holder to be killed")
    until(lambda: scope_of(box, lease["id"])["ActiveState"] != "active", 30, "the scope to go")
    FINDINGS["scope: revoke to an empty scope (s)"] = f"{time.monotonic() - revoked:.2f}"
    assert [p for p in pids if box.run(["kill", "-0", str(p)]).returncode == 0] == []


NESTED_LEASE = """
import os
from gpulease import gpu_lease
outer = os.environ["GPUALLOCD_LEASE_ID"]
with gpu_lease(1, label="inner", nested="new") as lease:
    print(outer, lease.id, open("/proc/self/cgroup").read().strip().split("::")[-1])
"""


def test_a_lease_taken_under_another_lease_leaves_its_holder_in_the_outer_scope(
    box: Box,
) -> None:
    """alice's `gpuallocctl run` runs a `gpu_lease(nested="new")` script (a lease of its own,
    not the outer one reused): the script stays in run's scope (a move would take it from
    run's lease), and both leases end with it."""
    done = box.as_user("alice", ["gpuallocctl", "run", "-n", "1", "--", PYTHON, "-c", NESTED_LEASE])
    assert done.returncode == 0, done.stderr
    outer, inner, cgroup = done.stdout.split()
    assert cgroup == f"/gpuallocd.slice/gpuallocd-leases.slice/gpuallocd-lease-{outer}.scope"
    assert inner != outer and leases(box) == []
    assert history(box, inner)[-1]["event"] == "freed"


def test_metrics_are_served_on_loopback(installed: Installed) -> None:
    """`metrics_listen = 127.0.0.1:PORT` through `IPAddressAllow=localhost`: a scrape from
    the box parses (prometheus-client's parser) and counts the grants so far."""
    url = f"http://127.0.0.1:{installed.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    names = {family.name for family in text_string_to_metric_families(text)}
    assert any(name.startswith("gpuallocd_") for name in names), sorted(names)
    firewall = show(installed.box, SERVICE, "IPAddressDeny", "IPAddressAllow")
    assert firewall["IPAddressDeny"] and "127.0.0.0/8" in firewall["IPAddressAllow"]


def test_doctor_finds_nothing_wrong_with_the_service(box: Box) -> None:
    """`gpuallocctl doctor` as root and as alice: the daemon under systemd with its watchdog,
    the unit's capabilities meeting every enabled feature, cgroup v2 with systemd as PID 1;
    nothing fails."""
    as_root = box.run(["gpuallocctl", "doctor"])
    assert as_root.returncode == 0, as_root.stdout
    FINDINGS["gpuallocctl doctor (root)"] = "\n" + as_root.stdout
    lines = {line[6:23].strip(): line for line in as_root.stdout.splitlines() if line[:1] != " "}
    assert lines["service"].startswith("ok") and "watchdog pinged every 15s" in lines["service"]
    assert lines["capabilities"].startswith("ok")
    assert lines["cgroups"].startswith("ok  ") and "systemd is PID 1" in lines["cgroups"]
    tracking = lines["process tracking"]
    assert tracking.startswith("ok") and "scope: each bound lease" in tracking, tracking
    as_alice = box.as_user("alice", ["gpuallocctl", "doctor", "--json"])
    assert as_alice.returncode == 0
    assert json.loads(as_alice.stdout)["failed"] == 0


def test_the_watchdog_leaves_a_healthy_daemon_alone_for_two_minutes(box: Box) -> None:
    """From the first client on, through all the checks above, two minutes at least: the
    same main process, no automatic restart, no watchdog timeout."""
    assert WATCHDOG["since"], "the socket activation check did not run"
    remaining = WATCHDOG["since"] + HEALTHY_WINDOW_SECONDS - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)  # the window itself: the watchdog is given the chance to fire
    state = show(box, SERVICE, "MainPID", "NRestarts", "ActiveState")
    FINDINGS["healthy window (s)"] = f"{time.monotonic() - WATCHDOG['since']:.0f}"
    assert int(state["MainPID"]) == WATCHDOG["main_pid"]
    assert state["NRestarts"] == "0" and state["ActiveState"] == "active"
    assert "Watchdog timeout" not in box.run(["journalctl", "--no-pager", "-u", SERVICE]).stdout


def test_restart_keeps_leases_and_a_waiting_client(box: Box) -> None:
    """Root holds every free GPU; bob waits with `gpu_lease(wait=True)`; `systemctl restart`:
    root's leases are the same, bob waits again, and gets the GPU root frees."""
    free = [g for g in gpus(box) if g["state"] == "free" and not g["mig_mode"]]
    assert len(free) == 7, [(g["index"], g["state"]) for g in gpus(box)]
    held = ctl(box, "allocate", "-n", str(len(free)), "--ttl", "1h", "--label", "root-all")
    start_user_unit(box, "bob", "bob-waits", [PYTHON, "-c", GPU_LEASE_SCRIPT, "bob-waits", "0"])
    until(lambda: len(waiters(box)) == 1, 30, "bob to wait")
    restarting = time.monotonic()
    assert box.run(["systemctl", "restart", SERVICE]).returncode == 0
    FINDINGS["systemctl restart with a waiter (s)"] = f"{time.monotonic() - restarting:.2f}"
    assert [x["id"] for x in leases(box)] == [held["id"]]
    until(lambda: len(waiters(box)) == 1, 30, "bob to wait again")
    ctl(box, "free", held["id"])
    until(lambda: unit_state(box, "bob-waits") != "active", 30, "bob's script to get a GPU")
    assert show(box, "bob-waits", "ExecMainStatus")["ExecMainStatus"] == "0"


def test_stop_then_a_client_call_brings_it_back(box: Box) -> None:
    """`systemctl stop`; a user's next call starts it again, and the lease is still there."""
    held = ctl(box, "allocate", "-n", "1", "--ttl", "1h", "--label", "kept")
    assert box.run(["systemctl", "stop", SERVICE]).returncode == 0
    assert unit_state(box, SERVICE) == "inactive"
    assert [x["id"] for x in leases(box, user="bob")] == [held["id"]]
    assert unit_state(box, SERVICE) == "active"
    ctl(box, "free", held["id"])


def test_the_watchdog_restarts_a_hung_daemon(box: Box) -> None:
    """SIGSTOP the daemon: within the 30 s watchdog systemd kills it and starts it again;
    the lease held before is still there."""
    held = ctl(box, "allocate", "-n", "1", "--ttl", "1h", "--label", "before-hang")
    before = show(box, SERVICE, "MainPID", "NRestarts")
    box.run(["kill", "-STOP", before["MainPID"]])
    stopped = time.monotonic()

    def restarted() -> bool:
        now = show(box, SERVICE, "MainPID", "NRestarts", "ActiveState")
        return now["MainPID"] not in ("0", before["MainPID"]) and now["ActiveState"] == "active"

    until(restarted, 90, "the watchdog to restart the daemon")
    FINDINGS["SIGSTOP to the watchdog's restart (s)"] = f"{time.monotonic() - stopped:.1f}"
    assert int(show(box, SERVICE, "NRestarts")["NRestarts"]) == int(before["NRestarts"]) + 1
    assert "Watchdog timeout" in box.run(["journalctl", "--no-pager", "-u", SERVICE]).stdout
    assert [x["id"] for x in leases(box)] == [held["id"]]
    ctl(box, "free", held["id"])


@pytest.mark.parametrize(
    "pattern",
    [
        "Traceback",
        "Permission denied",
        "Operation not permitted",
        "not allowed",
        "seccomp",
        "EPERM",
        "needs CAP_",
    ],
)
def test_the_journal_holds_no_traceback_nor_denial(box: Box, pattern: str) -> None:
    """Whatever ran above: the daemon's journal has no traceback, no refused call."""
    lines = [line for line in journal(box).splitlines() if pattern in line]
    assert lines == []
