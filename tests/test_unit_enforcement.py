"""Enforcement with only the capabilities the unit grants: stopping another user's process
that uses a GPU without a lease, and device files' ACLs for leaseholders.

Each daemon runs as root under `setpriv --bounding-set` with exactly the unit's
CapabilityBoundingSet= (tests/service_unit.py). The device files are character devices with
NVIDIA's major number (195) that the test creates, mode 0600 and owned by root, as the
driver leaves them with `NVreg_DeviceFileMode=0600` (docs/enforcement.md)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuallocd.enforcement.acl import grant_user
from tests.harness import DaemonPaths, ProcessDaemon, wait_for
from tests.system_users import SystemUsers
from tests.unleased_helpers import Node, alive, node

__all__ = ["node"]

NVIDIA_MAJOR = 195
PASSED = ("ENXIO", "ENODEV", "opened")  # past the permission check: no driver behind the node
UUID3 = "GPU-f06d330d-af21-5a36-84a7-d3d20d41fb7f"
PROBE = """
import errno, os, sys
try:
    os.close(os.open(sys.argv[1], os.O_RDWR))
    print("opened")
except OSError as exc:
    print(errno.errorcode[exc.errno])
"""


def test_terminate_stops_another_users_process(
    unit_daemon: Callable[..., ProcessDaemon], node: Node
) -> None:
    """`unleased_use = "terminate"` (grace 0): bob's process on GPU 3 is stopped by a daemon
    holding only the unit's capabilities (CAP_KILL)."""
    daemon = unit_daemon(
        inventory=node.inventory,
        unleased_use="terminate",
        unleased_grace_seconds=0.0,
        sample_interval_seconds=0.1,
    )
    pid = node.start("bob")
    node.put(UUID3, pid)
    wait_for(lambda: not alive(pid), timeout=30, what="bob's process to stop")
    with daemon.client() as client:
        actions = [e["action"] for e in client.unleased()["events"] if e["pid"] == pid]
    assert actions == ["reported", "terminated"]
    assert "not allowed" not in daemon.stderr()


@pytest.fixture
def devices(paths: DaemonPaths) -> Path:
    """`nvidia0`..`nvidia7` in a directory of the test, closed to users (0600, root)."""
    directory = paths.root / "dev"
    directory.mkdir(mode=0o755)
    for minor in range(8):
        os.mknod(
            directory / f"nvidia{minor}", 0o600 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor)
        )
    return directory


def probe(users: SystemUsers, user: str, path: Path) -> str:
    """What `open(path, O_RDWR)` as `user` gives: an errno name, or `opened`."""
    return users.run(user, ["-c", PROBE, str(path)]).stdout.strip()


def test_a_lease_opens_its_gpus_device_file_to_its_holder_only(
    unit_daemon: Callable[..., ProcessDaemon],
    node: Node,
    devices: Path,
    system_users: SystemUsers,
) -> None:
    """Without a lease, open() of /dev/nvidia3 fails with EACCES; alice's lease on GPU 3
    lets her past the permission check (ENXIO: no driver behind the test's node), not bob;
    when it ends, she is shut out again."""
    unit_daemon(inventory=node.inventory, device_access="acl", device_dir=str(devices))
    nvidia3 = devices / "nvidia3"
    assert probe(system_users, "alice", nvidia3) == "EACCES"
    granted = system_users.ctl("alice", node.paths.socket, "--json", "allocate", "--gpu", "3")
    assert granted.returncode == 0, granted.stderr
    assert probe(system_users, "alice", nvidia3) in PASSED
    assert probe(system_users, "bob", nvidia3) == "EACCES"
    assert probe(system_users, "alice", devices / "nvidia2") == "EACCES"
    freed = system_users.ctl("alice", node.paths.socket, "free", "--mine")
    assert freed.returncode == 0, freed.stderr
    assert probe(system_users, "alice", nvidia3) == "EACCES"
    assert stat.S_IMODE(os.stat(nvidia3).st_mode) == 0o600  # back as it was


def test_acls_follow_the_ledger_across_a_restart(
    unit_daemon: Callable[..., ProcessDaemon],
    node: Node,
    devices: Path,
    system_users: SystemUsers,
) -> None:
    """A lease that lives on through a restart keeps its holder's entry; an entry with no
    lease behind it (left by a daemon killed before it could take it away) goes at start."""
    settings = {"inventory": node.inventory, "device_access": "acl", "device_dir": str(devices)}
    daemon = unit_daemon(**settings)
    granted = system_users.ctl("alice", node.paths.socket, "allocate", "--gpu", "3")
    assert granted.returncode == 0, granted.stderr
    daemon.kill()
    grant_user(str(devices / "nvidia2"), system_users.uid("bob"))
    assert probe(system_users, "bob", devices / "nvidia2") in PASSED
    unit_daemon(**settings)
    assert probe(system_users, "alice", devices / "nvidia3") in PASSED
    assert probe(system_users, "bob", devices / "nvidia2") == "EACCES"
