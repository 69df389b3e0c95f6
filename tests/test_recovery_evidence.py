"""Recovery on evidence, as real users: after a damaged ledger, `gpuallocd --recover` gives
back what the records and the kernel prove, never what a user wrote (an id in an
environment, `CUDA_VISIBLE_DEVICES`, the order of pids), and each line names the owners.

The machine is a recorded 8-GPU one whose live processes the test names; the users' jobs
are real processes of real users; the daemon runs as shipped (its own process, as root)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.harness import DaemonPaths, ctl_argv, wait_for
from tests.ledger_damage import damage, damage_btrees
from tests.recovery_helpers import GPUS, Crash, carrying, crash, leases_in, lines_with
from tests.unleased_helpers import Node, alive, node

__all__ = ["crash", "node"]

UNITS_TABLE = "lease_gpus"
UNITS_INDEX = "sqlite_autoindex_lease_gpus_1"
SAYS_PID = "import os, time; print('ready', os.getpid(), flush=True); time.sleep(600)"


def _lease_of_run(log: Path) -> str:
    found = re.search(r"lease ([0-9a-f]{12}): GPU", log.read_text())
    assert found, log.read_text()
    return found.group(1)


def _child_pid(log: Path) -> int:
    found = re.search(r"ready (\d+)", log.read_text())
    assert found, log.read_text()
    return int(found.group(1))


@pytest.mark.parametrize("proof", ["index", "driver"])
def test_a_lease_whose_row_survived_comes_back_under_its_own_id(
    crash: Callable[..., Crash], node: Node, paths: DaemonPaths, proof: str
) -> None:
    """Case 5: alice's `gpuallocctl run` holds a lease; the daemon stops and the ledger loses
    the pages of the units' table (and of its index, with `proof="driver"`: then NVML
    showing her job on its GPU is the proof). After `--recover` the lease is active under
    its own id on the same GPU, hers; her renewal of that id succeeds on the restarted
    daemon, and her command still runs."""
    node_ = crash()
    node_.fill()
    log = paths.root / "run.log"
    run = node_.run("alice", SAYS_PID, log)
    child = 0
    try:
        wait_for(lambda: "ready" in log.read_text(), 30, what="alice's command")
        lease_id, child = _lease_of_run(log), _child_pid(log)
        (gpu,) = leases_in(node_.ledger)[lease_id].units
        if proof == "driver":
            node.put(gpu, child)
        node_.stop()
        damaged = (UNITS_TABLE,) if proof == "index" else (UNITS_TABLE, UNITS_INDEX)
        damage_btrees(node_.ledger, *damaged)
        lines = node_.recover()
        alice = node_.name("alice")
        held = leases_in(node_.ledger).get(lease_id)
        assert held is not None and (held.owner, held.units) == (alice, {gpu}), lines
        assert lines_with(lines, f"rebuilt: lease {lease_id} of {alice} on GPU", gpu), lines
        assert not lines_with(lines, "lost"), lines
        node_.serve()
        renewed = node_.users.ctl("alice", paths.socket, "renew", lease_id)
        assert renewed.returncode == 0, renewed.stderr
        assert run.poll() is None and alive(child), log.read_text()
    finally:
        for pid in (run.pid, *([child] if child else [])):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        run.wait(10)


def test_a_made_up_lease_id_takes_no_gpu_at_a_recovery(
    crash: Callable[..., Crash], node: Node
) -> None:
    """Case 1: bob, who leased nothing, runs a process carrying `GPUALLOCD_LEASE_ID=
    000000000000` and every GPU in `CUDA_VISIBLE_DEVICES`; alice's and carol's leases lose
    their units' rows. After `--recover` theirs are back on their own GPUs under their own
    ids; bob holds nothing, and a line names his process and the id it carried."""
    node_ = crash()
    node_.fill()
    forger = node.start("bob", carrying("000000000000", ",".join(map(str, range(8)))))
    alices, carols = node_.allocate("alice"), node_.allocate("carol")
    alice_gpu, carol_gpu = alices["gpus"][0]["uuid"], carols["gpus"][0]["uuid"]
    node.put(alice_gpu, node.start("alice", carrying(alices["id"], alice_gpu)))
    node.start("carol", carrying(carols["id"], carol_gpu))
    node_.stop()
    damage_btrees(node_.ledger, UNITS_TABLE)
    lines = node_.recover()
    found = leases_in(node_.ledger)
    alice, carol, bob = node_.name("alice"), node_.name("carol"), node_.name("bob")
    assert (found[alices["id"]].owner, found[alices["id"]].units) == (alice, {alice_gpu})
    assert (found[carols["id"]].owner, found[carols["id"]].units) == (carol, {carol_gpu})
    assert [h for h in found.values() if h.owner == bob] == []
    assert lines_with(lines, "set aside", f"{bob}'s pid {forger}", "000000000000"), lines
    assert lines_with(lines, f"rebuilt: lease {alices['id']} of {alice}"), lines
    assert not lines_with(lines, "lost"), lines


def test_a_good_backup_gives_a_forger_nothing_and_each_hold_obeys_the_limits(
    crash: Callable[..., Crash], node: Node
) -> None:
    """Case 2: with a good backup that holds every lease, bob (`max_gpus = 1`) carries a
    made-up id naming every GPU, and runs on three free GPUs without a lease. After
    `--recover` the backup's leases are as they were; bob holds one GPU, bound to his
    process, and the two others are held for the admins, each line naming bob and the rule."""
    node_ = crash("[limits.user.{bob}]\nmax_gpus = 1\n", ledger_backups=2)
    node_.fill()
    alices, carols = node_.allocate("alice"), node_.allocate("carol")
    leased = {alices["gpus"][0]["uuid"], carols["gpus"][0]["uuid"]}
    node.start("bob", carrying("000000000000", ",".join(map(str, range(8)))))
    free = [gpu for gpu in GPUS[:7] if gpu not in leased][:3]
    jobs = [node.start("bob") for _ in free]
    for gpu, pid in zip(free, jobs, strict=True):
        node.put(gpu, pid)
    node_.stop()  # its backup at stop holds every lease
    damage(node_.ledger, where="start")
    lines = node_.recover()
    found = leases_in(node_.ledger)
    bob = node_.name("bob")
    assert {found[alices["id"]].owner, found[carols["id"]].owner} == {
        node_.name("alice"),
        node_.name("carol"),
    }
    bobs = [h for h in found.values() if h.owner == bob]
    assert [(h.units, h.bound) for h in bobs] == [(frozenset({free[0]}), True)], lines
    for_admins = lines_with(lines, "held for the admins", f"{bob} (pid", "max_gpus = 1")
    assert len(for_admins) == 2, lines
    assert {h.owner for h in found.values() if h.units & set(free[1:])} == {"root"}
    assert lines_with(lines, "set aside", "000000000000"), lines


REWRITE_IN_PLACE = """
import ctypes, os, time
print('ready', flush=True)
while not os.path.exists({path!r}):
    time.sleep(0.05)
