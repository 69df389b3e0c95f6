"""The HTTP floor: the same gpulease pairs against a minimal aiohttp app that decides nothing.

The app answers allocate and free with the daemon's own answers, captured from it just
before, on the same kind of socket and event loop as the daemon. What a pair costs there is
the client and the HTTP layer alone: no allocator, no ledger, no commit. Added to the disk's
two durable commits, it is the lowest a pair can go while the daemon speaks HTTP through
aiohttp (the design's choice) and syncs each change before answering.

`python -m benchmarks.http_floor SOCKET ANSWERS.json` serves the app until SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpulease import Client

from benchmarks.daemon import wait_until_serving
from gpuallocd.daemon.eventloop import run_event_loop

__all__ = ["capture_answers", "serving_http_floor"]


def capture_answers(daemon_socket: Path) -> dict[str, Any]:
    """One allocate and one free against the real daemon, as the client decodes them."""
    with Client(daemon_socket) as client:
        granted = client.request("POST", "/v1/leases", {"count": 1, "label": "bench"})
        freed = client.request("DELETE", f"/v1/leases/{granted['id']}")
        health = client.request("GET", "/v1/health")
    return {"granted": granted, "freed": freed, "health": health}


async def _serve(socket: str, answers: dict[str, Any]) -> None:
    import asyncio

    from aiohttp import web

    granted, freed, health = (
        json.dumps(answers[key]).encode() for key in ("granted", "freed", "health")
    )

    async def allocate(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=granted, status=201, content_type="application/json")

    async def free(request: web.Request) -> web.Response:
        return web.Response(body=freed, content_type="application/json")

    async def healthy(request: web.Request) -> web.Response:
        return web.Response(body=health, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/leases", allocate)
    app.router.add_delete("/v1/leases/{lease_id}", free)
    app.router.add_get("/v1/health", healthy)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.UnixSite(runner, socket).start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()


@contextlib.contextmanager
def serving_http_floor(root: Path, answers: dict[str, Any]) -> Iterator[Path]:
    """Serve the minimal app on `root`/http-floor.sock; yields the socket's path."""
    socket = root / "http-floor.sock"
    answers_file = root / "http-floor-answers.json"
    answers_file.write_text(json.dumps(answers))
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.http_floor", str(socket), str(answers_file)],
        env=os.environ.copy(),
    )
    try:
        wait_until_serving(socket, process)
        yield socket
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


if __name__ == "__main__":
    run_event_loop(_serve(sys.argv[1], json.loads(Path(sys.argv[2]).read_text())))
