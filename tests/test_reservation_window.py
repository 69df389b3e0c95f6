"""An advance reservation chooses its GPUs for its window, not for now: today's processes
do not refuse it, and leases due to end before the start do not count; a lease that runs
past the start keeps its GPU out of the choice while others are free in the window."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonPaths, HandClock, ThreadDaemon, wait_for

HOUR = 3600.0
MACHINE = "dgx-a100-mig"  # GPUs 0-6 whole, GPU 7 in MIG mode


class Live:
    """The recorded machine's live file: which pids run on which GPU now."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mark = 0
        self.put({})

    def put(self, on: dict[str, list[int]]) -> None:
        self.mark += 1
        content: dict[str, Any] = {
            uuid: {"processes": [{"pid": pid, "used_memory_bytes": 2**30} for pid in pids]}
            for uuid, pids in on.items()
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(content))
        os.replace(tmp, self.path)


@pytest.fixture
def sleepers() -> Iterator[list[int]]:
    """Three processes of this user to show on GPUs (each its own pid), killed at the end."""
    started = [subprocess.Popen(["sleep", "600"]) for _ in range(3)]
    yield [p.pid for p in started]
    for process in started:
        process.kill()
        process.wait(10)


@pytest.fixture
def window_node(
    start_daemon: Callable[..., ThreadDaemon], paths: DaemonPaths
) -> Iterator[tuple[ThreadDaemon, HandClock, Live]]:
    live = Live(paths.root / "live.json")
    clock = HandClock()
    daemon = start_daemon(
        inventory=f"nvml-recording:{MACHINE}?live={live.path}",
        clock=clock,
        default_policy="simple",
        sample_interval_seconds=0.05,
        max_ttl_seconds=2 * 24 * HOUR,
    )
    yield daemon, clock, live


def _uuids(daemon: ThreadDaemon) -> list[str]:
    with daemon.client() as client:
        return [g.uuid for g in sorted(client.status(), key=lambda g: g.index)]


def _seen_in_use(daemon: ThreadDaemon, uuids: list[str]) -> None:
    """Until `status` shows a process on each of `uuids`."""

    def seen() -> bool:
        with daemon.client() as client:
            shown = {g.uuid: g.raw for g in client.status()}
        return all(shown[u].get("unleased") for u in uuids)

    wait_for(seen, timeout=30, what="the processes in a sample")


def test_a_reservation_for_tomorrow_is_not_refused_for_what_runs_today(
    window_node: tuple[ThreadDaemon, HandClock, Live], sleepers: list[int]
) -> None:
    """Every whole GPU is used today (a process with no lease on GPU 1, a lease ending in
    an hour on GPU 2): a reservation of all seven for tomorrow is granted."""
    daemon, clock, live = window_node
    uuids = _uuids(daemon)[:7]
    live.put({uuids[1]: sleepers[:1]})
    _seen_in_use(daemon, [uuids[1]])
    with daemon.client() as client:
        client.allocate_specific([2], ttl=HOUR)
        made = client.reserve(
            count=7,
            start_at=clock.now + 24 * HOUR,
            duration=4 * HOUR,
            reason="tomorrow",
            user="root",
        )
    assert sorted(made["gpu_indices"]) == list(range(7))


def test_count_avoids_a_gpu_whose_lease_runs_past_the_start(
    window_node: tuple[ThreadDaemon, HandClock, Live], sleepers: list[int]
) -> None:
    """GPU 0's lease runs 3 h past the window's start, GPUs 1-3 run unleased work today:
    `count=4` takes four GPUs free in the window, never GPU 0."""
    daemon, clock, live = window_node
    uuids = _uuids(daemon)[:7]
    live.put({u: [pid] for u, pid in zip(uuids[1:4], sleepers, strict=True)})
    _seen_in_use(daemon, uuids[1:4])
    with daemon.client() as client:
        client.allocate_specific([0], ttl=5 * HOUR)
        made = client.reserve(
            count=4, start_at=clock.now + 2 * HOUR, duration=HOUR, reason="r", user="root"
        )
    assert len(made["gpu_indices"]) == 4 and 0 not in made["gpu_indices"]
    assert made["waiting_for"] == []
