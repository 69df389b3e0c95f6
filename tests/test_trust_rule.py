"""The trust rule (host/trust.py): no decision gives a user anything on what that user wrote
alone. Every row of `Decision` has a proof here, run as real users where identity matters
(alice and bob, created by `useradd`), against a real daemon where the daemon decides; the
user-written facts are read through the trust module only."""

from __future__ import annotations

import ast
import contextlib
import inspect
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import gpuallocd
from gpuallocd.allocator.power.split import Parts, holders_by_gpu, sample_parts
from gpuallocd.enforcement import Seen, Track, UnitUse, UnleasedRules, decide
from gpuallocd.enforcement.proc_facts import proc_facts
from gpuallocd.enforcement.rules import DEFAULT_EXEMPT_COMMANDS
from gpuallocd.enforcement.shares import find_overruns, lease_claims
from gpuallocd.host.proc import children_of, process_owner, read_parent, read_process_table
from gpuallocd.host.trust import Decision, Fact, Rule, Source, Written, choose, takes_away
from gpuallocd.inventory import open_inventory
from gpuallocd.model import GpuProcess, Lease, LeasedGpu, LiveState, UnitKind
from gpuallocd.processes.inherited import belongs, inherited, inheritors
from tests.harness import DaemonPaths, ThreadDaemon, wait_for
from tests.ledger_damage import damage_btrees
from tests.recovery_helpers import GPUS, Crash, Held, carrying, leases_in, lines_with
from tests.system_users import SystemUsers, open_to_everyone
from tests.test_hostile_enforcement import lose_events_while
from tests.unleased_helpers import Node, exec_with, node

__all__ = ["node"]

