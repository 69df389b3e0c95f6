"""`make bench`'s HTTP floor: a minimal aiohttp app that gives gpulease the daemon's answers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gpulease import Client

from benchmarks.http_floor import capture_answers, serving_http_floor
from tests.harness import ProcessDaemon


def test_the_http_floor_serves_gpulease_the_daemons_own_answers(
    process_daemon: Callable[..., ProcessDaemon], tmp_path: Path
) -> None:
    """The answers are captured from a real daemon (which is left with no lease) and the app
    serves them to the real client, which reads them as the daemon's."""
    daemon = process_daemon()
    answers = capture_answers(daemon.paths.socket)
    with daemon.client() as client:
        assert client.leases() == []
    with serving_http_floor(tmp_path, answers) as socket, Client(socket) as floor:
        for _ in range(3):
            lease = floor.allocate(1, label="bench")
            assert (lease.id, lease.state) == (answers["granted"]["id"], "active")
            freed = floor.free(lease.id)
            assert (freed.id, freed.state) == (lease.id, "freed")
        assert floor.health()["status"] == "ok"
