#!/usr/bin/env python3
"""Record a Slurm job's GPUs in gpuallocd's ledger: `prolog` leases them, `epilog` frees them.

Slurm runs the prolog and epilog as root with the job in the environment (SLURM_JOB_ID,
SLURM_JOB_UID, SLURM_JOB_GID, SLURM_JOB_GPUS). The lease is labelled `slurm:JOBID` and owned
by the job's user: the prolog starts this program again as that user (`grant`), so the daemon
sees the user's uid through SO_PEERCRED; no request ever claims an identity. The epilog frees
as root, which may free any lease.

A label is anyone's to write, so a lease stands for the job only when it is the job user's,
labelled `slurm:JOBID` and on the job's GPUs; any other lease with that label is named in the
log and never taken for the job's record (where it sits on the job's GPUs it is revoked like
any stale Slurm lease: Slurm gave those GPUs to the job).

Both are idempotent (the job's lease is found and reused or freed), bounded
in time (GPUALLOCD_SLURM_TIMEOUT seconds, 15 by default) and fail open: whatever goes wrong
is logged to syslog and stderr and the exit status is 0, because a failing prolog or epilog
drains the node. Standard library and the `gpulease` client only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import logging.handlers
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from gpulease import Client, GpuRef, GpuStatus, Lease, LeaseNotActive, UnknownLease

LOG = logging.getLogger("gpuallocd-slurm")
DEFAULT_TTL_SECONDS = 7 * 24 * 3600.0  # the daemon's default max_ttl_seconds
DEFAULT_TIMEOUT_SECONDS = 15.0
LABEL_PREFIX = "slurm:"


@dataclass(frozen=True)
class Job:
    """The job as Slurm describes it in the prolog's environment."""

    id: str
    uid: int
    gid: int
    gpu_ids: tuple[int, ...]

    @property
    def label(self) -> str:
        return f"{LABEL_PREFIX}{self.id}"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Job:
        gpus = env.get("SLURM_JOB_GPUS", "")
        return cls(
            id=env["SLURM_JOB_ID"],
            uid=int(env["SLURM_JOB_UID"]),
            gid=int(env.get("SLURM_JOB_GID") or env["SLURM_JOB_UID"]),
            gpu_ids=tuple(int(part) for part in gpus.split(",") if part.strip()),
        )


def driver_minor_to_uuid(proc_root: Path = Path("/proc")) -> dict[int, str]:
    """Device minor number → GPU UUID, from the NVIDIA driver's table; empty without it."""
    table: dict[int, str] = {}
    for info in sorted((proc_root / "driver" / "nvidia" / "gpus").glob("*/information")):
        text = info.read_text(encoding="utf-8", errors="replace")
        uuid = re.search(r"^GPU UUID:\s*(\S+)", text, re.MULTILINE)
        minor = re.search(r"^Device Minor:\s*(\d+)", text, re.MULTILINE)
        if uuid and minor:
            table[int(minor.group(1))] = uuid.group(1)
    return table


def gpu_refs(gpu_ids: Sequence[int], minors: Mapping[int, str]) -> list[GpuRef]:
    """The daemon's names for Slurm's GPU ids.

    Slurm numbers a GPU by its device file (`/dev/nvidiaN` is N). With the NVIDIA driver
    that number is the minor number, which the driver's table turns into a UUID; without it
    (fake device files) the number is taken as the daemon's index.
    """
    return [minors.get(i, i) for i in gpu_ids]


def _matches(status: GpuStatus, ref: GpuRef) -> bool:
    return status.uuid == ref if isinstance(ref, str) else status.index == ref


def _clear_stale(client: Client, job: Job, wanted: Sequence[GpuStatus]) -> list[GpuStatus]:
    """Revoke leases of ended Slurm jobs on `wanted`; the GPUs that are still held by others.

    Slurm hands a GPU to one job at a time, so another job's lease on it outlived its job
    (its epilog failed). A lease of anyone else is a real conflict, left alone and reported.
    """
    conflicts: list[GpuStatus] = []
    for lease_id in sorted({s.lease_id for s in wanted if s.lease_id}):
        holder = client.lease(lease_id)
        if (holder.label or "").startswith(LABEL_PREFIX):
            LOG.warning("job %s: revoking stale lease %s (%s)", job.id, lease_id, holder.label)
            with contextlib.suppress(LeaseNotActive, UnknownLease):
                client.revoke(lease_id, reason=f"stale: Slurm gave its GPUs to job {job.id}")
        else:
            held = [s for s in wanted if s.lease_id == lease_id]
            LOG.error(
                "job %s: GPUs %s are leased to %s (lease %s, %s) outside Slurm; not recorded",
                job.id,
                ",".join(str(s.index) for s in held),
                holder.user,
                lease_id,
                holder.label or "no label",
            )
            conflicts += held
    return conflicts


def _grant_as_user(job: Job, uuids: Sequence[str], ttl: float, timeout: float) -> str:
    """Run `grant` as the job's user, so the lease is theirs; its JSON answer."""
    command = [sys.executable, os.path.abspath(__file__), "grant", "--label", job.label]
    command += ["--ttl", str(ttl), *uuids]
    become = job.uid != os.geteuid()  # root becoming the job's user, with none of its groups
    done = subprocess.run(
        command,
        user=job.uid if become else None,
        group=job.gid if become else None,
        extra_groups=[] if become else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd="/",
    )
    if done.returncode != 0:
        raise RuntimeError(f"grant as uid {job.uid} failed: {done.stderr.strip()}")
    return done.stdout