names = (b'GPUALLOCD_LEASE_ID=', b'CUDA_VISIBLE_DEVICES=')
values = dict(zip(names, open({path!r}, 'rb').read().split()))
environ = ctypes.POINTER(ctypes.c_void_p).in_dll(ctypes.CDLL(None), 'environ')
i = 0
while environ[i]:
    entry = ctypes.string_at(environ[i])
    for name, value in values.items():
        if entry.startswith(name) and len(entry) == len(name) + len(value):
            ctypes.memmove(environ[i] + len(name), value, len(value))
    i += 1
print('rewritten', flush=True)
time.sleep(600)
"""


def test_an_environment_rewritten_after_exec_takes_no_lease(
    crash: Callable[..., Crash], node: Node, paths: DaemonPaths
) -> None:
    """Case 3: bob's process, started before alice's grant, rewrites its own environment in
    place (what /proc/PID/environ shows) to her lease id and GPU, both public. Her lease
    loses its units' rows and their index; after `--recover` it is hers, on her GPU, where
    NVML shows her job; bob's process gets nothing, and a line says whose id it carried."""
    node_ = crash()
    node_.fill()
    order = paths.root / "rewrite"
    bobs = node.start(
        "bob", carrying("0" * 12, "X" * len(GPUS[0]), REWRITE_IN_PLACE.format(path=str(order)))
    )
    bob_log = paths.root / f"proc-{node.pids.index(bobs)}.log"
    alices = node_.allocate("alice")
    lease_id, gpu = alices["id"], alices["gpus"][0]["uuid"]
    node.put(gpu, node.start("alice", carrying(lease_id, gpu)))
    written = order.with_suffix(".partial")
    written.write_text(f"{lease_id} {gpu}")
    written.chmod(0o644)
    written.rename(order)  # bob waits for the name: he never reads half a file
    wait_for(lambda: "rewritten" in bob_log.read_text(), 30, what="bob's rewrite")
    assert f"GPUALLOCD_LEASE_ID={lease_id}".encode() in Path(f"/proc/{bobs}/environ").read_bytes()
    node_.stop()
    damage_btrees(node_.ledger, UNITS_TABLE, UNITS_INDEX)
    lines = node_.recover()
    found = leases_in(node_.ledger)
    alice, bob = node_.name("alice"), node_.name("bob")
    assert (found[lease_id].owner, found[lease_id].units) == (alice, {gpu}), lines
    assert [h for h in found.values() if h.owner == bob] == []
    assert lines_with(lines, "set aside", f"{bob}'s pid {bobs}", lease_id, f"{alice}'s"), lines


