"""`gpuallocctl status` against real daemons: what a person sees, and what scripts read."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gpuallocd.cli import cli
from gpuallocd.cli.leasing.waiting import waiting_text
from gpuallocd.cli.style import render_table, short_uuid
from gpuallocd.dashboard.sections import gpus_html, queue_html
from gpuallocd.dashboard.source import NodeNow
from gpuallocd.mcp.foreign import OthersText
from gpuallocd.mcp.shapes import gpu_line, gpu_view
from gpuallocd.model.queue_text import why_waiting
from tests.harness import ThreadDaemon, ctl_argv

A100 = "nvml-recording:dgx-a100-mig"


def ctl(daemon: ThreadDaemon, *args: str, **env: str) -> Result:
    runner = CliRunner(env={"NO_COLOR": None, **env})
    return runner.invoke(cli, ["--socket", str(daemon.paths.socket), *args])


def owner_of_pid(pid: int) -> str:
    """The user name of a process running here, or `?`."""
    try:
        return pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name
    except (OSError, KeyError):
        return "?"


def rows_by_index(output: str) -> dict[int, str]:
    lines = output.splitlines()[2:]  # the summary line and the header
    # Rows of MIG instances and shares (`7/mig`, `3/share`) stand under their GPU's row.
    return {int(line.split()[0]): line for line in lines if line.split()[0].isdigit()}


@pytest.fixture
def a100(start_daemon: Callable[..., ThreadDaemon]) -> ThreadDaemon:
    """A daemon on the recorded DGX A100 (GPU 0: 10 GiB used, 87% busy, foreign pid 4242)."""
    return start_daemon(inventory=A100, default_policy="simple", sample_interval_seconds=0.1)


def test_status_shows_memory_utilisation_and_foreign_processes(a100: ThreadDaemon) -> None:
    """A GPU someone uses outside a lease shows its memory used, its load, its draw and
    power limit, and user(pid)."""
    result = ctl(a100, "status", COLUMNS="160")
    assert result.exit_code == 0, result.output
    header = result.output.splitlines()[1].split()
    assert header == ["IDX", "UUID", "NAME", "MEMORY", "UTIL", "POWER", "STATE", "HOLDER"]
    gpu0 = rows_by_index(result.output)[0].split()
    assert gpu0[2:9] == ["A100-SXM4-80GB", "10.0/80.0", "GiB", "87%", "355/400", "W", "in-use"]
    # The recording's pid 4242: `?(4242)` where no such process runs here; where one does
    # (the pid is this machine's), its owner and command are named.
    holder = " ".join(gpu0[9:])
    assert holder == "?(4242)" or holder.startswith(f"{owner_of_pid(4242)}(4242")


def test_status_fits_100_columns_with_short_uuids(a100: ThreadDaemon) -> None:
    """Into a pipe rows fit 100 columns (COLUMNS where set) and show short UUIDs where they
    fit; -v shows them whole."""
    ctl(a100, "allocate", "-n", "2", "--label", "a-rather-long-label-for-a-sweep " * 3)
    piped = ctl(a100, "status")
    assert max(len(line) for line in piped.output.splitlines()) <= 100
    short = ctl(a100, "status", COLUMNS="200")
    assert max(len(line) for line in short.output.splitlines()) <= 200
    uuids = [g["uuid"] for g in json.loads(ctl(a100, "status", "--json").output)["gpus"]]
    assert short_uuid(uuids[1]) in short.output and uuids[1] not in short.output
    verbose = ctl(a100, "status", "-v")
    assert all(uuid in verbose.output for uuid in uuids)


def test_leased_gpu_shows_user_label_and_time_left(a100: ThreadDaemon) -> None:
    """HOLDER of a leased GPU: the user, the label, and the time left in hours and minutes."""
    lease = json.loads(
        ctl(a100, "allocate", "-n", "1", "--ttl", "8h", "--label", "nb", "--json").output
    )
    row = rows_by_index(ctl(a100, "status").output)[lease["gpus"][0]["index"]]
    assert "leased" in row and "root (nb) 7h59m left" in row


def test_gpus_held_for_a_waiter_show_as_reserved(daemon: ThreadDaemon) -> None:
    """A free GPU that a waiter ahead holds reads `reserved`, with whom it waits for."""
    ctl(daemon, "allocate", "-n", "3")
    waiter = subprocess.Popen(
        ctl_argv(daemon.paths.socket, "allocate", "-n", "2", "--wait"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with daemon.client() as client:
            wait_until_queued(client, 1)
        states = [g["state"] for g in json.loads(ctl(daemon, "status", "--json").output)["gpus"]]
        assert sorted(states) == ["leased", "leased", "leased", "reserved"]
        table = ctl(daemon, "status").output.splitlines()[2:]
        reserved = next(line for line in table if "reserved" in line)
        assert "held for root (queue 1)" in reserved
        free = ctl(daemon, "allocate", "-n", "1")
        assert free.exit_code == 4 and "gpus_unavailable" in free.output
        said = " ".join(free.output.split())
        assert "1 free GPU(s) held for requests queued before this one" in said
    finally:
        waiter.send_signal(signal.SIGINT)
        waiter.wait(30)


def test_a_held_gpu_and_its_waiter_read_alike_in_the_cli_mcp_and_dashboard(
    daemon: ThreadDaemon,
) -> None:
    """The GPU held for a waiter reads `held for root (queue 1)` in `status`, the MCP
    server's `gpus` and the dashboard alike, and the waiter's why (`Resources: ...`) is the
    same words in the CLI's waiting line, the MCP queue and the dashboard's queue."""
    ctl(daemon, "allocate", "-n", "3")
    waiter = subprocess.Popen(
        ctl_argv(daemon.paths.socket, "allocate", "-n", "2", "--wait"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with daemon.client() as client:
            wait_until_queued(client, 1)
            gpus = client.request("GET", "/v1/gpus")["gpus"]
            (queued,) = client.queue()
        now = time.time()
        (held,) = [g for g in gpus if g["state"] == "reserved"]
        node = NodeNow(now, "node", gpus, {}, [queued], [])
        said = "held for root (queue 1)"
        assert said in ctl(daemon, "status").output
        assert said in gpu_line(gpu_view(held, now, OthersText()), now)
        assert said in gpus_html(node, str)
        why = why_waiting(queued)
        assert why.startswith("Resources: ") and why in waiting_text(queued, 1, now)
        assert why in queue_html(node)
    finally:
        waiter.send_signal(signal.SIGINT)
        waiter.wait(30)


def wait_until_queued(client: Any, count: int) -> None:
    from tests.harness import wait_for

    wait_for(lambda: len(client.queue()) == count, timeout=20)


def test_json_and_socket_go_before_or_after_the_command(daemon: ThreadDaemon) -> None:
    """`status --json`, `--json status` and `free ID --socket S` all work."""
    runner = CliRunner()
    socket = str(daemon.paths.socket)
    after = runner.invoke(cli, ["status", "--json", "--socket", socket])
    before = runner.invoke(cli, ["--json", "--socket", socket, "status"])
    assert after.exit_code == 0 and before.exit_code == 0, after.output
    assert [g["uuid"] for g in json.loads(after.output)["gpus"]] == [
        g["uuid"] for g in json.loads(before.output)["gpus"]
    ]
    lease = json.loads(
        runner.invoke(cli, ["allocate", "-n", "1", "--socket", socket, "--json"]).output
    )
    freed = runner.invoke(cli, ["free", lease["id"], "--socket", socket, "--json"])
    assert json.loads(freed.output)["state"] == "freed"


def test_colour_on_a_terminal_only_and_never_with_no_color() -> None:
    """States are coloured when asked, and the alignment is the same with and without colour."""
    from gpuallocd.cli.looking.status import render_status

    gpus = [
        {"index": 0, "uuid": "GPU-0123456789", "name": "X", "state": "free"},
        {"index": 1, "uuid": "GPU-abcdef0123", "name": "X", "state": "drained"},
    ]
    plain = render_status(gpus, 0, now=0, verbose=False, colour=False)
    painted = render_status(gpus, 0, now=0, verbose=False, colour=True)
    assert "\x1b[" not in plain and "\x1b[32m" in painted  # green for free
    assert "drained" in plain  # a state this version never made still shows
    assert CliRunner().invoke(cli, ["--version"]).output.startswith("gpuallocctl, version ")


def test_tables_cut_the_last_column_to_the_width() -> None:
    """A long last cell is cut with an ellipsis at the width; other columns stay whole."""
    text = render_table(("A", "B"), [("x" * 10, "y" * 200)], width=40)
    assert max(len(line) for line in text.splitlines()) == 40 and text.endswith("…")


def test_status_watch_prints_frames_until_interrupted(a100: ThreadDaemon) -> None:
    """--watch off a terminal prints one frame after another; Ctrl-C ends it with status 0."""
    proc = subprocess.Popen(
        ctl_argv(a100.paths.socket, "status", "--watch", "0.2"),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    headers = 0
    while headers < 2:
        line = proc.stdout.readline()
        assert line, "the watch ended by itself"
        headers += line.startswith("IDX")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_status_json_watch_prints_one_document_per_line(a100: ThreadDaemon) -> None:
    """--json --watch prints JSON lines, each a whole status with its time."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuallocd.cli",
            "status",
            "--json",
            "-w",
            "0.2",
            "--socket",
            str(a100.paths.socket),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    documents = [json.loads(proc.stdout.readline()) for _ in range(2)]
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert all(len(d["gpus"]) == 8 and d["at"] > 0 for d in documents)


def test_a_drained_gpu_shows_who_drained_it_and_why(daemon: ThreadDaemon) -> None:
    """An admin's drain reads `drained` with the admin and the reason, until undrained."""
    assert ctl(daemon, "drain", "2", "--reason", "fan noise").exit_code == 0
    row = rows_by_index(ctl(daemon, "status").output)[2]
    assert "drained" in row and "drained by root: fan noise" in row
    assert ctl(daemon, "undrain", "2").exit_code == 0
    assert "free" in rows_by_index(ctl(daemon, "status").output)[2]


def test_status_names_the_process_tracking_mode(a100: ThreadDaemon) -> None:
    """`status -v` and `status --json` say how processes are tied to leases, as the daemon's
    health does (the mode in force: the kernel's events here, as root)."""
    with a100.client() as client:
        mode = client.health()["process_tracking"]
    assert mode in ("connector", "scope", "proc-scan")
    verbose = ctl(a100, "status", "-v")
    assert f"process tracking: {mode}" in verbose.output
    assert "process tracking" not in ctl(a100, "status").output
    assert json.loads(ctl(a100, "status", "--json").output)["process_tracking"] == mode
