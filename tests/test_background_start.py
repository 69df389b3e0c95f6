"""gpuallocctl started the way a background job starts it (SIGINT ignored, as `cmd &`,
`nohup` or a script's shell leaves it) still stops on Ctrl-C; and the test run's own check
for processes left behind sees them."""

from __future__ import annotations

import os
import signal
import subprocess

from tests.harness import ThreadDaemon, ctl_argv, wait_for
from tests.leftovers import MARKER, started_by_this_run, still_running_after_grace


def _as_a_background_job() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def background(daemon: ThreadDaemon, *args: str) -> subprocess.Popen[str]:
    """`gpuallocctl ARGS` started with SIGINT ignored, as a shell starts a background job."""
    return subprocess.Popen(
        ctl_argv(daemon.paths.socket, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_a_background_job,
    )


def test_a_watch_started_in_the_background_stops_on_sigint(daemon: ThreadDaemon) -> None:
    """`status --watch` inherited "ignore SIGINT": a SIGINT still ends it with status 0."""
    proc = background(daemon, "status", "--watch", "0.2")
    assert proc.stdout is not None
    try:
        while not proc.stdout.readline().startswith("IDX"):
            pass
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0


def test_a_waiter_started_in_the_background_leaves_the_queue_on_sigint(
    daemon: ThreadDaemon,
) -> None:
    """A queued `allocate --wait` and `run --wait` started with SIGINT ignored: exit 130,
    out of the queue."""
    with daemon.client() as client:
        holder = client.allocate(4)
        for command in (("allocate", "-n", "1", "--wait"), ("run", "--wait", "--", "true")):
            proc = background(daemon, *command)
            assert proc.stderr is not None
            try:
                assert proc.stderr.readline().startswith("gpuallocctl: queued 1 of 1")
                proc.send_signal(signal.SIGINT)
                _, err = proc.communicate(timeout=30)
            finally:
                proc.kill()
                proc.wait()
            assert proc.returncode == 130, err
            assert "left the queue" in err
            assert client.queue() == []
        assert [lease.id for lease in client.leases()] == [holder.id]


def test_the_leftover_check_sees_an_orphan_of_the_run() -> None:
    """An orphaned process that carries the run's marker is named; once gone it is not."""
    assert os.environ[MARKER] == str(os.getpid())
    started = subprocess.run(
        ["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    orphan = int(started.stdout)
    try:
        found = started_by_this_run(os.getpid())
        assert "sleep 600" in found[orphan]
    finally:
        os.kill(orphan, signal.SIGKILL)
    assert orphan not in still_running_after_grace(os.getpid())


def test_the_leftover_check_sees_a_child_with_a_fresh_environment() -> None:
    """A child of pytest without the marker (an environment built from scratch) is seen
    through its parent."""
    child = subprocess.Popen(["sleep", "600"], env={"PATH": "/usr/bin:/bin"})
    try:
        wait_for(lambda: child.pid in started_by_this_run(os.getpid()), timeout=10)
    finally:
        child.kill()
        child.wait()
    assert child.pid not in started_by_this_run(os.getpid())
