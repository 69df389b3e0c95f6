"""The daemon under systemd: socket activation, readiness and watchdog, the units themselves.

Socket activation and sd_notify are tested with what systemd really hands over: a listening
socket at fd 3 with LISTEN_FDS/LISTEN_PID in a child daemon process, and a datagram
NOTIFY_SOCKET that this test reads. The units are checked by `systemd-analyze`.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gpulease import Client

from gpuallocd.daemon.sdnotify import watchdog_interval
from gpuallocd.daemon.startup.activation import listen_fd_count
from tests.harness import (
    DEFAULT_INVENTORY,
    DaemonPaths,
    ProcessDaemon,
    ThreadDaemon,
    wait_until_serving,
)

REPO = Path(__file__).resolve().parent.parent
UNITS = REPO / "systemd"
START_SECONDS = 60  # an upper bound for a daemon to start, never a wait
Popen = subprocess.Popen[bytes]


def launch(
    paths: DaemonPaths,
    *options: str,
    pass_fds: tuple[int, ...] = (),
    inventory: str = DEFAULT_INVENTORY,
) -> Popen:
    """`gpuallocd` started as systemd would (tests/systemd_launch.py), output to a log."""
    command = [
        sys.executable,
        "-m",
        "tests.systemd_launch",
        *options,
        "--",
        "--socket",
        str(paths.socket),
        "--state-dir",
        str(paths.state_dir),
        "--inventory",
        inventory,
        "--default-policy",
        "simple",
    ]
    log_path = paths.root / f"daemon-{len(list(paths.root.glob('daemon-*')))}.log"
    with open(log_path, "w") as log:
        return subprocess.Popen(
            command, cwd=REPO, pass_fds=pass_fds, stdout=log, stderr=subprocess.STDOUT
        )


def stop(process: Popen) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(30)


@pytest.fixture
def listening(paths: DaemonPaths) -> Iterator[socket.socket]:
    """What gpuallocd.socket makes: a listening Unix socket at the daemon's socket path."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(paths.socket))
    os.chmod(paths.socket, 0o666)
    sock.listen(16)
    yield sock
    sock.close()


def test_activated_daemon_serves_clients_that_connected_before_it_started(
    paths: DaemonPaths, listening: socket.socket
) -> None:
    """A client connecting while the daemon starts waits in the backlog and is served."""
    daemon = launch(paths, "--listen-fd", str(listening.fileno()), pass_fds=(listening.fileno(),))
    try:
        with Client(paths.socket, timeout=START_SECONDS) as client:
            lease = client.allocate(2, label="early")
            assert [g.index for g in client.lease(lease.id).gpus] == [0, 1]
    finally:
        assert stop(daemon) == 0


def test_activated_daemon_leaves_the_socket_to_systemd(
    paths: DaemonPaths, listening: socket.socket
) -> None:
    """On stop the socket stays where systemd made it; the next daemon takes it over."""
    inode = paths.socket.stat().st_ino
    fd = listening.fileno()
    first = launch(paths, "--listen-fd", str(fd), pass_fds=(fd,))
    with Client(paths.socket, timeout=START_SECONDS) as client:
        lease = client.allocate(1)
    assert stop(first) == 0
    assert paths.socket.stat().st_ino == inode
    second = launch(paths, "--listen-fd", str(fd), pass_fds=(fd,))
    try:
        with Client(paths.socket, timeout=START_SECONDS) as client:
            assert [held.id for held in client.leases()] == [lease.id]
    finally:
        assert stop(second) == 0


def test_activation_with_a_socket_that_is_not_unix_is_refused(paths: DaemonPaths) -> None:
    """A socket unit with a TCP ListenStream= stops the start with 73 and says what to fix."""
    with socket.socket() as tcp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        daemon = launch(paths, "--listen-fd", str(tcp.fileno()), pass_fds=(tcp.fileno(),))
        assert daemon.wait(START_SECONDS) == 73
    log = next(paths.root.glob("daemon-*.log")).read_text()
    assert "none is a listening Unix stream socket" in log


@pytest.mark.parametrize(
    ("environ", "count"),
    [
        ({"LISTEN_PID": "4242", "LISTEN_FDS": "2"}, 2),
        ({"LISTEN_PID": "4243", "LISTEN_FDS": "2"}, 0),  # meant for another process
        ({"LISTEN_FDS": "1"}, 0),
        ({"LISTEN_PID": "4242", "LISTEN_FDS": "x"}, 0),
        ({}, 0),
    ],
)
def test_listen_fds_count_only_for_this_process(environ: dict[str, str], count: int) -> None:
    """LISTEN_FDS counts only when LISTEN_PID names this process, as sd_listen_fds does."""
    assert listen_fd_count(environ, 4242) == count


@pytest.mark.parametrize(
    ("environ", "interval"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4242"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({}, None),
    ],
)
def test_watchdog_pings_at_half_the_timeout(
    environ: dict[str, str], interval: float | None
) -> None:
    """Pings every WATCHDOG_USEC/2, only when the watchdog is meant for this process."""
    assert watchdog_interval(environ, 4242) == interval


