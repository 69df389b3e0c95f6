"""Case 11: a daemon whose socket is gone says so and stops (its service manager restarts it)."""

from __future__ import annotations

from collections.abc import Callable

from gpuallocd.errors import StateUnusable
from tests.harness import ProcessDaemon


def test_a_deleted_socket_stops_the_daemon_with_a_clear_message(
    process_daemon: Callable[..., ProcessDaemon],
) -> None:
    """rm of the socket: the daemon logs why and exits 73 within seconds."""
    daemon = process_daemon()
    daemon.paths.socket.unlink()
    assert daemon.process is not None
    assert daemon.process.wait(30) == StateUnusable.exit_code
    assert f"the socket {daemon.paths.socket} was removed" in daemon.stderr()


def test_a_replaced_socket_stops_the_daemon_and_is_left_alone(
    process_daemon: Callable[..., ProcessDaemon],
) -> None:
    """A file put where the socket was: the daemon stops and does not delete that file."""
    daemon = process_daemon()
    daemon.paths.socket.unlink()
    daemon.paths.socket.write_text("someone else's\n")
    assert daemon.process is not None
    assert daemon.process.wait(30) == StateUnusable.exit_code
    assert "was replaced by another file" in daemon.stderr()
    assert daemon.paths.socket.read_text() == "someone else's\n"