PACKAGE = Path(gpuallocd.__file__).parent
ROOT = PACKAGE.parent
SYSTEM_PYTHON = os.path.realpath("/usr/bin/python3")
WAIT = "import time; print('ready', flush=True); time.sleep(600)"
# Runs again as argv[0] `Xorg`, then names itself Xorg in the kernel too.
AS_XORG = (
    "import ctypes, os, sys, time\n"
    "if sys.argv[1:] != ['again']:\n"
    "    os.execv(sys.orig_argv[0], ['Xorg', '-c', sys.orig_argv[2], 'again'])\n"
    "ctypes.CDLL(None).prctl(15, b'Xorg', 0, 0, 0)\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)
GPU2 = "GPU-bb6adf39-2180-59fa-a20c-689582edf774"  # of the recorded machine
LEASE = b"GPUALLOCD_LEASE_ID"

USER_WRITTEN_READERS = {"read_environ", "environ_entries", "environ_value", "command_of"}

PROOFS: dict[Decision, Callable[..., None]] = {}


def proves(decision: Decision) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def register(proof: Callable[..., None]) -> Callable[..., None]:
        PROOFS[decision] = proof
        return proof

    return register


@pytest.mark.parametrize("decision", list(Decision), ids=lambda d: d.name.lower())
def test_what_a_user_wrote_alone_gets_them_nothing(
    decision: Decision, request: pytest.FixtureRequest
) -> None:
    """Each decision that gives a user something gives nothing on user-written facts alone
    (its proof below names the decision; a new decision must come with one)."""
    assert decision in PROOFS, f"{decision.name}: add its proof to tests/test_trust_rule.py"
    proof = PROOFS[decision]
    proof(**{name: request.getfixturevalue(name) for name in inspect.signature(proof).parameters})


# Real processes of real users ---------------------------------------------------------------


@pytest.fixture
def as_user(system_users: SystemUsers) -> Iterator[Callable[..., int]]:
    """Start the system's Python as a user (`-c CODE`) with exactly `environ`; its pid, once
    it says `ready`. Every process started is killed at the end."""
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip("no system python3 for another user to run")
    started: list[subprocess.Popen[str]] = []

    def start(short: str, code: str = WAIT, environ: dict[str, str] | None = None) -> int:
        entry = pwd.getpwnam(system_users.name(short))
        process = subprocess.Popen(
            [SYSTEM_PYTHON, "-c", code],
            user=entry.pw_uid,
            group=entry.pw_gid,
            extra_groups=[],
            env={"PATH": "/usr/bin:/bin", **(environ or {})},
            cwd="/",
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        return process.pid

    yield start
    for process in started:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def a_lease(lease_id: str, owner: int, *gpus: LeasedGpu) -> Lease:
    return Lease(
        id=lease_id,
        gpus=gpus or (LeasedGpu("GPU-0", 0),),
        owner_uid=owner,
        owner_name=str(owner),
        pid=None,
        label=None,
        policy="simple",
        created_at=0.0,
        expires_at=3600.0,
        bound=True,
        pid_start_time=0,
    )


# alice's holder: a bound lease through the API, then a child; prints the id and the child.
HOLDS_AND_FORKS = """
import os, sys, time
from gpulease import Client
lease = Client(sys.argv[1]).allocate(1, bind_to_process=True)
child = os.fork()
if child == 0:
    time.sleep(600)
    os._exit(0)
print(lease.id, child, flush=True)
time.sleep(600)
"""
# bob's process clones a child beside itself (CLONE_PARENT: its parent is bob's parent),
# which runs `sleep` with bob's environment.
BOB_CLONES_BESIDE = """
import ctypes, os, time
SYS_CLONE = {"x86_64": 56, "aarch64": 220}[os.uname().machine]
child = ctypes.CDLL(None, use_errno=True).syscall(SYS_CLONE, 0x00008000 | 17, 0, 0, 0, 0)
if child == 0:
    os.execv("/bin/sleep", ["sleep", "600"])
print("ready", flush=True)
time.sleep(600)
"""


# The proofs, one per decision ---------------------------------------------------------------


@proves(Decision.GRANT)
def grant_is_the_peers(daemon: ThreadDaemon, system_users: SystemUsers) -> None:
    """bob's allocate that names alice as its owner is refused; his allocate with USER and
    LOGNAME set to alice's name is a lease of his (the peer's uid, SO_PEERCRED)."""
    open_to_everyone(daemon.paths.root)
    alice, bob = system_users.uid("alice"), system_users.uid("bob")
    script = (
        "import json, os, sys\n"
        "from gpulease import Client\n"
        "from tests.rawhttp import connect, parse_response, read_all, request_bytes\n"
        "body = json.dumps({'count': 1, 'owner_uid': int(sys.argv[2])}).encode()\n"
        "sock = connect(sys.argv[1])\n"
        "sock.sendall(request_bytes('POST', '/v1/leases', body))\n"
        "print(parse_response(read_all(sock))[0])\n"
        "os.environ.update(USER=sys.argv[3], LOGNAME=sys.argv[3])\n"
        "print(Client(sys.argv[1]).allocate(1).owner_uid)\n"
    )
    argv = ["-c", script, str(daemon.paths.socket), str(alice), system_users.name("alice")]
    done = system_users.run("bob", argv)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["400", str(bob)]
    with daemon.client() as client:
        assert [lease.owner_uid for lease in client.leases()] == [bob]


@proves(Decision.NESTING)
def nesting_is_in_ones_own_lease(daemon: ThreadDaemon, system_users: SystemUsers) -> None:
    """bob's `gpu_lease` under alice's lease id (GPUALLOCD_LEASE_ID) takes a lease of his
    own; hers is neither used nor renewed."""
    open_to_everyone(daemon.paths.root)
    with daemon.client() as client:
        hers = client.allocate(1)
    script = (
        "import os, sys\n"
        "from gpulease import gpu_lease\n"
        "os.environ['GPUALLOCD_LEASE_ID'] = sys.argv[2]\n"
        "with gpu_lease(1, socket=sys.argv[1]) as lease:\n"
        "    print(lease.id, lease.owner_uid)\n"
    )
    done = system_users.run("bob", ["-c", script, str(daemon.paths.socket), hers.id])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() != [hers.id, str(hers.owner_uid)]
    assert done.stdout.split()[1] == str(system_users.uid("bob"))
    with daemon.client() as client:
        assert client.lease(hers.id).expires_at == hers.expires_at


@proves(Decision.ADOPTION)
def adoption_is_of_ones_own_process(
    start_daemon: Callable[..., ThreadDaemon], node: Node, system_users: SystemUsers
) -> None:
    """alice's process runs on GPU 2 without a lease; bob's `adopt` naming its pid is
    refused, and no lease is made."""
    hers = node.start("alice")
    node.put(GPU2, hers)
    daemon = start_daemon(inventory=node.inventory, sample_interval_seconds=0.1)
    with daemon.client() as client:
        node.sampled(client)
    done = system_users.ctl("bob", node.paths.socket, "adopt", f"pid:{hers}")
    assert done.returncode != 0 and "not you" in done.stderr, done.stdout
    with daemon.client() as client:
        assert client.leases() == []


@proves(Decision.EXEMPTION)
def exemption_is_by_roots_program(as_user: Callable[..., int]) -> None:
    """bob's Python that named itself Xorg (prctl) and runs as argv[0] `Xorg` is no program
    `Xorg`, and no exempt process."""
    renamed = as_user("bob", AS_XORG)
    facts = proc_facts(renamed, programs=set(DEFAULT_EXEMPT_COMMANDS))
    assert facts is not None and (facts.command, facts.argv0) == ("Xorg", "Xorg")
    assert facts.program is None
    assert not UnleasedRules().exempt("bob", facts.program)


@proves(Decision.SHARE_COUNT)
def a_share_counts_its_owners_processes(
    as_user: Callable[..., int], system_users: SystemUsers
) -> None:
    """bob's process carrying alice's share lease id uses 2 GiB on her GPU: it is not
    counted against her share; her own process carrying it is."""
    alice, bob = system_users.uid("alice"), system_users.uid("bob")
    share = LeasedGpu("GPU-0", 0, kind=UnitKind.SHARE, memory_bytes=1 << 30)
    lease = a_lease("aaaaaaaaaaaa", alice, share)
    bobs = as_user("bob", environ={"GPUALLOCD_LEASE_ID": lease.id})
    hers = as_user("alice", environ={"GPUALLOCD_LEASE_ID": lease.id})
    assert [str(claim) for claim in lease_claims(bobs)] == [lease.id]
    live = {"GPU-0": LiveState(processes=(GpuProcess(bobs, 2 << 30, uid=bob),))}
    assert find_overruns([lease], live) == []
    live = {"GPU-0": LiveState(processes=(GpuProcess(hers, 2 << 30, uid=alice),))}
    assert [overrun.pids for overrun in find_overruns([lease], live)] == [(hers,)]


@proves(Decision.INHERITED)
def inherited_work_joins_its_owners_lease(
    as_user: Callable[..., int], system_users: SystemUsers
) -> None:
    """bob's process carrying alice's lease id is not taken into her lease, nor is his
    process that names his own lease twice with two values; alice's process carrying her id
    is."""
    alice, bob = system_users.uid("alice"), system_users.uid("bob")
    hers, his = a_lease("aaaaaaaaaaaa", alice), a_lease("bbbbbbbbbbbb", bob)
    bobs = as_user("bob", environ={"GPUALLOCD_LEASE_ID": hers.id})
    ids = [f"GPUALLOCD_LEASE_ID={his.id}", f"GPUALLOCD_LEASE_ID={hers.id}"]
    twice = as_user("bob", exec_with(SYSTEM_PYTHON, [SYSTEM_PYTHON, "-c", WAIT], ids))
    wait_for(lambda: b"bbbb" in Path(f"/proc/{twice}/environ").read_bytes(), 10, what="exec")
    alices = as_user("alice", environ={"GPUALLOCD_LEASE_ID": hers.id})
    found = inheritors(read_process_table(), {hers.id: hers, his.id: his}, covered=())
    assert [(lease_id, member[0]) for lease_id, member in found] == [(hers.id, alices)]
    assert not belongs(inherited(bobs), hers) and not belongs(inherited(twice), his)


@proves(Decision.JOINING)
def joining_is_of_ones_own_lease(daemon: ThreadDaemon, system_users: SystemUsers) -> None:
    """bob's `run --lease` naming root's bound lease is refused, and his process is not one
    of the lease's (root's own lease, of the kernel's peer uid, is all that backs a join)."""
    open_to_everyone(daemon.paths.root)
    holder = subprocess.Popen(  # a holder of its own: this process may be in others' leases
        [sys.executable, "-c", _HOLDER, str(daemon.paths.socket)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        lease_id = holder.stdout.readline().strip()
        with daemon.client() as client:
            wait_for(
                lambda: holder.pid in client.lease(lease_id).raw["processes"], 30, what="holder"
            )
            argv = ["run", "--lease", lease_id, "--", "true"]
            done = system_users.ctl("bob", daemon.paths.socket, *argv)
            assert done.returncode != 0 and "permission_denied" in done.stderr, done.stdout
            found = client.lease(lease_id).raw["processes"]
        bob = system_users.uid("bob")
        assert holder.pid in found and not [p for p in found if _owner(p) == bob], found
    finally:
        holder.communicate("", timeout=30)


@proves(Decision.NAMING)
def a_name_decides_nothing() -> None:
    """A process's names (comm, argv[0]) change no unleased decision: bob's process named
    after each exempt program is treated as it is under its own name."""
    rules = UnleasedRules(mode="terminate", grace_seconds=0.0)
    use = {"GPU-0": UnitUse(frozenset({1001}), ("aaaaaaaaaaaa",))}

    def actions(name: str) -> list[str]:
        seen = Seen(7, 70, 1002, "bob", name, name, "GPU-0", 0, "GPU-0")
        found, _ = decide([seen], use, {(7, 70, "GPU-0"): Track(0.0)}, rules, 1.0)
        return [action.step.value for action in found]

    assert {name: actions(name) for name in DEFAULT_EXEMPT_COMMANDS} == {
        name: actions("python3") for name in DEFAULT_EXEMPT_COMMANDS
    }
    assert actions("python3") == ["reported", "terminated"]


@proves(Decision.DESCENT)
def descent_is_the_kernels_parent_chain(
    start_daemon: Callable[..., ThreadDaemon],
    system_users: SystemUsers,
    as_user: Callable[..., int],
) -> None:
    """alice's holder takes a bound lease through the API (nothing in any environment names
    it) and forks a child: the child is in her lease by its parent. bob's process naming her
    lease id in its environment, and its child cloned (`CLONE_PARENT`) beside her holder,
    where a child of hers would join by that id, are not; nor after the process events are
    lost and the daemon reads the environments again."""
    daemon = start_daemon(default_policy="simple", process_tracking="connector")
    open_to_everyone(daemon.paths.root)
    log = daemon.paths.root / "holder.log"
    holder = system_users.start("alice", ["-c", HOLDS_AND_FORKS, str(daemon.paths.socket)], log)
    child = cloned = 0
    try:
        wait_for(lambda: log.read_text().strip() != "", 30, what="alice's bound lease")
        lease_id, forked = log.read_text().split()
        child = int(forked)
        with daemon.client() as client:
            family = sorted([holder.pid, child])
            wait_for(lambda: client.lease(lease_id).raw["processes"] == family, 10)
        bobs = as_user("bob", BOB_CLONES_BESIDE, {"GPUALLOCD_LEASE_ID": lease_id})
        cloned = _cloned_beside(bobs, system_users.uid("bob"))
        assert read_parent(cloned) == read_parent(holder.pid) == os.getpid()
        carried = f"GPUALLOCD_LEASE_ID={lease_id}".encode()
        assert carried in Path(f"/proc/{cloned}/environ").read_bytes()
        lose_events_while(daemon, lambda: None)
        with daemon.client() as client:
            assert client.health()["process_tracking"] == "connector"
            assert client.lease(lease_id).raw["processes"] == family
    finally:
        holder.kill()
        holder.wait(10)
        for pid in [pid for pid in (child, cloned) if pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if cloned:
            os.waitpid(cloned, 0)  # its parent is this process, by CLONE_PARENT


def _cloned_beside(pid: int, uid: int) -> int:
    """The child `pid` cloned beside itself (a child of this process's, as `pid` is), once
    it runs `sleep`."""

    def found() -> list[int]:
        return [
            child
            for child in children_of(os.getpid())
            if child != pid
            and process_owner(child) == uid
            and Path(f"/proc/{child}/comm").read_text().strip() == "sleep"
        ]

    wait_for(lambda: len(found()) == 1, 10, what="the child cloned beside its parent")
    return found()[0]


@dataclass(frozen=True)
class Recovered:
    """One `gpuallocd --recover` after alice's lease lost its units' rows and their index,
    with bob's processes carrying her lease id and naming every GPU: its lines, the leases
    the recovered ledger holds, and who ran where."""

    lines: list[str]
    leases: dict[str, Held]
    lease_id: str
    alice: str
    bob: str
    hers: str  # her lease's GPU, where NVML shows her job
    named: str  # a free GPU her job's environment names too; nobody runs on it
    bobs_alone: tuple[str, int]  # a free GPU where only bob's process runs, and its pid
    shared: tuple[str, int, int]  # a free GPU where bob's and alice's processes run: pids


@pytest.fixture(scope="module")
def recovered(system_users: SystemUsers) -> Iterator[Recovered]:
    """The recovery the rows REBUILT and HELD are proved on (one for both: it takes the
    daemon as shipped, a stop, a damage and `gpuallocd --recover`)."""
    root = Path(tempfile.mkdtemp(prefix="ga-", dir="/tmp"))
    paths = DaemonPaths(root)
    open_to_everyone(root)
    machine = Node(system_users, paths)
    crashed: Crash | None = None
    try:
        crashed = Crash(system_users, machine, paths, "")
        alices = crashed.allocate("alice")
        lease_id, hers = alices["id"], alices["gpus"][0]["uuid"]
        named, alone, shared = [gpu for gpu in GPUS[:7] if gpu != hers][:3]
        machine.put(hers, machine.start("alice", carrying(lease_id, f"{hers},{named}")))
        every = ",".join(GPUS)
        bobs_alone = machine.start("bob", carrying(lease_id, every))
        machine.put(alone, bobs_alone)
        bobs = machine.start("bob", carrying(lease_id, every))
        alices_beside = machine.start("alice")
        machine.put(shared, bobs)
        machine.put(shared, alices_beside)
        crashed.stop()
        damage_btrees(crashed.ledger, "lease_gpus", "sqlite_autoindex_lease_gpus_1")
        lines = crashed.recover()
        yield Recovered(
            lines,
            leases_in(crashed.ledger),
            lease_id,
            crashed.name("alice"),
            crashed.name("bob"),
            hers,
            named,
            (alone, bobs_alone),
            (shared, bobs, alices_beside),
        )
    finally:
        if crashed is not None:
            crashed.close()
        machine.stop_all()
        shutil.rmtree(root, ignore_errors=True)


@proves(Decision.REBUILT)
def a_rebuilt_lease_is_what_the_records_back(recovered: Recovered) -> None:
    """alice's lease comes back hers, on the GPU NVML shows her job on and no other (not
    the one more her environment names); bob's processes carrying her id get nothing of it,
    and a line says whose id they carried."""
    found = recovered.leases[recovered.lease_id]
    assert (found.owner, found.units) == (recovered.alice, {recovered.hers}), recovered.lines
    assert lines_with(
        recovered.lines, f"rebuilt: lease {recovered.lease_id} of {recovered.alice}", recovered.hers
    ), recovered.lines
    assert lines_with(
        recovered.lines,
        "set aside",
        f"{recovered.bob}'s pid",
        recovered.lease_id,
        f"that lease is {recovered.alice}'s",
    ), recovered.lines


@proves(Decision.HELD)
def a_held_gpu_is_for_whose_processes_run_there(recovered: Recovered) -> None:
    """A GPU only bob's process runs on is held for bob, though that process names alice's
    lease; one where both run is held for the admins, naming both; a GPU only an environment
    names is held for nobody."""
    (alone, pid) = recovered.bobs_alone
    (shared, bobs, hers) = recovered.shared
    holds = {gpu: held for held in recovered.leases.values() for gpu in held.units}
    assert (holds[alone].owner, holds[alone].bound) == (recovered.bob, True), recovered.lines
    assert lines_with(recovered.lines, f"for {recovered.bob}, bound to pid {pid}"), recovered.lines
    assert (holds[shared].owner, holds[shared].bound) == ("root", False), recovered.lines
    label = holds[shared].label or ""
    assert f"{recovered.alice} (pid {hers})" in label and f"{recovered.bob} (pid {bobs})" in label
    assert recovered.named not in holds, recovered.lines


@proves(Decision.CHARGE)
def a_charge_is_the_owner_of_the_process(node: Node, system_users: SystemUsers) -> None:
    """bob's process naming alice's lease id and her GPU in its environment runs on her
    leased GPU: a sample charges it to bob (its owner by the kernel), her lease nothing;
    her own process beside it is her lease's, by memory. (The daemon charges the same:
    tests/test_energy_others.py.)"""
    alice, bob = system_users.uid("alice"), system_users.uid("bob")
    lease = a_lease("aaaaaaaaaaaa", alice, LeasedGpu(GPU2, 2))
    bobs = node.start("bob", carrying(lease.id, GPU2))
    wait_for(lambda: lease.id.encode() in Path(f"/proc/{bobs}/environ").read_bytes(), 10)
    node.put(GPU2, bobs)
    holders = holders_by_gpu([lease])[GPU2]

    def parts() -> Parts:
        inventory = open_inventory(node.inventory)
        try:
            return sample_parts(inventory.sample()[GPU2].processes, holders)
        finally:
            inventory.close()

    assert parts() == Parts({lease.id: 0.0}, {bob: 1.0})
    node.put(GPU2, node.start("alice"))
    assert parts() == Parts({lease.id: 0.5}, {bob: 0.5})


# The rule itself ----------------------------------------------------------------------------


def test_a_decision_that_rests_on_what_a_user_wrote_is_refused() -> None:
    """A row resting on a user-written fact, on nothing, or letting a kernel fact 'choose'
    is refused where it is written."""
    with pytest.raises(ValueError, match="rests on what a user writes"):
        Rule("a GPU", "x.py", frozenset({Fact.ENVIRONMENT}))
    with pytest.raises(ValueError, match="rests on a kernel or ledger fact"):
        Rule("a GPU", "x.py", frozenset(), chooses=frozenset({Fact.ENVIRONMENT}))
    with pytest.raises(ValueError, match="not the user's to write"):
        Rule("a GPU", "x.py", frozenset({Fact.OWNER}), chooses=frozenset({Fact.LEASES}))


def test_every_decision_rests_on_the_kernel_or_the_ledger() -> None:
    """Every row rests on kernel or ledger facts only, reads user-written facts only in a
    role, names a module that exists, and no two rows are one."""
    assert len(Decision.__members__) == len(list(Decision))
    for decision in Decision:
        rule = decision.rule
        assert rule.rests_on and all(f.source is not Source.USER for f in rule.rests_on)
        assert all(f.source is Source.USER for f in rule.reads)
        home = PACKAGE / rule.home if not rule.home.startswith("client/") else ROOT / rule.home
        assert home.is_file(), rule.home


def test_a_claim_only_chooses_among_backed_candidates() -> None:
    """A user's claim picks a candidate only where every occurrence names the same one; no
    claim, an unknown value or two values pick nothing; a fact that may not choose raises."""
    mine = {"bbbbbbbbbbbb": "bob's lease"}

    def claims(*values: str) -> list[Written]:
        return [Written(Fact.ENVIRONMENT, value) for value in values]

    assert choose(Decision.SHARE_COUNT, claims("bbbbbbbbbbbb"), mine) == "bob's lease"
    assert choose(Decision.SHARE_COUNT, claims("bbbbbbbbbbbb") * 2, mine) == "bob's lease"
    assert choose(Decision.SHARE_COUNT, claims("aaaaaaaaaaaa"), mine) is None
    assert choose(Decision.SHARE_COUNT, claims(), mine) is None
    assert choose(Decision.SHARE_COUNT, claims("bbbbbbbbbbbb", "aaaaaaaaaaaa"), mine) is None
    with pytest.raises(ValueError, match="chooses nothing"):
        choose(Decision.EXEMPTION, claims("bbbbbbbbbbbb"), mine)
    with pytest.raises(ValueError, match="takes nothing away"):
        takes_away(Decision.SHARE_COUNT, [Written(Fact.LOADER, "LD_PRELOAD=")])


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        yield name.removesuffix(".__init__"), ast.parse(path.read_text())


def test_user_written_facts_are_read_only_through_the_trust_module() -> None:
    """Only host/trust.py imports the readers of a process's environment and names from
    host/proc.py, and only host/proc.py names those files: a decision outside the table
    cannot read what a user wrote."""
    readers, paths = [], []
    for name, tree in _modules():
        for found in ast.walk(tree):
            if isinstance(found, ast.ImportFrom) and found.module == "gpuallocd.host.proc":
                readers += [name] if {a.name for a in found.names} & USER_WRITTEN_READERS else []
            elif isinstance(found, ast.Constant) and isinstance(found.value, str):
                last = found.value.rsplit("/", 1)[-1]
                paths += [name] if last in ("environ", "cmdline", "comm") else []
    assert sorted(set(readers)) == ["gpuallocd.host.trust"]
    assert set(paths) <= {"gpuallocd.host.proc"}


def _table_rows() -> dict[str, list[str]]:
    """docs/security.md's table of the trust rule: its cells by decision."""
    text = (ROOT / "docs" / "security.md").read_text()
    section = text[text.index("## The trust rule") : text.index("## Defences, case by case")]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| `")]
    return {cells[0].strip().strip("`"): [c.strip() for c in cells[1:]] for cells in rows}


def test_the_docs_show_every_decision() -> None:
    """docs/security.md's table of the trust rule has a row for each decision and no other,
    naming its module, the facts it rests on, and the roles of the user-written facts it
    reads ("none" where it reads none)."""
    rows = _table_rows()
    assert set(rows) == {decision.name for decision in Decision}
    for decision in Decision:
        _gives, home, rests_on, written = rows[decision.name]
        rule = decision.rule
        assert home == f"`{rule.home}`", decision
        named = {fact.name.lower().replace("_", " ") for fact in rule.rests_on}
        assert {fact.strip().lower() for fact in rests_on.split(",")} == named, decision
        roles = {r"chooses?": rule.chooses, r"takes? away": rule.takes_away, "shown": rule.shown}
        for role, facts in roles.items():
            assert bool(re.search(rf"\b{role}\b", written)) == bool(facts), (decision, role)
        assert (written == "none") == (not rule.reads), decision


def test_the_readers_refuse_a_decision_that_does_not_read_that_fact() -> None:
    """Reading a user-written fact for a decision whose row does not list it raises."""
    from gpuallocd.host.trust import environment, loader_variables, names

    with pytest.raises(ValueError, match="reads no ENVIRONMENT"):
        environment(Decision.EXEMPTION, os.getpid(), LEASE)
    with pytest.raises(ValueError, match="reads no LOADER"):
        loader_variables(Decision.SHARE_COUNT, os.getpid())
    with pytest.raises(ValueError, match="reads no NAME"):
        names(Decision.GRANT, os.getpid())


def _owner(pid: int) -> int | None:
    """The uid that owns a process, None where it is gone."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


# Takes a lease bound to itself and holds it until its stdin closes.
_HOLDER = """
import sys
from gpulease import Client
with Client(sys.argv[1]) as client:
    print(client.allocate(1, bind_to_process=True).id, flush=True)
    sys.stdin.read()
"""
