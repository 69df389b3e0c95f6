"""Who a process is and what it runs, as the daemon reads them from /proc: never what its
owner can dress up (a non-dumpable process, a preloaded library, someone else's lease id)."""

from __future__ import annotations

import os
import platform
import pwd
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuallocd.enforcement.proc_facts import proc_facts
from gpuallocd.enforcement.programs import runs_foreign_code, trusted_program
from gpuallocd.enforcement.shares import find_overruns
from gpuallocd.host.proc import executable_mappings, mapped_file, process_owner, tracer_of
from gpuallocd.host.trust import Fact, Written
from gpuallocd.model import GpuProcess, Lease, LeasedGpu, LiveState, UnitKind
from tests.harness import ProcessDaemon, wait_for
from tests.system_users import SystemUsers
from tests.unleased_helpers import (
    Node,
    UserLibraries,
    alive,
    bobs_libraries,
    exec_with,
    node,
    ran,
)

__all__ = ["bobs_libraries", "node"]

GPU3 = "GPU-f06d330d-af21-5a36-84a7-d3d20d41fb7f"  # of the recorded machine

NOBODY = 65534
SLEEP = frozenset({"sleep"})
NOT_DUMPABLE = (
    "import ctypes, sys, time\n"
    "ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.fixture
def hidden_owner() -> Iterator[subprocess.Popen[str]]:
    """A process of nobody's that made itself non-dumpable: /proc/PID is then root's."""
    if os.geteuid() != 0:
        pytest.skip("running a process as another user needs root")
    python = shutil.which("python3", path="/usr/bin:/bin")  # one nobody may run
    if python is None:
        pytest.skip("no system python3 for another user to run")
    process = subprocess.Popen(
        [python, "-c", NOT_DUMPABLE], user=NOBODY, stdout=subprocess.PIPE, text=True, cwd="/"
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    yield process
    process.kill()
    process.wait()
    process.stdout.close()


def test_a_non_dumpable_process_is_still_its_owners(
    hidden_owner: subprocess.Popen[str],
) -> None:
    """prctl(PR_SET_DUMPABLE, 0) makes /proc/PID root's; its owner is still read as nobody,
    so unleased use cannot pass itself off as root's (which is never signalled)."""
    # (a stock kernel makes /proc/PID root's then; some sandboxed kernels keep the owner)
    assert process_owner(hidden_owner.pid) == NOBODY


def test_a_preloaded_library_makes_a_program_no_exemption() -> None:
    """root's `sleep` is the trusted program `sleep`; started with LD_PRELOAD it is none."""
    plain = subprocess.Popen(["/bin/sleep", "30"])
    preloaded = subprocess.Popen(
        ["/bin/sleep", "30"],
        env={**os.environ, "LD_PRELOAD": "/nonexistent/mine.so"},
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: (f := proc_facts(plain.pid, programs=SLEEP)) and f.program == "sleep", 10)
        wait_for(lambda: (f := proc_facts(preloaded.pid)) is not None and f.command == "sleep", 10)
        facts = proc_facts(preloaded.pid, programs=SLEEP)  # after its exec: preloaded, it runs
        assert facts is not None and facts.program is None
    finally:
        for process in (plain, preloaded):
            process.kill()
            process.wait()


def test_another_users_process_naming_a_share_lease_is_not_counted_against_it() -> None:
    """bob's process that names alice's share lease in its environment uses memory on her
    GPU: it is not hers, so her share is not over its size (and nothing of hers is killed)."""
    share = LeasedGpu("GPU-0", 0, kind=UnitKind.SHARE, memory_bytes=1 << 30)
    lease = Lease(
        id="aaaaaaaaaaaa",
        gpus=(share,),
        owner_uid=1001,
        owner_name="alice",
        pid=None,
        label=None,
        policy="simple",
        created_at=0.0,
        expires_at=60.0,
    )
    live = {"GPU-0": LiveState(processes=(GpuProcess(77, 2 << 30, uid=1002),))}
    claims = (Written(Fact.ENVIRONMENT, lease.id),)
    assert find_overruns([lease], live, lease_of=lambda pid: claims) == []
    live = {"GPU-0": LiveState(processes=(GpuProcess(77, 2 << 30, uid=1001),))}
    overruns = find_overruns([lease], live, lease_of=lambda pid: claims)
    assert [o.used_bytes for o in overruns] == [2 << 30]


# Issue 36, case 6: what a process of a user's runs, beyond the program it started -----------

SYSTEM_PYTHON = os.path.realpath("/usr/bin/python3")
SYSTEM_SLEEP = os.path.realpath(shutil.which("sleep", path="/usr/bin:/bin") or "/bin/sleep")
PYTHON_NAME = os.path.basename(SYSTEM_PYTHON)
LOAD_AND_WAIT = (
    "import ctypes, sys, time\n"
    "ctypes.CDLL(sys.argv[1])\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)
FROM_A_MEMFD = (
    "import ctypes, os, sys, time\n"
    "fd = os.memfd_create('mine')\n"
    "os.write(fd, open(sys.argv[1], 'rb').read())\n"
    "ctypes.CDLL(f'/proc/self/fd/{fd}')\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)
MAPPED_AS_DATA = (
    "import mmap, sys, time\n"
    "mine = open(sys.argv[1], 'rb')\n"
    "data = mmap.mmap(mine.fileno(), 0, prot=mmap.PROT_READ)\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)
# The parent patches its child's code through /proc/PID/mem (the same byte back: the page is
# copied on write all the same), as a user may do to their own processes without a tracer.
PATCHED_CHILD = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.argv[1], '600'])\n"
    "while open(f'/proc/{child.pid}/comm').read().strip() != 'sleep':\n"
    "    time.sleep(0.01)\n"
    "line = next(l for l in open(f'/proc/{child.pid}/maps') if ' r-xp ' in l)\n"
    "start = int(line.split('-')[0], 16)\n"
    "with open(f'/proc/{child.pid}/mem', 'r+b', buffering=0) as mem:\n"
    "    mem.seek(start)\n"
    "    byte = mem.read(1)\n"
    "    mem.seek(start)\n"
    "    mem.write(byte)\n"
    "print('ready', child.pid, flush=True)\n"
    "child.wait()\n"
)
IN_A_USER_NAMESPACE = (
    "import ctypes, os, sys\n"
    "assert ctypes.CDLL(None).unshare(0x10000000) == 0  # CLONE_NEWUSER\n"
    "print('ready', flush=True)\n"
    "os.execv(sys.argv[1], [sys.argv[1], '600'])\n"
)


@dataclass
class Started:
    """A process of bob's, and the words of the line it said when ready."""

    process: subprocess.Popen[str]
    said: list[str]

    @property
    def pid(self) -> int:
        return self.process.pid


@pytest.fixture
def as_bob(system_users: SystemUsers) -> Iterator[Callable[..., Started]]:
    """Start the system's Python as bob (`-c CODE ARGS...`); return once it says `ready`.
    Every process started is killed at the end."""
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip("no system python3 for another user to run")
    entry = pwd.getpwnam(system_users.name("bob"))
    started: list[subprocess.Popen[str]] = []

    def start(code: str, *args: str) -> Started:
        process = subprocess.Popen(
            [SYSTEM_PYTHON, "-c", code, *args],
            user=entry.pw_uid,
            group=entry.pw_gid,
            extra_groups=[],
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        assert process.stdout is not None
        said = process.stdout.readline().split()
        assert said[:1] == ["ready"], said
        return Started(process, said)

    yield start
    for process in started:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def sleeping(started: Started) -> int:
    """The pid, once it runs `sleep` and its loader has mapped its libraries (libc is
    mapped after every preloaded one)."""

    def loaded() -> bool:
        maps = Path(f"/proc/{started.pid}/maps").read_text()
        return trusted_program(started.pid) == "sleep" and "/libc.so" in maps

    wait_for(loaded, 10, what="sleep to be loaded")
    return started.pid


def exempts_nothing(pid: int, program: str) -> bool:
    """Whether the process, which runs root's `program`, may run code that is not root's."""
    return trusted_program(pid) == program and runs_foreign_code(pid)


@pytest.mark.parametrize(
    "environ",
    [
        ["LD_PRELOAD=", "LD_PRELOAD={lib}"],  # the loader takes the last
        ["LD_PRELOAD="],
        ["LD_LIBRARY_PATH={directory}"],
        ["LD_AUDIT={lib}"],
    ],
    ids=["preload-twice", "preload-empty", "library-path", "audit"],
)
def test_any_loader_variable_exempts_nothing(
    as_bob: Callable[..., Started], bobs_libraries: UserLibraries, environ: list[str]
) -> None:
    """bob's root-installed `sleep` with any entry of LD_PRELOAD, LD_LIBRARY_PATH or
    LD_AUDIT in its environment (an empty one, or the first of two) is exempt by no program."""
    entries = [
        e.format(lib=bobs_libraries.plain, directory=bobs_libraries.directory) for e in environ
    ]
    pid = sleeping(as_bob(exec_with(SYSTEM_SLEEP, ["sleep", "600"], entries)))
    assert exempts_nothing(pid, "sleep")


def test_a_library_that_renames_its_preload_entry_exempts_nothing(
    as_bob: Callable[..., Started], bobs_libraries: UserLibraries
) -> None:
    """bob's library preloaded into `sleep` renames its entry to XD_PRELOAD once loaded: the
    environment then names no library, but the library is still mapped, and exempts nothing."""
    code = exec_with(SYSTEM_SLEEP, ["sleep", "600"], [f"LD_PRELOAD={bobs_libraries.hiding}"])
    pid = sleeping(as_bob(code))
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    assert b"XD_PRELOAD=" in environ and b"LD_PRELOAD" not in environ
    assert exempts_nothing(pid, "sleep")


def test_a_library_loaded_after_start_exempts_nothing(
    as_bob: Callable[..., Started], bobs_libraries: UserLibraries
) -> None:
    """The system's Python, root's, that bob has dlopen() his own library is exempt by no
    program (where `python3` were an exempt program)."""
    started = as_bob(LOAD_AND_WAIT, str(bobs_libraries.plain))
    assert exempts_nothing(started.pid, PYTHON_NAME)


def test_code_loaded_from_a_memfd_exempts_nothing(
    as_bob: Callable[..., Started], bobs_libraries: UserLibraries
) -> None:
    """A library copied into a memfd (`/memfd:mine (deleted)`, no file of root's) and loaded
    from there exempts nothing."""
    started = as_bob(FROM_A_MEMFD, str(bobs_libraries.plain))
    maps = Path(f"/proc/{started.pid}/maps").read_text()
    assert "/memfd:mine" in maps
    assert exempts_nothing(started.pid, PYTHON_NAME)


def test_code_patched_through_proc_mem_exempts_nothing(as_bob: Callable[..., Started]) -> None:
    """bob's process writes into the code of his `sleep` through /proc/PID/mem (no tracer, a
    clean environment, only root's files mapped): the page written exempts nothing."""
    started = as_bob(PATCHED_CHILD, SYSTEM_SLEEP)
    child = int(started.said[1])
    try:
        assert tracer_of(child) == 0
        assert exempts_nothing(child, "sleep")
    finally:
        os.kill(child, signal.SIGKILL)  # its parent is killed at the end; it would outlive it


def test_a_process_in_a_user_namespace_of_its_own_exempts_nothing(
    as_bob: Callable[..., Started],
) -> None:
    """bob's `sleep` in a user namespace of his (where he may mount over root's names and
    set what /proc/PID/exe shows) exempts nothing."""
    pid = sleeping(as_bob(IN_A_USER_NAMESPACE, SYSTEM_SLEEP))
    assert exempts_nothing(pid, "sleep")


def test_a_program_that_names_roots_file_as_its_own_exempts_nothing(
    as_bob: Callable[..., Started], bobs_libraries: UserLibraries
) -> None:
    """bob's program, in a user namespace of his, unmaps itself and sets /proc/PID/exe to
    root's `sleep` (only anonymous code is left mapped): it exempts nothing."""
    if platform.machine() != "x86_64":
        pytest.skip("the program makes x86-64 system calls")
    program = str(bobs_libraries.exe_swap)
    started = as_bob(exec_with(program, [program, SYSTEM_SLEEP], []))
    wait_for(lambda: trusted_program(started.pid) == "sleep", 10, what="the exe to be sleep")
    maps = Path(f"/proc/{started.pid}/maps").read_text()
    assert program not in maps and "/libc.so" in maps  # root's libraries only
    assert exempts_nothing(started.pid, "sleep")


def test_root_programs_of_a_user_that_run_root_code_stay_exempt(
    as_bob: Callable[..., Started], bobs_libraries: UserLibraries
) -> None:
    """bob's plain `sleep` is the program `sleep`, and the system's Python that maps bob's
    library as data (not executable: no code) is still the program it runs."""
    pid = sleeping(as_bob(exec_with(SYSTEM_SLEEP, ["sleep", "600"], ["PATH=/usr/bin"])))
    data = as_bob(MAPPED_AS_DATA, str(bobs_libraries.plain))
    assert str(bobs_libraries.plain) in Path(f"/proc/{data.pid}/maps").read_text()
    for running, program in ((pid, "sleep"), (data.pid, PYTHON_NAME)):
        assert not runs_foreign_code(running)
        facts = proc_facts(running, programs={program})
        assert facts is not None and facts.program == program


def test_the_two_preload_bypasses_are_stopped_under_terminate(
    unit_daemon: Callable[..., ProcessDaemon], node: Node, bobs_libraries: UserLibraries
) -> None:
    """`unleased_use = "terminate"`, `sleep` exempt, the daemon with the unit's capabilities:
    bob's `sleep` started with `LD_PRELOAD=` then `LD_PRELOAD=` his library, and his `sleep`
    whose library renames its entry to XD_PRELOAD, are reported and terminated; dave's plain
    `sleep` is left alone and not reported."""
    daemon = unit_daemon(
        inventory=node.inventory,
        unleased_use="terminate",
        unleased_grace_seconds=0.0,
        sample_interval_seconds=0.1,
        unleased_exempt_commands=["sleep"],
    )
    sleep = ["sleep", "600"]
    preloaded = [
        node.start(
            "bob",
            exec_with(SYSTEM_SLEEP, sleep, ["LD_PRELOAD=", f"LD_PRELOAD={bobs_libraries.plain}"]),
        ),
        node.start("bob", exec_with(SYSTEM_SLEEP, sleep, [f"LD_PRELOAD={bobs_libraries.hiding}"])),
    ]
    plain = node.start("dave", exec_with(SYSTEM_SLEEP, sleep, ["PATH=/usr/bin:/bin"]))
    for pid in (*preloaded, plain):
        ran(pid)
        node.put(GPU3, pid)
    for pid in preloaded:
        wait_for(lambda pid=pid: not alive(pid), timeout=30, what=f"bob's pid {pid} to stop")
    with daemon.client() as client:
        node.sampled(client)
        events = client.unleased()["events"]
    assert [[e["action"] for e in events if e["pid"] == pid] for pid in preloaded] == [
        ["reported", "terminated"]
    ] * 2
    assert alive(plain) and [e for e in events if e["pid"] == plain] == []


def test_a_mapping_is_resolved_to_the_file_it_holds() -> None:
    """/proc/PID/map_files gives the file each executable mapping holds, the one its name
    gives (what the check falls back to where smaps shows a file system's own device)."""
    process = subprocess.Popen([SYSTEM_SLEEP, "30"])
    try:
        wait_for(lambda: trusted_program(process.pid) == "sleep", 10, what="sleep")
        wait_for(lambda: bool(executable_mappings(process.pid)), 10, what="its mappings")
        for mapping in executable_mappings(process.pid) or []:
            resolved, named = mapped_file(process.pid, mapping), os.stat(mapping.path)
            assert resolved is not None and resolved.st_ino == named.st_ino == mapping.inode
            assert resolved.st_dev == named.st_dev
    finally:
        process.kill()
        process.wait()
