"""A real kill of the daemon inside a grant: after its commit and before its answer, and
after its answer. The client's retry with the same request id, sent to the restarted
daemon, gets the same lease, never a second one."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from gpulease import DaemonUnavailable

from gpuallocd.allocator.crash_points import armed_point
from tests.harness import ProcessDaemon
from tests.ledger_damage import CRASH_ENV


@pytest.mark.parametrize("point", ["after-commit", "after-reply"])
def test_a_retry_after_a_crash_gets_the_same_lease(
    process_daemon: Callable[..., ProcessDaemon], point: str
) -> None:
    os.environ.update({**CRASH_ENV, "GPUALLOCD_TEST_CRASH_AT": point})
    daemon = process_daemon()
    first = None
    with daemon.client(timeout=30) as client:
        try:
            first = client.allocate(2, request_id="job-33")
        except DaemonUnavailable:
            assert point == "after-commit"
    assert daemon.process is not None
    assert daemon.process.wait(30) == -9, "the daemon was not killed at its crash point"
    assert (first is None) == (point == "after-commit")
    assert "TEST FAULT ARMED" in daemon.stderr()

    for key in CRASH_ENV:
        os.environ.pop(key, None)
    os.environ.pop("GPUALLOCD_TEST_CRASH_AT", None)
    restarted = process_daemon()
    with restarted.client() as client:
        retried = client.allocate(2, request_id="job-33")
        again = client.allocate(2, request_id="job-33")
        active = client.leases()
        other = client.allocate(1, request_id="job-34")
    assert [lease.id for lease in active] == [retried.id]
    assert again.id == retried.id
    if first is not None:
        assert retried.id == first.id and retried.uuids == first.uuids
    assert not set(other.uuids) & set(retried.uuids)


def test_a_crash_point_needs_both_variables() -> None:
    """One variable alone, a wrong consent word or an unknown point arms nothing."""
    assert armed_point({"GPUALLOCD_TEST_CRASH_AT": "after-commit"}) is None
    assert armed_point({**CRASH_ENV}) is None
    wrong = {"GPUALLOCD_TEST_FAULTS": "yes", "GPUALLOCD_TEST_CRASH_AT": "after-commit"}
    assert armed_point(wrong) is None
    assert armed_point({**CRASH_ENV, "GPUALLOCD_TEST_CRASH_AT": "anywhere"}) is None
    assert armed_point({**CRASH_ENV, "GPUALLOCD_TEST_CRASH_AT": "after-reply"}) == "after-reply"


def test_an_unarmed_daemon_serves_through_every_point(
    process_daemon: Callable[..., ProcessDaemon],
) -> None:
    """`GPUALLOCD_TEST_CRASH_AT` alone (left over in an environment) kills nothing."""
    os.environ["GPUALLOCD_TEST_CRASH_AT"] = "after-commit"
    daemon = process_daemon()
    with daemon.client() as client:
        lease = client.allocate(1, request_id="r")
        client.free(lease.id)
    assert daemon.process is not None and daemon.process.poll() is None
    assert "TEST FAULT ARMED" not in daemon.stderr()
