"""A lease's events, long-polled: the holder hears a revoke (or a warning meant for it) at
the commit that records it, and `gpuallocctl run` stops its own command on a revoke."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
from gpulease import Client, InvalidRequest, UnknownLease

from gpuallocd.cli.errors import EXIT_REVOKED
from tests.harness import DaemonPaths, ProcessDaemon, ThreadDaemon, ctl_argv, wait_for
from tests.system_users import SystemUsers, open_to_everyone
from tests.test_unit_capabilities import alive, start_run

WITHOUT_CAP_KILL = ("CAP_CHOWN", "CAP_SYS_ADMIN")


def test_events_after_a_number_are_the_newer_ones(daemon: ThreadDaemon) -> None:
    with daemon.client() as client:
        lease = client.allocate(1)
        client.renew(lease.id, ttl=7200)
        same, events, rest = client.lease_events(lease.id)
        assert same.id == lease.id and [e["event"] for e in events] == ["granted", "renewed"]
        _, newer, _ = client.lease_events(lease.id, after=events[0]["seq"])
        assert [e["event"] for e in newer] == ["renewed"]
        assert rest["revoke_grace_seconds"] > 0


def test_a_long_poll_answers_at_the_revoke(daemon: ThreadDaemon) -> None:
    """A holder waiting for news (60 s) is answered when root revokes, with the event."""
    answers: list[Any] = []
    with daemon.client() as client:
        lease = client.allocate(1)
        _, seen, _ = client.lease_events(lease.id)

        def poll() -> None:
            with daemon.client() as holder:
                answers.append(holder.lease_events(lease.id, after=seen[-1]["seq"], wait=60))

        waiting = threading.Thread(target=poll)
        waiting.start()
        wait_for(lambda: waiting.is_alive(), timeout=5)
        client.revoke(lease.id, reason="maintenance")
        waiting.join(30)
    assert not waiting.is_alive()
    ((ended, events, _),) = answers
    assert ended.state == "revoked"
    assert [(e["event"], e["detail"]) for e in events] == [("revoked", "maintenance")]


def test_a_long_poll_of_an_ended_lease_answers_at_once(daemon: ThreadDaemon) -> None:
    with daemon.client() as client:
        lease = client.allocate(1)
        client.free(lease.id)
        ended, events, _ = client.lease_events(lease.id, after=10**9, wait=300)
    assert ended.state == "freed" and events == []


@pytest.mark.parametrize(
    "query", ["after=-1", "after=x", "wait_seconds=301", "wait_seconds=1.5", "after=%C2%B2"]
)
def test_bad_event_queries_are_refused(daemon: ThreadDaemon, query: str) -> None:
    with daemon.client() as client:
        lease = client.allocate(1)
        with pytest.raises(InvalidRequest):
            client.request("GET", f"/v1/leases/{lease.id}/events?{query}")
        with pytest.raises(UnknownLease):
            client.lease_events("0123456789ab")


def test_run_stops_its_command_where_the_daemon_may_not_signal(
    system_users: SystemUsers, paths: DaemonPaths
) -> None:
    """The daemon without CAP_KILL (the first unit's capabilities): root revokes alice's
    `gpuallocctl run`; run hears it, stops its command itself and exits 7."""
    open_to_everyone(paths.root)
    daemon = ProcessDaemon(
        paths, bounding_set=WITHOUT_CAP_KILL, default_policy="simple", revoke_grace_seconds=5.0
    ).start()
    try:
        wrapper, lease_id, command = start_run(system_users, daemon, "-n", "1")
        with Client(daemon.paths.socket) as client:
            client.revoke(lease_id, reason="the GPU is needed for a demo")
        assert wrapper.wait(timeout=60) == EXIT_REVOKED
        assert not alive(command)
        assert "not allowed to send SIGTERM" in daemon.stderr()  # the daemon could not
    finally:
        daemon.stop()


def test_run_prints_a_notice_meant_for_its_holder(
    process_daemon: Callable[..., ProcessDaemon], paths: DaemonPaths
) -> None:
    """A warning recorded for the lease (here: its share over its size) appears on run's
    stderr while the command runs."""
    live = paths.root / "live.json"
    live.write_text("{}")
    process_daemon(
        inventory=f"nvml-recording:dgx-a100-mig?live={live}",
        shared_gpus=["all"],
        share_enforcement="warn",
        sample_interval_seconds=0.2,
    )
    log = paths.root / "run.log"
    script = "import os, time; print(os.getpid(), flush=True); time.sleep(600)"
    with open(log, "w") as err:
        wrapper = subprocess.Popen(
            ctl_argv(paths.socket, "run", "--memory", "10G", "--", sys.executable, "-c", script),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        assert wrapper.stdout is not None
        pid = int(wrapper.stdout.readline())
        with Client(paths.socket) as client:
            (lease,) = client.leases()
        live.write_text(
            json.dumps(
                {lease.uuids[0]: {"processes": [{"pid": pid, "used_memory_bytes": 12 * 2**30}]}}
            )
        )
        wait_for(lambda: "warned" in log.read_text(), timeout=30, what="the notice")
        assert f"lease {lease.id}: warned: processes {pid} use 12.0 GiB" in log.read_text()
    finally:
        wrapper.terminate()  # forwarded to the command: a SIGKILL would leave it running
        wrapper.wait(timeout=60)
        wrapper.stdout.close()
