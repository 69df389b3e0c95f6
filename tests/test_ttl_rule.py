"""The lifetime a grant gets is decided in one place, and the queue's estimates use it."""

from __future__ import annotations

import subprocess

from tests.harness import DaemonPaths, wait_for
from tests.rules_harness import daemon_with_config
from tests.test_cli import ctl_json
from tests.test_cli_queue import queue_of, queued_process


def test_an_estimate_behind_a_capped_user_uses_the_capped_lifetime(paths: DaemonPaths) -> None:
    """Under max_ttl_seconds = 600 a waiter's defaulted TTL (an hour) is granted as 600 s, so
    the waiter behind it is estimated to start 600 s after it, not an hour after."""
    daemon = daemon_with_config(
        paths, 'default_policy = "simple"\n[limits]\nmax_ttl_seconds = 600\n'
    ).start()
    waiting: list[subprocess.Popen[str]] = []
    try:
        held = ctl_json(daemon, "allocate", "-n", "4", "--ttl", "5m")
        waiting.append(queued_process(daemon, "allocate", "-n", "1", "--wait"))
        wait_for(lambda: len(queue_of(daemon)) == 1, timeout=20)
        waiting.append(queued_process(daemon, "allocate", "-n", "4", "--wait", "--ttl", "1m"))
        wait_for(lambda: len(queue_of(daemon)) == 2, timeout=20)
        first, second = queue_of(daemon)
        assert abs(first["estimated_start_at"] - (held["created_at"] + 300)) < 5
        # the first waiter's lease runs 600 s (its cap), not the site's default hour
        assert abs(second["estimated_start_at"] - (held["created_at"] + 300 + 600)) < 5
    finally:
        for process in waiting:
            process.terminate()
            process.communicate(timeout=30)
        daemon.stop()