def _is_the_jobs(lease: Lease, job: Job, uuids: set[str]) -> bool:
    """A lease stands for the job only if it is the job user's, labelled for the job, and
    on the job's GPUs: a label alone is anyone's to write."""
    return lease.label == job.label and lease.owner_uid == job.uid and set(lease.uuids) <= uuids


def _name_forgeries(job: Job, leases: Sequence[Lease]) -> None:
    for lease in leases:
        LOG.warning(
            "job %s: lease %s is labelled %s but is %s's (uid %d), not the job's (uid %d); "
            "it does not stand for the job",
            job.id,
            lease.id,
            lease.label,
            lease.user,
            lease.owner_uid,
            job.uid,
        )


def prolog(client: Client, job: Job, ttl: float, timeout: float) -> None:
    """Lease the job's GPUs for its user, unless that user holds a lease labelled
    slurm:JOBID on the job's GPUs already. A lease of anyone else with that label is named
    in the log, and revoked where it is on the job's GPUs (Slurm gave them to the job)."""
    if not job.gpu_ids:
        LOG.info("job %s: no GPUs", job.id)
        return
    refs = gpu_refs(job.gpu_ids, driver_minor_to_uuid())
    statuses = client.status()
    wanted = [s for s in statuses if any(_matches(s, r) for r in refs)]
    if len(wanted) != len(refs):
        LOG.error("job %s: Slurm GPUs %s are not all known to gpuallocd", job.id, job.gpu_ids)
    labelled = [lease for lease in client.leases() if lease.label == job.label]
    existing = [lease for lease in labelled if _is_the_jobs(lease, job, {s.uuid for s in wanted})]
    if existing:
        LOG.info("job %s: already recorded as lease %s", job.id, existing[0].id)
        return
    _name_forgeries(job, labelled)
    conflicts = {s.uuid for s in _clear_stale(client, job, wanted)}
    uuids = [s.uuid for s in wanted if s.uuid not in conflicts]
    if not uuids:
        return
    lease = json.loads(_grant_as_user(job, uuids, ttl, timeout))
    LOG.info("job %s: GPUs %s recorded as lease %s", job.id, ",".join(uuids), lease["id"])


def epilog(client: Client, job: Job) -> None:
    """Free every active lease of the job's user labelled slurm:JOBID (none is fine); one
    of anyone else's with that label is left alone, and named."""
    for lease in client.leases():
        if lease.label == job.label and lease.owner_uid != job.uid:
            _name_forgeries(job, [lease])
        elif lease.label == job.label:
            with contextlib.suppress(LeaseNotActive, UnknownLease):
                client.free(lease.id)
            LOG.info("job %s: lease %s freed", job.id, lease.id)


def grant(socket: str | None, label: str, ttl: float, uuids: Sequence[str]) -> int:
    """Lease exactly `uuids` as the calling user and print the lease as JSON."""
    with Client(socket) as client:
        lease = client.allocate_specific(list(uuids), label=label, ttl=ttl)
    print(json.dumps(lease.raw))
    return 0


def _setup_logging() -> None:
    LOG.setLevel(logging.INFO)
    LOG.addHandler(logging.StreamHandler(sys.stderr))
    if os.path.exists("/dev/log"):
        syslog = logging.handlers.SysLogHandler(address="/dev/log")
        syslog.setFormatter(logging.Formatter("gpuallocd-slurm: %(message)s"))
        LOG.addHandler(syslog)


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise TimeoutError("gave up: the time limit passed")


def run_hook(name: str, env: Mapping[str, str]) -> int:
    """Run the prolog or epilog within the time limit; always 0 (fail open)."""
    timeout = float(env.get("GPUALLOCD_SLURM_TIMEOUT") or DEFAULT_TIMEOUT_SECONDS)
    ttl = float(env.get("GPUALLOCD_SLURM_TTL") or DEFAULT_TTL_SECONDS)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        job = Job.from_env(env)
        with Client(env.get("GPUALLOCD_SOCKET"), timeout=timeout) as client:
            if name == "prolog":
                prolog(client, job, ttl, timeout)
            else:
                epilog(client, job)
    except Exception as exc:
        LOG.error("%s failed open (job %s): %s", name, env.get("SLURM_JOB_ID"), exc)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuallocd_slurm.py", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("prolog", help="lease the job's GPUs (Slurm's Prolog)")
    commands.add_parser("epilog", help="free the job's lease (Slurm's Epilog)")
    grant_parser = commands.add_parser("grant", help="(internal) lease GPUs as the caller")
    grant_parser.add_argument("--label", required=True)
    grant_parser.add_argument("--ttl", type=float, required=True)
    grant_parser.add_argument("uuids", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "grant":
        return grant(os.environ.get("GPUALLOCD_SOCKET"), args.label, args.ttl, args.uuids)
    _setup_logging()
    return run_hook(args.command, os.environ)


if __name__ == "__main__":
    sys.exit(main())
