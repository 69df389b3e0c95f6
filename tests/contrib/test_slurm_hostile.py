"""contrib/slurm's prolog against a user who forges a job's label: the prolog matches a job's
lease by owner and GPUs, never by label alone, so Slurm and the ledger never disagree."""

from __future__ import annotations

import json
import pwd
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import DaemonPaths, ThreadDaemon
from tests.rules_harness import daemon_with_config
from tests.system_users import SystemUsers, open_to_everyone

HOOKS = Path(__file__).resolve().parents[2] / "contrib" / "slurm" / "gpuallocd_slurm.py"

FORGE = """
import json, sys
from gpulease import Client
with Client(sys.argv[1]) as c:
    print(json.dumps(c.allocate_specific([int(sys.argv[2])], label=sys.argv[3]).raw))
"""


def prolog_as_root(users: SystemUsers, socket: Path, job: str, owner: str, gpus: str) -> str:
    """Slurm's prolog for `job` of the user `owner` (root runs it, as slurmd does)."""
    entry = pwd.getpwnam(users.name(owner))
    env = {
        "PATH": "/usr/bin:/bin",
        **users.env,
        "GPUALLOCD_SOCKET": str(socket),
        "SLURM_JOB_ID": job,
        "SLURM_JOB_UID": str(entry.pw_uid),
        "SLURM_JOB_GID": str(entry.pw_gid),
        "SLURM_JOB_GPUS": gpus,
    }
    done = subprocess.run(
        [users.python, str(HOOKS), "prolog"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


@pytest.fixture
def node(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> Iterator[tuple[ThreadDaemon, SystemUsers]]:
    open_to_everyone(short_dir)
    daemon = daemon_with_config(paths, 'default_policy = "simple"\n').start()
    yield daemon, system_users
    daemon.stop()


def test_a_forged_job_label_does_not_stand_for_the_job(
    node: tuple[ThreadDaemon, SystemUsers],
) -> None:
    """bob leases GPU 3 labelled `slurm:41`, a job of alice's on GPUs 0,1. The prolog records
    alice's lease of GPUs 0 and 1 anyway, so bob cannot lease them; bob's forgery is named."""
    daemon, users = node
    socket = daemon.paths.socket
    forged = users.run("bob", ["-c", FORGE, str(socket), "3", "slurm:41"])
    assert forged.returncode == 0, forged.stderr
    log = prolog_as_root(users, socket, "41", "alice", "0,1")
    assert "not the job's" in log
    with daemon.client() as root:
        by_owner = {lease.user: lease for lease in root.leases()}
    assert by_owner[users.name("alice")].indices == (0, 1)
    assert by_owner[users.name("alice")].label == "slurm:41"
    taken = users.run("bob", ["-c", FORGE, str(socket), "0", "mine"])
    assert "gpu_busy" in taken.stderr or "GpuBusy" in taken.stderr


def test_a_forged_label_on_the_jobs_own_gpus_is_revoked(
    node: tuple[ThreadDaemon, SystemUsers],
) -> None:
    """bob leases GPU 0 labelled `slurm:42`, a job of alice's on GPU 0: the prolog revokes
    bob's lease (Slurm gave the GPU to alice) and records alice's."""
    daemon, users = node
    socket = daemon.paths.socket
    forged = users.run("bob", ["-c", FORGE, str(socket), "0", "slurm:42"])
    bob_lease = json.loads(forged.stdout)
    prolog_as_root(users, socket, "42", "alice", "0")
    with daemon.client() as root:
        assert root.lease(bob_lease["id"]).state == "revoked"
        (lease,) = root.leases()
    assert (lease.user, lease.indices, lease.label) == (users.name("alice"), (0,), "slurm:42")
