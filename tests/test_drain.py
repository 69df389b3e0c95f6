"""Drain: GPUs taken out of service by an admin, across restarts."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from gpulease import GpuBusy, GpusUnavailable, Lease

from tests.harness import DaemonPaths, ThreadDaemon, wait_for
from tests.rules_harness import daemon_with_config
from tests.system_users import SystemUsers, open_to_everyone


def states(daemon: ThreadDaemon) -> list[str]:
    with daemon.client() as client:
        return [gpu.state for gpu in client.status()]


def wait_for_gpu_0(daemon: ThreadDaemon) -> Lease:
    with daemon.client() as client:
        return client.allocate_specific([0], wait=True, timeout=60)


def test_a_drained_gpu_gets_no_new_lease_and_its_lease_runs_out(daemon: ThreadDaemon) -> None:
    """Drained GPUs are `draining` while leased and `drained` once free; no new lease takes
    them, by count or by name."""
    with daemon.client() as client:
        held = client.allocate_specific([1])
        statuses = client.drain([1, 2], "fan failure")
        assert [(s.index, s.state) for s in statuses] == [(1, "draining"), (2, "drained")]
        assert statuses[0].raw["drain"]["reason"] == "fan failure"
        assert statuses[0].raw["drain"]["by"] == "root"
        with pytest.raises(GpusUnavailable):
            client.allocate(3)
        with pytest.raises(GpuBusy, match="drained by an admin"):
            client.allocate_specific([2])
        assert client.allocate(2).indices == (0, 3)
        assert client.lease(held.id).state == "active"
        client.free(held.id)
        assert states(daemon)[1:3] == ["drained", "drained"]


def test_a_drain_survives_a_restart_and_undrain_serves_the_queue(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """A drain is in the ledger: the restarted daemon still refuses the GPU. A request waiting
    for it is granted the moment it is undrained."""
    first = start_daemon(default_policy="simple")
    with first.client() as client:
        client.drain([0], "new driver")
    first.stop()
    second = start_daemon(default_policy="simple")
    assert states(second) == ["drained", "free", "free", "free"]
    with ThreadPoolExecutor(1) as pool, second.client() as client:
        waiting = pool.submit(wait_for_gpu_0, second)
        wait_for(lambda: len(client.queue()) == 1, 30)
        assert [s.state for s in client.undrain([0])] == ["free"]
        assert waiting.result(60).indices == (0,)
        actions = [(a["action"], a["reason"]) for a in client.admin_actions()]
        assert actions == [("drain", "new driver"), ("undrain", None)]


def test_only_admins_drain_and_the_record_names_them(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """alice may not drain; dave (gpuadmin) drains and undrains with the CLI; `status` shows
    the drain, and the admin record names dave."""
    users = system_users
    open_to_everyone(short_dir)
    text = f'admin_groups = ["{users.name("gpuadmin")}"]\n'
    daemon = daemon_with_config(paths, text).start()
    socket = daemon.paths.socket
    try:
        refused = users.ctl("alice", socket, "drain", "3", "--reason", "mine")
        assert refused.returncode == 5 and "[permission_denied]" in refused.stderr
        done = users.ctl("dave", socket, "drain", "3", "--reason", "ECC errors")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().endswith(": drained")
        shown = json.loads(users.ctl("alice", socket, "--json", "status").stdout)["gpus"][3]
        assert (shown["state"], shown["drain"]["by"]) == ("drained", users.name("dave"))
        assert users.ctl("dave", socket, "undrain", "3").returncode == 0
        log = json.loads(users.ctl("alice", socket, "--json", "admin-log").stdout)["actions"]
        assert [(a["action"], a["actor"]["user"]) for a in log] == [
            ("drain", users.name("dave")),
            ("undrain", users.name("dave")),
        ]
    finally:
        daemon.stop()
