"""Who a process is and what it runs, as the daemon reads them from /proc: never what its
owner can dress up (a non-dumpable process, a preloaded library, someone else's lease id)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from gpuallocd.enforcement.proc_facts import proc_facts
from gpuallocd.enforcement.shares import find_overruns
from gpuallocd.host.proc import process_owner
from gpuallocd.model import GpuProcess, Lease, LeasedGpu, LiveState, UnitKind
from tests.harness import wait_for

NOBODY = 65534
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
        wait_for(lambda: (f := proc_facts(plain.pid)) is not None and f.program == "sleep", 10)
        wait_for(lambda: (f := proc_facts(preloaded.pid)) is not None and f.command == "sleep", 10)
        facts = proc_facts(preloaded.pid)  # after its exec: the preloaded program runs
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
    assert find_overruns([lease], live, lease_of=lambda pid: lease.id) == []
    live = {"GPU-0": LiveState(processes=(GpuProcess(77, 2 << 30, uid=1001),))}
    assert [o.used_bytes for o in find_overruns([lease], live, lease_of=lambda pid: lease.id)] == [
        2 << 30
    ]
