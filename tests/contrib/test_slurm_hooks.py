"""contrib/slurm's prolog and epilog against a real daemon: idempotent, fail-open, bounded.

The hooks run as Slurm runs them: a separate process with the job in its environment. Here
the job's uid is the test's own, so `grant` runs without a change of user; the change of
user is exercised by tests/contrib/test_slurm.py on a real Slurm.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.harness import ThreadDaemon

HOOKS = Path(__file__).resolve().parents[2] / "contrib" / "slurm" / "gpuallocd_slurm.py"


def hook(name: str, socket_path: Path, job: str, gpus: str, **env: str) -> str:
    """Run the prolog or epilog; assert it exits 0 (always); what it logged."""
    environment = dict(os.environ, GPUALLOCD_SOCKET=str(socket_path), SLURM_JOB_ID=job)
    environment |= {"SLURM_JOB_UID": str(os.getuid()), "SLURM_JOB_GID": str(os.getgid())}
    environment |= {"SLURM_JOB_GPUS": gpus, **env}
    done = subprocess.run(
        [sys.executable, str(HOOKS), name], env=environment, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_prolog_leases_the_jobs_gpus_and_the_epilog_frees_them(daemon: ThreadDaemon) -> None:
    """Slurm's GPUs 1,3 become one lease labelled slurm:JOBID; the epilog ends it."""
    hook("prolog", daemon.paths.socket, "41", "1,3")
    with daemon.client() as client:
        (lease,) = client.leases()
        assert lease.label == "slurm:41" and lease.indices == (1, 3)
        assert lease.owner_uid == os.getuid()
        hook("epilog", daemon.paths.socket, "41", "1,3")
        assert client.leases() == []
        assert client.lease(lease.id).state == "freed"


def test_prolog_and_epilog_are_idempotent(daemon: ThreadDaemon) -> None:
    """A second prolog reuses the lease; a second epilog finds nothing and succeeds."""
    hook("prolog", daemon.paths.socket, "7", "0,1")
    log = hook("prolog", daemon.paths.socket, "7", "0,1")
    assert "already recorded" in log
    with daemon.client() as client:
        assert len(client.leases()) == 1
        hook("epilog", daemon.paths.socket, "7", "0,1")
        hook("epilog", daemon.paths.socket, "7", "0,1")
        assert client.leases() == []
        assert [e["event"] for e in client.history()] == ["granted", "freed"]


def test_prolog_revokes_a_stale_slurm_lease_on_its_gpus(daemon: ThreadDaemon) -> None:
    """A lease left by an ended job whose epilog failed is revoked; the new job is recorded."""
    hook("prolog", daemon.paths.socket, "1", "0,1")
    log = hook("prolog", daemon.paths.socket, "2", "1,2")
    assert "revoking stale lease" in log
    with daemon.client() as client:
        (lease,) = client.leases()
        assert lease.label == "slurm:2" and lease.indices == (1, 2)


def test_prolog_leaves_interactive_leases_alone_and_records_the_rest(
    daemon: ThreadDaemon,
) -> None:
    """A GPU leased outside Slurm is reported, not taken; the job's other GPUs are recorded."""
    with daemon.client() as client:
        mine = client.allocate_specific([2], label="notebook")
        log = hook("prolog", daemon.paths.socket, "5", "2,3")
        assert "outside Slurm" in log
        leases = {lease.label: lease for lease in client.leases()}
        assert leases["notebook"].id == mine.id
        assert leases["slurm:5"].indices == (3,)


def test_a_job_without_gpus_records_nothing(daemon: ThreadDaemon) -> None:
    """No SLURM_JOB_GPUS, no lease."""
    hook("prolog", daemon.paths.socket, "9", "")
    with daemon.client() as client:
        assert client.leases() == []


def test_hooks_fail_open_when_the_daemon_is_down(short_dir: Path) -> None:
    """Nothing listening: the prolog logs why and exits 0, so Slurm does not drain the node."""
    log = hook("prolog", short_dir / "absent.sock", "3", "0")
    assert "prolog failed open" in log
    assert "failed open" in hook("epilog", short_dir / "absent.sock", "3", "0")


def test_hooks_give_up_at_their_time_limit(short_dir: Path) -> None:
    """A daemon that accepts but never answers costs the prolog its time limit, then 0."""
    path = short_dir / "mute.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mute:
        mute.bind(str(path))
        mute.listen(8)
        log = hook("prolog", path, "4", "0", GPUALLOCD_SLURM_TIMEOUT="1")
    assert "prolog failed open" in log
