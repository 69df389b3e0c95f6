"""`queue`, the waiting line, Ctrl-C while queued, `leases` and `history`, as users type them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

from click.testing import CliRunner, Result

from gpuallocd.cli import cli
from tests.harness import ThreadDaemon, ctl_argv, wait_for


def ctl(daemon: ThreadDaemon, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--socket", str(daemon.paths.socket), *args])


def ctl_json(daemon: ThreadDaemon, *args: str) -> Any:
    result = ctl(daemon, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def queued_process(daemon: ThreadDaemon, *args: str) -> subprocess.Popen[str]:
    """`gpuallocctl ARGS` in a process of its own, its stderr a pipe (not a terminal)."""
    return subprocess.Popen(
        ctl_argv(daemon.paths.socket, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def queue_of(daemon: ThreadDaemon) -> list[dict[str, Any]]:
    waiters: list[dict[str, Any]] = ctl_json(daemon, "queue")["waiters"]
    return waiters


def test_queue_counts_from_one_with_reason_time_waited_and_estimate(daemon: ThreadDaemon) -> None:
    """Positions start at 1; each waiter has a reason, the time it waited and an estimate."""
    ctl_json(daemon, "allocate", "-n", "3", "--ttl", "30m")
    holder = ctl_json(daemon, "allocate", "-n", "1", "--ttl", "10m")
    big = queued_process(daemon, "allocate", "-n", "2", "--wait", "--ttl", "1h")
    wait_for(lambda: len(queue_of(daemon)) == 1, timeout=20)
    small = queued_process(daemon, "allocate", "-n", "1", "--wait")
    try:
        wait_for(lambda: len(queue_of(daemon)) == 2, timeout=20)
        first, second = queue_of(daemon)
        assert [first["position"], second["position"]] == [1, 2]
        assert first["reason"] == "Resources" and first["reason_detail"] == "wants 2 GPU(s); 0 free"
        assert second["reason"] == "Resources"
        assert first["waited_seconds"] >= 0
        # The 10-minute lease ends first, then the 30-minute one: two GPUs free at 30m.
        assert abs(first["estimated_start_at"] - (holder["created_at"] + 1800)) < 5
        table = ctl(daemon, "queue").output.splitlines()
        assert table[0].split() == [
            "POS", "USER", "PID", "WANTS", "WAITED", "START", "REASON", "LABEL"
        ]  # fmt: skip
        assert table[1].split()[:4] == ["1", "root", str(big.pid), "2"]
        assert "Resources" in table[1] and "(~29m" in table[1]
    finally:
        for proc in (big, small):
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)


def test_a_waiter_behind_a_reservation_waits_for_reserved(daemon: ThreadDaemon) -> None:
    """When enough GPUs are free but held for a waiter ahead, the reason is Reserved."""
    three = ctl_json(daemon, "allocate", "-n", "3")
    big = queued_process(daemon, "allocate", "-n", "2", "--wait")
    wait_for(lambda: len(queue_of(daemon)) == 1, timeout=20)
    small = queued_process(daemon, "allocate", "--gpu", "3", "--wait")  # GPU 3 is the free one
    try:
        wait_for(lambda: len(queue_of(daemon)) == 2, timeout=20)
        second = queue_of(daemon)[1]
        assert second["reason"] == "Reserved"
        assert second["reason_detail"] == "free GPUs are held for position 1"
    finally:
        for proc in (big, small):
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)
    assert three["state"] == "active"


def test_allocate_wait_prints_its_place_then_the_lease(daemon: ThreadDaemon) -> None:
    """While queued, stderr tells the position and what blocks; once granted, stdout the lease."""
    holder = ctl_json(daemon, "allocate", "-n", "4")
    proc = queued_process(daemon, "allocate", "-n", "2", "--wait", "--json")
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert line.startswith("gpuallocctl: queued 1 of 1 (")
    assert "Resources: wants 2 GPU(s); 0 free; start in ~" in line
    ctl_json(daemon, "free", holder["id"])
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and len(json.loads(out)["gpus"]) == 2


def test_ctrl_c_while_queued_exits_130_and_leaves_nothing(daemon: ThreadDaemon) -> None:
    """SIGINT while waiting: exit 130, out of the queue, no lease left behind."""
    holder = ctl_json(daemon, "allocate", "-n", "4")
    for command in (("allocate", "-n", "1", "--wait"), ("run", "--wait", "--", "true")):
        proc = queued_process(daemon, *command)
        assert proc.stderr is not None
        assert proc.stderr.readline().startswith("gpuallocctl: queued 1 of 1")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert "left the queue" in err and "Traceback" not in err
        assert queue_of(daemon) == []
    assert [lease["id"] for lease in ctl_json(daemon, "leases")["leases"]] == [holder["id"]]


def test_leases_show_user_time_left_and_a_pid_only_when_bound(daemon: ThreadDaemon) -> None:
    """A detached lease shows no pid; one bound to a running command shows its pid."""
    ctl_json(daemon, "allocate", "-n", "1", "--ttl", "2h", "--label", "detached")
    script = "import sys; print('ready', flush=True); sys.stdin.read()"
    proc = subprocess.Popen(
        ctl_argv(
            daemon.paths.socket, "run", "--label", "bound", "--", sys.executable, "-c", script
        ),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        wide = CliRunner().invoke(  # every column whole, whatever terminal ran the tests
            cli, ["--socket", str(daemon.paths.socket), "leases"], env={"COLUMNS": "200"}
        )
        rows = {line.split()[-1]: line.split() for line in wide.output.splitlines()}
        assert rows["detached"][2:4] == ["root", "-"] and rows["detached"][5].startswith("1h59m")
        assert rows["bound"][3] == str(proc.pid)
    finally:
        proc.communicate("", timeout=30)


def test_history_names_users_and_refuses_an_unknown_lease(daemon: ThreadDaemon) -> None:
    """history shows who acted by name; an id that never existed is unknown_lease (exit 2)."""
    lease = ctl_json(daemon, "allocate", "-n", "1")
    ctl_json(daemon, "free", lease["id"])
    lines = ctl(daemon, "history", "--lease", lease["id"]).output.splitlines()
    assert lines[0].split() == ["TIME", "LEASE", "EVENT", "BY", "DETAIL", "KWH"]
    assert [line.split()[3:5] for line in lines[1:]] == [["granted", "root"], ["freed", "root"]]
    unknown = ctl(daemon, "history", "--lease", "deadbeef")
    assert unknown.exit_code == 2 and "unknown_lease" in unknown.output


def test_durations_as_people_type_them(daemon: ThreadDaemon) -> None:
    """--ttl takes 90s, 30m, 8h, 2d and seconds; a TTL too short to use is refused with a hint."""
    for text, seconds in (("90s", 90), ("30m", 1800), ("8h", 28800), ("2d", 172800), ("600", 600)):
        lease = ctl_json(daemon, "allocate", "-n", "1", "--ttl", text)
        assert abs(lease["expires_at"] - lease["created_at"] - seconds) < 1
        ctl_json(daemon, "free", lease["id"])
    refused = ctl(daemon, "allocate", "-n", "1", "--ttl", "0.5")
    assert refused.exit_code == 2 and "did you mean 0.5h or 0.5m?" in refused.output
    assert "is not a duration" in ctl(daemon, "allocate", "-n", "1", "--ttl", "soon").output


def test_min_free_memory_skips_gpus_with_too_little_free(start_daemon: Any) -> None:
    """--min-free-memory 75G never picks the A100 with 10 GiB of its 80 in use."""
    daemon = start_daemon(inventory="nvml-recording:dgx-a100-mig", default_policy="simple")
    # GPUs 1-6: GPU 7 is in MIG mode, so it is leased by instance, never whole.
    lease = ctl_json(daemon, "allocate", "-n", "6", "--min-free-memory", "75G")
    assert 0 not in [g["index"] for g in lease["gpus"]]
    refused = ctl(daemon, "allocate", "--gpu", "0", "--min-free-memory", "75G")
    assert refused.exit_code != 0
