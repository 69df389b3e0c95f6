"""gpuallocctl against a real daemon: shapes of --json, tables, errors, and `run`."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuallocd.cli import cli
from tests.harness import ThreadDaemon, ctl_argv, wait_for


def ctl(daemon: ThreadDaemon, *args: str) -> Any:
    result = CliRunner().invoke(cli, ["--socket", str(daemon.paths.socket), *args])
    return result


def ctl_json(daemon: ThreadDaemon, *args: str) -> Any:
    result = ctl(daemon, "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def ctl_process(daemon: ThreadDaemon, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ctl_argv(daemon.paths.socket, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def test_status_json_shape(daemon: ThreadDaemon) -> None:
    """status --json is {"gpus": [...]} with index, uuid and state."""
    data = ctl_json(daemon, "status")
    assert [g["index"] for g in data["gpus"]] == [0, 1, 2, 3]
    assert all(g["uuid"].startswith("GPU-") and g["state"] == "free" for g in data["gpus"])


def test_allocate_json_is_one_lease(daemon: ThreadDaemon) -> None:
    """allocate --json prints one lease object with id and gpus (index, uuid)."""
    lease = ctl_json(daemon, "allocate", "-n", "2", "--label", "exp1", "--ttl", "600")
    assert lease["id"] and lease["label"] == "exp1"
    assert all({"index", "uuid", "kind"} <= set(g) for g in lease["gpus"])
    assert len(lease["gpus"]) == 2
    listed = ctl_json(daemon, "leases")
    assert [x["id"] for x in listed["leases"]] == [lease["id"]]


def test_allocate_specific_gpus_by_flag(daemon: ThreadDaemon) -> None:
    """--gpu ID (repeatable) takes those GPUs, by index or UUID."""
    uuid = ctl_json(daemon, "status")["gpus"][2]["uuid"]
    lease = ctl_json(daemon, "allocate", "--gpu", "3", "--gpu", uuid)
    assert sorted(g["index"] for g in lease["gpus"]) == [2, 3]


def test_human_tables_are_aligned(daemon: ThreadDaemon) -> None:
    """status and leases print aligned tables with headers (no POWER column where no GPU
    reports power, as on this topology)."""
    ctl_json(daemon, "allocate", "-n", "1", "--label", "demo")
    status = ctl(daemon, "status").output.splitlines()[1:]  # under the summary line
    assert status[0].split()[:6] == ["IDX", "UUID", "NAME", "MEMORY", "UTIL", "STATE"]
    column = status[0].index("STATE")
    assert [line[column:].split()[0] for line in status[1:]] == ["leased", "free", "free", "free"]
    leases = ctl(daemon, "leases").output.splitlines()
    assert leases[0].split()[:3] == ["LEASE", "GPUS", "USER"] and "demo" in leases[1]


def test_renew_free_revoke(daemon: ThreadDaemon) -> None:
    """renew, free and revoke act on a lease and print it."""
    first = ctl_json(daemon, "allocate", "-n", "1")
    assert ctl_json(daemon, "renew", first["id"], "--ttl", "120")["state"] == "active"
    assert ctl_json(daemon, "free", first["id"])["state"] == "freed"
    second = ctl_json(daemon, "allocate", "-n", "1")
    assert ctl_json(daemon, "revoke", second["id"], "--reason", "test")["state"] == "revoked"
    assert ctl_json(daemon, "leases") == {"leases": []}


def test_errors_are_one_line_without_traceback(daemon: ThreadDaemon) -> None:
    """A daemon error prints its message and code, exits non-zero, no traceback."""
    result = ctl(daemon, "allocate", "-n", "99")
    assert result.exit_code != 0
    assert "count_exceeds_node" in result.output and "Traceback" not in result.output
    result = ctl(daemon, "free", "nope")
    assert result.exit_code != 0 and "unknown_lease" in result.output


def test_no_daemon_is_a_clear_error(short_dir: Any) -> None:
    """Without a daemon the CLI says where it looked."""
    result = CliRunner().invoke(cli, ["--socket", f"{short_dir}/none.sock", "status"])
    assert result.exit_code != 0
    assert "none.sock" in result.output and "daemon_unavailable" in result.output


def test_run_sets_environment_and_returns_exit_code(daemon: ThreadDaemon) -> None:
    """run leases, shows the command its GPUs, frees them, and exits with its code."""
    proc = ctl_process(
        daemon,
        "run",
        "-n",
        "2",
        "--",
        sys.executable,
        "-c",
        "import os, sys; print(os.environ['CUDA_VISIBLE_DEVICES']); sys.exit(3)",
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert len(out.strip().split(",")) == 2 and out.startswith("GPU-")
    assert ctl_json(daemon, "leases") == {"leases": []}


def test_run_forwards_sigterm_and_frees(daemon: ThreadDaemon) -> None:
    """SIGTERM to gpuallocctl reaches the command; the lease is freed after it exits."""
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(42))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = ctl_process(daemon, "run", "-n", "1", "--", sys.executable, "-c", script)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    assert len(ctl_json(daemon, "leases")["leases"]) == 1
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # once in many CI runs: say where each thread waited
        seen = _where_it_waits(proc.pid)
        proc.kill()
        proc.communicate()
        pytest.fail(f"run did not exit 30 s after SIGTERM:\n{seen}")
    assert proc.returncode == 42
    assert ctl_json(daemon, "leases") == {"leases": []}


def _where_it_waits(pid: int) -> str:
    """Each thread of `pid` and of its children: its state and the system call it is in
    (/proc/PID/task/TID/syscall: the number first), and the process's signal masks."""
    lines = []
    children = Path(f"/proc/{pid}/task/{pid}/children")
    kids = children.read_text().split() if children.exists() else []
    for process in [str(pid), *kids]:
        base = Path("/proc", process)
        with contextlib.suppress(OSError):
            status = base.joinpath("status").read_text().splitlines()
            masks = [line for line in status if line.startswith(("Sig", "Shd"))]
            lines.append(f"{process} {base.joinpath('cmdline').read_bytes()[:80]!r} {masks}")
            for task in sorted(base.joinpath("task").iterdir()):
                with contextlib.suppress(OSError):
                    state = task.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0]
                    call = task.joinpath("syscall").read_text().strip()
                    lines.append(f"  thread {task.name}: {state} syscall {call}")
    return "\n".join(lines)


