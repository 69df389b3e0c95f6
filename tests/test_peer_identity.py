"""The caller is read from the kernel per connection, and each connection is its own."""

from __future__ import annotations

import os
import subprocess
import sys

from gpulease import Client

from tests.harness import ThreadDaemon

CHILD = """
import os, sys
from gpulease import Client
with Client(sys.argv[1]) as client:
    lease = client.allocate(1)
    print(lease.pid, os.getpid())
"""


def test_each_connection_is_attributed_to_the_process_that_opened_it(
    daemon: ThreadDaemon,
) -> None:
    """Leases asked for on one connection all carry its process; another process's connection
    carries that process, whatever was asked before it."""
    with Client(daemon.paths.socket) as client:
        first, second = client.allocate(1), client.allocate(1)
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(daemon.paths.socket)],
            capture_output=True,
            text=True,
            check=True,
        )
        third = client.allocate(1)
    recorded, child_pid = done.stdout.split()
    assert recorded == child_pid != str(os.getpid())
    assert first.pid == second.pid == third.pid == os.getpid()
