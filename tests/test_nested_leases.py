"""A lease inside a lease: `gpu_lease(n)` or `gpuallocctl run` under GPUALLOCD_LEASE_ID of a
live lease of the caller's uses that lease (and says so), refuses what it cannot cover, and
takes a lease of its own only when asked (`nested="new"`, `--nested new`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from gpulease import InvalidRequest, gpu_lease

from tests.harness import ThreadDaemon, ctl_argv
from tests.system_users import SystemUsers, open_to_everyone

INNER = (
    "import json, os, sys\n"
    "from gpulease import gpu_lease, Client\n"
    "count, nested = int(sys.argv[1]), sys.argv[2]\n"
    "with gpu_lease(count, wait=True, timeout=5, nested=nested) as cm_lease:\n"
    "    with Client() as client:\n"
    "        ids = sorted(l.id for l in client.leases())\n"
    "    print(json.dumps({'inner': cm_lease.id, 'leases': ids,\n"
    "                      'cuda': os.environ['CUDA_VISIBLE_DEVICES']}))\n"
)


def test_a_lease_inside_a_lease_uses_it_and_leaves_it_to_its_holder(
    daemon: ThreadDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """The inner block gets the outer lease (its first GPU for a count of 1), says so on
    stderr, takes nothing more, and its exit neither frees nor changes the outer lease."""
    with gpu_lease(2, socket=daemon.paths.socket) as outer:
        outer_env = os.environ["CUDA_VISIBLE_DEVICES"]
        inner_cm = gpu_lease(1, socket=daemon.paths.socket)
        with inner_cm as inner:
            assert inner_cm.nested and inner.id == outer.id
            assert os.environ["CUDA_VISIBLE_DEVICES"] == outer.uuids[0]
            with daemon.client() as client:
                assert [lease.id for lease in client.leases()] == [outer.id]
        assert os.environ["CUDA_VISIBLE_DEVICES"] == outer_env
        with daemon.client() as client:
            assert client.lease(outer.id).state == "active"
    assert f"gpulease: using the enclosing lease {outer.id} (GPUALLOCD_LEASE_ID)" in (
        capsys.readouterr().err
    )
    with daemon.client() as client:
        assert client.lease(outer.id).state == "freed"


def test_a_lease_inside_a_lease_that_asks_for_more_is_refused(daemon: ThreadDaemon) -> None:
    """Three GPUs inside a two-GPU lease: InvalidRequest naming the lease and the way out;
    nothing more is leased, and the outer lease stays."""
    with gpu_lease(2, socket=daemon.paths.socket) as outer:
        with pytest.raises(InvalidRequest) as refused, gpu_lease(3, socket=daemon.paths.socket):
            pass  # pragma: no cover - refused on entry
        assert f"runs under lease {outer.id}" in refused.value.message
        assert "nested='new'" in refused.value.message
        named, socket = [outer.gpus[0].index, 99], daemon.paths.socket
        with pytest.raises(InvalidRequest, match="including"), gpu_lease(gpus=named, socket=socket):
            pass  # pragma: no cover
        with daemon.client() as client:
            assert [lease.id for lease in client.leases()] == [outer.id]


def test_nested_new_takes_a_lease_of_its_own(daemon: ThreadDaemon) -> None:
    """nested="new" takes another lease, frees it on exit, and leaves the outer one."""
    with gpu_lease(2, socket=daemon.paths.socket) as outer:
        cm = gpu_lease(2, socket=daemon.paths.socket, nested="new")
        with cm as inner:
            assert not cm.nested and inner.id != outer.id
            assert set(inner.uuids).isdisjoint(outer.uuids)
        with daemon.client() as client:
            assert [lease.id for lease in client.leases()] == [outer.id]


def test_a_stale_or_foreign_lease_id_is_not_nested_in(daemon: ThreadDaemon) -> None:
    """GPUALLOCD_LEASE_ID of a lease that has ended: a new lease is taken, as before."""
    with daemon.client() as client:
        ended = client.allocate(1)
        client.free(ended.id)
    os.environ["GPUALLOCD_LEASE_ID"] = ended.id
    cm = gpu_lease(1, socket=daemon.paths.socket)
    with cm as lease:
        assert not cm.nested and lease.id != ended.id


def test_gpu_lease_inside_run_does_not_take_a_second_lease(daemon: ThreadDaemon) -> None:
    """The README's two ways combined: `run -n 2 -- python train.py` whose script says
    `gpu_lease(2, wait=True)` holds one two-GPU lease, even on a box with no GPU free."""
    env = {**os.environ, "GPUALLOCD_SOCKET": str(daemon.paths.socket)}
    with daemon.client() as client:
        client.allocate(2)  # the rest of the box is busy
    argv = ctl_argv(daemon.paths.socket, "run", "-n", "2", "--", sys.executable, "-c", INNER)
    result = subprocess.run(
        [*argv, "2", "reuse"], capture_output=True, text=True, timeout=60, env=env
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert len(seen["leases"]) == 2  # the busy one and run's, nothing more
    assert seen["inner"] in seen["leases"] and len(seen["cuda"].split(",")) == 2
    assert "using the enclosing lease" in result.stderr


def test_run_inside_run_uses_the_outer_lease_unless_told_new(daemon: ThreadDaemon) -> None:
    """`run` inside `run`: the inner command runs on the outer lease; `--nested new` asks
    for another (refused here: the box has no more)."""
    inner = "import os; print(os.environ['GPUALLOCD_LEASE_ID'])"
    socket = daemon.paths.socket
    nested = [*ctl_argv(socket, "run", "-n", "1", "--", sys.executable, "-c", inner)]
    outer = ctl_argv(socket, "run", "-n", "4", "--", sys.executable, "-c", INNER_RUN, *nested)
    result = subprocess.run(outer, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    outer_id, inner_id = result.stdout.split()
    assert outer_id == inner_id
    new = [*nested[:6], "--nested", "new", *nested[6:]]
    refused = subprocess.run(
        ctl_argv(socket, "run", "-n", "4", "--", *new), capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 4, refused.stderr  # gpus_unavailable: a second lease was asked
    with daemon.client() as client:
        assert client.leases() == []


INNER_RUN = (
    "import os, subprocess, sys\n"
    "print(os.environ['GPUALLOCD_LEASE_ID'], flush=True)\n"
    "sys.exit(subprocess.run(sys.argv[1:]).returncode)\n"
)


def test_another_users_lease_is_never_nested_in(
    daemon: ThreadDaemon, system_users: SystemUsers
) -> None:
    """alice's script names root's lease in GPUALLOCD_LEASE_ID: she gets a lease of her own;
    root's lease is neither used, renewed nor freed by her block."""
    open_to_everyone(daemon.paths.root)
    with daemon.client() as client:
        roots = client.allocate(1)
    script = (
        "import os, sys\n"
        "from gpulease import gpu_lease\n"
        "os.environ['GPUALLOCD_LEASE_ID'] = sys.argv[2]\n"
        "cm = gpu_lease(1, socket=sys.argv[1])\n"
        "with cm as lease:\n"
        "    print(lease.id, cm.nested)\n"
    )
    done = system_users.run("alice", ["-c", script, str(daemon.paths.socket), roots.id])
    assert done.returncode == 0, done.stderr
    lease_id, nested = done.stdout.split()
    assert lease_id != roots.id and nested == "False"
    with daemon.client() as client:
        after = client.lease(roots.id)
    assert after.state == "active" and after.expires_at == roots.expires_at