def test_run_reports_a_missing_command(daemon: ThreadDaemon) -> None:
    """A command that does not exist exits 127 and frees the lease."""
    proc = ctl_process(daemon, "run", "-n", "1", "--", "no-such-command-xyz")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 127 and "not found" in err
    assert ctl_json(daemon, "leases") == {"leases": []}


def test_run_waits_in_the_queue(daemon: ThreadDaemon) -> None:
    """run --wait queues while the node is full, shows in `queue`, and runs once freed."""
    holder = ctl_json(daemon, "allocate", "-n", "4")
    proc = ctl_process(
        daemon, "run", "--wait", "-n", "2", "--", sys.executable, "-c", "print('ran')"
    )
    wait_for(lambda: bool(ctl_json(daemon, "queue")["waiters"]), 20)
    waiters = ctl_json(daemon, "queue")["waiters"]
    assert len(waiters) == 1 and waiters[0]["count"] == 2
    ctl_json(daemon, "free", holder["id"])
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out.strip() == "ran"


def test_history_lists_transitions(daemon: ThreadDaemon) -> None:
    """history shows granted and freed events of a lease."""
    lease = ctl_json(daemon, "allocate", "-n", "1")
    ctl_json(daemon, "free", lease["id"])
    events = ctl_json(daemon, "history", "--lease", lease["id"])["events"]
    assert [e["event"] for e in events] == ["granted", "freed"]