def test_a_gpu_two_users_run_on_is_held_for_the_admins(
    crash: Callable[..., Crash], node: Node
) -> None:
    """Case 4: no lease explains GPU 2, where an older process of bob's (the lower pid) and
    alice's job both run, nor GPU 3, where only alice's runs. After `--recover` GPU 2 is held
    for the admins (root's, bound to no process), its line and label naming both users and
    pids; GPU 3 is alice's, bound to her process."""
    node_ = crash()
    node_.fill()
    bobs, alices, alone = node.start("bob"), node.start("alice"), node.start("alice")
    assert bobs < alices
    node.put(GPUS[2], bobs)
    node.put(GPUS[2], alices)
    node.put(GPUS[3], alone)
    node_.stop()
    damage(node_.ledger, where="start")
    lines = node_.recover()
    found = leases_in(node_.ledger)
    alice, bob = node_.name("alice"), node_.name("bob")
    (shared,) = [h for h in found.values() if h.units == {GPUS[2]}]
    assert (shared.owner, shared.bound) == ("root", False)
    assert f"{alice} (pid {alices})" in (shared.label or "") and f"{bob} (pid {bobs})" in (
        shared.label or ""
    )
    assert lines_with(lines, "held for the admins: GPU 2", alice, bob), lines
    (own,) = [h for h in found.values() if h.units == {GPUS[3]}]
    assert (own.owner, own.bound) == (alice, True)


def test_a_lease_that_ended_normally_is_never_listed_as_lost(
    crash: Callable[..., Crash], node: Node
) -> None:
    """Issue 39, finding 9: the leases' own rows are lost (no backup) while their history
    survives. The leases that had ended (freed, expired) are not listed as lost; alice's
    lease that was still held comes back under its id on its GPU, its line naming her;
    there is no `lost:` line at all."""
    node_ = crash()
    node_.fill()
    carols = node_.allocate("carol")
    assert node_.users.ctl("carol", node_.paths.socket, "free", carols["id"]).returncode == 0
    alices = node_.allocate("alice")
    node_.stop()
    damage_btrees(node_.ledger, "leases")
    lines = node_.recover()
    assert not lines_with(lines, "lost"), lines
    assert not lines_with(lines, carols["id"]), lines
    gpu = alices["gpus"][0]["uuid"]
    assert lines_with(lines, f"rebuilt: lease {alices['id']} of {node_.name('alice')}", gpu)
    assert leases_in(node_.ledger)[alices["id"]].units == {gpu}


def test_no_lost_line_when_nothing_was_lost(crash: Callable[..., Crash], node: Node) -> None:
    """Issue 39, finding 9: with a good backup, damage that spares every lease (the history's
    pages) prints no `lost:` line; each lease comes back as it was."""
    node_ = crash(ledger_backups=2)
    node_.fill()
    held = [node_.allocate("alice"), node_.allocate("bob")]
    node_.stop()
    damage_btrees(node_.ledger, "history")
    lines = node_.recover()
    assert lines_with(lines, "damaged: table history"), lines
    assert not lines_with(lines, "lost"), lines
    found = leases_in(node_.ledger)
    assert {lease["id"] for lease in held} <= set(found)


def test_a_lease_that_ended_after_the_backup_is_ended_and_its_successor_rebuilt(
    crash: Callable[..., Crash], node: Node, paths: DaemonPaths
) -> None:
    """Issue 39, finding 9: the backup holds dave's lease on GPU 0; since, dave freed it and
    alice was granted GPU 0; the daemon is killed and the leases' own rows are lost. After
    `--recover` dave's lease is ended (its units' rows say so), never listed as lost, and
    alice's comes back under its own id on GPU 0, each line naming its owner."""
    node_ = crash(ledger_backups=2)
    node_.fill()
    daves = node_.allocate("dave")
    backup = subprocess.run(
        ctl_argv(paths.socket, "ledger", "backup"), capture_output=True, text=True, timeout=60
    )
    assert backup.returncode == 0, backup.stderr
    assert node_.users.ctl("dave", paths.socket, "free", daves["id"]).returncode == 0
    alices = node_.allocate("alice")
    gpu = daves["gpus"][0]["uuid"]
    assert alices["gpus"][0]["uuid"] == gpu
    node_.daemon.kill()  # no backup at stop: the newest backup has dave's lease active
    damage_btrees(node_.ledger, "leases")
    lines = node_.recover()
    found = leases_in(node_.ledger)
    assert daves["id"] not in found
    assert (found[alices["id"]].owner, found[alices["id"]].units) == (node_.name("alice"), {gpu})
    assert lines_with(lines, f"ended: lease {daves['id']} of {node_.name('dave')}"), lines
    assert not lines_with(lines, "lost"), lines
