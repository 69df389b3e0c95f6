#!/usr/bin/env python3
"""How often Slurm gives a 2-GPU job the best-linked pair of the free GPUs.

Each probe fills every GPU with a 1-GPU job, ends the jobs on a random set of 3 to 6 GPUs
(the same sets for the same --seed), runs `srun --gres=gpu:2` and compares the pair Slurm
picked with the best pair among the free GPUs (most NVLinks, as gres.conf's comments and the
daemon's topology say). Run by test-single-node.sh --measure on a running cluster
(SLURM_CONF set); needs gpuallocd importable for the topology.
"""

from __future__ import annotations

import argparse
import itertools
import random
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gpulease import Client

from gpuallocd.integrations.slurm_gres import link_weight
from gpuallocd.model import Topology
from gpuallocd.topology import topology_from_json


def slurm(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def wait_until(predicate: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)


def listed(job_ids: Sequence[str]) -> dict[str, str]:
    """Job id → state for the jobs squeue still lists."""
    out = slurm("squeue", "-h", "-o", "%i %T", "-j", ",".join(job_ids)) if job_ids else ""
    return dict(line.split() for line in out.splitlines() if line.strip())


def slurm_order(gres_conf: Path) -> list[str]:
    """GPU UUIDs in Slurm's numbering: the `# index N: UUID` comments of gres.conf."""
    return re.findall(r"^# index \d+: (\S+)$", gres_conf.read_text(), re.MULTILINE)


def gpu_of(job_id: str) -> int:
    detail = slurm("scontrol", "show", "job", "-d", job_id)
    match = re.search(r"IDX:(\d+)", detail)
    if match is None:
        raise RuntimeError(f"job {job_id} shows no GPU index: {detail}")
    return int(match.group(1))


def fill(gpus: int) -> dict[int, str]:
    """One sleeping 1-GPU job per GPU; Slurm GPU id → job id."""
    jobs = [
        slurm("sbatch", "--parsable", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "sleep 600")
        .strip()
        .split(";")[0]
        for _ in range(gpus)
    ]
    wait_until(lambda: set(listed(jobs).values()) == {"RUNNING"}, "the blockers to run")
    return {gpu_of(job): job for job in jobs}


def end(job_ids: Sequence[str]) -> None:
    if job_ids:
        slurm("scancel", *job_ids)
        wait_until(lambda: not listed(job_ids), "jobs to end")


def weight(topology: Topology, order: Sequence[str], pair: Sequence[int]) -> int:
    return link_weight(topology.link(order[pair[0]], order[pair[1]]))


def probe(topology: Topology, order: Sequence[str], rng: random.Random) -> tuple[bool, bool]:
    """(picked the best pair, the free GPUs offered a choice of link counts)."""
    blockers = fill(len(order))
    free = sorted(rng.sample(range(len(order)), rng.randint(3, 6)))
    end([blockers[i] for i in free])
    out = slurm("srun", "--gres=gpu:2", "-t", "1", "printenv", "SLURM_STEP_GPUS")
    picked = [int(i) for i in out.strip().split(",")]
    end([job for gpu, job in blockers.items() if gpu not in free])
    weights = {pair: weight(topology, order, pair) for pair in itertools.combinations(free, 2)}
    best = max(weights.values())
    return weight(topology, order, picked) == best, len(set(weights.values())) > 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--gres-conf", type=Path, required=True)
    parser.add_argument("--probes", type=int, default=30)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    with Client(args.socket) as client:
        topology = topology_from_json(client.topology())
    order = slurm_order(args.gres_conf)
    rng = random.Random(args.seed)
    results = [probe(topology, order, rng) for _ in range(args.probes)]
    best = sum(hit for hit, _ in results)
    choice = [hit for hit, had_choice in results if had_choice]
    print(
        f"{args.label}: best-linked pair in {best}/{len(results)} probes; "
        f"{sum(choice)}/{len(choice)} of those where the link counts differed"
    )


if __name__ == "__main__":
    main()