@pytest.fixture
def notify_socket(short_dir: Path) -> Iterator[socket.socket]:
    """systemd's end of NOTIFY_SOCKET: a datagram socket this test reads."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(short_dir / "notify"))
    sock.settimeout(START_SECONDS)
    os.environ["NOTIFY_SOCKET"] = str(short_dir / "notify")
    yield sock
    sock.close()


def messages(sock: socket.socket) -> Iterator[str]:
    while True:
        yield sock.recv(4096).decode()


def test_daemon_reports_ready_pings_the_watchdog_and_reports_stopping(
    process_daemon: Callable[..., ProcessDaemon], notify_socket: socket.socket
) -> None:
    """READY=1 once serving, then WATCHDOG=1 again and again, STOPPING=1 on SIGTERM."""
    os.environ["WATCHDOG_USEC"] = "100000"
    daemon = process_daemon()
    received = messages(notify_socket)
    assert next(received) == "READY=1"
    assert [next(received) for _ in range(3)] == ["WATCHDOG=1"] * 3
    daemon.signal(signal.SIGTERM)
    assert "STOPPING=1" in received
    assert daemon.process is not None and daemon.process.wait(30) == 0


def test_a_stuck_event_loop_stops_the_watchdog_pings(
    paths: DaemonPaths, notify_socket: socket.socket
) -> None:
    """While the event loop is blocked no WATCHDOG=1 goes out; once it runs, pings resume."""
    os.environ["WATCHDOG_USEC"] = "100000"  # a ping every 0.05 s while the loop runs
    daemon = ThreadDaemon(paths, default_policy="simple").start()
    entered, release = threading.Event(), threading.Event()

    def block_the_loop() -> None:
        entered.set()
        release.wait(30)

    try:
        assert daemon._loop is not None
        daemon._loop.call_soon_threadsafe(block_the_loop)
        assert entered.wait(30)
        notify_socket.setblocking(False)
        while True:  # what was sent before the loop stopped
            try:
                notify_socket.recv(4096)
            except BlockingIOError:
                break
        notify_socket.settimeout(0.5)  # ten ping intervals: nothing may come
        with pytest.raises(TimeoutError):
            notify_socket.recv(4096)
        release.set()
        notify_socket.settimeout(START_SECONDS)
        assert notify_socket.recv(4096) == b"WATCHDOG=1"
    finally:
        release.set()
        daemon.stop()


def _installed_units(short_dir: Path) -> list[Path]:
    """The units as installed here: ExecStart names this installation's gpuallocd."""
    executable = shutil.which("gpuallocd", path=str(Path(sys.executable).parent))
    assert executable is not None
    units = []
    for unit in ("gpuallocd.socket", "gpuallocd.service"):
        text = (UNITS / unit).read_text()
        text = re.sub(r"^ExecStart=\S+", f"ExecStart={executable}", text, flags=re.M)
        (short_dir / unit).write_text(text)
        units.append(short_dir / unit)
    return units


def _systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
    return found


def test_units_pass_systemd_analyze_verify(short_dir: Path) -> None:
    """`systemd-analyze verify` accepts gpuallocd.socket and gpuallocd.service."""
    analyze = _systemd_analyze()
    result = subprocess.run(
        [analyze, "verify", *map(str, _installed_units(short_dir))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_service_exposure_stays_low(short_dir: Path) -> None:
    """`systemd-analyze security --offline=yes` rates the service 3.1 or lower (it was 9.6;
    2.9 before process tracking's AF_NETLINK and CAP_NET_ADMIN)."""
    analyze = _systemd_analyze()
    service = _installed_units(short_dir)[1]
    result = subprocess.run(
        [analyze, "security", "--offline=yes", str(service)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if "--offline" in result.stderr:
        pytest.skip(f"this systemd-analyze has no offline security review: {result.stderr}")
    found = re.search(r"Overall exposure level for gpuallocd.service: ([\d.]+)", result.stdout)
    assert found is not None, result.stdout + result.stderr
    assert float(found.group(1)) <= 3.1, result.stdout
    readme = " ".join((UNITS.parent / "README.md").read_text().split())
    assert f"`systemd-analyze security`: {found.group(1)}, OK" in readme  # says what is measured


def test_daemon_runs_under_memory_deny_write_execute(paths: DaemonPaths) -> None:
    """With the kernel refusing writable-executable memory (MemoryDenyWriteExecute=yes),
    the daemon and the NVML backend over a recorded machine still serve and end leases."""
    probe = subprocess.run(
        [sys.executable, "-m", "tests.systemd_launch", "--deny-write-execute", "--", "--version"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:
        pytest.skip(f"this kernel cannot deny write-execute per process: {probe.stderr.strip()}")
    daemon = launch(paths, "--deny-write-execute", inventory="nvml-recording:dgx-a100-mig")
    try:
        wait_until_serving(paths.socket, timeout=START_SECONDS)
        with Client(paths.socket) as client:
            lease = client.allocate(2)
            assert client.free(lease.id).state == "freed"
    finally:
        assert stop(daemon) == 0
